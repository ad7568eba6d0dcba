"""Type and quantization ops, and the real value of a bias stored in integers."""

from __future__ import annotations

from typing import Optional

import numpy as np

from ....ir.dtypes import elem_type
from ....ir.graph import Value
from ....ir.types import Quantization
from .emitter import FLOATS, Emitter, const_data, quantization
from .registry import op


@op("CAST", raw=True)
def _cast(e, n):
    return [e.emit("Cast", [e.raw(n.inputs[0])], to=elem_type(n.outputs[0].type.dtype))]


@op("QUANTIZE")
def _quantize(e, n):
    # The real value; binding the quantized output writes the QuantizeLinear
    # (also a requantization from one int8 scale to another).
    return [e.real(n.inputs[0])]


@op("DEQUANTIZE")
def _dequantize(e, n):
    x, out = n.inputs[0], n.outputs[0]
    y = e.real(x)  # float16 weights are dequantized by a plain cast
    return [e.cast(y, e.real_dtype(x), out.type.dtype)]


def real_bias(e: Emitter, b: Optional[Value], x: Value, w: Value) -> str:
    """The real bias of a conv / fully connected op. An int32 bias without its own
    quantization has scale input_scale * weight_scale (per output channel), zero point 0."""
    if b is None:
        return ""
    qx, qw = quantization(x), quantization(w)
    if quantization(b) is not None or qx is None or qw is None or b.type.dtype in FLOATS:
        return e.real(b)
    scale = np.float64(qx.scale[0]) * np.asarray(qw.scale, np.float64)
    data = const_data(b)
    if data is not None:
        return e.const((data.astype(np.float64) * scale).astype(np.float32), f"{b.name}_real")
    q = Quantization(tuple(float(s) for s in scale), (0,) * len(scale), 0)
    return e.dequantize(e.raw(b), q, b.type.dtype, f"{b.name}_real")

