"""Reading a model file of any format: what it is, recognized by content (``sniff``, in
``kinds.registry``: it imports no model library, so the command line asks it before
it starts anything), and the importer its kind's record names (``read_model``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import List, Mapping, Optional, Sequence, Tuple

from ..errors import BadInput
from ..model import Model
from ..kinds.base import resolve
from ..kinds.registry import NOT_MODELS, named, sniff  # noqa: F401 - sniff re-exported: where callers ask it


def check_external_data(path: Path) -> None:
    """For an ONNX file that is handed to onnxruntime as a path (which then reads its
    external data): BadInput, naming the file, for external data that
    ``ir.constdata.external_data`` refuses. Other formats are left alone."""
    kind = named(sniff(path))
    if kind is not None and kind.external_data is not None:
        resolve(kind.external_data).check(path)


def files_read(paths: Sequence[Path], outputs: Sequence[Path] = (),
               kinds: Optional[Mapping[Path, str]] = None) -> List[Tuple[str, Path]]:
    """Every file that reading the models ``paths`` opens, as (what it is, path) pairs:
    each model and, for ONNX, the external data files it names. The external files are
    looked up only when one of ``atomic_files`` already exists, as an output that does not
    exist cannot be any of them (and the look-up parses the model). BadInput for a
    model whose external data ``ir.constdata`` refuses. ``kinds``: what ``sniff`` found
    of some of ``paths`` already."""
    found = [("an input model", Path(p)) for p in paths]
    if not any(os.path.lexists(o) for o in outputs if o is not None):
        return found
    for _, path in list(found):
        known = (kinds or {}).get(path)
        kind = named(known if known is not None else sniff(path)) if path.is_file() else None
        if kind is not None and kind.external_data is not None:
            found += resolve(kind.external_data).files(path)
    return found


def read_model(path, infer: bool = True, trust_pt2: bool = False, kind: Optional[str] = None) -> Model:
    """Load a model file of any supported format into the IR (a ``.pt2`` through its
    ONNX export: ``kinds.pt2.onnx_export``, the optional torch extra; read so that nothing
    in it runs unless ``trust_pt2``). ``kind``: what ``sniff`` found, where it was asked
    already (a run's plan); else it is asked here."""
    path = Path(path)
    name = kind if kind is not None else sniff(path)
    found = named(name)
    if found is None:
        raise BadInput(f"{path}: is {NOT_MODELS[name]}")
    return resolve(found.read)(path, infer, trust_pt2)
