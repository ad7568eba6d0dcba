"""TOSA lowerings of elementwise ONNX ops: arithmetic, comparisons, quantization,
activations, casts. Operands already have the result's rank (the ``tosa`` legal form)
and broadcast only through size-1 dims, as TOSA allows."""

from __future__ import annotations

import math
from typing import List, Optional

import numpy as np

from ....ir.dtypes import numpy_dtype
from ....ir.graph import Node
from ..onnx_attrs import attr, axis_index, params_are_operands
from ..registry import Unsupported, rule_op_names
from .emitter import FLOATS, INT_RANGE, LOWERINGS, Emitter, T, identity

# ONNX ops that are one TOSA op each, the op as rules/onnx.toml names it.
_BINARY = rule_op_names("tosa", ("Add", "Sub", "Mul", "Max", "Min", "Equal", "Greater", "GreaterOrEqual",
                                 "And", "Or", "Xor", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "Sum"))
# Div is tosa.intdiv (integers only: a float division is a product with a reciprocal).
_NAMES = rule_op_names("tosa", ("Div", "Pow", "Neg"))
# TOSA has no less-than: greater (or greater_equal) with the operands swapped.
_SWAPPED = rule_op_names("tosa", ("Less", "LessOrEqual"))
_UNARY = rule_op_names("tosa", ("Exp", "Log", "Tanh", "Sigmoid", "Abs", "Reciprocal", "Floor", "Ceil", "Erf",
                                "Sin", "Cos", "Not", "BitwiseNot"))


@LOWERINGS.register(*_BINARY)
def _binary(e: Emitter, node: Node) -> List[T]:
    operands = [e.input(i) for i in range(len(node.inputs)) if e.has_input(i)]
    dtype, _ = e.out_type()
    name = _BINARY[node.op_type]
    if len(operands) == 1:  # a one-operand Sum/Max/Min
        return [identity(e, operands[0])]
    if len(operands) != 2:
        raise Unsupported(f"{len(operands)} operands (legalize splits variadic ops into binary ones)")
    return [e.binary(name, operands[0], operands[1], dtype=dtype, result=e.result_name())]


@LOWERINGS.register(*_SWAPPED)
def _swapped(e: Emitter, node: Node) -> List[T]:
    return [e.binary(_SWAPPED[node.op_type], e.input(1), e.input(0), dtype="bool", result=e.result_name())]


@LOWERINGS.register(*_UNARY)
def _unary(e: Emitter, node: Node) -> List[T]:
    dtype, _ = e.out_type()
    return [e.unary(_UNARY[node.op_type], e.input(0), result=e.result_name(), dtype=dtype)]


@LOWERINGS.register("Neg")
def _neg(e: Emitter, node: Node) -> List[T]:
    x = e.input(0)
    zp = e.zp(x.dtype)
    return [e.op(_NAMES["Neg"], [x, zp, zp], x.dtype, x.shape, result=e.result_name())]


@LOWERINGS.register("Div")
def _div(e: Emitter, node: Node) -> List[T]:
    a, b = e.input(0), e.input(1)
    if a.dtype in FLOATS:  # TOSA has no float division: a * (1 / b)
        return [e.binary("tosa.mul", a, e.unary("tosa.reciprocal", b), result=e.result_name())]
    if a.dtype not in _INTDIV:
        raise Unsupported(f"integer division of {a.dtype} (tosa.intdiv takes int32)")
    # tosa.intdiv truncates toward zero, as ONNX's integer Div does
    return [e.binary(_NAMES["Div"], a, b, result=e.result_name())]


# tosa.intdiv's element types: i32 in the TOSA spec; IREE also compiles i64 (ONNX's index type).
_INTDIV = ("int32", "int64")


