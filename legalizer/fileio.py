"""Reading model files (recognized by content) and writing them atomically."""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

import onnx
from google.protobuf.message import DecodeError

from .errors import BadInput, UsageError
from .model import Model

FORMATS = ("onnx", "tflite", "mlir", "mlirbc", "pt2")


def sniff(path: Path) -> str:
    """The model format of ``path``, from its content; BadInput if it is none."""
    if not path.exists():
        raise BadInput(f"{path}: no such file")
    if path.is_dir():
        raise BadInput(f"{path}: is a directory, not a model file")
    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError as e:
        raise BadInput(f"{path}: cannot read: {e.strerror}") from None
    if not head:
        raise BadInput(f"{path}: is empty")
    if head[4:8] == b"TFL3":
        return "tflite"
    if head.startswith(b"ML\xefR"):
        return "mlirbc"
    if head.startswith(b"PK\x03\x04"):
        return "pt2"
    text = head.lstrip()
    if text.startswith((b"module", b"func.func", b"#map", b"//", b"\"builtin.module\"")):
        return "mlir"
    return "onnx"


def load_onnx_proto(path: Path) -> onnx.ModelProto:
    size = path.stat().st_size
    try:
        model = onnx.load_model(str(path), load_external_data=False)
    except (DecodeError, RuntimeWarning, ValueError) as e:
        raise BadInput(f"{path}: not a valid ONNX model ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else 'protobuf decode failed'})") from None
    except OSError as e:
        raise BadInput(f"{path}: cannot read: {e.strerror}") from None
    if not model.HasField("graph") or model.ir_version <= 0:
        raise BadInput(f"{path}: not an ONNX model ({size} bytes that parse as no ModelProto"
                       " with a graph and an IR version)")
    return model


def load(path, infer: bool = True) -> Model:
    """Load a model file of any supported format into the IR."""
    path = Path(path)
    fmt = sniff(path)
    if fmt == "onnx":
        from .importers.onnx import import_model

        model = import_model(load_onnx_proto(path), path.resolve().parent, infer=infer)
        model.source = path
        return model
    names = {"tflite": "TFLite", "mlir": "MLIR text", "mlirbc": "MLIR bytecode", "pt2": "a torch.export archive"}
    raise BadInput(f"{path}: is {names[fmt]}; this version of legalize reads ONNX models only")


@contextmanager
def atomic_output(path: Path, *, force: bool = False, protect: Optional[Path] = None) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success rename it onto ``path``.

    An interrupted or failed write leaves nothing behind. ``protect`` (the input) is
    never overwritten; an existing ``path`` needs ``force``.
    """
    path = Path(path)
    if protect is not None and path.exists() and Path(protect).exists() and path.resolve() == Path(protect).resolve():
        raise UsageError(f"{path}: refusing to overwrite the input model")
    if path.exists() and not force:
        raise UsageError(f"{path}: already exists (use --force to replace it)")
    if not path.parent.exists():
        raise UsageError(f"{path.parent}: output directory does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()
