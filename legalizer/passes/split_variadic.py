"""``tosa`` target: variadic ``Sum``/``Max``/``Min``/``Mean`` with more than two inputs
become left-to-right chains of binary ops (``Mean`` sums, then divides by the count),
each with its own inferred intermediate type."""

from __future__ import annotations

import numpy as np

from ..ir.dtypes import numpy_dtype
from ..ir.graph import Graph, Node, Value
from ..ir.types import TensorType
from ..shapes import IncompatibleDims, infer_result_shape
from ..oprules import RuleLookup
from .base import PassContext, register_pass
from .rewrite import add_const


def _pair_type(a: Value, b: Value) -> TensorType:
    try:
        shape = infer_result_shape([a.type.shape, b.type.shape]).shape
    except IncompatibleDims:  # verified before legalizing; keep going without a shape
        shape = None
    return TensorType(a.type.dtype or b.type.dtype, shape)


@register_pass()
def split_variadic(graph: Graph, ctx: PassContext) -> bool:
    changed = False
    lookup = RuleLookup(graph, ctx.rules)
    for node in graph.ops():
        if len(node.inputs) <= 2:  # (a quick look first: most nodes)
            continue
        rule, mode, _ = lookup(node) or (None, None, None)
        if rule is None or rule.category != "variadic":
            continue
        if mode != "numpy":
            continue
        operands = [v for v in node.inputs if v is not None]
        if len(operands) <= 2:
            continue
        binary = rule.binary or node.op_type
        acc = operands[0]
        base = node.name or node.output.name
        for k, v in enumerate(operands[1:], 1):
            last = k == len(operands) - 1 and node.op_type != "Mean"
            t = node.output.type if last else _pair_type(acc, v)
            step = graph.add_op(binary, [acc, v], [t], name=graph.fresh_name(f"{base}_{k}"),
                                output_names=[f"{base}_{binary.lower()}{k}"])
            acc = step.output
        if node.op_type == "Mean":
            count = _count_const(graph, node, len(operands))
            step = graph.add_op("Div", [acc, count], [node.output.type], name=graph.fresh_name(f"{base}_mean"),
                                output_names=[f"{base}_mean"])
            acc = step.output
        name = node.output.name
        graph.replace_all_uses_with(node.output, acc)
        graph.remove_node(node)
        if acc.name != name:  # downstream tools see the same value names
            graph.rename(acc, name)
        ctx.stats["variadic_split"] += 1
        changed = True
    return changed


def _count_const(graph: Graph, node: Node, n: int) -> Value:
    return add_const(graph, f"{node.name or node.output.name}_count", np.array(n, numpy_dtype(node.output.type.dtype)))
