"""The model kinds, in the order their signatures are tried, and ``sniff``: what a model
file is, from its first bytes. It imports no model library (no onnx, numpy or networkx),
so that the command line can ask it before it starts what the run will use: the
runtimes warmed and the shape inference helper follow the content of the files, not
their suffixes. A new kind is one package with its record, added here (``register``)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

from ..errors import BadInput
from .base import Kind
from .mlir.kind import BYTECODE as MLIR_BYTECODE, KIND as MLIR
from .onnx.kind import KIND as ONNX
from .pt2.kind import KIND as PT2, zip_kind
from .tflite.kind import KIND as TFLITE

KINDS: List[Kind] = [ONNX, TFLITE, MLIR, MLIR_BYTECODE, PT2]
DEFAULT = ONNX  # a file no signature matches: binary protobuf has none

# Files recognized by content that are no model: what to tell the user, by the name
# ``sniff`` gives them.
NOT_MODELS = {
    "torch": "a PyTorch checkpoint (torch.save), which holds weights, not a graph;"
             " export the model with torch.onnx.export and pass the .onnx file",
    "zip": "a zip archive, not a model file",
    "npy": "a NumPy array file, not a model file",
    "hdf5": "an HDF5 file (a Keras .h5 model?), which legalize does not read;"
            " convert the model to ONNX or TFLite first",
}


def register(kind: Kind) -> None:
    """Add ``kind`` (its signature tried after those before it); ValueError if its name is taken."""
    if named(kind.name) is not None:
        raise ValueError(f"a model kind named '{kind.name}' is registered already")
    KINDS.append(kind)


def named(name: Optional[str]) -> Optional[Kind]:
    """The kind of that name (``sniff``'s, the report's format), or None."""
    return next((k for k in KINDS if k.name == name), None)


def report_formats() -> List[str]:
    """The report's ``format`` of a model of each kind: its own behaviour's name."""
    return list(dict.fromkeys(k.formats[0][0] for k in KINDS if k.formats))


def of_suffix(suffix: str) -> Optional[Kind]:
    """The kind whose files take ``suffix`` (``.tflite``, as written), or None."""
    return next((k for k in KINDS if suffix in k.suffixes), None)


def _not_a_model(path: Path, head: bytes) -> Optional[str]:
    if head.startswith(b"PK\x03\x04"):
        return zip_kind(path)
    if head.startswith(b"\x93NUMPY"):
        return "npy"
    if head.startswith(b"\x89HDF\r\n\x1a\n"):
        return "hdf5"
    return None


def sniff(path: Path) -> str:
    """The kind of ``path`` (its name), or of ``NOT_MODELS``, from its content; BadInput
    if it is not a readable file."""
    try:
        there, folder = path.exists(), path.is_dir()
    except OSError as e:  # (a name too long for the file system)
        raise BadInput(f"{path}: cannot be read: {e.strerror or e}") from None
    if not there:
        raise BadInput(f"{path}: no such file")
    if folder:
        if (path / "saved_model.pb").exists():
            raise BadInput(f"{path}: is a TensorFlow SavedModel, which legalize does not read;"
                           " convert it to TFLite or ONNX first")
        raise BadInput(f"{path}: is a directory, not a model file")
    if not path.is_file():  # a FIFO or a device would block or never end
        raise BadInput(f"{path}: is not a regular file")
    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError as e:
        raise BadInput(f"{path}: cannot read: {e.strerror}") from None
    if not head:
        raise BadInput(f"{path}: is empty")
    kind = next((k for k in KINDS if k.magic is not None and k.magic(path, head)), None)
    if kind is None and (other := _not_a_model(path, head)) is not None:
        return other
    kind = kind or next((k for k in KINDS if k.guess is not None and k.guess(path, head)), DEFAULT)
    return kind.name
