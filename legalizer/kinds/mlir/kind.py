"""The MLIR records: text (``mlir``) and bytecode (``mlirbc``), read alike as a TOSA
module (its model's format: ``mlir``); verified, not written."""

from __future__ import annotations

from pathlib import Path

from ..base import Kind, looks_like_text


def mlir_text(path: Path, head: bytes) -> bool:
    """MLIR text opens with an op (custom or generic form), an attribute or type alias
    (#loc, #map, !t = ...), a comment, or file metadata; a .mlir of text is taken too.
    A binary ONNX file opens with a protobuf tag (0x08 for ir_version), never text."""
    return head.lstrip().startswith((b"module", b"func.func", b"#", b"!", b"//", b"\"", b"{-#")) or (
        path.suffix == ".mlir" and looks_like_text(head))


KIND = Kind(
    name="mlir", title="MLIR", suffixes=(".mlir",), guess=mlir_text,
    read="legalizer.kinds.mlir.read:read",
    formats=(("mlir", "legalizer.kinds.mlir.format:MlirFormat"),), in_folders=True, runtimes=("iree.runtime",))

# Read and run as the text is; a kind of its own for its signature and its name in messages
# ("--against takes a .tflite or .onnx model, not mlirbc").
BYTECODE = Kind(
    name="mlirbc", title="MLIR bytecode", suffixes=(".mlirbc",), magic=lambda path, head: head.startswith(b"ML\xefR"),
    read=KIND.read, formats=KIND.formats, in_folders=True, runtimes=KIND.runtimes)
