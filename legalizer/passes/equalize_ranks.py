"""``tosa`` target: every operand of a broadcasting op gets the result's rank, by
prepending 1-dims (ExpandRank of the spec made explicit). Constants are reshaped at
compile time; other values go through an ``Unsqueeze``, which is exact for dynamic
dims. Afterwards broadcasting happens only through dims of size 1, as TOSA allows."""

from __future__ import annotations

from ..ir.graph import Graph
from ..oprules import RuleLookup
from .base import PassContext, register_pass
from .rewrite import RankExpander


@register_pass(ensures=("equal-ranks",))
def equalize_ranks(graph: Graph, ctx: PassContext) -> bool:
    expander = RankExpander(graph, ctx)
    lookup = RuleLookup(graph, ctx.rules)
    changed = False
    for node in graph.ops():
        found = lookup(node)
        if found is None or found[1] not in ("numpy", "unidirectional"):
            continue
        rule = found[0]
        inputs = node.inputs
        shapes = [None if v is None else v.type.shape for v in inputs]
        if rule.broadcast == "unidirectional":
            targets = [i for i in rule.broadcasts if i < len(inputs)]
            ref = node.outputs[0] if rule.onto == "result" else inputs[0]
            if ref is None or ref.type.shape is None:
                continue
            rank = len(ref.type.shape)
        else:
            targets = range(len(inputs))
            # The result's rank counts too: with an unranked operand it may be the only
            # witness of the broadcast rank (Mul(<*>, <5>) -> <2x3x5>).
            ranks = [len(s) for s in shapes if s is not None]
            result = node.outputs[0].type.shape if node.outputs else None
            if result is not None:
                ranks.append(len(result))
            if not ranks:
                continue
            rank = max(ranks)
        for i in targets:
            shape = shapes[i]
            if shape is None or len(shape) >= rank:
                continue
            graph.set_input(node, i, expander.prepend(inputs[i], rank))
            changed = True
    return changed
