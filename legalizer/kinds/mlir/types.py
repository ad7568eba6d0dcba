"""MLIR types and attributes, as MLIR's Python bindings give them, in the IR's terms:
shaped types (``tensor<1x?x16xf32>``, quantized elements), ``dense<...>`` as numpy
arrays, attributes as Python values, and ``MlirAttr`` for what the IR keeps as text."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

import numpy as np

from ...ir.dtypes import DTYPE_OF_MLIR, numpy_dtype
from ...ir.types import UNKNOWN, Quantization, TensorType
from .bounds import non_utf8_literal


# The quant dialect's types are read from their text (``element_dtype``); MLIR's tools
# know the dialect and write its types in a binary form that the bindings, which lack
# it, cannot read back. Spelled as a dialect no one has (of the same length: every
# offset stays), they are kept as text throughout, and spelled back here.
QUANT, OPAQUE_QUANT = "!quant.", "!quan_."
_QUANT_TOKEN = re.compile(r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"|//[^\n]*|!quant\.')


def opaque_quant(text: str) -> str:
    """``text`` with each ``!quant.`` type outside strings and comments spelled ``!quan_.``."""
    return _QUANT_TOKEN.sub(lambda m: OPAQUE_QUANT if m.group() == QUANT else m.group(), text)


def text_of(x) -> str:
    """An ``ir.Type`` / ``ir.Attribute`` (or a message) as MLIR writes it, quant types spelled back."""
    return str(x).replace(OPAQUE_QUANT, QUANT)


@dataclass(frozen=True)
class MlirAttr:
    """An attribute the IR keeps as text (``#tosa.xxx<...>``, ``affine_map<...>``, types)."""

    text: str

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class MType:
    """A type: its text, and the IR's view of it."""

    text: str
    tensor: TensorType = UNKNOWN
    quant: Optional[Quantization] = None
    is_tensor: bool = False


def mtype(t) -> MType:
    """An ``ir.Type``: ``tensor<1x?xf32>`` (ranked), ``tensor<*xf32>``; anything else
    (``!tosa.shape<4>``, scalars, vectors) is not a tensor value."""
    from iree.compiler import ir

    text = text_of(t)
    if not isinstance(t, (ir.RankedTensorType, ir.UnrankedTensorType)):
        return MType(text)
    dtype, quant = element_dtype(text_of(t.element_type))
    shape = tuple(None if d == ir.ShapedType.get_dynamic_size() else d for d in t.shape) \
        if isinstance(t, ir.RankedTensorType) else None
    return MType(text, TensorType(dtype, shape), quant, True)


def element_dtype(elem: str) -> Tuple[Optional[str], Optional[Quantization]]:
    """An element type's IR dtype name, and the quantization of a ``!quant.uniform``
    (its text: the quant dialect is not loaded, so its types are opaque)."""
    if elem.startswith("!quant.uniform<"):
        try:
            return _quant_uniform(elem[len("!quant.uniform<"):-1])
        except ValueError:  # MLIR's tools keep the type as text: its syntax is checked here
            raise ValueError(f"'{elem}' is not a quantized type legalize reads") from None
    if elem.startswith("!quant."):
        storage = elem.split("<", 1)[1].split(":", 1)[0] if "<" in elem else ""
        return _storage_dtype(storage.split("<")[0].strip()), None
    return DTYPE_OF_MLIR.get(elem.replace(" ", "")), None


def _quant_uniform(body: str) -> Tuple[Optional[str], Optional[Quantization]]:
    """``i8<-127:127>:f32:3, {0.1:0, 0.2:1}`` or ``i8:f32, 0.5:-1``."""
    head, _, params = body.partition(",")
    storage = head.split(":")[0].split("<")[0].strip()
    fields = [f.strip() for f in _strip_range(head).split(":")]
    axis = int(fields[2]) if len(fields) > 2 and fields[2].lstrip("-").isdigit() else 0
    params = params.strip()
    scales, zps = [], []
    items = params[1:-1].split(",") if params.startswith("{") else [params]
    for item in items:
        s, _, z = item.strip().partition(":")
        scales.append(float(s))
        zps.append(int(z) if z.strip() else 0)
    return _storage_dtype(storage), Quantization(tuple(scales), tuple(zps), axis)


def _storage_dtype(storage: str) -> Optional[str]:
    """A quant type's storage type: ``i8``, ``u8`` (the quant dialect's unsigned spelling)."""
    if storage.startswith("u") and not storage.startswith("ui"):
        storage = "ui" + storage[1:]
    return DTYPE_OF_MLIR.get(storage)


def _strip_range(head: str) -> str:
    """``i8<-127:127>:f32`` -> ``i8:f32``."""
    if "<" in head:
        a, _, rest = head.partition("<")
        return a + rest.partition(">")[2]
    return head


# ---- attributes ------------------------------------------------------------------------

class NotUtf8Name(ValueError):
    """An attribute name that is not UTF-8 text: MLIR takes any bytes in one, and its
    bindings cannot give it as a str."""


def attributes(attrs) -> Dict[str, Any]:
    """An op's attributes (``op.attributes``) by name, as Python values (``attr_value``);
    NotUtf8Name for a name that is not UTF-8 text."""
    try:
        names = list(attrs)  # the bindings raise here on such a name (where they can)
    except RuntimeError:  # nanobind's "conversion error": the name's bytes are not UTF-8
        raise NotUtf8Name("an attribute name that is not UTF-8 text; legalize reads no such name") from None
    return {name: attr_value(attrs[name]) for name in names}


def _dict(a) -> Any:
    """A ``DictAttr`` as a dict; kept as MLIR writes it (escaped) where a literal in it
    is not UTF-8 text: the bindings abort the process on such a key, so none is asked for."""
    text = text_of(a)
    if non_utf8_literal(text) is not None:
        return MlirAttr(text)
    return {x.name: attr_value(x.attr) for x in a}


def _string(a) -> Any:
    """A ``StringAttr``: its text, or, for bytes that are not UTF-8 (a TFLite model's
    metadata buffers, which tosa-converter-for-tflite keeps), the literal as MLIR writes
    it, escaped."""
    try:
        return a.value_bytes.decode("utf-8")
    except UnicodeDecodeError:
        return MlirAttr(text_of(a))


def attr_value(a) -> Any:
    """An ``ir.Attribute`` as a Python value: ``int``, ``float``, ``bool``, ``str``,
    lists (``[...]``, ``array<i64: ...>``), dicts, numpy arrays (``dense<...>``), or
    ``MlirAttr`` holding its text."""
    from iree.compiler import ir

    for kind, convert in _CONVERT:
        if isinstance(a, getattr(ir, kind)):
            return convert(a)
    if isinstance(a, ir.DenseElementsAttr):
        return dense_array(a)
    return MlirAttr(text_of(a))


_CONVERT = [
    ("BoolAttr", lambda a: a.value),
    ("IntegerAttr", lambda a: a.value),
    ("FloatAttr", lambda a: a.value),
    ("StringAttr", _string),
    ("UnitAttr", lambda a: True),
    ("ArrayAttr", lambda a: [attr_value(x) for x in a]),
    ("DictAttr", _dict),
    *((f"Dense{k}ArrayAttr", list) for k in ("Bool", "I8", "I16", "I32", "I64", "F32", "F64")),
]


# The largest array numpy addresses (its sizes are intp).
MAX_ARRAY_BYTES = int(np.iinfo(np.intp).max)


def dense_array(a) -> Any:
    """``dense<...>`` of a static tensor type -> a numpy array of its type (a splat is
    a broadcast view, costing nothing); an ``MlirAttr`` where the type has no numpy form."""
    t = mtype(a.type)
    shape = t.tensor.shape
    if not t.is_tensor or shape is None or t.quant is not None:
        return MlirAttr(text_of(a))
    try:
        dtype = np.dtype(numpy_dtype(t.tensor.dtype))
    except (ValueError, KeyError, TypeError):
        return MlirAttr(text_of(a))
    size = math.prod(shape) * dtype.itemsize
    if size > MAX_ARRAY_BYTES:  # a splat's type may claim any size; numpy cannot even view it
        raise ValueError(f"a constant of type '{t.text}' would be {size:,} bytes, more than an array can"
                         " address; legalize reads no such constant")
    if a.is_splat:
        value = attr_value(a.get_splat_value())
        return MlirAttr(text_of(a)) if isinstance(value, MlirAttr) else np.broadcast_to(np.asarray(value, dtype), shape)
    if dtype == np.bool_:
        return np.asarray([bool(x) for x in a], np.bool_).reshape(shape)
    try:
        arr = np.array(a)  # a copy: the array outlives the module
    except (ValueError, TypeError, RuntimeError):
        return MlirAttr(text_of(a))
    if arr.dtype.itemsize != dtype.itemsize:
        return MlirAttr(text_of(a))
    return arr.view(dtype).reshape(shape)
