"""Cleanup: drop op and constant nodes whose values nobody uses. Graph inputs and
outputs always stay."""

from __future__ import annotations

from ..ir.graph import CONST, OP, Graph
from .base import PassContext


def dead_code_elimination(graph: Graph, ctx: PassContext) -> bool:
    removed = 0
    for node in reversed(graph.nodes()):
        if node.kind in (OP, CONST) and not graph.has_uses(node):
            graph.remove_node(node)
            removed += 1
    ctx.stats["dead_nodes_removed"] += removed
    return removed > 0
