"""Constant data: an initializer's proto plus a lazily made numpy view of it.

External data stays on disk: its array is a read-only memory map of the data file, so
a multi-GB weight is never read into memory just to be imported or written back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any, Callable, Optional

import numpy as np
import onnx.numpy_helper
from onnx import TensorProto, helper

from ..errors import BadInput
from ..kinds.onnx.protoutil import model_tensors
from .dtypes import dtype_name


# Element types stored packed, several to a byte: their data is not itemsize * count
# bytes and cannot be memory-mapped as it is; onnx reads and unpacks them.
_PACKED = {getattr(TensorProto, n) for n in ("INT4", "UINT4", "FLOAT4E2M1", "INT2", "UINT2",
                                              "FLOAT6E2M3", "FLOAT6E3M2") if hasattr(TensorProto, n)}


_TYPED_FIELDS = ("float_data", "int32_data", "int64_data", "double_data", "uint64_data", "string_data")
_COMPLEX = {TensorProto.COMPLEX64, TensorProto.COMPLEX128}


def check_tensor(p: TensorProto, what: Optional[str] = None) -> None:
    """BadInput unless the data of tensor ``p`` (``what``: how to name it; an
    initializer by default) fits its dims: no negative dim, and inline data of exactly
    the size the dims give (checked before anything is read, so that huge dims over a
    few bytes are an error, not an allocation)."""
    what = what or f"initializer '{p.name}'"
    if any(d < 0 for d in p.dims):
        raise BadInput(f"{what} has a negative dim in its dims {list(p.dims)}")
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
            raise BadInput(f"{what}: its data is {len(p.raw_data)} bytes, but its dims"
                           f" {list(p.dims)} need {count * itemsize}")
        return
    have = sum(len(getattr(p, f)) for f in _TYPED_FIELDS)
    need = count * (2 if p.data_type in _COMPLEX else 1)
    if have != need and not (have == 0 and need == 0):
        raise BadInput(f"{what}: it holds {have} values, but its dims {list(p.dims)}"
                       f" need {need}")


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

    @property
    def array(self) -> np.ndarray:
        if self._array is None:
            self._array = self._load()
        return self._array

    def _load(self) -> np.ndarray:
        if self._loader is not None:
            return self._loader()
        p = self.proto
        if not self.sparse:
            return read_tensor(p, self.base_dir, f"initializer '{p.name}'")
        what = f"sparse initializer '{p.values.name}'"
        dense = read_tensor(p.values, self.base_dir, what)
        idx = read_tensor(p.indices, self.base_dir, what)
        try:
            out = np.zeros(tuple(p.dims), dense.dtype)
            if idx.ndim == 1:
                out.reshape(-1)[idx] = dense
            else:
                out[tuple(idx.T)] = dense
        except (ValueError, TypeError, IndexError) as e:
            raise BadInput(f"{what}: cannot read its data ({e})") from None
        return out


def read_tensor(p: TensorProto, base_dir: Optional[Path], what: str) -> np.ndarray:
    """The array of tensor ``p`` (``what`` names it in errors); external data is read
    only from where ``external_data`` allows (``base_dir``: the model's folder), as a
    read-only memory map where its element type allows."""
    if p.data_location != TensorProto.EXTERNAL:
        try:
            return onnx.numpy_helper.to_array(p)
        except (ValueError, TypeError) as e:
            raise BadInput(f"{what}: cannot read its data ({e})") from None
    ext = external_data(p, base_dir, what)
    try:
        np_dtype = helper.tensor_dtype_to_np_dtype(p.data_type)
    except (KeyError, ValueError, TypeError):
        raise BadInput(f"{what} has element type {p.data_type}, which ONNX does not define") from None
    shape = tuple(p.dims)
    if _nbytes(p) == 0:
        return np.zeros(shape, np_dtype)
    # ml_dtypes' types (bfloat16, float8) are kind "V", and map as well as numpy's.
    if np_dtype.kind in "fiucbV" and np_dtype.itemsize in (1, 2, 4, 8, 16) and p.data_type not in _PACKED:
        return np.memmap(ext.path, dtype=np_dtype.newbyteorder("<"), mode="r", offset=ext.offset, shape=shape)
    # Packed types (and any other): the checked bytes, unpacked by onnx from a copy of the
    # proto that holds them inline (the model's own proto stays external).
    t = TensorProto()
    t.CopyFrom(p)
    del t.external_data[:]
    t.data_location = TensorProto.DEFAULT
    try:
        with open(ext.path, "rb") as f:
            f.seek(ext.offset)
            t.raw_data = f.read(ext.length)
        return onnx.numpy_helper.to_array(t)
    except (ValueError, TypeError, OSError) as e:
        raise BadInput(f"{what}: cannot read external data '{ext.location}': {e}") from None


def attribute_array(node, name: str) -> np.ndarray:
    """The array of tensor attribute ``name`` of ``node`` (a Constant's ``value``); its
    external data, if any, lies in the folder of the node's graph's model."""
    graph = node.graph
    return read_tensor(node.attrs[name].t, graph.base_dir if graph is not None else None,
                       f"node '{node.label}' attribute '{name}'")


# -- external data: where a tensor's bytes lie ----------------------------------------------

_BITS = {getattr(TensorProto, n): b for n, b in (("INT4", 4), ("UINT4", 4), ("FLOAT4E2M1", 4), ("INT2", 2),
                                                 ("UINT2", 2), ("FLOAT6E2M3", 6), ("FLOAT6E3M2", 6))
         if hasattr(TensorProto, n)}


def _nbytes(p: TensorProto) -> Optional[int]:
    """The bytes tensor ``p``'s dims take (packed types as onnx packs them); None for
    strings and element types without a size."""
    count = 1
    for d in p.dims:
        count *= int(d)
    if p.data_type in _BITS:
        return (count * _BITS[p.data_type] + 7) // 8
    if p.data_type == TensorProto.STRING:
        return None
    try:
        return count * helper.tensor_dtype_to_np_dtype(p.data_type).itemsize
    except (KeyError, ValueError, TypeError):
        return None


@dataclass(frozen=True)
class ExternalData:
    """Where an external tensor's bytes lie, checked: ``path``, a regular file inside
    the model's folder (symlinks resolved: read this, not the location), and its bytes
    [offset, offset + length)."""

    location: str
    path: Path
    offset: int
    length: int


_OUTSIDE = "it must name a file inside the model's folder"


def external_location(p: TensorProto, base_dir: Optional[Path], what: str) -> Path:
    """The data file of external tensor ``p``, resolved, without reading anything (it
    need not exist). BadInput, as onnx's and onnxruntime's loaders refuse it, for a
    location that is empty, absolute, contains '..', or leads out of ``base_dir``
    (the model's folder; the working directory for a model held in memory) through a
    symlink: a model must not make legalize read, or copy into its output, any other
    file on the machine."""
    loc = {e.key: e.value for e in p.external_data}.get("location", "")  # the last one, as onnx reads it
    if not loc:
        raise BadInput(f"{what}: external data has no location")
    if "\x00" in loc:
        raise BadInput(f"{what}: external data location {loc!r} is not a file name")
    if loc.startswith(("/", "\\")) or PurePosixPath(loc).is_absolute() or PureWindowsPath(loc).drive:
        raise BadInput(f"{what}: external data location '{loc}' is an absolute path; {_OUTSIDE}")
    if ".." in re.split(r"[\\/]", loc):
        raise BadInput(f"{what}: external data location '{loc}' contains '..'; {_OUTSIDE}")
    try:
        base = Path(base_dir if base_dir is not None else ".").resolve()
        path = (base / loc).resolve()
    except (OSError, RuntimeError) as e:  # a symlink loop
        raise BadInput(f"{what}: external data location '{loc}' cannot be resolved ({e})") from None
    if not path.is_relative_to(base):
        raise BadInput(f"{what}: external data location '{loc}' resolves outside the model's folder"
                       f" (through a symlink); {_OUTSIDE}")
    return path


def _byte_count(text: Optional[str], key: str, what: str) -> Optional[int]:
    """An external-data ``offset`` or ``length``: decimal digits only (``int`` would
    also take "-1", " 1" and "1_0")."""
    if text is None:
        return None
    if not re.fullmatch(r"[0-9]+", text):
        raise BadInput(f"{what}: external data {key} '{text}' is not a number of bytes (a non-negative integer)")
    return int(text)


def external_data(p: TensorProto, base_dir: Optional[Path], what: str) -> ExternalData:
    """Where external tensor ``p``'s bytes lie, checked before a byte is read: its
    location (``external_location``), a regular file, an offset and a length that are
    byte counts inside it, and a length that is what the tensor's dims need."""
    path = external_location(p, base_dir, what)
    info = {e.key: e.value for e in p.external_data}
    loc = info["location"]
    check_tensor(p, what)
    offset = _byte_count(info.get("offset"), "offset", what) or 0
    length = _byte_count(info.get("length"), "length", what)
    need = _nbytes(p)
    if length is not None and need is not None and length != need:
        raise BadInput(f"{what}: external data length {length} does not match its dims {list(p.dims)}"
                       f" of {dtype_name(p.data_type)} ({need} bytes)")
    if not path.exists():
        raise BadInput(f"{what}: external data file '{loc}' is missing")
    if not path.is_file():
        raise BadInput(f"{what}: external data location '{loc}' is not a regular file")
    size = path.stat().st_size
    if length is not None:
        if offset + length > size:
            raise BadInput(f"{what}: external data '{loc}' is {size} bytes, but the tensor's offset {offset}"
                           f" and length {length} reach byte {offset + length}")
    elif offset > size or (need is not None and offset + need > size):
        raise BadInput(f"{what}: external data '{loc}' is shorter than the tensor"
                       f" ({offset + (need or 0)} > {size} bytes)")
    return ExternalData(loc, path, offset, length if length is not None else
                        (need if need is not None else size - offset))


def check_external(model, base_dir: Optional[Path], files: bool = True) -> None:
    """BadInput for the first external tensor of ModelProto ``model`` whose data
    ``external_data`` refuses (``files``: also its file and offsets, else only its
    location), before anything is read."""
    for what, t in model_tensors(model):
        if t.data_location == TensorProto.EXTERNAL:
            external_data(t, base_dir, what) if files else external_location(t, base_dir, what)
