"""Building blocks the passes share: new constants, rank expansion of a value (folded
for constants, an ``Unsqueeze`` otherwise), with one expansion per (value, rank)."""

from __future__ import annotations

from typing import Dict, Optional, Sequence, Tuple

import numpy as np
from onnx import helper

from ..ir.constdata import ConstData
from ..ir.dtypes import dtype_of_array
from ..ir.graph import CONST, Graph, Node, Value
from ..ir.types import TensorType
from .base import PassContext


def add_const(graph: Graph, base: str, array: np.ndarray) -> Value:
    v = Value(graph.fresh_name(base), TensorType(dtype_of_array(array), tuple(array.shape)))
    graph.add_node(Node(CONST, "$const", name=v.name, outputs=[v], data=ConstData.from_array(array)))
    return v


def int64_const(graph: Graph, base: str, values: Sequence[int]) -> Value:
    return add_const(graph, base, np.asarray(list(values), np.int64))


class RankExpander:
    """Prepends (or places) 1-dims on values, sharing the result among users."""

    def __init__(self, graph: Graph, ctx: PassContext):
        self.graph, self.ctx = graph, ctx
        self.cache: Dict[Tuple[int, Tuple[int, ...]], Value] = {}
        self.opset = graph.opsets.get("", 1)

    def expand(self, value: Value, axes: Tuple[int, ...], new_shape: Tuple) -> Value:
        """``value`` with size-1 dims inserted at ``axes`` (of the result), giving
        ``new_shape``: a folded constant, or an Unsqueeze."""
        key = (id(value), axes)
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        prod = value.producer
        base = f"{value.name}_r{len(new_shape)}"
        if prod is not None and prod.kind == CONST and prod.data is not None and not prod.data.sparse:
            out = add_const(self.graph, base, np.asarray(prod.data.array).reshape(new_shape))
            self.ctx.stats["constants_folded"] += 1
        else:
            if self.opset >= 13:
                node = self.graph.add_op("Unsqueeze", [value, int64_const(self.graph, base + "_axes", axes)],
                                         [value.type.with_shape(new_shape)], name=self.graph.fresh_name(base),
                                         output_names=[base])
            else:
                node = self.graph.add_op("Unsqueeze", [value], [value.type.with_shape(new_shape)],
                                         attrs={"axes": helper.make_attribute("axes", list(axes))},
                                         name=self.graph.fresh_name(base), output_names=[base])
            out = node.output
            self.ctx.stats["reshapes_inserted"] += 1
        self.cache[key] = out
        return out

    def prepend(self, value: Value, rank: int) -> Value:
        shape = value.type.shape
        k = rank - len(shape)
        return self.expand(value, tuple(range(k)), (1,) * k + tuple(shape))
