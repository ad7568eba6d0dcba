"""A ``torch.export`` program's ATen graph as the IR: each call becomes a node of domain
``aten`` named by its OpOverload (``aten.view.default``), whose rules are in
``rules/aten.toml``, as TFLite's builtins are nodes of domain ``tflite``.

The program is read after ``run_decompositions()`` (Core ATen). A node keeps what the
exporter needs to write it back as the same call (``ATEN_CALL``: the op, its arguments
with the tensor operands taken out, and the fx node's metadata). Parameters, buffers and
lifted constants are graph inputs of the IR, not constants: the passes then reshape them
with ops, and the program's state dict stays as it was.

Symbolic sizes (``SymInt``) name their symbol (``s77``, ``4*s77``); a call that makes
a ``SymInt`` (``aten.sym_size.int``) has a rank-0 ``int64`` result.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Dict, List, Tuple

from .records import ATEN_CALL, DOMAIN, AtenCall, In
from ...errors import BadInput, first_line
from ...ir.graph import INPUT, OP, OUTPUT, Graph, Node, Value
from ...ir.types import TensorType
from .kind import KIND as PT2
from ...model import Model

@dataclass
class AtenSource:
    """What the IR does not hold of the program: the program itself (its signature,
    state dict, constants, range constraints, module call graph), which the exporter
    writes the legal form with."""

    program: Any  # torch.export.ExportedProgram, decomposed to Core ATen
    original: Any  # the program as given (the check's reference)
    declared: Any = None  # its inputs and outputs declared as ONNX (``declaration``)
    legal: Any = None  # the legal program, once written (``kinds.pt2.exporter``)


_DTYPES = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16", "float64": "double", "int64": "int64",
           "int32": "int32", "int16": "int16", "int8": "int8", "uint8": "uint8", "bool": "bool"}


def dim_of(d) -> Any:
    """A size as the IR holds it: an int, or its symbol's expression (``s77``). (``int``
    of a SymInt would specialize it: a guard on the program.)"""
    if isinstance(d, int):
        return d
    known = d.node.maybe_as_int() if hasattr(d, "node") else None
    return known if known is not None else str(d)


def tensor_type(val) -> TensorType:
    """The IR type of an fx node's ``meta['val']``: a tensor's dtype and sizes, a SymInt
    as a rank-0 int64."""
    import torch

    if isinstance(val, torch.Tensor):
        dtype = str(val.dtype).replace("torch.", "")
        return TensorType(_DTYPES.get(dtype, dtype), tuple(dim_of(d) for d in val.shape))
    if isinstance(val, (torch.SymInt, int)):
        return TensorType("int64", ())
    if isinstance(val, (torch.SymFloat, float)):
        return TensorType("float", ())
    return TensorType(None, None)


def label_of(target) -> Tuple[str, str]:
    """(domain, op_type) of a call target: ATen's by its OpOverload name."""
    import torch

    op = target
    if not isinstance(op, torch._ops.OpOverload):  # ExecuTorch's EdgeOpOverload wraps one
        op = getattr(target, "_op", target)
    if isinstance(op, torch._ops.OpOverload):
        ns = "aten" if op.namespace == "dim_order_ops" else op.namespace  # its copies, read as aten's
        return ns, f"{op._schema.name.split('::', 1)[-1]}.{op._overloadname}"
    return "fx", getattr(target, "__name__", str(target))


def decomposed(program):
    """``program`` in Core ATen (``run_decompositions()``), or BadInput in torch's words."""
    from .torch_logs import quiet_torch

    try:
        with quiet_torch():
            return program.run_decompositions()
    except Exception as e:  # noqa: BLE001 - torch's words are the reason
        raise BadInput(f"the program: torch.export's run_decompositions fails on it"
                       f" ({type(e).__name__}: {first_line(e)})") from None


