"""The names legalize gives what it writes."""

from __future__ import annotations

from pathlib import Path
from typing import Optional


def is_output(path) -> bool:
    """Whether ``path`` is named as legalize names what it writes (``<stem>.legal.<ext>``,
    ``<stem>.legal.tosa.mlir``, ...): an output, not a model to legalize."""
    return ".legal." in Path(path).name



def default_output(path: Path, kind: Optional[str] = "") -> Path:
    """``model.onnx`` -> ``model.legal.onnx`` beside it (``model.pt2`` -> ``model.legal.pt2``;
    a suffix-less file's is ONNX). The suffix follows the content, not the name: a TFLite
    model named ``m.onnx`` gives ``m.legal.tflite``. ``kind``: what ``sniff`` found, where
    it was asked already (None: it found no model); by default it is asked here."""
    from ..errors import BadInput
    from .registry import named, sniff

    suffix = path.suffix if path.suffix else ".onnx"
    if kind == "":
        try:
            kind = sniff(path)
        except BadInput:  # no model there (yet): its run says so; the name alone decides
            kind = None
    found = named(kind)
    suffix = found.written or suffix if found is not None else suffix
    return path.with_name(f"{path.stem if path.suffix else path.name}.legal{suffix}")
