"""What a model file is, from its first bytes (``sniff``): ONNX, TFLite, MLIR text or
bytecode, a torch.export archive, or a kind legalize names and does not read. It imports
no model library (no onnx, numpy or networkx), so that the command line can ask it
before it starts what the run will use: the runtimes warmed and the shape inference
helper follow the content of the files, not their suffixes."""

from __future__ import annotations

from pathlib import Path

from ..errors import BadInput


def _zip_kind(path: Path) -> str:
    """A zip is a torch.export archive, a torch.save checkpoint, or something else."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
    except (zipfile.BadZipFile, OSError, ValueError):
        return "zip"
    leaves = {n.rstrip("/").rsplit("/", 1)[-1] for n in names}
    if leaves & {"archive_format", "serialized_exported_program.json"}:
        return "pt2"
    if "data.pkl" in leaves:
        return "torch"
    return "zip"


def _meant_as_tflite(path: Path, head: bytes) -> bool:
    """A TFLite file whose identifier (bytes 4..8) is not TFL3: named .tflite, or a
    flatbuffer header (a 4-aligned root offset inside the file, then four printable
    identifier bytes). The TFLite importer then names the identifier it found, instead of
    the ONNX parser failing on it. Binary ONNX opens with 0x08 (ir_version's tag), a
    byte TFLite writers never start with (the root offset is past the header and the
    root table's vtable: 0x10 to 0x30), so ONNX is never taken for TFLite; nor is text."""
    if head[:1] == b"\x08" or _looks_like_text(head):
        return False
    if path.suffix.lower() == ".tflite":
        return True
    if len(head) < 8:
        return False
    root = int.from_bytes(head[:4], "little")
    return root % 4 == 0 and 8 < root < path.stat().st_size and all(0x20 < b < 0x7F for b in head[4:8])


def sniff(path: Path) -> str:
    """The model format of ``path``, from its content; BadInput if it is none."""
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
    if head[4:8] == b"TFL3":
        return "tflite"
    if head.startswith(b"ML\xefR"):
        return "mlirbc"
    if head.startswith(b"PK\x03\x04"):
        return _zip_kind(path)
    if head.startswith(b"\x93NUMPY"):
        return "npy"
    if head.startswith(b"\x89HDF\r\n\x1a\n"):
        return "hdf5"
    if _meant_as_tflite(path, head):  # after the magic numbers: a zip named .tflite is a zip
        return "tflite"
    text = head.lstrip()
    # MLIR text opens with an op (custom or generic form), an attribute or type alias
    # (#loc, #map, !t = ...), a comment, or file metadata; a .mlir of text is taken too.
    # A binary ONNX file opens with a protobuf tag (0x08 for ir_version), never text.
    if text.startswith((b"module", b"func.func", b"#", b"!", b"//", b"\"", b"{-#")) or (
            path.suffix == ".mlir" and _looks_like_text(head)):
        return "mlir"
    return "onnx"


def _looks_like_text(head: bytes) -> bool:
    import codecs

    try:  # not final: ``head`` may end inside a character
        text = codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError:
        return False
    return all(c.isprintable() or c in "\t\r\n" for c in text)
