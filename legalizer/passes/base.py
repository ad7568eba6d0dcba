"""Pass infrastructure: a pass rewrites one graph and says whether it changed it; the
manager runs passes over a graph and all its subgraphs, in order."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable, List, Mapping, Optional

from ..ir.graph import Graph
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


PassFn = Callable[[Graph, PassContext], bool]


class PassManager:
    """Runs each pass on every graph (outer first, then subgraphs, depth first). With
    ``debug``, ``numeric`` runs after every pass and its failures name the pass."""

    def __init__(self, passes: Iterable[PassFn], debug: bool = False,
                 check: Optional[Callable[[Graph, str], None]] = None):
        self.passes: List[PassFn] = list(passes)
        self.debug = debug
        self.check = check

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        modified = False
        for p in self.passes:
            for g in graph.graphs():
                modified |= bool(p(g, ctx))
            if self.debug and self.check is not None:
                self.check(graph, getattr(p, "__name__", str(p)))
        return PassResult(graph, modified)
