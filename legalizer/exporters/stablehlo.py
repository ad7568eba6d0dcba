"""IR -> StableHLO MLIR text: ``emit_stablehlo(model)``.

The input is an ONNX-frontend model legalized for target ``xla``: every broadcasting
op's operands already have the result's shape, made so by ``Unsqueeze`` (rank) +
``Expand`` (the broadcast) nodes whose runtime shapes are ``Shape``/``Gather``/``Equal``/
``Where``/``Concat`` computations. Each ONNX op is lowered by the function registered for
it in ``LOWERINGS`` (``exporters.mlir.stablehlo``: elementwise, shapes, nn) to StableHLO
ops in a single ``func.func @main`` whose arguments are the graph inputs in order and
whose results are the graph outputs in order.

- Values known at compile time (initializers, ``Constant`` ops, inputs with an initializer
  default, small computations on those: ``mlir.fold.STABLEHLO_FOLDING``) are emitted as
  ``stablehlo.constant`` only where an op needs them at run time; an op that needs an
  operand at compile time (``Slice`` starts, ``Unsqueeze`` axes, ...) reads it.
- Elementwise ops are emitted only on operands of one shape; an implicit broadcast left
  in the graph is a bug upstream and raises ``ImplicitBroadcast``.
- Every runtime constraint is a ``@shape_assertion`` (``mlir.stablehlo.assertions``).
- An op that cannot be lowered is collected; after the whole graph is walked, one
  ``BadInput`` names every such op and its nodes. No partial module is ever returned.
"""

from __future__ import annotations

import re
from typing import List

import numpy as np

from ..errors import BadInput, LegalizeError
from ..extras import install_hint
from ..ir.graph import CONST, INPUT, OP, Graph, Node
from ..oprules import frontend_rules
from ..shapes import same_shape
from .mlir.failures import Failures
from .mlir.fold import STABLEHLO_FOLDING, fold
from .mlir.registry import Unsupported
from .mlir.stablehlo import LOWERINGS
from .mlir.stablehlo.assertions import Assertions
from .mlir.stablehlo.emitter import TT, Emitter, has_input
from .mlir.stablehlo.shapes import track_parts

__all__ = ["emit_stablehlo", "ImplicitBroadcast", "LOWERINGS", "portable_artifact"]


class ImplicitBroadcast(LegalizeError):
    """An elementwise op whose operands differ in shape: the model is not in the ``xla``
    legal form (a bug in the legalization, or a model that skipped it)."""


# The broadcasting ops and which operands broadcast onto what: the rules table.
_RULES = {op: r for op, r in frontend_rules("onnx").items() if r.broadcasting}


def _no_implicit_broadcast(node: Node) -> None:
    """The ``xla`` form's promise, checked for every op the rules table says broadcasts:
    its broadcasting operands provably have the shape they broadcast onto (equal static
    sizes, equal symbols). Anything else is an implicit broadcast left in the graph."""
    rule = _RULES.get(node.op)
    if rule is None:
        return
    if rule.broadcast == "multidirectional":
        vals = [v for v in node.inputs if v is not None]
        onto = vals[0]
    else:
        vals = [node.inputs[i] for i in rule.broadcasts if has_input(node, i)]
        onto = node.outputs[0] if rule.onto == "result" else node.inputs[0]
    bad = [v for v in vals if not same_shape(v.type.shape, onto.type.shape)]
    if bad:
        raise ImplicitBroadcast(
            f"cannot emit StableHLO: {node.op} '{node.label}' broadcasts implicitly ("
            + ", ".join(str(v.type) for v in bad) + f" onto {onto.type}); emit_stablehlo needs a model"
            " legalized for target xla")


def emit_stablehlo(model, constraints=None) -> str:
    """StableHLO MLIR text of ``model`` (a ``Model`` or a ``Graph``), which must be in
    the ``xla`` legal form. Every runtime constraint becomes a ``@shape_assertion``:
    ``constraints`` (a ``ConstraintSet`` or ``VerifyResult``), by default those
    ``legalize`` recorded on the model (``Model.constraints``: what the report lists),
    else those of the graph as it is. Raises ``BadInput`` naming every op that cannot be
    lowered, and ``ImplicitBroadcast`` if an elementwise op still broadcasts."""
    graph: Graph = model if isinstance(model, Graph) else model.graph
    if graph.frontend != "onnx":
        raise BadInput("cannot emit StableHLO for a TFLite model's graph (its ONNX form can be)")
    cx = Emitter(graph)
    if constraints is None:
        constraints = getattr(model, "constraints", None)
    if constraints is None:
        from ..verify import verify

        constraints = verify(graph, "mlir")
    asserts = Assertions(cx, graph, getattr(constraints, "constraints", constraints))
    failures = Failures("StableHLO")
    poisoned: set = set()
    args: List[str] = []
    for node in graph.nodes():
        if node.kind == CONST:
            if node.data is None or node.data.sparse:
                failures.add(f"initializer '{node.output.name}'", "sparse", None)
                poisoned.update(node.outputs)
            else:
                cx.known[node.output] = np.asarray(node.data.array)
                asserts.defined(node.outputs)
            continue
        if node.kind == INPUT:
            # An input with an initializer default (IR version < 4) is that constant:
            # the check feeds only inputs without one, and XLA needs its static value.
            if node.data is not None:
                cx.known[node.output] = np.asarray(node.data.array)
                asserts.defined(node.outputs)
                continue
            try:
                tt = TT.of(node.output)
            except Unsupported as e:
                failures.add(f"input '{node.output.name}'", str(e), None)
                poisoned.add(node.output)
                continue
            name = cx.fresh(node.output.name)
            cx.values[node.output] = name
            cx.types[name] = tt
            args.append(f"{name}: {tt}")
            asserts.defined(node.outputs)
            continue
        if node.kind != OP:
            continue
        if any(v in poisoned for v in node.inputs if v is not None):
            poisoned.update(node.outputs)
            if node.op not in LOWERINGS:
                failures.add(node.op, "", node.label)
            continue
        cx.node = node
        try:
            folded = fold(graph, node, cx.known.get, STABLEHLO_FOLDING)
            if folded is not None:
                for o, r in zip(node.outputs, folded):
                    cx.known[o] = np.asarray(r)
                asserts.defined(node.outputs)
                continue
            fn = LOWERINGS.get(node.op)
            if fn is None or node.domain not in ("", "ai.onnx") or any(True for _ in node.subgraphs()):
                raise Unsupported("")
            _no_implicit_broadcast(node)
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
        except Unsupported as e:
            failures.add(node.op, str(e), node.label)
            poisoned.update(node.outputs)
            continue
        asserts.defined([o for o in node.outputs if o in cx.values])
    cx.node = None
    if failures:
        raise failures.by_op()
    asserts.finish()
    rets, types = [], []
    for out in graph.outputs:
        v = out.inputs[0]
        rets.append(cx.v(v))
        types.append(str(cx.tt(rets[-1])))
    body = "\n".join("    " + line for text in cx.lines for line in text.split("\n"))
    ret = f"    return {', '.join(rets)} : {', '.join(types)}" if rets else "    return"
    return (f"module {{\n  func.func public @main({', '.join(args)}) -> ({', '.join(types)}) {{\n"
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
