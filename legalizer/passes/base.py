"""Pass infrastructure: a pass rewrites one graph and says whether it changed it; the
manager runs passes over a graph and all its subgraphs, in order."""

from __future__ import annotations

import itertools
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


PassFn = Callable[[Graph, PassContext], bool]


class PassManager:
    """Runs each pass on every graph (outer first, then subgraphs, depth first). With
    ``debug``, ``check`` runs after every pass and its failures name the pass."""

    def __init__(self, passes: Iterable[PassFn], debug: bool = False,
                 check: Optional[Callable[[Graph, str], None]] = None):
        self.passes: List[PassFn] = list(passes)
        self.debug = debug
        self.check = check

    def run(self, graph: Graph, ctx: PassContext) -> PassResult:
        modified = False
        for p in self.passes:
            for g in _graphs(graph):
                modified |= bool(p(g, ctx))
            if self.debug and self.check is not None:
                self.check(graph, getattr(p, "__name__", str(p)))
        return PassResult(graph, modified)


def _graphs(graph: Graph) -> List[Graph]:
    """``graph`` and every subgraph: each node's subgraphs, then theirs (the order of
    a walk that lists a node's subgraphs as it meets the node)."""
    out = [graph]

    def visit(g: Graph) -> None:
        for _, group in itertools.groupby(g.subgraphs(), key=lambda t: t[0]):
            mine = [sub for _, _, sub in group]
            out.extend(mine)
            for sub in mine:
                visit(sub)

    visit(graph)
    return out
