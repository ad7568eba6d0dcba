"""Element types: the IR names them as ONNX does, lower-cased (``float``, ``int64``,
``bool``, ``float16``); one place converts to and from ONNX codes and numpy."""

from __future__ import annotations

from typing import Optional

import numpy as np
from onnx import TensorProto, helper

_NAMES = {v: k.lower() for k, v in TensorProto.DataType.items()}


def dtype_name(elem_type: int) -> Optional[str]:
    """ONNX element type code -> IR dtype name (None for 'undefined')."""
    if elem_type == 0:
        return None
    return _NAMES.get(elem_type, f"dtype{elem_type}")


def elem_type(dtype: Optional[str]) -> int:
    """IR dtype name -> ONNX element type code (0 for unknown)."""
    if dtype is None:
        return 0
    if dtype.startswith("dtype") and dtype[5:].isdigit():  # a code this onnx has no name for
        return int(dtype[5:])
    return TensorProto.DataType.Value(dtype.upper())


def dtype_of_array(array: np.ndarray) -> str:
    return dtype_name(helper.np_dtype_to_tensor_dtype(np.asarray(array).dtype))


def numpy_dtype(dtype: Optional[str]) -> np.dtype:
    return helper.tensor_dtype_to_np_dtype(elem_type(dtype or "float"))


# IR dtype name -> MLIR element type: the one table every MLIR emitter and the MLIR
# importer read (a target that lacks some of them, as TOSA lacks unsigned types, says
# so where it lowers).
MLIR_ELEMENT = {
    "float": "f32", "double": "f64", "float16": "f16", "bfloat16": "bf16", "bool": "i1",
    "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64",
    "uint8": "ui8", "uint16": "ui16", "uint32": "ui32", "uint64": "ui64",
}
# MLIR element type -> IR dtype name: the inverse, and the types MLIR inputs may
# hold that no emitter writes (signed-explicit, sub-byte, index, fp8, complex).
DTYPE_OF_MLIR = {
    **{mlir: name for name, mlir in MLIR_ELEMENT.items()},
    "si8": "int8", "si16": "int16", "si32": "int32", "si64": "int64",
    "i2": "int2", "i4": "int4", "ui1": "bool", "ui4": "uint4", "i48": "int48", "index": "int64",
    "f8E4M3FN": "float8e4m3fn", "f8E4M3FNUZ": "float8e4m3fnuz", "f8E5M2": "float8e5m2",
    "f8E5M2FNUZ": "float8e5m2fnuz", "complex<f32>": "complex64", "complex<f64>": "complex128",
}
MLIR_FLOATS = ("f16", "bf16", "f32", "f64")
