"""Runtime constraints as StableHLO shape assertions.

Every runtime constraint of the model (what the verifier lists and the report shows:
``b[0] == 2 or b[0] == 1``, ``M == N`` in strict symbolic mode) is a
``stablehlo.custom_call @shape_assertion`` as JAX writes them - the asserting form of a
shape computation (https://mlir.llvm.org/docs/Dialects/ShapeDialect/): the predicate
computed from ``get_dimension_size`` of the values the constraint names, then those
dims, which ``{0}``, ``{1}``... of its ``error_message`` (the constraint's text and its
nodes) stand for. A binding that breaks one fails at shape refinement with that
message, before anything is computed on a bad shape.
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ....ir.graph import OP, Graph, Value
from ..failures import node_names
from .emitter import TT, Emitter, RDim, escape_braces

# A term of a constraint, resolved in the graph: a static size, ("dim", value, axis), or
# ("broadcast", term, term), numpy's broadcast of two dims.
Term = Union[int, Tuple]


class Assertions:
    """Every runtime constraint as a ``@shape_assertion``, written as soon as the values
    whose dims it reads are defined (a constraint on graph inputs: at the top of
    ``@main``, where JAX writes its own). A label names a dim as the verifier does: a
    symbol (its first occurrence, graph inputs first), ``value[axis]``, a
    ``broadcast(a, b)`` of two, or a number. A constraint whose labels name nothing in
    this graph (a value legalization removed as dead) is not asserted, and a comment in
    the module says so."""

    def __init__(self, cx: Emitter, graph: Graph, constraints):
        from ....shapes import alternatives

        self.cx, self.graph = cx, graph
        self._symbols: Optional[Dict[str, Tuple[Value, int]]] = None
        self.todo: List[Tuple[str, str, List[Tuple[Term, Term]], List[Tuple[str, Term]]]] = []
        self.missing: List[int] = []
        self.waiting: Dict[Value, List[int]] = {}
        self.skipped: List[str] = []
        for key, c in constraints.items.items():
            nodes = node_names(constraints.nodes.get(key, []))
            pairs, shown, ok = [], {}, True
            for a, b in alternatives(c):
                ta, tb = self.term(a), self.term(b)
                if ta is None or tb is None:
                    ok = False
                    break
                pairs.append((ta, tb))
                for label, t in ((a, ta), (b, tb)):
                    if not isinstance(t, int):
                        shown.setdefault(label, t)
            if not ok:
                self.skipped.append(f"// legalize: runtime constraint {c.text} ({nodes}) is not asserted:"
                                    " it names dims of no value of this graph")
                continue
            values = {d[1] for t in shown.values() for d in _dim_terms(t)}
            self.todo.append((c.text, nodes, pairs, list(shown.items())))
            self.missing.append(len(values))
            for v in values:
                self.waiting.setdefault(v, []).append(len(self.todo) - 1)
            if not values:
                self.write(len(self.todo) - 1)

    # -- labels
    def symbols(self) -> Dict[str, Tuple[Value, int]]:
        if self._symbols is None:
            self._symbols = {}
            values = [n.output for n in self.graph.inputs] + \
                [v for n in self.graph.nodes() if n.kind == OP for v in n.outputs]
            for v in values:
                for k, d in enumerate(v.type.shape or ()):
                    if isinstance(d, str):
                        self._symbols.setdefault(d, (v, k))
        return self._symbols

    def term(self, label: str) -> Optional[Term]:
        from ....shapes import broadcast_label_operands

        if label.isdigit():
            return int(label)
        hit = self.symbols().get(label)
        if hit is not None:
            return ("dim",) + hit
        pair = broadcast_label_operands(label)
        if pair is not None:
            a, b = self.term(pair[0]), self.term(pair[1])
            return None if a is None or b is None else ("broadcast", a, b)
        m = re.fullmatch(r"(.*)\[(\d+)\]", label, re.S)
        if m is not None:
            v, k = self.graph.value(m[1]), int(m[2])
            if v is not None and v.type.shape is not None and k < len(v.type.shape):
                return ("dim", v, k)
        return None

    # -- writing
    def defined(self, values: Sequence[Optional[Value]]) -> None:
        """``values`` are defined (emitted, or known at compile time): write the
        assertions that waited only for them."""
        for v in values:
            for i in self.waiting.pop(v, ()) if v is not None else ():
                self.missing[i] -= 1
                if self.missing[i] == 0:
                    self.write(i)

    def dim(self, t: Term) -> RDim:
        cx = self.cx
        if isinstance(t, int):
            return t
        if t[0] == "broadcast":
            a, b = self.dim(t[1]), self.dim(t[2])
            if isinstance(a, int) and isinstance(b, int):
                return b if a == 1 else a
            a, b = cx.dim_vector(a), cx.dim_vector(b)
            return cx.select(cx.compare("EQ", a, cx.index_vector([1])), b, a)
        _, v, k = t
        if v in cx.known:
            return int(np.shape(cx.known[v])[k])
        return cx.rdim(cx.v(v), k)

    def write(self, i: int) -> None:
        cx = self.cx
        text, nodes, pairs, shown = self.todo[i]
        node, cx.node, cx.base = cx.node, None, f"cstr{i}."
        try:
            always, conds = False, []
            for a, b in pairs:
                da, db = self.dim(a), self.dim(b)
                if isinstance(da, int) and isinstance(db, int):
                    always |= da == db
                else:
                    conds.append(cx.compare("EQ", cx.dim_vector(da), cx.dim_vector(db)))
            if always or not conds:
                ok = cx.const(np.array([always]), TT("i1", (1,)), f"cstr{i}.")
            else:
                ok = conds[0]
                for c in conds[1:]:
                    ok = cx.op("stablehlo.or", [ok, c], cx.tt(ok))
            inputs, values = [], []
            for label, t in shown:
                d = self.dim(t)
                if isinstance(d, int):
                    values.append(f"{escape_braces(label)} = {d}")
                else:
                    values.append(f"{escape_braces(label)} = {{{len(inputs)}}}")
                    inputs.append(d)
            message = (f"legalize: runtime constraint {escape_braces(text)} ({escape_braces(nodes)}) does not hold"
                       + (": " + ", ".join(values) if values else ""))
            cx.shape_assertion(ok, inputs, message)
        finally:
            cx.node, cx.base = node, None

    def finish(self) -> None:
        """Constraints still waiting read dims of values never defined (an optional
        output no one uses): said in a comment, as the unresolved ones."""
        for i, n in enumerate(self.missing):
            if n > 0:
                text, nodes = self.todo[i][:2]
                self.skipped.append(f"// legalize: runtime constraint {text} ({nodes}) is not asserted:"
                                    " it names dims of a value this module does not compute")
        self.cx.lines.extend(" ".join(line.splitlines()) for line in self.skipped)


def _dim_terms(t: Term):
    """The ("dim", value, axis) terms in ``t``."""
    if isinstance(t, int):
        return
    if t[0] == "broadcast":
        yield from _dim_terms(t[1])
        yield from _dim_terms(t[2])
    else:
        yield t

