"""A ``Model`` of any format written out: its ONNX form (what runtimes, the MLIR
emitters and the ONNX writer read), and the model written in its own format."""

from __future__ import annotations

from pathlib import Path

import onnx

from ..model import Model
from .onnx import export_model, save_model


def to_onnx(model: Model) -> onnx.ModelProto:
    """The ONNX ModelProto of ``model``'s IR, with every header field carried over; for
    a TFLite model, its first subgraph translated to ONNX ops (``CheckUnavailable``
    naming every op that has none)."""
    if model.format == "tflite":
        from .tflite_onnx import tflite_to_onnx

        return tflite_to_onnx(model)
    return export_model(model.graph, model.proto)


def write_model(model: Model, path: Path, *, force: bool = False, inspect=None) -> Path:
    """Write ``model`` to ``path`` in its own format (ONNX or TFLite; a model from
    PyTorch as ONNX) as a transaction (``outputs``), never over its own source file;
    ``inspect`` gets the written file before it takes its name (``save_model``)."""
    if model.format == "tflite":
        from .tflite import save_tflite

        return save_tflite(model, path, force=force, protect=model.source, inspect=inspect)
    # The initializers and nodes are streamed into the file, not copied into a new ModelProto.
    inits: list = []
    nodes: list = []
    proto = export_model(model.graph, model.proto, detached=inits, detached_nodes=nodes)
    return save_model(proto, path, model.base_dir, force=force, protect=model.source,
                      inspect=inspect, initializers=inits, nodes=nodes)
