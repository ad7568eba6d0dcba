"""Matrix products: FULLY_CONNECTED and BATCH_MATMUL, their int8 forms computed in
integers as LiteRT computes them.

LiteRT multiplies int8 matrices in int32 and requantizes the sums with a fixed-point
multiplier (gemmlowp's QuantizeMultiplier: a 31-bit significand and a shift). A float
product requantized by QuantizeLinear rounds a sum near a half step the other way now
and then: one step, which an attention block's SOFTMAX turns into several (3 were
seen). The ONNX form does the same integer arithmetic, in int64. The two kernels round
differently: FULLY_CONNECTED (ruy) rounds half up at both shifts, BATCH_MATMUL
(gemmlowp's SaturatingRoundingDoublingHighMul, then RoundingDivideByPOT) half away
from zero. Measured on LiteRT's own results: equal on every element."""

from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple

import numpy as np
from onnx import TensorProto

from ....ir.graph import Node, Value
from .elementwise import int_floor_div
from .emitter import Emitter, NoForm, const_data, operand, option, quantization
from .quantization import real_bias
from .registry import Stored, op


def _quantize_multiplier(m: float) -> Tuple[int, int]:
    """gemmlowp's QuantizeMultiplier: m = q * 2**(shift - 31), q a 31-bit integer."""
    if m == 0:
        return 0, 0
    frac, shift = math.frexp(m)
    q = int(round(frac * (1 << 31)))
    if q == 1 << 31:
        q, shift = q // 2, shift + 1
    return q, shift


def _shift_right(e: Emitter, a: str, d) -> str:
    """floor(a / d) of int64 ``a`` by powers of two ``d``: an arithmetic right shift."""
    return int_floor_div(e, a, e.const(np.asarray(d, np.int64)))


def _requantize(e: Emitter, acc: str, multipliers: Sequence[float], out: Value, kernel: str,
                activation: int = 0) -> str:
    """The int8 result of int64 sums ``acc``: scaled by ``multipliers`` (one, or one per
    channel of the last axis), rounded as LiteRT's ``kernel`` (ruy or gemmlowp) does,
    offset by the output's zero point, clamped to the range of its fused activation."""
    qs, shifts = zip(*(_quantize_multiplier(m) for m in multipliers))
    left = np.array([1 << max(s, 0) for s in shifts], np.int64)
    right = np.array([max(-s, 0) for s in shifts], np.int64)
    ab = e.emit("Mul", [e.emit("Mul", [acc, e.const(left)]), e.const(np.array(qs, np.int64))])
    if kernel == "ruy":  # (ab + 2**30) >> 31, then (x + 2**(right-1)) >> right
        hi = _shift_right(e, e.emit("Add", [ab, e.const(np.int64(1 << 30))]), np.int64(1 << 31))
        half = np.where(right > 0, 1 << np.maximum(right - 1, 0), 0)
        y = _shift_right(e, e.emit("Add", [hi, e.const(half)]), 1 << right)
    else:  # gemmlowp: (ab + nudge) / 2**31, truncated; then RoundingDivideByPOT
        nudge = e.emit("Where", [e.emit("GreaterOrEqual", [ab, e.const(np.int64(0))]),
                                 e.const(np.int64(1 << 30)), e.const(np.int64(1 - (1 << 30)))])
        hi = e.emit("Div", [e.emit("Add", [ab, nudge]), e.const(np.int64(1 << 31))])
        rem = e.emit("Mod", [hi, e.const(1 << right)], fmod=0)
        negative = e.emit("Cast", [e.emit("Less", [hi, e.const(np.int64(0))])], to=TensorProto.INT64)
        threshold = e.emit("Add", [e.const(((1 << right) - 1) >> 1), negative])
        up = e.emit("Cast", [e.emit("Greater", [rem, threshold])], to=TensorProto.INT64)
        y = e.emit("Add", [_shift_right(e, hi, 1 << right), up])
    lo, hi_ = _activation_range(out, activation)
    y = e.emit("Add", [y, e.const(np.int64(out.quant.zero_point[0]))])
    return e.emit("Cast", [e.emit("Clip", [y, e.const(np.int64(lo)), e.const(np.int64(hi_))])], to=TensorProto.INT8)


def _activation_range(out: Value, activation: int) -> Tuple[int, int]:
    """The int8 range a fused activation clamps ``out`` to, as LiteRT's
    CalculateActivationRangeQuantized computes it."""
    bounds = {0: (None, None), 1: (0.0, None), 2: (-1.0, 1.0), 3: (0.0, 6.0)}.get(activation)
    if bounds is None:
        raise NoForm(f"fused activation {activation} on int8")
    scale, zp = float(out.quant.scale[0]), int(out.quant.zero_point[0])
    lo, hi = bounds
    return (-128 if lo is None else max(-128, zp + int(round(lo / scale))),
            127 if hi is None else min(127, zp + int(round(hi / scale))))


