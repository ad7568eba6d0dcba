"""A model kind's facts as one record (``Kind``): how its files are recognized and
named, what reads, writes and translates it, what its check starts and what Model
Explorer calls its graphs. Each kind's package (``kinds/onnx``, ``kinds/tflite``, ...)
holds its record in ``kind.py``, and ``kinds.registry`` lists them in sniffing order.
The code a record names is a ``"module:attribute"`` reference, imported when asked
(``resolve``): a record imports nothing, so the lowest layers may read it."""

from __future__ import annotations

import codecs
import functools
import importlib
from pathlib import Path
from typing import Any, Callable, NamedTuple, Optional, Tuple


class Kind(NamedTuple):
    """One model kind's facts. (A NamedTuple, not a frozen dataclass: the command line
    reads the records before it starts anything, and such a dataclass of these fields
    takes ~3 ms to make, this ~0.5 ms, measured on this machine.)"""

    name: str  # what ``registry.sniff`` finds, and the report's ``format`` of its models
    title: str  # what its files hold, in messages ("the legalized model is ONNX")
    suffixes: Tuple[str, ...]  # its files' suffixes
    read: str  # (path, infer, trust_pt2) -> Model
    library_read: Optional[str] = None  # (path, infer, trust) -> Model: the library's ``load``, where not ``read``
    pair_check: Optional[str] = None  # the library's ``check`` of two files of this kind: its own runtime, not ONNX's
    formats: Tuple[Tuple[str, str], ...] = ()  # its behaviours (``kinds.behaviour.Format``), by name, its own first
    magic: Optional[Callable[[Path, bytes], bool]] = None  # its signature in a file's first 64 bytes
    guess: Optional[Callable[[Path, bytes], bool]] = None  # weaker evidence: asked after every signature
    written: Optional[str] = None  # the suffix its legal form is written with; None: verified only
    native_only: Optional[str] = None  # what alone may be written as its kind (no other converts to it)
    in_folders: bool = False  # a folder's models include its files (with --verify-only where not written)
    every_subgraph: bool = False  # legalize rewrites each top-level graph, with no opsets or legacy forms
    records_constraints: bool = False  # legalize records its input's runtime constraints (the xla form's asserts)
    runtimes: Tuple[str, ...] = ()  # the modules its check's runtimes import: started ahead by the CLI
    warm: Tuple[str, ...] = ()  # the modules a batch's workers import ahead for a model of this kind
    infers_onnx_shapes: bool = False  # reading it runs ONNX shape inference (the helper started ahead)
    translation: Optional[str] = None  # (model, results=) -> its ONNX-op form, a ModelProto
    explorer_ids: Optional[str] = None  # (path) -> Model Explorer's graphs and node ids of its files
    explorer_adapter: Optional[str] = None  # the Model Explorer adapter class that draws its input file; None: not drawn
    external_data: Optional[str] = None  # its tensors in other files: check(path), files(path)

    def behaviour(self):
        """Its own ``Format`` (the first of ``formats``), or None for a kind with none."""
        return behaviour(self.formats[0][1]) if self.formats else None


def resolve(ref: str) -> Any:
    """What ``"package.module:attribute"`` names, imported now."""
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


@functools.lru_cache(maxsize=None)
def behaviour(ref: str):
    """The one instance of the ``Format`` class ``ref`` names."""
    return resolve(ref)()


def looks_like_text(head: bytes) -> bool:
    """Whether ``head`` (a file's first bytes) is printable UTF-8 text."""
    try:  # not final: ``head`` may end inside a character
        text = codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
    except UnicodeDecodeError:
        return False
    return all(c.isprintable() or c in "\t\r\n" for c in text)
