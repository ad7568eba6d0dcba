"""A TFLite file read into the IR (``kinds.tflite.importer``)."""

from __future__ import annotations

from pathlib import Path

from .importer import load_tflite
from ...model import Model


def read(path: Path, infer: bool, trust_pt2: bool) -> Model:
    return load_tflite(path)
