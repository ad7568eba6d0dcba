"""A ``Model`` of any format as ONNX: what runtimes, the MLIR emitters and the ONNX
writer read."""

from __future__ import annotations

import onnx

from ..kinds.base import resolve
from ..kinds.registry import named
from ..model import Model
from ..kinds.onnx.exporter import export_model


def translated(model: Model) -> bool:
    """Whether ``model``'s IR is of its own ops, which become ONNX ops through its kind's
    ``translation`` (a TFLite model's); else it is of ONNX ops already."""
    kind = named(model.format)
    return kind is not None and kind.translation is not None


def to_onnx(model: Model, results=None) -> onnx.ModelProto:
    """The ONNX ModelProto of ``model``'s IR, with every header field carried over; for
    a TFLite model, its first subgraph translated to ONNX ops (``CheckUnavailable``
    naming every op that has none; ``results``, a dict, is given the form's tensors that
    hold an op's result, as ``kinds.tflite.onnx_form.onnx_form`` gives them)."""
    if translated(model):
        return resolve(named(model.format).translation)(model, results=results)
    return export_model(model.graph, model.proto)
