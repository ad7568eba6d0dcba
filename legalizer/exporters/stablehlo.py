"""IR -> StableHLO MLIR text: ``emit_stablehlo(model)``.

The input is an ONNX-frontend model legalized for target ``xla``: every broadcasting
op's operands already have the result's shape, made so by ``Unsqueeze`` (rank) +
``Expand`` (the broadcast) nodes whose runtime shapes are ``Shape``/``Gather``/``Equal``/
``Where``/``Concat`` computations. Each ONNX op is lowered by the function registered for
it in ``LOWERINGS`` (``exporters.mlir.stablehlo``: elementwise, shapes, nn) to StableHLO
ops in a single ``func.func @main`` whose arguments are the graph inputs in order and
whose results are the graph outputs in order, walked by the MLIR driver
(``mlir.driver``) that TOSA shares.

- Values known at compile time (initializers, ``Constant`` ops, inputs with an initializer
  default, small computations on those: ``mlir.fold.STABLEHLO_FOLDING``) are emitted as
  ``stablehlo.constant`` only where an op needs them at run time; an op that needs an
  operand at compile time (``Slice`` starts, ``Unsqueeze`` axes, ...) reads it.
- Elementwise ops are emitted only on operands of one shape: the verifier's ``xla``
  profile says so (the pipeline's verification of its output, or the emitter's own,
  once, when the caller passes none); an implicit broadcast left in the graph is a bug
  upstream and raises ``ImplicitBroadcast``.
- Every runtime constraint is a ``@shape_assertion`` (``mlir.stablehlo.assertions``).
- An op that cannot be lowered is collected; after the whole graph is walked, one
  ``BadInput`` names every such op and its nodes. No partial module is ever returned.
"""

from __future__ import annotations

import re
from typing import List, Optional

import numpy as np

from ..errors import BadInput, LegalizeError
from ..extras import install_hint
from ..ir.graph import Graph, Node
from ..verifier import VerifyResult, verify
from .mlir.driver import Driver
from .mlir.fold import STABLEHLO_FOLDING
from .mlir.registry import FRONTEND, Unsupported
from .mlir.stablehlo import LOWERINGS
from .mlir.stablehlo.assertions import Assertions
from .mlir.stablehlo.emitter import TT, Emitter
from .mlir.stablehlo.shapes import track_parts

__all__ = ["emit_stablehlo", "ImplicitBroadcast", "LOWERINGS", "portable_artifact"]


class ImplicitBroadcast(LegalizeError):
    """An elementwise op whose operands differ in shape: the model is not in the ``xla``
    legal form (a bug in the legalization, or a model that skipped it)."""


def _require_xla_form(verified: VerifyResult) -> None:
    """ImplicitBroadcast for the first op the verifier found broadcasting implicitly
    under the ``xla`` profile, in the graph itself (an op with a subgraph has no lowering)."""
    for d in verified.violations:
        if d.code == "implicit-broadcast" and not d.graph:
            raise ImplicitBroadcast(f"cannot emit StableHLO: {d.op} '{d.node}' broadcasts implicitly ({d.message});"
                                    " emit_stablehlo needs a model legalized for target xla")


def emit_stablehlo(model, constraints=None, *, verified: Optional[VerifyResult] = None) -> str:
    """StableHLO MLIR text of ``model`` (a ``Model`` or a ``Graph``), which must be in
    the ``xla`` legal form: ``verified``, the graph's verification under the ``xla``
    profile (the pipeline's), else the emitter verifies it once. Every runtime
    constraint becomes a ``@shape_assertion``: ``constraints`` (a ``ConstraintSet`` or
    ``VerifyResult``), by default those ``legalize`` recorded on the model
    (``Model.constraints``: what the report lists), else those of the graph as it is.
    Raises ``BadInput`` naming every op that cannot be lowered, and ``ImplicitBroadcast``
    if an elementwise op still broadcasts."""
    graph: Graph = model if isinstance(model, Graph) else model.graph
    if graph.frontend != FRONTEND:
        raise BadInput("cannot emit StableHLO for a TFLite model's graph (its ONNX form can be)")
    if verified is None:
        verified = verify(graph, "xla")
    _require_xla_form(verified)
    if constraints is None:
        constraints = getattr(model, "constraints", None)
    if constraints is None:  # those of the graph as it is (the profile adds none)
        constraints = verified
    return _StableHLODriver(graph, getattr(constraints, "constraints", constraints)).text()


