"""Cleanup: drop op and constant nodes whose values nobody uses. Graph inputs and
outputs always stay, and so do ops with effects (``has_effects``: variables, subgraph
calls, custom ops), whose work is not only their results."""

from __future__ import annotations

from ..ir.graph import CONST, OP, Graph
from ..oprules import has_effects
from .base import PassContext, register_pass


@register_pass()
def dead_code_elimination(graph: Graph, ctx: PassContext) -> bool:
    removed = 0
    for node in reversed(graph.nodes()):
        if node.kind in (OP, CONST) and not graph.has_uses(node) and not (node.kind == OP and has_effects(node.op)):
            graph.remove_node(node)
            removed += 1
    ctx.stats["dead_nodes_removed"] += removed
    return removed > 0
