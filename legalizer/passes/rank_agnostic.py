"""``tosa`` and ``xla`` targets, where an operand's rank stays unknown: the
rank-agnostic rewrites (``xla``'s: ``rank_agnostic_expand``, below).

A broadcasting op whose operand has no known rank (its rank depends on values at run
time: a ``ConstantOfShape`` of a computed shape, an ``If`` whose branches differ) cannot
get its 1-dims prepended by a constant ``Unsqueeze``. It can by shape arithmetic: each
operand ``v`` becomes ``Reshape(v, Concat(ones(R - rank(v)), Shape(v)))``, with
``rank(v) = Size(Shape(v))`` and ``R`` the broadcast rank: the result's when it is
known, else the largest of the operands' (``Max``). That is numpy's ExpandRank, exact
for every rank, made explicit. With ``R`` unknown, the operands and the result get one
rank symbol (``TensorType.rank_of``), and the verifier proves them equal in rank by it.

Reshape's ``allowzero`` (opset 14) keeps a 0-size dim 0 once 1s are put in front of it
(without it, a 0 in the new shape copies the input's dim at that position): an older
model that needs the rewrite is raised to opset 14 first (``target_passes``, with onnx's
version converter; ``needs_rank_agnostic`` says whether it does).
"""

from __future__ import annotations

from typing import Iterator, List

import numpy as np
from onnx import helper, numpy_helper

from ..ir.graph import OP, Graph, Node, Value
from ..ir.types import TensorType
from ..oprules import RuleLookup
from .base import PassContext, register_pass
from .frontend_ops import FRONTEND_OPS
from .rewrite import add_const

MIN_OPSET = 14
EXPAND_OPSET = 8  # xla's form: Expand


class _Builder:
    def __init__(self, graph: Graph, node: Node, ctx: PassContext):
        self.graph, self.node, self.ctx = graph, node, ctx
        self.base = node.outputs[0].name or node.label

    def op(self, op_type: str, inputs: List[Value], out: TensorType, tag: str, **attrs) -> Value:
        name = self.graph.fresh_name(f"{self.base}_{tag}")
        return self.graph.add_op(op_type, inputs, [out], name=name, output_names=[name],
                                 attrs={k: helper.make_attribute(k, v) for k, v in attrs.items()}).output

    def rank_of(self, v: Value) -> Value:
        """``v``'s rank as an int64 scalar: a constant, or ``Size(Shape(v))``."""
        if v.type.shape is not None:
            return add_const(self.graph, f"{self.base}_rank", np.asarray(len(v.type.shape), np.int64))
        shape = self.op("Shape", [v], TensorType("int64", (None,)), "shape")
        return self.op("Size", [shape], TensorType("int64", ()), "rank")

    def shape_of(self, v: Value) -> Value:
        return self.op("Shape", [v], TensorType("int64", (None,) if v.type.shape is None else (len(v.type.shape),)),
                       "bshape")

    def expand(self, v: Value, shape: Value, out: TensorType) -> Value:
        self.ctx.stats["broadcasts_made_explicit"] += 1
        return self.op("Expand", [v, shape], out, "expanded")

    def to_rank(self, v: Value, rank: Value, out: TensorType) -> Value:
        """``v`` with 1-dims in front up to ``rank`` (an int64 scalar)."""
        pad = self.op("Sub", [rank, self.rank_of(v)], TensorType("int64", ()), "pad")
        axes = add_const(self.graph, f"{self.base}_axes", np.asarray([0], np.int64))
        pad1 = self.op("Unsqueeze", [pad, axes], TensorType("int64", (1,)), "pad1")
        ones = self.op("ConstantOfShape", [pad1], TensorType("int64", (None,)), "ones",
                       value=numpy_helper.from_array(np.asarray([1], np.int64), "value"))
        shape = self.op("Shape", [v], TensorType("int64", (None,) if v.type.shape is None else (len(v.type.shape),)),
                        "inshape")
        target = self.op("Concat", [ones, shape], TensorType("int64", (None,)), "newshape", axis=0)
        self.ctx.stats["reshapes_inserted"] += 1
        return self.op("Reshape", [v, target], out, "ranked", allowzero=1)


