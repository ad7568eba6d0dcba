"""Tensor types of the IR: a dtype and a shape of dims.

A dim is an ``int`` (static), a ``str`` (a symbol: equal symbols are equal sizes,
different symbols are unknown relative to each other) or ``None`` (``?``, dynamic and
anonymous). A shape is a tuple of dims, or ``None`` for an unranked tensor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Tuple, Union

Dim = Union[int, str, None]
Shape = Optional[Tuple[Dim, ...]]


def names_a_dim(dim_param: str) -> bool:
    """Whether an ONNX ``dim_param`` names a dim (``batch``, ``s0``, ``2*s0``): two dims
    with the same name are equal. One with no letter in it (``?``, ``-1``, ``*``; an
    empty one) names nothing: as onnxruntime takes it, each place it occurs is a dim of
    its own, and two ``"?"`` dims may differ."""
    return any(c.isalpha() for c in dim_param)


def all_static(dims) -> bool:
    """Whether every dim of ``dims`` has a size (an empty shape, a scalar's, has)."""
    return all(isinstance(d, int) for d in dims)


def dim_str(dim: Dim) -> str:
    if dim is None:
        return "?"
    return str(dim)


def shape_str(shape: Shape) -> str:
    """MLIR-style shape: ``4x?x3``, ``*`` for unranked, empty for rank 0."""
    if shape is None:
        return "*"
    return "x".join(dim_str(d) for d in shape)


def shape_strs(shape: Shape) -> Optional[list]:
    """Shape as the report writes it: a list of strings, ``None`` for unranked."""
    if shape is None:
        return None
    return [dim_str(d) for d in shape]


@dataclass(frozen=True, slots=True)
class TensorType:
    """``dtype`` is the ONNX element type name (``float32``, ``int64``, ...) or
    ``None`` when unknown; ``shape`` as above."""

    dtype: Optional[str]
    shape: Shape = None
    # For an unranked tensor: a symbol naming its rank, which values that share it have
    # alike (the rank-agnostic rewrite gives a node's operands and result one); None:
    # nothing known.
    rank_of: Optional[str] = None
    # Likewise a symbol naming its shape (the xla form of that rewrite gives a node's
    # operands and result one shape); implies equal ranks.
    shape_of: Optional[str] = None

    @property
    def rank(self) -> Optional[int]:
        return None if self.shape is None else len(self.shape)

    @property
    def is_static(self) -> bool:
        return self.shape is not None and all_static(self.shape)

    def with_shape(self, shape: Shape) -> "TensorType":
        return TensorType(self.dtype, None if shape is None else tuple(shape))

    def __str__(self) -> str:
        dims = shape_str(self.shape)
        return f"tensor<{dims + 'x' if dims else ''}{self.dtype or '?'}>"


UNKNOWN = TensorType(None, None)


@dataclass(frozen=True, slots=True)
class Quantization:
    """Affine quantization of a tensor (TFLite's QuantizationParameters): real =
    scale * (q - zero_point), per tensor (one scale) or per axis along
    ``quantized_dimension``. ``extra`` keeps what the IR does not model (min/max,
    custom details) for a lossless export."""

    scale: Tuple[float, ...] = ()
    zero_point: Tuple[int, ...] = ()
    quantized_dimension: int = 0
    extra: Any = None

    @property
    def per_axis(self) -> bool:
        return len(self.scale) > 1
