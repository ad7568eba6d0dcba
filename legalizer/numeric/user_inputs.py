"""What the user gives the check instead of synthesized data: per-input shapes
(``--input-shape NAME:1x512``, as Polygraphy takes them), arrays (``--input
NAME=FILE.npy``, ``--input FILE.npz``), and the dim bindings both imply.

A model's inputs are described as ``Declared``: per input, its name and per axis its
static size (an int) or the key of its dynamic dim (the symbol, or ``input[axis]``),
as the check's bindings name them."""

from __future__ import annotations

import math
import os
import stat
import zipfile
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
from onnx import helper

from ..errors import UsageError, first_line
from ..ir.types import names_a_dim

Declared = List[Tuple[str, Optional[List[Union[int, str]]]]]


def _sized(d) -> bool:
    """Whether a declared dim has a size: a negative ``dim_value`` (-1, as Paddle2ONNX
    and older exporters write a dynamic dim) is dynamic, as onnxruntime and the
    importer read it."""
    return d.HasField("dim_value") and d.dim_value >= 0


def declared_shapes(model) -> Declared:
    """Each fed graph input (a tensor, not an initializer): its name and per axis its
    static size or its dim key - the symbol, or ``input[axis]`` for an anonymous dim.
    An unranked input has None."""
    inits = {t.name for t in model.graph.initializer}
    out: Declared = []
    for vi in model.graph.input:
        if vi.name in inits or not vi.type.HasField("tensor_type"):
            continue
        out.append((vi.name, dim_keys(vi) if vi.type.tensor_type.HasField("shape") else None))
    return out


def dim_keys(vi) -> List:
    """A tensor input's static sizes and dim keys (none when it is unranked)."""
    return [d.dim_value if _sized(d) else (d.dim_param if names_a_dim(d.dim_param) else f"{vi.name}[{k}]")
            for k, d in enumerate(vi.type.tensor_type.shape.dim)]


NO_ELEMENT = "the check would compare no element"  # why a size-0 dim is refused


def parse_input_shape(text: str) -> Tuple[str, Tuple[int, ...]]:
    """``NAME:1x512`` -> ("NAME", (1, 512)). The last ``:`` splits, as input names
    from TensorFlow (``input:0``) hold one themselves. A size of 0 is refused: its
    tensors are empty, and a check of them compares nothing."""
    name, sep, dims = text.rpartition(":")
    parts = dims.split("x")
    if not sep or not name or not all(p.strip().isdigit() for p in parts):
        raise UsageError(f"--input-shape expects NAME:DIMxDIM... with each DIM a positive integer"
                         f" (e.g. x:1x512), not '{text}'")
    shape = tuple(int(p) for p in parts)
    refuse_empty(f"--input-shape {text}", shape)
    return name, shape


def refuse_empty(what: str, shape: Sequence[int]) -> None:
    """UsageError when ``shape`` has a size-0 dim: the tensors it binds are empty, and a
    check that compares no element is no check (it would read as passed)."""
    zero = [axis for axis, d in enumerate(shape) if isinstance(d, (int, np.integer)) and d == 0]
    if zero:
        raise UsageError(f"{what}: dim {zero[0]} is 0: an empty input, and {NO_ELEMENT}")


def refuse_zero_dim(name: str, size: int) -> None:
    """UsageError for ``--dim name=0`` (as ``refuse_empty``)."""
    if int(size) == 0:
        raise UsageError(f"--dim {name}=0: a size of 0 makes empty inputs, and {NO_ELEMENT}")


def dynamic_keys(declared: Declared) -> List[str]:
    """The keys of the dynamic dims of ``declared`` (what ``--dim`` may bind), each once,
    in the order the inputs declare them."""
    return list(dict.fromkeys(d for _, shape in declared for d in shape or () if isinstance(d, str)))


def unbound_dims(dims: Mapping[str, int], keys: Sequence[str]) -> List[str]:
    """The names in ``dims`` that are no dim of ``keys``."""
    known = set(keys)
    return [k for k in dims if k not in known]


def no_such_dim(name: str, size: int, keys: Sequence[str], whose: str = "the model") -> UsageError:
    """The error for ``--dim name=size`` that binds no dynamic dim of ``keys``."""
    have = f"its dims are: {', '.join(keys)}" if keys else "it has none (every input dim is static)"
    return UsageError(f"--dim {name}={size}: {whose} has no dynamic dim '{name}'; {have}")


def check_dim_names(dims: Optional[Mapping[str, int]], keys: Sequence[str], whose: str = "the model") -> None:
    """UsageError for the first ``--dim`` that binds none of the dynamic dims ``keys``,
    naming them all. (A ``--dim`` of size 0 is refused where it is parsed; a dim that an
    empty ``--input`` array binds to 0 is data: the check then says when its outputs are
    all empty, as it compared nothing.)"""
    known = set(keys)
    for name, size in (dims or {}).items():
        if name not in known:
            raise no_such_dim(name, size, keys, whose)


_NPY, _ZIP = b"\x93NUMPY", b"PK\x03\x04"