def import_program(program, what: str = "the program") -> Model:
    """``program`` (an ``ExportedProgram``) as a Model whose graph holds its Core ATen
    calls (frontend ``aten``); ``model.aten`` keeps the program."""
    import torch.fx

    edge = str(getattr(program, "dialect", "")) == "EDGE"  # ExecuTorch's: already in its op set
    ep = program if edge else decomposed(program)
    g = Graph("main", {DOMAIN: 1})
    g.frontend = DOMAIN
    g.aten_dialect = "edge" if edge else "aten"  # the op set new calls are made in (AtenOps)
    values: Dict[Any, List[Value]] = {}
    nodes: List[Node] = []
    for fx_node in ep.graph.nodes:
        if fx_node.op == "placeholder":
            v = Value(fx_node.name, tensor_type(fx_node.meta.get("val")))
            values[fx_node] = [v]
            nodes.append(Node(INPUT, "$input", name=fx_node.name, outputs=[v]))
        elif fx_node.op == "call_function":
            inputs: List[Value] = []

            getitem = fx_node.target is operator.getitem

            def operand(a):
                if isinstance(a, torch.fx.Node):
                    got = values.get(a)
                    if getitem and got is not None and len(got) > 1:  # one result of a tuple
                        inputs.append(got[fx_node.args[1]])
                        return In(len(inputs) - 1)
                    if got is None or len(got) != 1:
                        raise BadInput(f"{what}: node '{fx_node.name}' reads '{a.name}', which is not one value")
                    inputs.append(got[0])
                    return In(len(inputs) - 1)
                return a

            args = torch.fx.node.map_aggregate(fx_node.args, operand)
            kwargs = dict(torch.fx.node.map_aggregate(fx_node.kwargs, operand))
            val = fx_node.meta.get("val")
            vals = list(val) if isinstance(val, (tuple, list)) else [val]
            names = [fx_node.name] if len(vals) == 1 else [f"{fx_node.name}_{i}" for i in range(len(vals))]
            outs = [Value(n, tensor_type(x)) for n, x in zip(names, vals)]
            domain, op_type = label_of(fx_node.target)
            call = AtenCall(fx_node.target, tuple(args), kwargs, dict(fx_node.meta))
            nodes.append(Node(OP, op_type, domain, fx_node.name, inputs, outs, {ATEN_CALL: call}))
            values[fx_node] = outs
        elif fx_node.op == "output":
            for i, a in enumerate(torch.utils._pytree.tree_leaves(fx_node.args[0])):
                if not isinstance(a, torch.fx.Node):
                    raise BadInput(f"{what}: output {i} is not a tensor the graph computes")
                v = _getitem_value(values, a)
                nodes.append(Node(OUTPUT, "$output", name=v.name, inputs=[v]))
        else:
            raise BadInput(f"{what}: its graph has a '{fx_node.op}' node ('{fx_node.name}'), which a torch.export"
                           " program in Core ATen does not")
    g.add_nodes(nodes)
    g.nodes()
    model = Model(g, PT2.name)
    model.aten = AtenSource(ep, program)
    return model


def _getitem_value(values, a) -> Value:
    got = values[a]
    if len(got) != 1:
        raise BadInput(f"the program returns '{a.name}', a tuple, not a tensor")
    return got[0]


_ONNX_TYPES = {"float32": 1, "uint8": 2, "int8": 3, "int16": 5, "int32": 6, "int64": 7, "bool": 9, "float16": 10,
               "double": 11, "bfloat16": 16}


def user_inputs(program) -> List[str]:
    """The names of the program's user inputs (placeholders), in its flat input order."""
    from torch.export.graph_signature import InputKind

    return [s.arg.name for s in program.graph_signature.input_specs if s.kind == InputKind.USER_INPUT]


def declaration(model: Model):
    """An ONNX ModelProto that declares the program's user inputs and outputs, no more:
    their element types and dims (a symbol is a ``dim_param``, as an ONNX export names
    it), so that the check binds (``--dim``), synthesizes and names them as for any
    model. Made once per model."""
    from onnx import helper

    src = model.aten
    if getattr(src, "declared", None) is not None:
        return src.declared
    users = set(user_inputs(src.program))

    def info(v: Value):
        dims = [d if isinstance(d, int) else str(d) for d in (v.type.shape or ())]
        return helper.make_tensor_value_info(v.name, _ONNX_TYPES.get(v.type.dtype or "", 0), dims)

    inputs = [info(n.outputs[0]) for n in model.graph.inputs if n.name in users]
    outputs = [info(n.inputs[0]) for n in model.graph.outputs]
    src.declared = helper.make_model(helper.make_graph([], "program", inputs, outputs))
    return src.declared


def load_pt2(path, trust: bool = False) -> Model:
    """A ``.pt2`` archive (``torch.export.save``) as a Model of its Core ATen graph, read
    so that nothing in it runs unless ``trust`` (``pytorch.load_pt2``'s rules)."""
    from pathlib import Path

    from .onnx_export import _load_trusted, require_torch

    path = Path(path)
    require_torch(f"{path}: is a torch.export archive (.pt2); reading it")
    if trust:
        program = _load_trusted(path)
    else:
        from .safety import load_untrusted

        program = load_untrusted(path)
    model = import_program(program, what=str(path))
    model.source = path
    return model