def _int8(v: Optional[Value], per_axis: bool = False) -> bool:
    """An int8 tensor quantized per tensor (or, with ``per_axis``, per axis 0)."""
    q = None if v is None else quantization(v)
    return (q is not None and v.type.dtype == "int8" and
            (not q.per_axis or (per_axis and q.quantized_dimension == 0)))


def _centered(e: Emitter, v: Value) -> str:
    """The int8 data of ``v`` less its zero point, in int64."""
    y = e.emit("Cast", [e.raw(v)], to=TensorProto.INT64)
    zp = int(v.quant.zero_point[0]) if v.quant.zero_point else 0
    return e.emit("Sub", [y, e.const(np.int64(zp))]) if zp else y


def _f32(x: float) -> float:
    return float(np.float32(x))  # LiteRT keeps scales in float32


def _flattened(e: Emitter, n: Node, y: str, depth: int) -> str:
    """FULLY_CONNECTED's input ``y`` as [-1, depth], unless it keeps its dims."""
    if not option(n, "keep_num_dims", False) and n.inputs[0].type.rank != 2:
        return e.emit("Reshape", [y, e.ints([-1, depth])])
    return y


def _int8_fully_connected(e: Emitter, n: Node) -> Optional[Stored]:
    """LiteRT's int8 FULLY_CONNECTED (constant symmetric weights, int32 bias), or None
    if the op is not one."""
    x, w, b = n.inputs[0], n.inputs[1], operand(n, 2)
    weights, out = const_data(w), n.outputs[0]
    bias = None if b is None else const_data(b)
    if not (_int8(x) and _int8(w, per_axis=True) and _int8(out) and weights is not None and weights.ndim == 2
            and not any(w.quant.zero_point) and (b is None or (b.type.dtype == "int32" and bias is not None))):
        return None
    y = _flattened(e, n, _centered(e, x), weights.shape[1])
    acc = e.emit("MatMul", [y, e.const(weights.T.astype(np.int64))])
    if bias is not None:
        acc = e.emit("Add", [acc, e.const(bias.astype(np.int64))])
    scales = np.broadcast_to(np.asarray(w.quant.scale, np.float32), (weights.shape[0],))
    multipliers = [_f32(x.quant.scale[0]) * float(s) / _f32(out.quant.scale[0]) for s in scales]
    return Stored([_requantize(e, acc, multipliers, out, "ruy", int(option(n, "fused_activation_function")))])


@op("FULLY_CONNECTED")
def _fully_connected(e, n):
    if option(n, "weights_format"):
        raise NoForm("shuffled weights")
    x, w, b = n.inputs[0], n.inputs[1], operand(n, 2)
    if w.type.shape is None or not isinstance(w.type.shape[1], int):
        raise NoForm("weights of unknown depth")
    exact = _int8_fully_connected(e, n)
    if exact is not None:
        return exact
    y = _flattened(e, n, e.real(x), w.type.shape[1])
    y = e.emit("MatMul", [y, e.permuted(w, (1, 0))])  # weights are [out, in]
    if b is not None:
        y = e.emit("Add", [y, real_bias(e, b, x, w)])
    return [y]


def _adjoint(e: Emitter, v: Value, t: str, adj: bool) -> str:
    if not adj:
        return t
    if v.type.rank is None:
        raise NoForm("adjoint of an unranked operand")
    r = v.type.rank
    return e.emit("Transpose", [t], perm=list(range(r - 2)) + [r - 1, r - 2])


@op("BATCH_MATMUL")
def _batch_matmul(e, n):
    a, b = n.inputs[:2]
    adj = (option(n, "adj_x", False), option(n, "adj_y", False))
    out = n.outputs[0]
    if _int8(a) and _int8(b) and _int8(out):  # as LiteRT's int8 kernel: see _requantize
        acc = e.emit("MatMul", [_adjoint(e, v, _centered(e, v), j) for v, j in zip((a, b), adj)])
        m = _f32(a.quant.scale[0]) * _f32(b.quant.scale[0]) / _f32(out.quant.scale[0])
        return Stored([_requantize(e, acc, [m], out, "gemmlowp")])
    return [e.emit("MatMul", [_adjoint(e, v, e.real(v), j) for v, j in zip((a, b), adj)])]

