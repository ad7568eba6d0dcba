"""``tosa`` target: every operand of a broadcasting op gets the result's rank, by
prepending 1-dims (ExpandRank of the spec made explicit). Constants are reshaped at
compile time; other values go through an ``Unsqueeze``, which is exact for dynamic
dims. Afterwards broadcasting happens only through dims of size 1, as TOSA allows."""

from __future__ import annotations

from ..ir.graph import Graph
from ..oprules import RuleLookup
from .base import PassContext
from .rewrite import RankExpander


def equalize_ranks(graph: Graph, ctx: PassContext) -> bool:
    expander = RankExpander(graph, ctx)
    lookup = RuleLookup(graph, ctx.rules)
    changed = False
    for node in graph.ops():
        found = lookup(node)
        if found is None or found[1] not in ("numpy", "unidirectional"):
            continue
        rule = found[0]
        if rule.broadcast == "unidirectional":
            targets = [i for i in rule.broadcasts if i < len(node.inputs)]
            ref = node.outputs[0] if rule.onto == "result" else node.inputs[0]
            if ref is None or ref.type.shape is None:
                continue
            rank = len(ref.type.shape)
        else:
            targets = list(range(len(node.inputs)))
            # The result's rank counts too: with an unranked operand it may be the only
            # witness of the broadcast rank (Mul(<*>, <5>) -> <2x3x5>).
            ranks = [len(v.type.shape) for v in node.inputs + node.outputs[:1]
                     if v is not None and v.type.shape is not None]
            if not ranks:
                continue
            rank = max(ranks)
        for i in targets:
            v = node.inputs[i]
            if v is None or v.type.shape is None or len(v.type.shape) >= rank:
                continue
            graph.set_input(node, i, expander.prepend(v, rank))
            changed = True
    return changed
