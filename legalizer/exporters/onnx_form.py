"""The ONNX form of any model the IR holds: what runtimes, the MLIR emitters and the
ONNX writer read."""

from __future__ import annotations

import onnx

from ..model import Model
from .onnx import export_model


def to_onnx(model: Model) -> onnx.ModelProto:
    """The ONNX ModelProto of ``model``'s IR, with every header field carried over; for
    a TFLite model, its first subgraph translated to ONNX ops (``CheckUnavailable``
    naming every op that has none)."""
    if model.format == "tflite":
        from .tflite_onnx import tflite_to_onnx

        return tflite_to_onnx(model)
    return export_model(model.graph, model.proto)
