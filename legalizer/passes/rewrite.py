"""Building blocks the passes share: new constants, rank expansion of a value (folded
for constants, an ``Unsqueeze`` or ``RESHAPE`` otherwise), with one expansion per
(value, rank)."""

from __future__ import annotations

from typing import Dict, Optional, Sequence, Tuple

import numpy as np
from onnx import helper

from ..ir.constdata import ConstData, attribute_array
from ..ir.dtypes import numpy_dtype
from ..ir.graph import CONST, OP, Graph, Value
from ..ir.types import Quantization, all_static
from .base import PassContext
from .frontend_ops import _placed_quant, ops_for


def add_const(graph: Graph, base: str, array: np.ndarray, quant: Optional[Quantization] = None,
              data: Optional[ConstData] = None) -> Value:
    """A new constant in ``graph``'s frontend (see ``frontend_ops``)."""
    return ops_for(graph).const(graph, base, array, quant, data)


def index_const(graph: Graph, base: str, values: Sequence[int]) -> Value:
    """A shape or index vector, in the integer type the frontend's shape ops take."""
    return add_const(graph, base, np.asarray(list(values), numpy_dtype(ops_for(graph).index_dtype)))


_CONSTANT_ATTRS = {"value_float": np.float32, "value_floats": np.float32, "value_int": np.int64,
                   "value_ints": np.int64}


def constant_array(value: Value) -> Optional[np.ndarray]:
    """The compile-time value of ``value``: an initializer's data, or a ``Constant``
    op's (TorchScript exports scalars that way); None if it is not constant."""
    prod = value.producer
    if prod is None:
        return None
    if prod.kind == CONST and prod.data is not None and not prod.data.sparse:
        array = np.asarray(prod.data.array)
        shape = value.type.shape
        if shape is not None and all_static(shape) and array.shape != tuple(shape):
            return None  # raw bytes kept as they are (an element type numpy has no name for)
        return array
    if prod.kind == OP and prod.op == "Constant" and len(prod.attrs) == 1:
        (name, attr), = prod.attrs.items()
        if name == "value":
            return attribute_array(prod, name)
        if name in _CONSTANT_ATTRS:
            return np.asarray(helper.get_attribute_value(attr), _CONSTANT_ATTRS[name])
    return None


# numpy holds arrays of rank 32 at most (64 since numpy 2): a constant that must grow
# beyond that is reshaped at run time instead of folded.
MAX_FOLD_RANK = 32


class RankExpander:
    """Prepends (or places) 1-dims on values, sharing the result among users."""

    def __init__(self, graph: Graph, ctx: PassContext):
        self.graph, self.ctx = graph, ctx
        self.cache: Dict[Tuple[int, Tuple[int, ...]], Value] = {}

    def expand(self, value: Value, axes: Tuple[int, ...], new_shape: Tuple) -> Value:
        """``value`` with size-1 dims inserted at ``axes`` (of the result), giving
        ``new_shape``: a folded constant, or an Unsqueeze."""
        key = (id(value), axes)
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        base = f"{value.name}_r{len(new_shape)}"
        array = constant_array(value) if len(new_shape) <= MAX_FOLD_RANK else None
        if array is not None:
            # External data (a multi-GB weight) keeps its bytes where they are, under new dims.
            prod = value.producer
            same_bytes = prod.data.reshaped(new_shape) if prod.kind == CONST else None
            out = add_const(self.graph, base, array.reshape(new_shape),
                            _placed_quant(value.quant, axes, len(new_shape)), same_bytes)
            self.ctx.stats["constants_folded"] += 1
        else:
            out = ops_for(self.graph).expand_rank(self.graph, value, axes, new_shape, base)
            self.ctx.stats["reshapes_inserted"] += 1
        self.cache[key] = out
        return out

    def prepend(self, value: Value, rank: int) -> Value:
        shape = value.type.shape
        k = rank - len(shape)
        return self.expand(value, tuple(range(k)), (1,) * k + tuple(shape))
