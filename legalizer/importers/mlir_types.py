"""MLIR types and attribute values as the importer reads them: shaped types
(``tensor<1x?x16xf32>``, quantized elements), ``dense<...>`` literals as numpy arrays, and
``MlirAttr`` for what the IR keeps as text."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Optional, Tuple

import numpy as np

from ..ir.dtypes import DTYPE_OF_MLIR
from ..ir.types import UNKNOWN, Quantization, TensorType
from .mlir_lexer import Lexer, _unquote, describe


@dataclass(frozen=True)
class MlirAttr:
    """An attribute the IR keeps as text (``#tosa.xxx<...>``, ``affine_map<...>``, types)."""

    text: str

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class MType:
    """A parsed type: its text, and the IR's view of it."""

    text: str
    tensor: TensorType = UNKNOWN
    quant: Optional[Quantization] = None
    is_tensor: bool = False


def _float_from_bits(bits: int, elem: str) -> float:
    """``0x7F800000 : f32``: a float attribute written as its bits."""
    np_type = {"f32": (np.uint32, np.float32), "f16": (np.uint16, np.float16),
               "f64": (np.uint64, np.float64)}.get(elem)
    if np_type is None:  # bf16: the top half of an f32
        return float(np.array([bits << 16], np.uint32).view(np.float32)[0])
    return float(np.array([bits], np_type[0]).view(np_type[1])[0])


# ---- shaped types --------------------------------------------------------------------------

def parse_shaped(text: str, body: str, lexer: Lexer, pos: int) -> MType:
    """``tensor<1x?x16xf32>``, ``tensor<*xf32>``, ``tensor<f32>``, ``tensor<4xf32, #enc>``,
    ``tensor<2x!quant.uniform<i8:f32, 0.5:-1>>``."""
    i, n = 0, len(body)
    dims: Optional[List[Optional[int]]] = []
    while i < n:
        j = i
        while j < n and body[j].isdigit():
            j += 1
        if j > i and j < n and body[j] == "x":
            dims.append(int(body[i:j]))
            i = j + 1
        elif body.startswith("?x", i):
            dims.append(None)
            i += 2
        elif body.startswith("*x", i):
            dims = None
            i += 2
        else:
            break
    elem = _top_level_split(body[i:])[0].strip()
    if not elem:
        raise lexer.error(f"no element type in '{text}'", pos + i)
    dtype, quant = element_dtype(elem, lexer, pos + i)
    if not text.startswith("tensor<"):
        return MType(text)  # vectors and memrefs are not tensor values
    shape = None if dims is None else tuple(dims)
    return MType(text, TensorType(dtype, shape), quant, True)


def _top_level_split(s: str) -> List[str]:
    """Split at commas outside ``<...>`` / ``(...)`` / ``{...}`` / strings."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(s):
        c = s[i]
        if c == '"':
            i += 1
            while i < len(s) and s[i] != '"':
                i += 2 if s[i] == "\\" else 1
        elif c in "<({[":
            depth += 1
        elif c in ">)}]" and not (c == ">" and i > 0 and s[i - 1] == "-"):
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(s[start:i])
            start = i + 1
        i += 1
    parts.append(s[start:])
    return parts


def element_dtype(elem: str, lexer: Lexer, pos: int) -> Tuple[Optional[str], Optional[Quantization]]:
    """An element type's IR dtype name, and the quantization of a ``!quant.uniform``."""
    if elem.startswith("!quant.uniform<"):
        return _quant_uniform(elem[len("!quant.uniform<"):-1], lexer, pos)
    if elem.startswith("!quant."):
        storage = elem.split("<", 1)[1].split(":", 1)[0] if "<" in elem else ""
        return _storage_dtype(storage.split("<")[0].strip()), None
    return DTYPE_OF_MLIR.get(elem.replace(" ", "")), None


def _quant_uniform(body: str, lexer: Lexer, pos: int) -> Tuple[Optional[str], Optional[Quantization]]:
    """``i8<-127:127>:f32:3, {0.1:0, 0.2:1}`` or ``i8:f32, 0.5:-1``."""
    head, _, params = body.partition(",")
    storage = head.split(":")[0].split("<")[0].strip()
    fields = [f.strip() for f in _strip_range(head).split(":")]
    axis = int(fields[2]) if len(fields) > 2 and fields[2].lstrip("-").isdigit() else 0
    params = params.strip()
    scales, zps = [], []
    try:
        items = params[1:-1].split(",") if params.startswith("{") else [params]
        for item in items:
            s, _, z = item.strip().partition(":")
            scales.append(float(s))
            zps.append(int(z) if z.strip() else 0)
    except ValueError:
        raise lexer.error(f"cannot read the quantization parameters '{params}'", pos) from None
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


# ---- dense literals ----------------------------------------------------------------------

class DenseParser:
    """The body of ``dense<...>``: a splat, a nested list, or a ``"0x..."`` hex string."""

    def __init__(self, lexer: Lexer, dtype: np.dtype, shape: Tuple[int, ...]):
        self.lx, self.dtype, self.shape = lexer, np.dtype(dtype), shape

    def parse(self) -> np.ndarray:
        lx = self.lx
        t = lx.peek()
        if t.kind == "eof":  # dense<> : tensor<0xf32>
            return np.zeros(self.shape, self.dtype)
        if t.kind == "string":
            lx.next()
            out = self.hex(_unquote(t.text), t.pos)
        else:
            value = self.element_or_list()
            out = self.shaped(value, t.pos)
        if lx.peek().kind != "eof":
            raise lx.error(f"unexpected {describe(lx.peek())} in dense literal")
        return out

    def element_or_list(self) -> Any:
        lx = self.lx
        if lx.accept("["):
            items = []
            while not lx.at("]"):
                items.append(self.element_or_list())
                if not lx.accept(","):
                    break
            lx.expect("]", "in dense literal")
            return items
        t = lx.peek()
        if t.kind == "bare" and t.text in ("true", "false"):
            lx.next()
            return t.text == "true"
        if t.text == "(":  # a complex number
            lx.next()
            re_ = self.number()
            lx.expect(",")
            im = self.number()
            lx.expect(")")
            return complex(re_, im)
        return self.number()

    def number(self) -> Any:
        lx = self.lx
        neg = lx.accept("-")
        t = lx.next()
        if t.kind == "int":
            v: Any = int(t.text, 0)
            if t.text.lower().startswith("0x") and self.dtype.kind == "f":
                v = np.array([v], f"u{self.dtype.itemsize}").view(self.dtype)[0]
        elif t.kind == "float":
            v = float(t.text)
        elif t.kind == "bare" and t.text in ("inf", "nan"):
            v = float(t.text)
        else:
            raise lx.error(f"expected a number in dense literal, found {describe(t)}", t.pos)
        return -v if neg else v

    def shaped(self, value: Any, pos: int) -> np.ndarray:
        count = int(np.prod(self.shape)) if self.shape else 1
        try:
            arr = np.asarray(value, dtype=self.dtype)
        except (ValueError, OverflowError, TypeError) as e:
            raise self.lx.error(f"bad dense literal: {e}", pos) from None
        if arr.ndim == 0:
            return np.broadcast_to(arr, self.shape)
        if arr.size != count:
            raise self.lx.error(f"dense literal has {arr.size} elements but the type has {count}", pos)
        return arr.reshape(self.shape)

    def hex(self, text: str, pos: int) -> np.ndarray:
        if not text.lower().startswith("0x"):
            raise self.lx.error("expected a hex string \"0x...\" in dense literal", pos)
        try:
            data = bytes.fromhex(text[2:])
        except ValueError:
            raise self.lx.error("bad hex string in dense literal", pos) from None
        count = int(np.prod(self.shape)) if self.shape else 1
        item = self.dtype.itemsize
        if self.dtype == np.bool_ and len(data) == (count + 7) // 8 and len(data) != count:
            bits = np.unpackbits(np.frombuffer(data, np.uint8), bitorder="little")[:count]
            return bits.astype(np.bool_).reshape(self.shape)
        if len(data) == item:
            return np.broadcast_to(np.frombuffer(data, self.dtype.newbyteorder("<"))[0], self.shape)
        if len(data) != item * count:
            raise self.lx.error(f"hex dense literal has {len(data)} bytes, the type needs {item * count}", pos)
        return np.frombuffer(data, self.dtype.newbyteorder("<")).reshape(self.shape)
