"""The one driver of the MLIR emitters: a walk over a graph's nodes that lowers each op
by the rule its dialect's ``LoweringTable`` registers for it.

Every rule has one signature, ``rule(cx, node) -> [result per output]``: ``cx`` is the
dialect's emitter (``cx.node`` is ``node`` while it runs), a result what the dialect
binds to the output (None: no value). The driver folds what is known at compile time
(``fold``, under the dialect's ``FoldPolicy``), looks the rule up, runs it, and collects
every op that cannot be emitted in one ``Failures``; a dialect (a ``Driver`` subclass)
says what an argument, a constant and a result are in it (the hooks below) and writes
the module once the walk is done (``module``).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, List, Optional, Sequence

import numpy as np

from ...ir.graph import CONST, INPUT, OP, Graph, Node
from .failures import Failures
from .fold import FoldPolicy, fold
from .registry import LoweringTable, Unsupported

Rule = Callable[[Any, Node], Sequence[Any]]


class OperandFailed(Exception):
    """Raised while lowering: an operand comes from an op that could not be emitted (and
    is reported already), so this op is not reported again."""


class Driver:
    """Lowers one graph into one function of a dialect. Subclasses set ``dialect`` (its
    name in messages), ``table``, ``folding`` and ``no_rule`` (the reason given for an
    op the table has no rule for), and fill in the hooks."""

    dialect: str
    table: LoweringTable
    folding: FoldPolicy
    no_rule: str = ""

    def __init__(self, graph: Graph, cx: Any):
        self.graph, self.cx = graph, cx
        self.failures = Failures(self.dialect)

    def text(self) -> str:
        """The module's text; ``BadInput`` naming every op that cannot be emitted."""
        for node in self.walk():
            if node.kind == OP:
                self.operation(node)
            elif node.kind == CONST:
                self.constant(node)
            elif node.kind == INPUT:
                self.argument(node)
        self.cx.node = None
        return self.module()

    def operation(self, node: Node) -> None:
        if self.blocked(node):
            return
        self.cx.node = node
        try:
            folded = fold(self.graph, node, self.known, self.folding)
            if folded is not None:
                self.define_known(node, folded)
                return
            results = self.lower(self.rule(node), node)
        except Unsupported as why:
            self.failed(node, str(why))
        except OperandFailed:
            self.failed(node, None)
        else:
            self.define(node, results)

    def rule(self, node: Node) -> Rule:
        """The table's rule for ``node``; an op with a subgraph has none."""
        fn = self.table.get(node.op)
        if fn is None or any(True for _ in node.subgraphs()):
            raise Unsupported(self.no_rule)
        return fn

    # -- the hooks ------------------------------------------------------------------------
    def walk(self) -> Iterable[Node]:
        """The nodes in the order they are lowered."""
        return self.graph.nodes()

    def blocked(self, node: Node) -> bool:
        """Whether ``node`` is not lowered at all (it reports itself if it must)."""
        return False

    def known(self, value) -> Optional[np.ndarray]:
        """``value``'s compile-time array, or None."""
        raise NotImplementedError

    def argument(self, node: Node) -> None:
        raise NotImplementedError

    def constant(self, node: Node) -> None:
        raise NotImplementedError

    def lower(self, fn: Rule, node: Node) -> List[Any]:
        return fn(self.cx, node)

    def define_known(self, node: Node, arrays: List[np.ndarray]) -> None:
        """``node``'s outputs are known at compile time: ``arrays``."""
        raise NotImplementedError

    def define(self, node: Node, results: List[Any]) -> None:
        """``node`` was lowered: ``results``, one per output."""
        raise NotImplementedError

    def failed(self, node: Node, why: Optional[str]) -> None:
        """``node`` cannot be lowered: ``why`` (None: an operand's op failed)."""
        raise NotImplementedError

    def module(self) -> str:
        raise NotImplementedError
