"""A ``Model`` of any format as ONNX: what runtimes, the MLIR emitters and the ONNX
writer read."""

from __future__ import annotations

import onnx

from ..model import Model
from .onnx import export_model


def _tflite_to_onnx(model: Model, results=None) -> onnx.ModelProto:
    from .tflite_onnx import tflite_to_onnx

    return tflite_to_onnx(model, results=results)


# How a model of each format that is not ONNX becomes ONNX ops.
TRANSLATIONS = {"tflite": _tflite_to_onnx}


def to_onnx(model: Model, results=None) -> onnx.ModelProto:
    """The ONNX ModelProto of ``model``'s IR, with every header field carried over; for
    a TFLite model, its first subgraph translated to ONNX ops (``CheckUnavailable``
    naming every op that has none; ``results``, a dict, is given the form's tensors that
    hold an op's result, as ``tflite_onnx.onnx_form`` gives them)."""
    translate = TRANSLATIONS.get(model.format)
    return translate(model, results) if translate is not None else export_model(model.graph, model.proto)
