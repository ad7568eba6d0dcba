"""ONNX-frontend IR -> TOSA MLIR text: ``emit_tosa(model)``.

The model is expected in the ``tosa`` target's legal form (``legalize(model, "tosa")``):
every elementwise operand already has its result's rank, so an elementwise ONNX op is
one TOSA op whose operands broadcast only through size-1 dims, as TOSA allows. The other
ops are lowered by small functions registered per ONNX op type in ``LOWERINGS``
(``exporters.mlir.tosa``: elementwise, shapes, nn), each emitting TOSA ops through one
``Emitter``; a missing lowering is a named error. A TFLite model is emitted from its
ONNX form, which the caller makes (``emit.render_mlir``).

- One ``func.func @main`` in a ``module``: arguments in graph-input order (an initializer
  that ONNX IR < 4 also lists as an input is a constant, not an argument), results in
  graph-output order.
- Convolutions, pools, slices and means need the dims they compute with to be static.
  ``dims=`` binds symbolic dims to sizes first (the model's ONNX form is re-imported with
  them, so shape inference makes everything it can static).
- Values computed from constants only are folded at emission time
  (``mlir.fold.TOSA_FOLDING``); constants are emitted where they are first used, once.

If any op cannot be emitted, ``BadInput`` names every such op on one line and no module
is produced.
"""

from __future__ import annotations

from typing import List, Mapping, Optional

import numpy as np

from ..errors import BadInput
from ..ir.graph import OP, Graph, Value
from ..model import Model
from .mlir.failures import Failures
from .mlir.fold import TOSA_FOLDING, fold
from .mlir.registry import Unsupported
from .mlir.tosa import LOWERINGS
from .mlir.tosa.emitter import TOSA_ELEMENT, Emitter, Poisoned, T

__all__ = ["emit_tosa", "LOWERINGS"]


def _specialize(model: Model, dims: Mapping[str, int]) -> Model:
    """The model with symbolic dims bound to sizes: its ONNX form re-imported, so that
    shape inference makes static what it can."""
    from ..importers.onnx import import_model
    from .onnx_form import to_onnx

    proto = to_onnx(model)
    g = proto.graph
    for vi in list(g.input) + list(g.output):
        if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
            continue
        for d in vi.type.tensor_type.shape.dim:
            if d.WhichOneof("value") == "dim_param":
                if d.dim_param in dims:
                    d.dim_value = int(dims[d.dim_param])
                elif vi in g.output:
                    d.ClearField("dim_param")
    del g.value_info[:]
    return import_model(proto, model.base_dir)


def emit_tosa(model: Model, *, dims: Optional[Mapping[str, int]] = None, func_name: str = "main") -> str:
    """TOSA MLIR text of ``model`` (ONNX frontend, legalized for ``tosa``). ``dims``
    binds symbolic dims to sizes. BadInput names every op that cannot be emitted."""
    if model.format != "onnx":
        raise BadInput(f"TOSA export reads an ONNX model, not {model.format} (emit its ONNX form)")
    if dims:
        model = _specialize(model, dims)
    return _emit_graph(model.graph, func_name)


def _placeholder(v: Value) -> Optional[T]:
    t = v.type
    if t.dtype in TOSA_ELEMENT and t.shape is not None:
        return T("%<unavailable>", t.dtype, tuple(t.shape))
    return None


def _emit_graph(graph: Graph, func_name: str) -> str:
    e = Emitter(graph)
    args: List[T] = []
    failures = Failures("TOSA")
    for n in graph.inputs:
        v = n.outputs[0]
        if n.data is not None:  # IR < 4: an initializer listed as an input
            e.consts[id(v)] = np.asarray(n.data.array)
            continue
        t = v.type
        if t.dtype is None or t.shape is None or t.dtype not in TOSA_ELEMENT:
            failures.add(f"input '{v.name}'", f"{t}: needs a ranked tensor type TOSA has")
            continue
        arg = T(e.fresh(f"arg{len(args)}"), t.dtype, tuple(t.shape))
        args.append(arg)
        e.env[id(v)] = arg
    for n in graph.constants():
        if n.data is not None and not n.data.sparse:
            e.consts[id(n.outputs[0])] = n.data.array
    for node in graph.nodes():
        if node.kind != OP:
            continue
        folded = fold(graph, node, e.const_of, TOSA_FOLDING)
        if folded is not None:
            for v, a in zip(node.outputs, folded):
                e.consts[id(v)] = a
            continue
        e.node = node
        lower = LOWERINGS.get(node.op)
        failed = True
        try:
            if lower is None:
                raise Unsupported("no TOSA lowering")
            outs = lower(e)
            failed = False
        except Unsupported as why:
            failures.add(node.op, str(why), node.label)
        except Poisoned:  # an operand's op failed and is reported; this op is only if it has no lowering
            if lower is None:
                failures.add(node.op, "no TOSA lowering", node.label)
        if failed:  # later ops still get checked, on placeholders of the IR's types
            outs = [_placeholder(v) for v in node.outputs]
        for v, t in zip(node.outputs, outs):
            if t is not None:
                e.env[id(v)] = t
            elif failed:
                e.poisoned.add(id(v))
    results: List[T] = []
    for n in graph.outputs:
        v = n.inputs[0]
        if v is None:
            continue
        try:
            results.append(e.value(v))
        except (Unsupported, Poisoned):
            if not failures:
                failures.add(f"output '{v.name}'", "not computed")
    if failures:
        raise failures.by_node()
    sig_args = ", ".join(f"{a.ssa}: {a.type}" for a in args)
    res_types = [r.type for r in results]
    ret = res_types[0] if len(res_types) == 1 else "(" + ", ".join(res_types) + ")"
    names = ", ".join(n.outputs[0].name for n in graph.inputs if n.data is None)
    header = f"// TOSA form of graph '{graph.name}' (inputs: {names}) written by legalize"
    out = [" ".join(header.splitlines()), "module {", f"  func.func @{func_name}({sig_args}) -> {ret} {{"]
    out.extend("    " + line for line in e.lines)
    if results:
        out.append(f"    return {', '.join(r.ssa for r in results)} : {', '.join(res_types)}")
    else:
        out.append("    return")
    out.append("  }")
    out.append("}")
    return "\n".join(out) + "\n"
