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