class _StableHLODriver(Driver):
    """The StableHLO function: graph inputs without a value are its arguments; values
    known at compile time stay numpy arrays until an op needs them at run time; a failed
    op poisons its outputs, and the ops that read them are not lowered."""

    dialect = "StableHLO"
    table = LOWERINGS
    folding = STABLEHLO_FOLDING

    def __init__(self, graph: Graph, constraints):
        super().__init__(graph, Emitter(graph))
        self.asserts = Assertions(self.cx, graph, constraints)
        self.poisoned: set = set()
        self.args: List[str] = []

    def known(self, value):
        return self.cx.known.get(value)

    def constant(self, node: Node) -> None:
        if node.data is None or node.data.sparse:
            self.failures.add(f"initializer '{node.output.name}'", "sparse", None)
            self.poisoned.update(node.outputs)
            return
        self.cx.known[node.output] = np.asarray(node.data.array)
        self.asserts.defined(node.outputs)

    def argument(self, node: Node) -> None:
        cx = self.cx
        # An input with an initializer default (IR version < 4) is that constant:
        # the check feeds only inputs without one, and XLA needs its static value.
        if node.data is not None:
            cx.known[node.output] = np.asarray(node.data.array)
            self.asserts.defined(node.outputs)
            return
        try:
            tt = TT.of(node.output)
        except Unsupported as e:
            self.failures.add(f"input '{node.output.name}'", str(e), None)
            self.poisoned.add(node.output)
            return
        name = cx.fresh(node.output.name)
        cx.values[node.output] = name
        cx.types[name] = tt
        self.args.append(f"{name}: {tt}")
        self.asserts.defined(node.outputs)

    def blocked(self, node: Node) -> bool:
        if not any(v in self.poisoned for v in node.inputs if v is not None):
            return False
        self.poisoned.update(node.outputs)
        if node.op not in LOWERINGS:
            self.failures.add(node.op, "", node.label)
        return True

    def define_known(self, node: Node, arrays) -> None:
        for o, r in zip(node.outputs, arrays):
            self.cx.known[o] = np.asarray(r)
        self.asserts.defined(node.outputs)

    def lower(self, fn, node: Node) -> List[Optional[str]]:
        """The rule's results, each converted to its output's type and named after it."""
        cx = self.cx
        for v in node.inputs:
            if v is not None:
                TT.of(v)
        mark = len(cx.lines)
        results = fn(cx, node)
        for o, r in zip(node.outputs, results):
            if r is None:
                continue
            tt = TT.of(o)
            if cx.tt(r) != tt:
                r = cx.emit(f"stablehlo.convert {r} : ({cx.tt(r)}) -> {tt}", tt, o.name)
            cx.values[o] = cx.rename_new(r, o.name, mark)
        track_parts(cx, node)
        return results

    def define(self, node: Node, results) -> None:
        self.asserts.defined([o for o in node.outputs if o in self.cx.values])

    def failed(self, node: Node, why: Optional[str]) -> None:
        self.failures.add(node.op, why or "", node.label)
        self.poisoned.update(node.outputs)

    def module(self) -> str:
        cx = self.cx
        if self.failures:
            raise self.failures.by_op()
        self.asserts.finish()
        rets, types = [], []
        for out in self.graph.outputs:
            rets.append(cx.v(out.inputs[0]))
            types.append(str(cx.tt(rets[-1])))
        body = "\n".join("    " + line for text in cx.lines for line in text.split("\n"))
        ret = f"    return {', '.join(rets)} : {', '.join(types)}" if rets else "    return"
        return (f"module {{\n  func.func public @main({', '.join(self.args)}) -> ({', '.join(types)}) {{\n"
                f"{body}\n{ret}\n  }}\n}}\n")


def portable_artifact(text: str) -> bytes:
    """``text`` as a StableHLO portable artifact (VHLO bytecode at the current StableHLO
    version, readable by later versions), serialized by jaxlib's StableHLO (the jax
    extra). CHLO ops (erf: ONNX's Erf, Gelu) have no stable form: BadInput naming them."""
    try:
        from jaxlib.mlir.dialects import stablehlo
    except ImportError:
        raise BadInput(f"--emit stablehlo-bytecode needs jaxlib: {install_hint('jax')}"
                       " (or write text: --emit stablehlo)") from None
    chlo = sorted(set(re.findall(r"\bchlo\.[a-z_]+", text)))
    if chlo:
        raise BadInput(f"cannot write a StableHLO portable artifact: {', '.join(chlo)} "
                       "is not in StableHLO's stable opset (--emit stablehlo writes the text)")
    try:
        return bytes(stablehlo.serialize_portable_artifact_str(text, stablehlo.get_current_version()))
    except ValueError as e:
        raise BadInput(f"cannot write a StableHLO portable artifact: {e}") from None
