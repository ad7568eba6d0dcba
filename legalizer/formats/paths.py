"""The names legalize gives what it writes."""

from __future__ import annotations

from pathlib import Path


def is_output(path) -> bool:
    """Whether ``path`` is named as legalize names what it writes (``<stem>.legal.<ext>``,
    ``<stem>.legal.tosa.mlir``, ...): an output, not a model to legalize."""
    return ".legal." in Path(path).name


def default_output(path: Path) -> Path:
    """``model.onnx`` -> ``model.legal.onnx`` beside it (``model.pt2`` -> ``model.legal.pt2``;
    a suffix-less file's is ONNX)."""
    suffix = path.suffix if path.suffix else ".onnx"
    return path.with_name(f"{path.stem if path.suffix else path.name}.legal{suffix}")
