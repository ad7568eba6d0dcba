"""Constant data: an initializer's proto plus a lazily made numpy view of it.

External data stays on disk: its array is a read-only memory map of the data file, so
a multi-GB weight is never read into memory just to be imported or written back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import onnx.numpy_helper
from onnx import TensorProto, helper

from ..errors import BadInput


# Element types stored packed, several to a byte: their data is not itemsize * count
# bytes and cannot be memory-mapped as it is; onnx reads and unpacks them.
_PACKED = {getattr(TensorProto, n) for n in ("INT4", "UINT4", "FLOAT4E2M1", "INT2", "UINT2",
                                              "FLOAT6E2M3", "FLOAT6E3M2") if hasattr(TensorProto, n)}


_TYPED_FIELDS = ("float_data", "int32_data", "int64_data", "double_data", "uint64_data", "string_data")
_COMPLEX = {TensorProto.COMPLEX64, TensorProto.COMPLEX128}


def check_tensor(p: TensorProto) -> None:
    """BadInput unless the data of initializer ``p`` fits its dims: no negative dim, and
    inline data of exactly the size the dims give (checked before anything is read, so
    that huge dims over a few bytes are an error, not an allocation)."""
    if any(d < 0 for d in p.dims):
        raise BadInput(f"initializer '{p.name}' has a negative dim in its dims {list(p.dims)}")
    if p.data_location == TensorProto.EXTERNAL or p.data_type in _PACKED or p.data_type == TensorProto.STRING:
        return
    count = 1
    for d in p.dims:
        count *= int(d)
    if p.raw_data:
        try:
            itemsize = helper.tensor_dtype_to_np_dtype(p.data_type).itemsize
        except (KeyError, ValueError, TypeError):
            return
        if len(p.raw_data) != count * itemsize:
            raise BadInput(f"initializer '{p.name}': its data is {len(p.raw_data)} bytes, but its dims"
                           f" {list(p.dims)} need {count * itemsize}")
        return
    have = sum(len(getattr(p, f)) for f in _TYPED_FIELDS)
    need = count * (2 if p.data_type in _COMPLEX else 1)
    if have != need and not (have == 0 and need == 0):
        raise BadInput(f"initializer '{p.name}': it holds {have} values, but its dims {list(p.dims)} need {need}")


class ConstData:
    __slots__ = ("proto", "base_dir", "index", "sparse", "_array", "stored", "_loader")

    def __init__(self, proto: Any, base_dir: Optional[Path], index: int = -1, sparse: bool = False,
                 array: Optional[np.ndarray] = None, stored: Optional[np.ndarray] = None,
                 loader: Optional[Callable[[], np.ndarray]] = None):
        self.proto = proto  # TensorProto / SparseTensorProto, or None for a new constant
        self.base_dir = base_dir
        self.index = index  # position among the graph's initializers (export order)
        self.sparse = sparse
        self._array = array
        # The bytes as the file stores them where they are not the array's (a TFLite
        # sparse tensor's values): written back as they came; ``loader`` makes the
        # array from them when it is first needed.
        self.stored = stored
        self._loader = loader

    @classmethod
    def from_array(cls, array: np.ndarray) -> "ConstData":
        return cls(None, None, array=array)

    @property
    def is_external(self) -> bool:
        p = self.proto
        return (isinstance(p, TensorProto) and p.data_location == TensorProto.EXTERNAL)

    def reshaped(self, shape) -> Optional["ConstData"]:
        """The same external bytes under new dims of the same element count (a rank
        expansion only prepends or inserts 1s): a copy of the small proto, its data never
        read. None unless the data is external."""
        if not self.is_external:
            return None
        p = TensorProto()
        p.CopyFrom(self.proto)
        del p.dims[:]
        p.dims.extend(int(d) for d in shape)
        return ConstData(p, self.base_dir, index=1 << 60)  # new constants go last

    def external_info(self) -> dict:
        return {e.key: e.value for e in self.proto.external_data}

    @property
    def array(self) -> np.ndarray:
        if self._array is None:
            self._array = self._load()
        return self._array

    def _load(self) -> np.ndarray:
        if self._loader is not None:
            return self._loader()
        p = self.proto
        if self.sparse:
            try:
                dense = onnx.numpy_helper.to_array(p.values)
                out = np.zeros(tuple(p.dims), dense.dtype)
                idx = onnx.numpy_helper.to_array(p.indices)
                if idx.ndim == 1:
                    out.reshape(-1)[idx] = dense
                else:
                    out[tuple(idx.T)] = dense
            except (ValueError, TypeError, IndexError) as e:
                raise BadInput(f"sparse initializer '{p.values.name}': cannot read its data ({e})") from None
            return out
        if self.is_external:
            return self._map_external()
        try:
            return onnx.numpy_helper.to_array(p)
        except (ValueError, TypeError) as e:
            raise BadInput(f"initializer '{p.name}': cannot read its data ({e})") from None

    def _map_external(self) -> np.ndarray:
        p = self.proto
        info = self.external_info()
        base = self.base_dir or Path(".")
        path = base / info.get("location", "")
        if not path.is_file():
            raise BadInput(f"initializer '{p.name}': external data file '{path}' is missing")
        np_dtype = helper.tensor_dtype_to_np_dtype(p.data_type)
        shape = tuple(p.dims)
        offset = int(info.get("offset", 0))
        count = int(np.prod(shape, dtype=np.int64))
        if count == 0:
            return np.zeros(shape, np_dtype)
        # ml_dtypes' types (bfloat16, float8) are kind "V", and map as well as numpy's.
        if np_dtype.kind in "fiucbV" and np_dtype.itemsize in (1, 2, 4, 8, 16) and p.data_type not in _PACKED:
            size = path.stat().st_size
            if offset + np_dtype.itemsize * count > size:
                raise BadInput(f"initializer '{p.name}': external data '{path.name}' is shorter than"
                               f" the tensor ({offset + np_dtype.itemsize * count} > {size} bytes)")
            return np.memmap(path, dtype=np_dtype.newbyteorder("<"), mode="r", offset=offset, shape=shape)
        # A copy: older onnx releases load the data into the proto they are given, which would
        # then be exported with its data inline as well as external.
        t = TensorProto()
        t.CopyFrom(p)
        try:
            return onnx.numpy_helper.to_array(t, str(base))
        except (ValueError, OSError) as e:
            raise BadInput(f"initializer '{p.name}': cannot read external data '{path.name}': {e}") from None