def _unranked_users(graph: Graph, ctx: PassContext) -> Iterator[Node]:
    """The numpy-broadcasting ops of ``graph`` with an operand of unknown rank, in order."""
    # Most graphs have every value ranked: one look at each result, then at the users
    # of those that are not (the ops to rewrite are among them).
    unranked = [v for n in graph.unordered_nodes() for v in n.outputs if v.type.shape is None]
    if not unranked:
        return
    users = {u.id: u for v in unranked if v.producer.graph is graph for u, _ in graph.users(v) if u.graph is graph}
    if graph.owner is not None:  # a subgraph: unranked values of the enclosing graphs, used here
        users.update((n.id, n) for n in graph.unordered_nodes()
                     if any(v is not None and v.type.shape is None and v.producer is not None
                            and v.producer.graph is not graph for v in n.inputs))
    lookup = RuleLookup(graph, ctx.rules)
    for node in sorted(users.values(), key=lambda n: n.id):
        if node.kind != OP or not node.outputs or \
                not any(v is not None and v.type.shape is None for v in node.inputs):
            continue
        found = lookup(node)
        if found is None or found[1] != "numpy" or found[0].broadcast != "multidirectional" \
                or found[0].operands is not None or any(v is None for v in node.inputs):
            continue
        yield node


def needs_rank_agnostic(graph: Graph, ctx: PassContext) -> bool:
    """Whether ``graph`` (or a subgraph of it) has a numpy-broadcasting op with an
    operand of unknown rank, which only the rank-agnostic rewrite makes provable."""
    return _in_ops_of_its_own(graph) and any(next(_unranked_users(g, ctx), None) is not None for g in graph.graphs())


def _in_ops_of_its_own(graph: Graph) -> bool:
    """Whether the rewrites can be written in ``graph``'s ops (its frontend's record)."""
    ops = FRONTEND_OPS.get(graph.frontend)
    return ops is not None and ops.rank_agnostic


@register_pass()
def rank_agnostic_expand(graph: Graph, ctx: PassContext) -> bool:
    """``xla``'s form of the rewrite: no implicit broadcast, so every operand of such an
    op becomes ``Expand(v, S)``, ``S`` the broadcast shape, made at run time by Expand
    itself: ``t = Expand(b, Shape(a))`` has the shape of ``a`` and ``b`` broadcast, and
    so on for each further operand; ``S = Shape(t)``. Every operand then has the
    result's shape: the result's type where it is known, else one shape symbol shared
    with the result (``TensorType.shape_of``), by which the verifier proves them equal."""
    if not _in_ops_of_its_own(graph) or graph.opset_for("") < EXPAND_OPSET:
        return False
    changed = False
    for node in list(_unranked_users(graph, ctx)):
        b = _Builder(graph, node, ctx)
        out = node.outputs[0]
        if out.type.shape is not None:
            typed = lambda v: TensorType(v.type.dtype, out.type.shape)  # noqa: E731
        else:
            symbol = f"shape({out.name})"
            typed = lambda v: TensorType(v.type.dtype, None, symbol, symbol)  # noqa: E731
            out.type = TensorType(out.type.dtype, None, symbol, symbol)
        operands = list(node.inputs)
        t = operands[0]
        for k, v in enumerate(operands[1:], 2):  # t: the first k operands broadcast (the last: all)
            t = b.expand(v, b.shape_of(t), typed(v) if k == len(operands) else TensorType(v.type.dtype))
        shape = b.shape_of(t)
        for i, v in enumerate(operands[:-1]):
            graph.set_input(node, i, b.expand(v, shape, typed(v)))
        graph.set_input(node, len(operands) - 1, t)
        changed = True
    return changed


@register_pass()
def rank_agnostic(graph: Graph, ctx: PassContext) -> bool:
    """Give every operand of unknown rank of a numpy-broadcasting op the broadcast rank
    (module docstring)."""
    if not _in_ops_of_its_own(graph) or graph.opset_for("") < MIN_OPSET:
        return False
    changed = False
    for node in list(_unranked_users(graph, ctx)):
        b = _Builder(graph, node, ctx)
        out = node.outputs[0]
        if out.type.shape is not None:  # the result's rank is the broadcast rank
            r = len(out.type.shape)
            rank = add_const(graph, f"{b.base}_rank", np.asarray(r, np.int64))
            for i, v in enumerate(list(node.inputs)):
                if v.type.shape is None:
                    graph.set_input(node, i, b.to_rank(v, rank, TensorType(v.type.dtype, (None,) * r)))
        else:
            symbol = f"rank({out.name})"
            ranks = [b.rank_of(v) for v in node.inputs]
            rank = ranks[0]
            for other in ranks[1:]:
                rank = b.op("Max", [rank, other], TensorType("int64", ()), "maxrank")
            for i, v in enumerate(list(node.inputs)):
                graph.set_input(node, i, b.to_rank(v, rank, TensorType(v.type.dtype, None, symbol)))
            out.type = TensorType(out.type.dtype, None, symbol)
        changed = True
    return changed
