"""Opset < 7 ``broadcast``/``axis`` nodes (and PRelu-6's per-channel slope): the InDim
broadcast made explicit. Operand 1
(Gemm's C) gets 1-dims around it so that it lies at ``axis`` of operand 0 (Gemm's
result) with its rank;
the attributes go, leaving the plain equal-rank form that opset 7's numpy rules read the
same way (the model's opset is raised afterwards, see ``legalizer.target_passes``)."""

from __future__ import annotations

from onnx import helper

from ..ir.graph import Graph
from ..oprules import RuleLookup
from .base import PassContext, register_pass
from .rewrite import RankExpander


@register_pass()
def legacy_broadcast(graph: Graph, ctx: PassContext) -> bool:
    if not _legacy_at(graph, ctx):
        return False
    expander = RankExpander(graph, ctx)
    lookup = RuleLookup(graph, ctx.rules)
    changed = False
    for node in graph.ops():
        rule, mode, _ = lookup(node) or (None, None, None)
        if mode == "channel":
            changed |= _place_channel(graph, node, expander, ctx)
            continue
        if mode != "attr":
            continue
        attrs = {k: helper.get_attribute_value(a) for k, a in node.attrs.items() if k in ("broadcast", "axis")}
        if not attrs.get("broadcast", 0):
            continue
        i = rule.broadcasts[0]
        a = node.outputs[0] if rule.onto == "result" else node.inputs[0]
        b = node.inputs[i] if i < len(node.inputs) else None
        if a is None or b is None or a.type.shape is None or b.type.shape is None:
            continue  # left as it is; the output verification says why
        ra, rb = len(a.type.shape), len(b.type.shape)
        axis = attrs.get("axis", ra - rb)
        if rb < ra:
            axes = tuple(range(axis)) + tuple(range(axis + rb, ra))
            placed = (1,) * axis + tuple(b.type.shape) + (1,) * (ra - axis - rb)
            graph.set_input(node, i, expander.expand(b, axes, placed))
        for k in ("broadcast", "axis"):
            node.attrs.pop(k, None)
        ctx.stats["legacy_broadcasts_rewritten"] += 1
        changed = True
    return changed


def _legacy_at(graph: Graph, ctx: PassContext) -> bool:
    """Whether any op of ``ctx.rules`` has a legacy rule this pass rewrites at the opset
    ``graph`` reads it at (else no node of it needs a look)."""
    for op, rule in ctx.rules.items():
        if rule.legacy in ("attr", "channel"):
            domain = op.rpartition(".")[0]  # Node.op: "domain.op_type", or the op type
            if rule.mode_at(graph.opset_for(domain)) != "numpy":
                return True
    return False


def _place_channel(graph: Graph, node, expander: RankExpander, ctx: PassContext) -> bool:
    """PRelu-1/6: a rank-1 slope of size C > 1 lies along axis 1 of X."""
    x, slope = node.inputs[0], node.inputs[1]
    if x is None or slope is None or x.type.shape is None or slope.type.shape is None:
        return False
    xs, ss = x.type.shape, slope.type.shape
    if len(ss) != 1 or ss[0] == 1 or len(xs) < 2:
        return False
    after = len(xs) - 2
    graph.set_input(node, 1, expander.expand(slope, (0,) + tuple(range(2, len(xs))), (1, ss[0]) + (1,) * after))
    ctx.stats["legacy_broadcasts_rewritten"] += 1
    return True
