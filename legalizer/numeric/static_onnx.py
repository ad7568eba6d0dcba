"""Specialize an ONNX model's dynamic dims to static sizes, for a backend that takes static
shapes only (Qualcomm's HTP through onnxruntime's QNN EP: a node with a dynamic shape is
not placed on it).

    specialize_onnx(model, sizes, default=1) -> Specialized(bound, shapes_set, folded)

Every dynamic dim of the graph's inputs gets the size the user bound (``--dim``,
``--input-shape``: ``sizes``, keyed as the check keys dims: the symbol, or ``input[axis]``)
or ``default``. The shape arithmetic that is then constant (``Shape`` and what computes on
its result, up to a ``Reshape``'s target) becomes constants, their values computed by
onnxruntime (the model run once on zeros, those values its outputs), and the model is
imported again, its shapes inferred at the bound sizes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Mapping

import onnx

from ..errors import BadInput, first_line
from ..ir.types import names_a_dim
from ..model import Model
from .inputs import dim_key


@dataclass
class Specialized:
    bound: Dict[str, int] = field(default_factory=dict)  # dim key -> size
    shapes_set: int = 0  # input dims made static
    folded: int = 0  # shape values made constants


def specialize_onnx(model: Model, sizes: Mapping[str, int], default: int = 1) -> Specialized:
    import onnxruntime as ort

    from ..exporters.as_onnx import to_onnx

    out = Specialized()
    proto = to_onnx(model)
    inits = {t.name for t in proto.graph.initializer}
    for vi in proto.graph.input:
        if vi.name in inits or not vi.type.HasField("tensor_type"):
            continue
        if not vi.type.tensor_type.HasField("shape"):
            raise BadInput(f"input '{vi.name}' has no known rank: its shape cannot be made static")
        for axis, d in enumerate(vi.type.tensor_type.shape.dim):
            if d.HasField("dim_value") and d.dim_value >= 0:  # (-1: a dynamic dim, as exporters write one)
                continue
            # a named dim by its name; an unnamed one ('?', -1, none) is a dim of its own
            key = d.dim_param if names_a_dim(d.dim_param) else dim_key(vi.name, axis)
            size = int(sizes.get(key, sizes.get(dim_key(vi.name, axis), default)))
            out.bound[key] = size
            d.Clear()
            d.dim_value = size
            out.shapes_set += 1
    if not out.bound:
        return out
    new = _reimported(proto, model.base_dir)
    # Each round's constants give shapes inference could not see before (an Expand to a
    # shape computed from shapes): folded again until nothing is left to fold.
    for _ in range(16):
        folded = _fold_shape_arithmetic(new, out.bound)
        if not folded:
            break
        out.folded += folded
        new = _reimported(to_onnx(new), model.base_dir)
    model.graph, model.proto = new.graph, new.proto
    return out


def _reimported(proto: onnx.ModelProto, base_dir) -> Model:
    """``proto`` imported with every shape inferred anew (from its inputs' static sizes)."""
    from ..kinds.onnx.importer import import_model

    for vi in proto.graph.output:
        if vi.type.HasField("tensor_type"):
            vi.type.tensor_type.ClearField("shape")
    del proto.graph.value_info[:]  # (the shapes at the symbolic sizes)
    return import_model(proto, base_dir)


# Ops whose integer result is a function of their operands' shapes and values only: once
# every shape is static, what computes on ``Shape`` with them is a constant.
SHAPE_ARITHMETIC = frozenset({
    "Shape", "Size", "Gather", "Concat", "Slice", "Unsqueeze", "Squeeze", "Reshape", "Cast", "Add", "Sub", "Mul",
    "Div", "Max", "Min", "Equal", "Where", "Range", "ReduceProd", "Identity", "ConstantOfShape", "Expand", "Neg", "Abs",
    "Constant",
})


def _fold_shape_arithmetic(model: Model, bound: Mapping[str, int]) -> int:
    """Every integer value computed from shapes alone (``Shape`` of a static tensor, and
    ``SHAPE_ARITHMETIC`` on such values and constants) that a node of another kind reads:
    a constant, its value as onnxruntime computes it (the model run once, on zeros, those
    values its outputs). How many were folded."""
    import numpy as np
    import onnxruntime as ort

    from ..exporters.as_onnx import to_onnx
    from ..ir.graph import CONST, OP
    from ..ir.types import all_static
    from ..passes import PassContext, dead_code_elimination
    from ..passes.rewrite import add_const

    graph = model.graph
    known = set()  # ids of values that are functions of shapes alone
    for node in graph.nodes():
        if node.kind == CONST:
            known.update(id(v) for v in node.outputs)
        elif node.kind == OP and node.domain in ("", "ai.onnx") and node.op_type in SHAPE_ARITHMETIC \
                and not any(True for _ in node.subgraphs()):
            ins = [v for v in node.inputs if v is not None]
            if node.op_type in ("Shape", "Size"):
                ok = ins and ins[0].type.shape is not None and all_static(ins[0].type.shape)
            elif node.op_type == "Constant":  # (exporters such as paddle2onnx write constants as ops)
                ok = True
            else:
                ok = bool(ins) and all(id(v) in known for v in ins)
            if ok and all(v.type.dtype in ("int64", "int32", "bool") for v in node.outputs):
                known.update(id(v) for v in node.outputs)
    edge = []  # computed from shapes, read by another kind of node or a graph output
    for node in graph.nodes():
        if node.kind != OP or not all(id(v) in known for v in node.outputs):
            continue
        for v in node.outputs:
            if any(id(u.outputs[0]) not in known if u.kind == OP and u.outputs else True for u, _ in graph.users(v)):
                edge.append(v)
    if not edge:
        return 0
    proto = to_onnx(model)
    names = [v.name for v in edge]
    del proto.graph.output[:]
    proto.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names)
    feeds = {}
    inits = {t.name for t in proto.graph.initializer}
    for vi in proto.graph.input:
        if vi.name in inits:
            continue
        t = vi.type.tensor_type
        feeds[vi.name] = np.zeros([d.dim_value for d in t.shape.dim], onnx.helper.tensor_dtype_to_np_dtype(t.elem_type))
    opts = ort.SessionOptions()
    opts.log_severity_level = 4
    try:
        values = ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(names, feeds)
    except Exception as e:  # noqa: BLE001 - onnxruntime's own words are the reason
        raise BadInput(f"the model does not run at the static sizes {_sizes(bound)}: {first_line(e)}") from None
    for v, array in zip(edge, values):
        c = add_const(graph, f"{v.name}_static", np.asarray(array))
        c.type = v.type.with_shape(tuple(np.shape(array)))
        graph.replace_all_uses_with(v, c)
    ctx = PassContext()
    while dead_code_elimination(graph, ctx):
        pass
    return len(edge)


def _sizes(bound: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in bound.items())
