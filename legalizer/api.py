"""Writing models back out."""

from __future__ import annotations

from pathlib import Path

import onnx

from .exporters.onnx import export_model, save_model
from .model import Model


def to_onnx(model: Model) -> onnx.ModelProto:
    """The ONNX ModelProto of ``model``'s IR, with every header field carried over; for
    a TFLite model, its first subgraph translated to ONNX ops."""
    if model.format == "tflite":
        from .exporters.tflite_onnx import tflite_to_onnx

        return tflite_to_onnx(model)
    return export_model(model.graph, model.proto)


def save(model: Model, path, *, force: bool = False, inspect=None) -> Path:
    """Write ``model`` in its own format (ONNX or TFLite) to ``path`` atomically; never
    over its own source file. External data stays external (see
    ``exporters.onnx.save_model``, also for ``inspect``, a look at the written file
    before it takes its name)."""
    if model.format == "tflite":
        from .exporters.tflite import save_tflite

        return save_tflite(model, Path(path), force=force, protect=model.source, inspect=inspect)
    # The initializers are streamed into the file, not copied into a new ModelProto.
    inits: list = []
    proto = export_model(model.graph, model.proto, detached=inits)
    return save_model(proto, Path(path), model.base_dir, force=force, protect=model.source,
                      inspect=inspect, initializers=inits)
