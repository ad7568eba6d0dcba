"""ONNX-frontend IR -> TOSA MLIR text: ``emit_tosa(model)``.

The model is expected in the ``tosa`` target's legal form (``legalize(model, "tosa")``):
every elementwise operand already has its result's rank, so an elementwise ONNX op is
one TOSA op whose operands broadcast only through size-1 dims, as TOSA allows. The other
ops are lowered by small functions registered per ONNX op type in ``LOWERINGS``
(``exporters.mlir.tosa``: elementwise, shapes, nn), each emitting TOSA ops through one
``Emitter``, walked by the MLIR driver (``mlir.driver``) that StableHLO shares; a missing
lowering is a named error. A TFLite model is emitted from its ONNX form, which the
caller makes (``emit_formats.render_mlir``).

- One ``func.func @main`` in a ``module``: arguments in graph-input order (an initializer
  that ONNX IR < 4 also lists as an input is a constant, not an argument), results in
  graph-output order.
- Convolutions, pools, slices and means need the dims they compute with to be static:
  the caller binds symbolic dims to sizes first (``emit_formats.bound_dims``: the IR's
  values retyped by one shape inference with the dims bound, which makes static what it
  can); the exporter reads the model as it is given.
- Values computed from constants only are folded at emission time
  (``mlir.fold.TOSA_FOLDING``); constants are emitted where they are first used, once.

If any op cannot be emitted, ``BadInput`` names every such op on one line and no module
is produced.
"""

from __future__ import annotations

from typing import List, Optional

import numpy as np

from ..errors import BadInput
from ..ir.graph import Graph, Node, Value
from ..model import Model
from .as_onnx import translated
from .mlir.driver import Driver
from .mlir.fold import TOSA_FOLDING
from .mlir.registry import Unsupported
from .mlir.tosa import LOWERINGS
from .mlir.tosa.emitter import TOSA_ELEMENT, Emitter, Poisoned, T

__all__ = ["emit_tosa", "LOWERINGS"]


def emit_tosa(model: Model, *, func_name: str = "main") -> str:
    """TOSA MLIR text of ``model`` (ONNX frontend, legalized for ``tosa``; symbolic dims
    bound where the ops need them static). BadInput names every op that cannot be emitted."""
    if translated(model):  # not of ONNX ops
        raise BadInput(f"TOSA export reads an ONNX model, not {model.format} (emit its ONNX form)")
    return _TosaDriver(model.graph, func_name).text()


def _placeholder(v: Value) -> Optional[T]:
    t = v.type
    if t.dtype in TOSA_ELEMENT and t.shape is not None:
        return T("%<unavailable>", t.dtype, tuple(t.shape))
    return None


class _TosaDriver(Driver):
    """The TOSA function: graph inputs are its arguments, in order; constants are
    emitted where first used; a failed op leaves placeholders of its IR types, so that
    later ops are still checked."""

    dialect = "TOSA"
    table = LOWERINGS
    folding = TOSA_FOLDING
    no_rule = "no TOSA lowering"

    def __init__(self, graph: Graph, func_name: str):
        super().__init__(graph, Emitter(graph))
        self.func_name = func_name
        self.args: List[T] = []

    def walk(self):
        # the arguments first, numbered in graph-input order; then every constant
        return self.graph.inputs + self.graph.constants() + self.graph.ops()

    def known(self, value):
        return self.cx.const_of(value)

    def argument(self, node: Node) -> None:
        e, v = self.cx, node.outputs[0]
        if node.data is not None:  # IR < 4: an initializer listed as an input
            e.consts[id(v)] = np.asarray(node.data.array)
            return
        t = v.type
        if t.dtype is None or t.shape is None or t.dtype not in TOSA_ELEMENT:
            self.failures.add(f"input '{v.name}'", f"{t}: needs a ranked tensor type TOSA has")
            return
        arg = T(e.fresh(f"arg{len(self.args)}"), t.dtype, tuple(t.shape))
        self.args.append(arg)
        e.env[id(v)] = arg

    def constant(self, node: Node) -> None:
        if node.data is not None and not node.data.sparse:
            self.cx.consts[id(node.outputs[0])] = node.data.array

    def define_known(self, node: Node, arrays) -> None:
        for v, a in zip(node.outputs, arrays):
            self.cx.consts[id(v)] = a

    def define(self, node: Node, results) -> None:
        for v, t in zip(node.outputs, results):
            if t is not None:
                self.cx.env[id(v)] = t

    def failed(self, node: Node, why: Optional[str]) -> None:
        if why is not None:  # else an operand's op failed, and is reported
            self.failures.add(node.op, why, node.label)
        for v in node.outputs:  # later ops still get checked, on placeholders of the IR's types
            t = _placeholder(v)
            if t is not None:
                self.cx.env[id(v)] = t
            else:
                self.cx.poisoned.add(id(v))

    def module(self) -> str:
        e, graph = self.cx, self.graph
        results: List[T] = []
        for n in graph.outputs:
            v = n.inputs[0]
            if v is None:
                continue
            try:
                results.append(e.value(v))
            except (Unsupported, Poisoned):
                if not self.failures:
                    self.failures.add(f"output '{v.name}'", "not computed")
        if self.failures:
            raise self.failures.by_node()
        sig_args = ", ".join(f"{a.ssa}: {a.type}" for a in self.args)
        res_types = [r.type for r in results]
        ret = res_types[0] if len(res_types) == 1 else "(" + ", ".join(res_types) + ")"
        names = ", ".join(n.outputs[0].name for n in graph.inputs if n.data is None)
        header = f"// TOSA form of graph '{graph.name}' (inputs: {names}) written by legalize"
        out = [" ".join(header.splitlines()), "module {", f"  func.func @{self.func_name}({sig_args}) -> {ret} {{"]
        out.extend("    " + line for line in e.lines)
        if results:
            out.append(f"    return {', '.join(r.ssa for r in results)} : {', '.join(res_types)}")
        else:
            out.append("    return")
        out.append("  }")
        out.append("}")
        return "\n".join(out) + "\n"
