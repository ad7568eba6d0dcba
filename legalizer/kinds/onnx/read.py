"""Reading an ONNX file: its ModelProto (its weights left where they are), its
external data, and its IR (``kinds.onnx.importer``)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Tuple

import onnx
from google.protobuf.message import DecodeError

from ...errors import BadInput
from ...model import Model
from ..base import looks_like_text
from .kind import INFER_PRELOAD


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
    # Its strings are checked for UTF-8 by the importer (kinds.onnx.importer._check_strings).
    return model


class OnnxExternalData:
    """An ONNX model's tensors stored in files beside it (``ir.constdata`` resolves them)."""

    @staticmethod
    def check(path: Path) -> None:
        from ...ir.constdata import check_external

        proto = load_onnx_proto(path)
        try:
            check_external(proto, path.resolve().parent)
        except BadInput as e:
            raise BadInput(f"{path}: {e}") from None

    @staticmethod
    def files(path: Path) -> List[Tuple[str, Path]]:
        from ...ir.constdata import external_location
        from .protoutil import model_tensors

        proto = load_onnx_proto(path)
        try:
            return [(f"the external data of {path}", external_location(t, path.resolve().parent, what))
                    for what, t in model_tensors(proto) if t.data_location == onnx.TensorProto.EXTERNAL]
        except BadInput as e:
            raise BadInput(f"{path}: {e}") from None


def read(path: Path, infer: bool, trust_pt2: bool) -> Model:
    from .importer import import_model

    if infer:  # the helper that infers its shapes starts (imports) while the file is parsed
        from ... import bounded_helper

        bounded_helper.start(INFER_PRELOAD)
    proto = load_onnx_proto(path)
    try:
        model = import_model(proto, path.resolve().parent, infer=infer)
    except BadInput as e:  # the importer knows the graph, not the file: name it
        raise BadInput(f"{path}: {e}") from None
    model.source = path
    return model
