"""TFLite-dialect IR -> an equivalent ONNX ModelProto, so a TFLite model (legalized or
not) can run on onnxruntime.

One TFLite subgraph becomes one ONNX graph. The boundary keeps TFLite's names, dtypes,
shapes and NHWC layout (a dynamic dim becomes a dim_param); convolutions and pools go
through NCHW inside (Transpose, Conv, Transpose back).

Quantized tensors are computed in float: a quantized operand is read through
``DequantizeLinear`` (a quantized constant is dequantized at export) and a quantized
result written through ``QuantizeLinear``. An int8 model thus runs as its float
equivalent; LiteRT's integer kernels round differently, by about one quantization step,
and so may onnxruntime where it fuses DequantizeLinear -> op -> QuantizeLinear into an
integer kernel. int8 FULLY_CONNECTED and BATCH_MATMUL, whose step off a SOFTMAX after
them multiplies, are computed in integers as LiteRT computes them.

A WHILE is a Loop, an IF an If, a CALL its subgraph written in place (the subgraphs
come from the ``Model``). Ops with state (resource variables, hash tables) have no form.

Elementwise ops with an ONNX twin come from ``rules/tflite.toml`` (its ``onnx`` key);
every other op is a small function registered in the op table (``registry``), one
module per op family. An op without a translation does not stop the walk (``driver``):
all of them are collected. ``tflite_to_onnx`` then fails with one line naming each
(``CheckUnavailable``), never returning a partial model; ``onnx_form`` (the check's)
gives the model of the outputs that do not depend on any of them, and for each other
output, why not.
"""

from .driver import DEFAULT_OPSET, INT16_OPSET, MIN_OPSET, onnx_form, tflite_to_onnx
# The op families: importing them registers their ops.
from . import conv, control_flow, elementwise, matmul, quantization, reductions, resize, shapes  # noqa: F401

__all__ = ["DEFAULT_OPSET", "INT16_OPSET", "MIN_OPSET", "onnx_form", "tflite_to_onnx"]
