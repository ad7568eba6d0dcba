"""A ``torch.export`` program read as its Core ATen graph (``kinds.pt2.importer``: the optional
torch extra), so that nothing in it runs unless ``trust_pt2``."""

from __future__ import annotations

from pathlib import Path

from .importer import load_pt2
from ...model import Model


def read(path: Path, infer: bool, trust_pt2: bool) -> Model:
    return load_pt2(path, trust=trust_pt2)