@LOWERINGS.register("Mod")
def _mod(e: Emitter, node: Node) -> List[T]:
    """fmod=0: the remainder takes the divisor's sign (Python's %); fmod=1: the
    dividend's (C's fmod). Floats: a - floor(a/b)*b, or a - trunc(a/b)*b; integers:
    a - intdiv(a, b)*b (truncated, C's), then corrected by b where the signs differ."""
    a, b = e.input(0), e.input(1)
    fmod = int(attr(node, "fmod", 0))
    rank = max(a.rank, b.rank)
    a, b = e.expand_rank(a, rank), e.expand_rank(b, rank)
    if a.dtype in FLOATS:
        q = e.binary("tosa.mul", a, e.unary("tosa.reciprocal", b))
        if fmod:  # trunc(q) = sign(q) * floor(|q|)
            neg = e.binary("tosa.greater", e.scalar(0.0, a.dtype, rank), q, dtype="bool")
            zp = e.zp(a.dtype)
            mag = e.unary("tosa.floor", e.unary("tosa.abs", q))
            q = e.select(neg, e.op("tosa.negate", [mag, zp, zp], mag.dtype, mag.shape), mag)
        else:
            q = e.unary("tosa.floor", q)
        r = e.binary("tosa.sub", a, e.binary("tosa.mul", q, b), result=e.result_name() if fmod else None)
        if fmod:
            return [r]
        zero = e.scalar(0.0, a.dtype, rank)
    elif a.dtype in _INTDIV:
        r = e.binary("tosa.sub", a, e.binary("tosa.mul", e.binary(_NAMES["Div"], a, b), b),
                     result=e.result_name() if fmod else None)
        if fmod:
            return [r]
        zero = e.scalar(0, a.dtype, rank)
    else:
        raise Unsupported(f"Mod of {a.dtype} (floats, int32 and int64 have a TOSA form)")
    # fmod=0: where r != 0 and sign(r) != sign(b), r + b (a float r rounded to |b| becomes 0)
    r_neg = e.binary("tosa.greater", zero, r, dtype="bool")
    b_neg = e.binary("tosa.greater", zero, b, dtype="bool")
    r_nonzero = e.unary("tosa.logical_not", e.binary("tosa.equal", r, zero, dtype="bool"))
    fix = e.binary("tosa.logical_and", e.binary("tosa.logical_xor", r_neg, b_neg), r_nonzero)
    floats = a.dtype in FLOATS
    out = e.select(fix, e.binary("tosa.add", r, b), r, result=None if floats else e.result_name())
    if floats:  # r + b rounded to b: the remainder is 0
        out = e.select(e.binary("tosa.equal", out, b, dtype="bool"), zero, out, result=e.result_name())
    return [out]


def _quant_param(e: Emitter, i: int, x: T, dtype: str, what: str, default=0) -> Optional[np.ndarray]:
    """A constant scale / zero point as an array broadcastable against ``x``: a scalar,
    or a 1-D per-axis vector reshaped to ``x``'s rank along ``axis``."""
    if not e.has_input(i):
        return None if default is None else np.full((1,) * x.rank, default)
    c = e.const_input(i)
    if c is None:
        raise Unsupported(f"a run-time {what} (operand #{i} must be a constant)")
    c = np.asarray(c)
    if attr(e.node, "block_size", 0):
        raise Unsupported("blocked quantization (block_size) has no TOSA lowering")
    if c.size == 1:
        return c.reshape((1,) * x.rank)
    if c.ndim != 1:
        raise Unsupported(f"a {what} of rank {c.ndim}")
    axis = axis_index(attr(e.node, "axis", 1), x.rank)
    shape = [1] * x.rank
    shape[axis] = c.shape[0]
    return c.reshape(shape)


@LOWERINGS.register("DequantizeLinear")
def _dequantize(e: Emitter, node: Node) -> List[T]:
    """(cast(x to float) - zero_point) * scale."""
    x = e.input(0)
    dtype, _ = e.out_type()
    if x.dtype not in ("int8", "int16", "int32"):
        raise Unsupported(f"dequantizing {x.dtype} (int8, int16 and int32 have a TOSA form)")
    scale = _quant_param(e, 1, x, dtype, "scale", default=None)
    zp = _quant_param(e, 2, x, dtype, "zero point")
    y = e.op("tosa.cast", [x], dtype, x.shape)
    if np.any(zp != 0):
        y = e.binary("tosa.sub", y, e.const(zp.astype(numpy_dtype(dtype)), dtype))
    return [e.binary("tosa.mul", y, e.const(scale.astype(numpy_dtype(dtype)), dtype), result=e.result_name())]