def _kind(file: Union[str, os.PathLike]) -> str:
    """"npy", "npz" or "" by the file's first bytes: np.load takes anything else for a
    pickle, which it refuses with words about pickles, not about the file. "special" for
    what is not a regular file (a FIFO would block the read, a device never end it)."""
    try:
        if not stat.S_ISREG(os.stat(file).st_mode):
            return "special"
        with open(file, "rb") as f:
            head = f.read(6)
    except OSError:
        return "?"  # np.load says what is wrong with the path
    return "npy" if head.startswith(_NPY) else "npz" if head.startswith(_ZIP) else ""


def _not_regular(file) -> str:
    return "is a directory" if os.path.isdir(file) else "not a regular file (a device, a FIFO or a socket)"


def read_npy(name: str, file: Union[str, os.PathLike]) -> np.ndarray:
    """One array from a ``.npy`` file, for input ``name``."""
    if _kind(file) == "special":
        raise UsageError(f"--input {name}: cannot read '{file}': {_not_regular(file)}")
    if _kind(file) == "":
        raise UsageError(f"--input {name}: cannot read '{file}': not a .npy array (nor an .npz archive)")
    try:
        if _kind(file) == "npy":
            with open(file, "rb") as f:
                _check_declared(f, name, str(file), os.fstat(f.fileno()).st_size)
        data = np.load(file, allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        raise UsageError(f"--input {name}: cannot read '{file}' as a .npy array: {first_line(e)}") from None
    if not isinstance(data, np.ndarray):  # an .npz archive: np.load gave its NpzFile
        data.close()
        raise UsageError(f"--input {name}: '{file}' is an .npz archive, not a .npy array: give it as --input {file}")
    return data


# An .npz member is a .npy file in a zip archive. Its header (dtype, shape) is read
# before its data, so that an archive that declares, or inflates to, more than these
# bounds is refused before it allocates (3 MB that inflate to 3 GiB).
MAX_ARRAY_BYTES = 4 << 30
MAX_INFLATION = 100  # uncompressed / compressed
INFLATION_FLOOR = 16 << 20  # members smaller than this are never refused for it
_HEADERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


def _check_declared(f, where: str, array: str, holds: int) -> None:
    """UsageError where the ``.npy`` data open as ``f`` (at its start) declares more
    than ``MAX_ARRAY_BYTES``, or more than the ``holds`` bytes its file has; only its
    header is read. ``where`` and ``array`` name it in the message."""
    version = np.lib.format.read_magic(f)
    if version not in _HEADERS:
        raise ValueError(f"array '{array}' is in .npy format version {version[0]}.{version[1]},"
                         f" which is not read here")
    shape, _, dtype = _HEADERS[version](f)
    dims = 'x'.join(map(str, shape))
    for d in shape:
        if d < 0:
            raise UsageError(f"--input {where}: array '{array}' declares {dims} of {dtype}: dim {d} is negative;"
                             " refusing to read it")
    size = math.prod(shape) * dtype.itemsize
    declares = f"array '{array}' declares {dims} of {dtype} ({size:,} bytes)"
    if size > MAX_ARRAY_BYTES:
        raise UsageError(f"--input {where}: {declares}, over the limit of {MAX_ARRAY_BYTES:,}; refusing to read it")
    for d in shape:  # each dim on its own too: a zero elsewhere makes the product 0
        if d * max(dtype.itemsize, 1) > MAX_ARRAY_BYTES:
            raise UsageError(f"--input {where}: {declares}, but its dim {d} alone is over the limit of"
                             f" {MAX_ARRAY_BYTES:,}; refusing to read it")
    if dtype.kind != "O" and size > holds - f.tell():
        raise UsageError(f"--input {where}: {declares}, but its file holds {max(holds - f.tell(), 0):,} bytes of"
                         f" data; refusing to read it")


def _check_members(file: Union[str, os.PathLike]) -> None:
    """UsageError for the first member of the ``.npz`` archive ``file`` whose data
    would inflate beyond ``MAX_INFLATION``, or whose header declares more than
    ``MAX_ARRAY_BYTES`` (or than the member holds); only the zip directory and the
    members' headers are read."""
    with zipfile.ZipFile(file) as z:
        for info in z.infolist():
            name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            if info.file_size > INFLATION_FLOOR and info.file_size > MAX_INFLATION * max(info.compress_size, 1):
                raise UsageError(f"--input {file}: array '{name}' inflates from {info.compress_size:,} to"
                                 f" {info.file_size:,} bytes (more than {MAX_INFLATION}x); refusing to read it")
            with z.open(info) as f:
                _check_declared(f, str(file), name, info.file_size)


def read_npz(file: Union[str, os.PathLike]) -> Dict[str, np.ndarray]:
    """Every array of an ``.npz`` archive (``np.savez``), by name: the inputs it feeds."""
    if _kind(file) == "special":
        raise UsageError(f"--input {file}: cannot read it: {_not_regular(file)}")
    if _kind(file) == "":
        raise UsageError(f"--input {file}: cannot read it: not an .npz archive (nor a .npy array)")
    if _kind(file) == "npy":
        raise UsageError(f"--input {file}: is a .npy array, not an .npz archive: give it as --input NAME={file}")
    try:
        if _kind(file) == "npz":
            _check_members(file)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise UsageError(f"--input {file}: cannot read it as an .npz archive: {first_line(e)}") from None
    try:
        data = np.load(file, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise UsageError(f"--input {file}: cannot read it as an .npz archive: {first_line(e)}") from None
    if isinstance(data, np.ndarray):
        raise UsageError(f"--input {file}: is a .npy array, not an .npz archive: give it as --input NAME={file}")
    try:
        with data:
            arrays = {key: data[key] for key in data.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise UsageError(f"--input {file}: cannot read it as an .npz archive: {first_line(e)}") from None
    if not arrays:
        raise UsageError(f"--input {file}: the archive holds no arrays")
    return arrays


def as_arrays(inputs) -> Dict[str, np.ndarray]:
    """The library's ``inputs=``: a mapping of input names to arrays, or the path of an
    ``.npz`` archive."""
    if inputs is None:
        return {}
    if isinstance(inputs, (str, os.PathLike)):
        return read_npz(Path(inputs))
    return {name: np.asarray(a) for name, a in inputs.items()}


def _text(shape: Sequence[Union[int, str]]) -> str:
    """A shape MLIR-style: ``1x512``, a dynamic dim by its symbol (``?`` when anonymous)."""
    dims = ["?" if isinstance(d, str) and d.endswith("]") else str(d) for d in shape]
    return "x".join(dims) if dims else "scalar"


def user_dims(declared: Declared, dims: Optional[Mapping[str, int]] = None,
              input_shapes: Optional[Mapping[str, Sequence[int]]] = None,
              inputs: Optional[Mapping[str, np.ndarray]] = None,
              keys: Optional[Sequence[str]] = None) -> Dict[str, int]:
    """The dim bindings the user gives: ``dims`` (``--dim``) as they are, plus each dynamic
    dim of an input given a shape (``input_shapes``) or an array (``inputs``). A shape or
    array must name an input, have its rank and its static dims, and agree with the other
    bindings of the same dim: otherwise UsageError, naming the input, the dim and both
    sizes. Each of ``dims`` must bind a dynamic dim: one of ``keys`` (by default those
    of ``declared``), else UsageError naming them."""
    by_name = dict(declared)
    check_dim_names(dims, dynamic_keys(declared) if keys is None else keys)
    bound: Dict[str, int] = {k: int(v) for k, v in (dims or {}).items()}
    origin = {k: f"--dim {k}={v}" for k, v in bound.items()}
    given = [("input shape", name, tuple(shape)) for name, shape in (input_shapes or {}).items()] + \
            [("input array", name, tuple(np.shape(a))) for name, a in (inputs or {}).items()]
    for what, name, shape in given:
        where = f"{what} '{name}' ({_text(shape)})"
        if what == "input shape":  # an empty array is data (a shape of length 0, say): its outputs tell
            refuse_empty(where, shape)
        if name not in by_name:
            raise UsageError(f"{where}: the model has no input '{name}' (its inputs: "
                             f"{', '.join(repr(n) for n in by_name) or 'none'})")
        decl = by_name[name]
        if decl is None:  # unranked: any shape, and no dim of it to bind
            continue
        if len(shape) != len(decl):
            raise UsageError(f"{where}: rank {len(shape)}, but input '{name}' is declared"
                             f" '{_text(decl)}' (rank {len(decl)})")
        for axis, (want, got) in enumerate(zip(decl, shape)):
            if not isinstance(got, (int, np.integer)) or got < 0:
                raise UsageError(f"{where}: dim {axis} is '{got}', not a non-negative integer")
            if isinstance(want, int):
                if want != got:
                    raise UsageError(f"{where}: dim {axis} is {got}, but input '{name}' is declared"
                                     f" '{_text(decl)}', static {want} there")
                continue
            if want in bound and bound[want] != got:
                raise UsageError(f"{where}: dim {axis} ('{want}') is {got}, but {origin[want]} binds it"
                                 f" to {bound[want]}")
            bound[want], origin[want] = int(got), f"{what} '{name}'"
    return bound


def check_dtypes(types: Mapping[str, int], inputs: Optional[Mapping[str, np.ndarray]]) -> None:
    """UsageError for a given array whose dtype is not its input's (``types``: ONNX
    element type codes by input name, 0 where unknown): a runtime would refuse every
    binding, and the check would not run. A string input takes any numpy string array."""
    for name, array in (inputs or {}).items():
        code = types.get(name, 0)
        try:
            want = np.dtype(helper.tensor_dtype_to_np_dtype(code)) if code else None
        except (KeyError, TypeError, ValueError):  # a type numpy has no dtype for: the runtime judges
            want = None
        have = np.asarray(array).dtype
        if want is None or have == want or (want.kind == "O" and have.kind in "OUS"):
            continue
        raise UsageError(f"input array '{name}' ({_text(np.shape(array))}): dtype {have}, but input '{name}' is"
                         f" declared {want}")
