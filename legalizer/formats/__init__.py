"""What the main job reads, checks, compares, localizes and reduces is asked of the
model's ``Format``: each kind's behaviour, in its package (``kinds/<kind>/format.py``),
found through its record (``kinds.registry``)."""

from __future__ import annotations

from typing import Dict, Optional

from ..kinds.base import behaviour
from ..kinds.behaviour import Format, Sides, Subject
from ..kinds.paths import default_output, is_output
from ..kinds.registry import KINDS, named as kind_named
from ..model import Model

__all__ = ["Format", "Sides", "Subject", "default_output", "format_of", "formats", "is_output", "of_kind"]


def formats() -> Dict[str, Format]:
    """Every behaviour by its name (the report's ``format``), in the kinds' order."""
    return {name: behaviour(ref) for kind in KINDS for name, ref in kind.formats}


def of_kind(kind: Optional[str]) -> Optional[Format]:
    """The behaviour of a file of the kind ``sniff`` named ``kind``; None for none."""
    found = kind_named(kind)
    return found.behaviour() if found is not None else None


def format_of(model: Model) -> Format:
    """The record of ``model``'s input kind (a model from PyTorch: ``pt2-onnx``)."""
    return formats()["pt2-onnx" if model.torch is not None else model.format]