@LOWERINGS.register("QuantizeLinear")
def _quantize(e: Emitter, node: Node) -> List[T]:
    """clamp(round(x * (1/scale)) + zero_point, qmin, qmax), cast: tosa.cast from float to
    int32 rounds half to even (and saturates), as ONNX's QuantizeLinear's rounding does.
    ONNX divides by the scale; x * (1/scale) may land an ulp off an exact tie (x = k.5 *
    scale), so a product within an ulp of a half-integer is taken as that tie."""
    x = e.input(0)
    dtype, _ = e.out_type()
    if x.dtype not in FLOATS:
        raise Unsupported(f"quantizing {x.dtype} (a float input is needed)")
    if dtype not in ("int8", "int16"):
        raise Unsupported(f"quantizing to {dtype} (int8 and int16 have a TOSA form)")
    scale = _quant_param(e, 1, x, x.dtype, "scale", default=None)
    zp = _quant_param(e, 2, x, x.dtype, "zero point")
    inv = (1.0 / scale.astype(np.float64)).astype(numpy_dtype(x.dtype))
    q = e.binary("tosa.mul", x, e.const(inv, x.dtype))
    half = e.binary("tosa.add", e.unary("tosa.floor", q), e.scalar(0.5, x.dtype, x.rank))
    ulp = e.mul_scalar(e.unary("tosa.abs", half), 2.0 ** -23 if x.dtype == "float" else 2.0 ** -10)
    tie = e.binary("tosa.greater_equal", ulp, e.unary("tosa.abs", e.binary("tosa.sub", q, half)), dtype="bool")
    n = e.op("tosa.cast", [e.select(tie, half, q)], "int32", q.shape)  # rounds half to even
    if np.any(zp != 0):
        n = e.binary("tosa.add", n, e.const(zp.astype(np.int32), "int32"))
    lo, hi = INT_RANGE[dtype]  # tosa.clamp takes no i32 (profiles): maximum / minimum
    n = e.binary("tosa.minimum", e.binary("tosa.maximum", n, e.scalar(lo, "int32", n.rank)),
                 e.scalar(hi, "int32", n.rank))
    return [e.op("tosa.cast", [n], dtype, n.shape, result=e.result_name())]


@LOWERINGS.register("Pow")
def _pow(e: Emitter, node: Node) -> List[T]:
    x = e.input(0)
    if x.dtype not in FLOATS:
        raise Unsupported("integer Pow (tosa.pow takes floats)")
    exponent = e.const_input(1)
    if exponent is not None and exponent.size == 1:
        p = float(np.asarray(exponent).reshape(-1)[0])
        # small integer exponents as products: exact, and defined for negative bases
        if p in (1.0, 2.0, 3.0, 4.0):
            acc = x
            for _ in range(int(p) - 1):
                acc = e.binary("tosa.mul", acc, x)
            return [acc]
        if p == -1.0:
            return [e.unary("tosa.reciprocal", x, result=e.result_name())]
        if p == 0.5:
            return [e.binary(_NAMES["Pow"], x, e.scalar(0.5, x.dtype, x.rank), result=e.result_name())]
    y = e.input(1)
    if y.dtype != x.dtype:
        y = e.cast(y, x.dtype)
    return [_signed_pow(e, x, y)]


def _signed_pow(e: Emitter, x: T, y: T) -> T:
    """tosa.pow is undefined for x < 0; ONNX's Pow (C's pow) is defined there for integral
    y: |x|^y, negated for odd y; NaN for the rest. So: pow(|x|, y), then select."""
    rank = max(x.rank, y.rank)
    x, y = e.expand_rank(x, rank), e.expand_rank(y, rank)
    p = e.binary(_NAMES["Pow"], e.unary("tosa.abs", x), y)
    whole = e.unary("tosa.floor", y)
    integral = e.binary("tosa.equal", y, whole, dtype="bool")
    half = e.unary("tosa.floor", e.mul_scalar(whole, 0.5))
    odd = e.unary("tosa.logical_not", e.binary("tosa.equal", e.mul_scalar(half, 2.0), whole, dtype="bool"))
    zp = e.zp(x.dtype)
    negated = e.op("tosa.negate", [p, zp, zp], p.dtype, p.shape)
    of_negative = e.select(integral, e.select(odd, negated, p), e.scalar(float("nan"), x.dtype, rank))
    negative = e.binary("tosa.greater", e.scalar(0.0, x.dtype, rank), x, dtype="bool")
    return e.select(negative, of_negative, p, result=e.result_name())


@LOWERINGS.register("Sqrt")
def _sqrt(e: Emitter, node: Node) -> List[T]:
    x = e.input(0)
    return [e.binary(_NAMES["Pow"], x, e.scalar(0.5, x.dtype, x.rank), result=e.result_name())]


@LOWERINGS.register("Where")
def _where(e: Emitter, node: Node) -> List[T]:
    return [e.select(e.input(0), e.input(1), e.input(2), result=e.result_name())]


@LOWERINGS.register("Mean")
def _mean(e: Emitter, node: Node) -> List[T]:
    operands = [e.input(i) for i in range(len(node.inputs)) if e.has_input(i)]
    acc = operands[0]
    for t in operands[1:]:
        acc = e.binary("tosa.add", acc, t)
    if len(operands) == 1:
        return [acc]
    return [e.mul_scalar(acc, 1.0 / len(operands), result=e.result_name())]


@LOWERINGS.register("Relu")
def _relu(e: Emitter, node: Node) -> List[T]:
    x = e.input(0)
    return [e.clamp(x, 0, None, result=e.result_name())]


