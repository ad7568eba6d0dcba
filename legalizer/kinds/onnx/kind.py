"""The ONNX record. A binary ONNX file has no signature (a protobuf opens with a field
tag): it is what a file is when no other kind's bytes match (``registry.DEFAULT``)."""

from __future__ import annotations

from ..base import Kind

KIND = Kind(
    name="onnx", title="ONNX", suffixes=(".onnx",),
    read="legalizer.kinds.onnx.read:read",
    # a module or program handed to ``load`` is legalized as its ONNX export ("pt2-onnx")
    formats=(("onnx", "legalizer.kinds.onnx.format:OnnxFormat"),
             ("pt2-onnx", "legalizer.kinds.onnx.format:Pt2Format")),
    written=".onnx", in_folders=True, records_constraints=True, runtimes=("onnxruntime",),
    infers_onnx_shapes=True, explorer_ids="legalizer.explorer_ids:onnx_file_ids",
    explorer_adapter="model_explorer_onnx.main:ONNXAdapter",
    external_data="legalizer.kinds.onnx.read:OnnxExternalData")

# What the helper that runs ONNX shape inference imports ahead (``kinds.onnx.infer``),
# started as soon as a run knows it will infer: by the command line, and by the reader
# of an ONNX file (while it parses the file: a library run, a batch's worker).
INFER_PRELOAD = ("legalizer.kinds.onnx.infer",)
