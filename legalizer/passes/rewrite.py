"""Building blocks the passes share: new constants, rank expansion of a value (folded
for constants, an ``Unsqueeze`` otherwise), with one expansion per (value, rank)."""

from __future__ import annotations

from typing import Dict, Optional, Sequence, Tuple

import numpy as np
import onnx.numpy_helper
from onnx import helper

from ..ir.constdata import ConstData
from ..ir.dtypes import dtype_of_array
from ..ir.graph import CONST, OP, Graph, Node, Value
from ..ir.types import TensorType
from .base import PassContext


def add_const(graph: Graph, base: str, array: np.ndarray) -> Value:
    """A new constant: an initializer, or a ``Constant`` op in models of IR version < 4
    (whose initializers must all be graph inputs too, which would make them overridable)."""
    name = graph.fresh_name(base)
    t = TensorType(dtype_of_array(array), tuple(array.shape))
    if graph.ir_version < 4:
        attr = helper.make_attribute("value", onnx.numpy_helper.from_array(np.asarray(array), name))
        return graph.add_op("Constant", [], [t], name=name, attrs={"value": attr}, output_names=[name]).output
    v = Value(name, t)
    graph.add_node(Node(CONST, "$const", name=name, outputs=[v], data=ConstData.from_array(array)))
    return v


def int64_const(graph: Graph, base: str, values: Sequence[int]) -> Value:
    return add_const(graph, base, np.asarray(list(values), np.int64))


_CONSTANT_ATTRS = {"value_float": np.float32, "value_floats": np.float32, "value_int": np.int64,
                   "value_ints": np.int64}


def constant_array(value: Value) -> Optional[np.ndarray]:
    """The compile-time value of ``value``: an initializer's data, or a ``Constant``
    op's (TorchScript exports scalars that way); None if it is not constant."""
    prod = value.producer
    if prod is None:
        return None
    if prod.kind == CONST and prod.data is not None and not prod.data.sparse:
        return np.asarray(prod.data.array)
    if prod.kind == OP and prod.op == "Constant" and len(prod.attrs) == 1:
        (name, attr), = prod.attrs.items()
        if name == "value":
            return onnx.numpy_helper.to_array(attr.t)
        if name in _CONSTANT_ATTRS:
            return np.asarray(helper.get_attribute_value(attr), _CONSTANT_ATTRS[name])
    return None


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
        base = f"{value.name}_r{len(new_shape)}"
        array = constant_array(value)
        if array is not None:
            out = add_const(self.graph, base, array.reshape(new_shape))
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
