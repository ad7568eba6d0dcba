"""Reading a model file of any format: what it is, recognized by content (``sniff``, in
``kinds.registry``: it imports no model library, so the command line asks it before
it starts anything), and the importer its kind's record names (``read_model``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import List, Mapping, Optional, Sequence, Tuple

import onnx
from google.protobuf.message import DecodeError

from ..errors import BadInput
from ..model import Model
from ..kinds.base import looks_like_text, resolve
from ..kinds.registry import NOT_MODELS, named, sniff  # noqa: F401 - sniff re-exported: where callers ask it


def load_onnx_proto(path: Path) -> onnx.ModelProto:
    size = path.stat().st_size
    try:
        model = onnx.load_model(str(path), load_external_data=False)
    except (DecodeError, RuntimeWarning, ValueError) as e:
        with open(path, "rb") as f:
            head = f.read(256)
        if looks_like_text(head[:200]):
            raise BadInput(f"{path}: is a text file, not an ONNX model") from None
        raise BadInput(f"{path}: not a valid ONNX model ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else 'protobuf decode failed'})") from None
    except OSError as e:
        raise BadInput(f"{path}: cannot read: {e.strerror}") from None
    if not model.HasField("graph") or model.ir_version <= 0:
        raise BadInput(f"{path}: not an ONNX model ({size} bytes that parse as no ModelProto"
                       " with a graph and an IR version)")
    # Its strings are checked for UTF-8 by the importer (importers.onnx._check_strings).
    return model


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


class OnnxExternalData:
    """An ONNX model's tensors stored in files beside it (``ir.constdata`` resolves them)."""

    @staticmethod
    def check(path: Path) -> None:
        from ..ir.constdata import check_external

        proto = load_onnx_proto(path)
        try:
            check_external(proto, path.resolve().parent)
        except BadInput as e:
            raise BadInput(f"{path}: {e}") from None

    @staticmethod
    def files(path: Path) -> List[Tuple[str, Path]]:
        from ..ir.constdata import external_location
        from ..kinds.onnx.protoutil import model_tensors

        proto = load_onnx_proto(path)
        try:
            return [(f"the external data of {path}", external_location(t, path.resolve().parent, what))
                    for what, t in model_tensors(proto) if t.data_location == onnx.TensorProto.EXTERNAL]
        except BadInput as e:
            raise BadInput(f"{path}: {e}") from None


def read_onnx(path: Path, infer: bool, trust_pt2: bool) -> Model:
    from .onnx import import_model

    proto = load_onnx_proto(path)
    try:
        model = import_model(proto, path.resolve().parent, infer=infer)
    except BadInput as e:  # the importer knows the graph, not the file: name it
        raise BadInput(f"{path}: {e}") from None
    model.source = path
    return model


def read_tflite(path: Path, infer: bool, trust_pt2: bool) -> Model:
    from .tflite import load_tflite

    return load_tflite(path)


def read_mlir(path: Path, infer: bool, trust_pt2: bool) -> Model:
    from .mlir import load_mlir

    return load_mlir(path)


def read_pt2(path: Path, infer: bool, trust_pt2: bool) -> Model:
    from .aten import load_pt2  # the optional torch extra: its Core ATen graph

    return load_pt2(path, trust=trust_pt2)


def read_model(path, infer: bool = True, trust_pt2: bool = False, kind: Optional[str] = None) -> Model:
    """Load a model file of any supported format into the IR (a ``.pt2`` through its
    ONNX export: ``importers.pytorch``, the optional torch extra; read so that nothing
    in it runs unless ``trust_pt2``). ``kind``: what ``sniff`` found, where it was asked
    already (a run's plan); else it is asked here."""
    path = Path(path)
    name = kind if kind is not None else sniff(path)
    found = named(name)
    if found is None:
        raise BadInput(f"{path}: is {NOT_MODELS[name]}")
    return resolve(found.read)(path, infer, trust_pt2)
