"""The input kinds as one table of records (``Format``): what the main job reads,
checks, compares, localizes and reduces is asked of the model's record."""

from __future__ import annotations

from typing import Dict

from ..errors import UsageError
from ..model import Model
from .base import Format, Sides, Subject
from .mlir import MlirFormat
from .onnx import OnnxFormat, Pt2Format
from .pt2 import AtenFormat
from .paths import default_output, is_output
from .tflite import TfliteFormat

# A .pt2 is legalized as its Core ATen graph (AtenFormat) and written as a .pt2; a module
# or program handed to ``load`` is legalized as its ONNX export (Pt2Format: "pt2-onnx").
FORMATS: Dict[str, Format] = {f.name: f for f in (OnnxFormat(), Pt2Format(), AtenFormat(), TfliteFormat(),
                                                   MlirFormat())}

__all__ = ["FORMATS", "Format", "Sides", "Subject", "default_output", "format_of", "is_output", "named"]


def format_of(model: Model) -> Format:
    """The record of ``model``'s input kind (a model from PyTorch: ``pt2``)."""
    return FORMATS["pt2-onnx" if model.torch is not None else model.format]


def named(name: str) -> Format:
    try:
        return FORMATS[name]
    except KeyError:
        raise UsageError(f"unknown model format '{name}'; expected one of {', '.join(FORMATS)}") from None