@LOWERINGS.register("Clip")
def _clip(e: Emitter, node: Node) -> List[T]:
    x = e.input(0)
    if not params_are_operands(e.graph, node):
        return [e.clamp(x, attr(node, "min"), attr(node, "max"), result=e.result_name())]
    bounds = []
    for i in (1, 2):
        if not e.has_input(i):
            bounds.append(None)
            continue
        c = e.const_input(i)
        bounds.append(float(np.asarray(c).reshape(-1)[0]) if c is not None else e.input(i))
    if all(not isinstance(b, T) for b in bounds):
        return [e.clamp(x, bounds[0], bounds[1], result=e.result_name())]
    lo, hi = bounds  # run-time bounds: maximum / minimum with the scalars
    if lo is not None:
        x = e.binary("tosa.maximum", x, lo if isinstance(lo, T) else e.scalar(lo, x.dtype, x.rank))
    if hi is not None:
        x = e.binary("tosa.minimum", x, hi if isinstance(hi, T) else e.scalar(hi, x.dtype, x.rank))
    return [x]


@LOWERINGS.register("LeakyRelu")
def _leaky_relu(e: Emitter, node: Node) -> List[T]:
    x = e.input(0)
    alpha = attr(node, "alpha", 0.01)
    ge = e.binary("tosa.greater_equal", x, e.scalar(0.0, x.dtype, x.rank), dtype="bool")
    return [e.select(ge, x, e.mul_scalar(x, alpha), result=e.result_name())]


@LOWERINGS.register("PRelu")
def _prelu(e: Emitter, node: Node) -> List[T]:
    x, slope = e.input(0), e.input(1)
    ge = e.binary("tosa.greater_equal", x, e.scalar(0.0, x.dtype, x.rank), dtype="bool")
    return [e.select(ge, x, e.binary("tosa.mul", x, slope), result=e.result_name())]


@LOWERINGS.register("HardSigmoid", "HardSwish")
def _hard_sigmoid(e: Emitter, node: Node) -> List[T]:
    x = e.input(0)
    swish = node.op_type == "HardSwish"
    alpha = 1.0 / 6.0 if swish else attr(node, "alpha", 0.2)
    beta = 0.5 if swish else attr(node, "beta", 0.5)
    y = e.binary("tosa.add", e.mul_scalar(x, alpha), e.scalar(beta, x.dtype, x.rank))
    y = e.clamp(y, 0.0, 1.0, result=None if swish else e.result_name())
    return [e.binary("tosa.mul", x, y, result=e.result_name()) if swish else y]


@LOWERINGS.register("Softplus")
def _softplus(e: Emitter, node: Node) -> List[T]:
    x = e.input(0)
    one = e.scalar(1.0, x.dtype, x.rank)
    return [e.unary("tosa.log", e.binary("tosa.add", e.unary("tosa.exp", x), one), result=e.result_name())]


@LOWERINGS.register("Elu")
def _elu(e: Emitter, node: Node) -> List[T]:
    x = e.input(0)
    alpha = attr(node, "alpha", 1.0)
    neg = e.mul_scalar(e.binary("tosa.sub", e.unary("tosa.exp", x), e.scalar(1.0, x.dtype, x.rank)), alpha)
    gt = e.binary("tosa.greater", x, e.scalar(0.0, x.dtype, x.rank), dtype="bool")
    return [e.select(gt, x, neg, result=e.result_name())]


@LOWERINGS.register("Gelu")
def _gelu(e: Emitter, node: Node) -> List[T]:
    x = e.input(0)
    if attr(node, "approximate", "none") == "tanh":
        cube = e.binary("tosa.mul", e.binary("tosa.mul", x, x), x)
        inner = e.binary("tosa.add", x, e.mul_scalar(cube, 0.044715))
        t = e.unary("tosa.tanh", e.mul_scalar(inner, math.sqrt(2.0 / math.pi)))
    else:
        t = e.unary("tosa.erf", e.mul_scalar(x, 1.0 / math.sqrt(2.0)))
    half = e.mul_scalar(x, 0.5)
    return [e.binary("tosa.mul", half, e.binary("tosa.add", t, e.scalar(1.0, x.dtype, x.rank)),
                     result=e.result_name())]


@LOWERINGS.register("Identity")
def _identity_op(e: Emitter, node: Node) -> List[T]:
    return [identity(e, e.input(0))]


@LOWERINGS.register("Dropout")
def _dropout(e: Emitter, node: Node) -> List[Optional[T]]:
    if e.used(1):
        raise Unsupported("its mask output is used")
    return [identity(e, e.input(0)), None]


@LOWERINGS.register("Cast")
def _cast(e: Emitter, node: Node) -> List[T]:
    dtype, _ = e.out_type()
    return [e.cast(e.input(0), dtype, result=e.result_name())]


