"""A TOSA MLIR module, text or bytecode, read into the IR (``kinds.mlir.importer``)."""

from __future__ import annotations

from pathlib import Path

from .importer import load_mlir
from ...model import Model


def read(path: Path, infer: bool, trust_pt2: bool) -> Model:
    return load_mlir(path)
