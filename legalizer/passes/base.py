"""Pass infrastructure: a pass rewrites one graph and says whether it changed it; the
manager runs passes over a graph and all its subgraphs, in order.

Each pass is a record in one registry (``register_pass``; ``PASSES``): its name, the
frontends whose graphs it applies to, and the contracts it requires before it runs and
ensures after, by name. The contracts themselves are measures a caller above this layer
supplies (``Contract``; ``legalizer.target_passes`` has the targets'): with them, the
manager checks each pass and names the one that broke a contract, as onnx-ir's pass
infrastructure and MLIR's pass manager do."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple, Union

from ..ir.graph import Graph, Node
from ..oprules import OpRule, builtin_rules


@dataclass
class PassResult:
    graph: Graph
    modified: bool


@dataclass
class PassContext:
    """What passes share: the op table, the counters that end up in the report's
    stats, and the symbolic mode (the target picks the passes, not a field here)."""

    rules: Mapping[str, OpRule] = field(default_factory=lambda: builtin_rules())
    stats: Counter = field(default_factory=Counter)
    assume_dynamic_not_one: bool = False
    # The highest rank the target takes: ``fold_ranks`` folds elementwise regions above
    # it (None: no limit, nothing folded; 0: every region to its lowest rank).
    max_rank: Optional[int] = None
    # Whether the target's backend refuses a node at its rank and takes it at a lower one
    # (its own rules); None: a target without a backend's rules.
    rank_refused: Optional[Callable[[Node], bool]] = None


PassFn = Callable[[Graph, PassContext], bool]


@dataclass(frozen=True)
class Pass:
    """A registered pass: its function and what it promises."""

    name: str
    run: PassFn
    # graph.frontend values whose graphs it rewrites ("onnx", "tflite", "aten"); () all
    frontends: Tuple[str, ...] = ()
    requires: Tuple[str, ...] = ()  # contracts that must hold before it runs
    ensures: Tuple[str, ...] = ()  # contracts it makes hold (or keeps), beyond every pass's

    def applies_to(self, graph: Graph) -> bool:
        return not self.frontends or graph.frontend in self.frontends


PASSES: Dict[str, Pass] = {}
_BY_FUNCTION: Dict[Callable, Pass] = {}


def register_pass(name: Optional[str] = None, *, frontends: Tuple[str, ...] = (), requires: Tuple[str, ...] = (),
                  ensures: Tuple[str, ...] = ()) -> Callable[[PassFn], PassFn]:
    """Decorator: ``fn`` becomes the pass ``name`` (default: its own name); it stays
    callable as it was."""
    def record(fn: PassFn) -> PassFn:
        rec = Pass(name or fn.__name__, fn, tuple(frontends), tuple(requires), tuple(ensures))
        if PASSES.setdefault(rec.name, rec) is not rec:
            raise ValueError(f"pass '{rec.name}' is already registered")
        _BY_FUNCTION[fn] = rec
        return fn
    return record


def pass_record(p: Union[str, Pass, PassFn]) -> Pass:
    """The record of a pass named, given, or registered for a function (an unregistered
    function is a pass of its own name that promises nothing)."""
    if isinstance(p, Pass):
        return p
    if isinstance(p, str):
        try:
            return PASSES[p]
        except KeyError:
            raise KeyError(f"unknown pass '{p}'; registered: {', '.join(sorted(PASSES))}") from None
    return _BY_FUNCTION.get(p) or Pass(getattr(p, "__name__", str(p)), p)


@dataclass(frozen=True)
class Contract:
    """What a pass may promise about a graph, as a measure of what is wrong with it (a
    list of findings, each in words). ``kept``: the pass leaves no more findings than it
    found; otherwise it leaves none at all."""

    name: str
    measure: Callable[[Graph, PassContext], List[str]]
    kept: bool = True


class ContractError(AssertionError):
    """A pass broke a contract (a bug in the pass, never in the model)."""


class PassManager:
    """Runs each pass on every graph it applies to (outer first, then subgraphs, depth
    first). Given ``contracts`` (name -> ``Contract``), it checks each pass: what it
    requires before, what it ensures after, and ``always`` (every pass's, e.g. legal stays
    legal), and raises ``ContractError`` naming the pass and the contract."""

    def __init__(self, passes: Iterable[Union[str, Pass, PassFn]], contracts: Optional[Mapping[str, Contract]] = None,
                 always: Tuple[str, ...] = ()):
        self.passes: List[Pass] = [pass_record(p) for p in passes]
        self.contracts = contracts
        self.always = always if contracts is not None else ()
        for rec in self.passes:
            for c in (*rec.requires, *rec.ensures, *self.always):
                if contracts is not None and c not in contracts:
                    raise KeyError(f"pass '{rec.name}' names an unknown contract '{c}'")

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        modified = False
        for rec in self.passes:
            graphs = [g for g in graph.graphs() if rec.applies_to(g)]
            if not graphs:
                continue
            before = self._check(rec, graph, ctx)
            for g in graphs:
                modified |= bool(rec.run(g, ctx))
            self._check(rec, graph, ctx, before)
        return PassResult(graph, modified)

    def _check(self, rec: Pass, graph: Graph, ctx: PassContext, before: Optional[Dict[str, List[str]]] = None) -> Any:
        """Before the pass (``before`` None): its requirements, and the measures of what it
        must keep; after it: what it ensures, against those measures."""
        if self.contracts is None:
            return None
        if before is None:
            for name in rec.requires:
                found = self.contracts[name].measure(graph, ctx)
                if found:
                    raise ContractError(f"pass '{rec.name}' requires '{name}': {found[0]}")
            return {name: self.contracts[name].measure(graph, ctx)
                    for name in dict.fromkeys((*rec.ensures, *self.always)) if self.contracts[name].kept}
        for name in dict.fromkeys((*rec.ensures, *self.always)):
            contract = self.contracts[name]
            found = contract.measure(graph, ctx)
            had = before.get(name, [])
            if (contract.kept and len(found) > len(had)) or (not contract.kept and found):
                new = [f for f in found if f not in had] or found
                raise ContractError(f"after pass '{rec.name}': contract '{name}' broken: {new[0]}"
                                    + (f" ({len(found)} now, {len(had)} before)" if contract.kept else ""))
        return None
