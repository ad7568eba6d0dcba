"""MLIR text shared by the dialects: tensor types, dense literals, attributes, strings.

Element types come from the one table, ``ir.dtypes.MLIR_ELEMENT``. A ``dense<...>``
literal is a splat, a nested list (up to ``LITERAL_LIMIT`` elements) or little-endian
hex bytes; the two emitters spell floats differently (``LiteralStyle``), both as
MLIR's parser reads them (https://mlir.llvm.org/docs/Dialects/Builtin/#denseintorfpelementsattr).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from ...ir.dtypes import MLIR_FLOATS

# Constants up to this many elements are written out as literals, larger ones in hex.
LITERAL_LIMIT = 16


def is_float(elem: str) -> bool:
    return elem in MLIR_FLOATS


def tensor_type(elem: str, dims: Sequence) -> str:
    """``tensor<2x?x3xf32>``: a static dim as its size, a symbol or None as ``?``."""
    return "tensor<" + "".join(f"{d}x" if isinstance(d, int) else "?x" for d in dims) + elem + ">"


def shape_text(dims: Sequence) -> str:
    """``2x?x3``, as MLIR prints a shape in messages."""
    return "x".join(str(d) if isinstance(d, int) else "?" for d in dims)


def int_list(xs: Sequence[int]) -> str:
    return "[" + ", ".join(str(int(x)) for x in xs) + "]"


def dense_array(elem: str, xs: Sequence[int]) -> str:
    """``array<i64: 1, 2>`` (a DenseArrayAttr; ``array<i64>`` when empty)."""
    return f"array<{elem}" + (": " + ", ".join(str(int(x)) for x in xs) if len(xs) else "") + ">"


def i64_array(xs: Sequence[int]) -> str:
    return dense_array("i64", xs)


def mlir_string(s: str) -> str:
    """A quoted MLIR string attribute: quotes and backslashes escaped, non-ASCII and
    control characters as ``\\XX`` bytes."""
    out = []
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif 32 <= ord(ch) < 127:
            out.append(ch)
        else:
            out.extend(f"\\{b:02X}" for b in ch.encode())
    return '"' + "".join(out) + '"'


# ---- float literals ----------------------------------------------------------------------

def decimal_float(x: float, elem: str = "f64") -> str:
    """Python's shortest round-trip spelling of ``x`` as a double (``0.5``, ``1.0e-05``):
    MLIR wants a '.' in a decimal float literal."""
    s = repr(float(x))
    if "e" in s and "." not in s:
        s = s.replace("e", ".0e")
    return s


def scientific_float(x: float, elem: str) -> str:
    """The shortest spelling of ``x`` in ``elem``'s precision (f64, else f32), in
    scientific form (``5.0e-01``)."""
    np_type = np.float64 if elem == "f64" else np.float32
    return np.format_float_scientific(np_type(x), unique=True, exp_digits=2).replace(".e", ".0e")


def hex_bytes(array: np.ndarray) -> str:
    """``"0x..."``: the array's elements as little-endian bytes."""
    a = np.asarray(array)
    data = np.ascontiguousarray(a, a.dtype.newbyteorder("<")).tobytes()
    return '"0x' + data.hex().upper() + '"'


def hex_bits(x, np_dtype) -> str:
    """A float's bit pattern, big-endian hex (``0x7F800000``): how MLIR writes inf and nan."""
    size = np.dtype(np_dtype).itemsize
    bits = np.asarray(x, np_dtype).view(f"u{size}")
    return f"0x{int(bits):0{2 * size}X}"


@dataclass(frozen=True)
class LiteralStyle:
    """How one emitter spells what MLIR lets it spell more than one way (each style is
    kept so that its dialect's text stays as it has been)."""

    float_text: Callable[[float, str], str]
    nonfinite_bits: bool  # an inf/nan splat as its bit pattern (else as hex bytes)
    empty_nested: bool  # an empty tensor as nested brackets (else ``dense<>``)


STABLEHLO_LITERALS = LiteralStyle(decimal_float, nonfinite_bits=True, empty_nested=False)
TOSA_LITERALS = LiteralStyle(scientific_float, nonfinite_bits=False, empty_nested=True)


def _scalar(x, elem: str, style: LiteralStyle) -> str:
    if elem == "i1":
        return "true" if bool(x) else "false"
    if is_float(elem):
        return style.float_text(x, elem)
    return str(int(x))


def _nested(a: np.ndarray, elem: str, style: LiteralStyle) -> str:
    if a.ndim == 0:
        return _scalar(a[()], elem, style)
    return "[" + ", ".join(_nested(s, elem, style) for s in a) + "]"


def is_splat(array: np.ndarray) -> bool:
    """Every element the same (NaN counting as itself)."""
    a = np.asarray(array)
    if a.size <= 1 or all(s == 0 for s in a.strides):  # a broadcast view is one value
        return True
    flat = a.reshape(-1)
    return bool((flat == flat[0]).all()) or (a.dtype.kind == "f" and bool(np.isnan(flat).all()))


def dense_body(array: np.ndarray, elem: str, style: LiteralStyle, storage=None) -> str:
    """What goes inside ``dense<...>`` for ``array`` as ``elem``. ``storage``, the numpy
    type of ``elem``, is what a list or hex bytes are written in (default: the array's)."""
    a = np.asarray(array)
    if a.size == 0:
        return (_nested(np.zeros(a.shape, np.int32), "i32", style) if a.ndim > 1 else "[]") \
            if style.empty_nested else ""
    flat = a.reshape(-1)
    floats = is_float(elem)
    if is_splat(a):
        x = flat[0]
        if floats and not np.isfinite(x):
            one = np.asarray([x], storage or a.dtype)
            return hex_bits(one[0], one.dtype) if style.nonfinite_bits else hex_bytes(one)
        return _scalar(x, elem, style)
    if storage is not None:
        a = np.asarray(a, storage)
        flat = a.reshape(-1)
    if elem == "i1" or (a.size <= LITERAL_LIMIT and (not floats or np.isfinite(flat).all())):
        return _nested(a, elem, style)
    return hex_bytes(a)
