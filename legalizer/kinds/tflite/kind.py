"""The TFLite record: a flatbuffer whose identifier (bytes 4..8) is ``TFL3``."""

from __future__ import annotations

from pathlib import Path

from ..base import Kind, looks_like_text


def meant_as_tflite(path: Path, head: bytes) -> bool:
    """A TFLite file whose identifier (bytes 4..8) is not TFL3: named .tflite, or a
    flatbuffer header (a 4-aligned root offset inside the file, then four printable
    identifier bytes). The TFLite importer then names the identifier it found, instead of
    the ONNX parser failing on it. Binary ONNX opens with 0x08 (ir_version's tag), a
    byte TFLite writers never start with (the root offset is past the header and the
    root table's vtable: 0x10 to 0x30), so ONNX is never taken for TFLite; nor is text."""
    if head[:1] == b"\x08" or looks_like_text(head):
        return False
    if path.suffix.lower() == ".tflite":
        return True
    if len(head) < 8:
        return False
    root = int.from_bytes(head[:4], "little")
    return root % 4 == 0 and 8 < root < path.stat().st_size and all(0x20 < b < 0x7F for b in head[4:8])


KIND = Kind(
    name="tflite", title="TFLite", suffixes=(".tflite",), magic=lambda path, head: head[4:8] == b"TFL3",
    guess=meant_as_tflite,  # after the signatures: a zip named .tflite is a zip
    read="legalizer.kinds.tflite.read:read",
    formats=(("tflite", "legalizer.kinds.tflite.format:TfliteFormat"),),
    written=".tflite", native_only="a TFLite model", in_folders=True, every_subgraph=True,
    runtimes=("ai_edge_litert.interpreter", "onnxruntime"),
    warm=("legalizer.kinds.tflite.importer", "legalizer.kinds.tflite.exporter", "legalizer.kinds.tflite.onnx_form",
          "legalizer.numeric.tflite", "legalizer.numeric.litert"),
    translation="legalizer.kinds.tflite.onnx_form:tflite_to_onnx",
    explorer_ids="legalizer.explorer_ids:tflite_ids",
    # (the built-in flatbuffer reader: no extension registry is asked)
    explorer_adapter="model_explorer.builtin_tflite_flatbuffer_adapter:BuiltinTfliteFlatbufferAdapter")
