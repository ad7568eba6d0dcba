"""TOSA lowerings of ONNX's neural-network ops: reductions and normalizations, matrix
products, convolution and pooling (NCHW transposed to TOSA's NHWC; 1-D windows as 2-D
with a unit height)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import numpy as np

from ....ir.dtypes import numpy_dtype
from ....ir.graph import Node
from ..onnx_attrs import attr, axis_index, params_are_operands, softmax_axes
from ..printer import is_splat, shape_text
from ..registry import Unsupported, rule_op_names
from .emitter import LOWERINGS, Emitter, T, broadcast_shape, i64_array, ints, need_const, static
from .shapes import tile, tosa_pad


def _reduce_axes(e: Emitter, rank: int) -> Optional[List[int]]:
    """The axes of a Reduce* op (an attribute, or operand 1 from its opset in
    ``OPERANDS_SINCE``); every axis when none are given; [] for none
    (noop_with_empty_axes)."""
    if not params_are_operands(e.graph, e.node):
        axes = attr(e.node, "axes")
    else:
        axes = ints(need_const(e, 1, "axes")) if e.has_input(1) else None
    if not axes:
        return [] if attr(e.node, "noop_with_empty_axes", 0) else list(range(rank))
    return sorted(axis_index(a, rank) for a in axes)


# Each reduction's TOSA op, as rules/onnx.toml names it (a mean: a sum, then scaled).
_REDUCE = rule_op_names("tosa", ("ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceMean"))


@LOWERINGS.register(*_REDUCE)
def _reduce(e: Emitter, node: Node) -> List[T]:
    x = e.input(0)
    name = _REDUCE[node.op_type]
    axes = _reduce_axes(e, x.rank)
    y = e.reduce(name, x, axes)
    if node.op_type == "ReduceMean" and axes:
        count = [x.shape[a] for a in axes]
        if not static(count):
            raise Unsupported("the mean over a dynamic dim needs static shapes")
        y = e.mul_scalar(y, 1.0 / float(np.prod(count)))
    _, shape = e.out_type()
    return [e.reshape(y, shape, result=e.result_name())]


@LOWERINGS.register("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(e: Emitter, node: Node) -> List[T]:
    x = e.input(0)
    axes = list(range(2, x.rank))
    if node.op_type == "GlobalMaxPool":
        return [e.reduce("tosa.reduce_max", x, axes)]
    count = [x.shape[a] for a in axes]
    if not static(count):
        raise Unsupported("the mean over a dynamic dim needs static shapes")
    return [e.mul_scalar(e.reduce("tosa.reduce_sum", x, axes), 1.0 / float(np.prod(count)), result=e.result_name())]


def _softmax_last(e: Emitter, x: T, log: bool, result: Optional[str]) -> T:
    axis = x.rank - 1
    shifted = e.binary("tosa.sub", x, e.reduce("tosa.reduce_max", x, [axis]))
    exp = e.unary("tosa.exp", shifted)
    total = e.reduce("tosa.reduce_sum", exp, [axis])
    if log:
        return e.binary("tosa.sub", shifted, e.unary("tosa.log", total), result=result)
    return e.binary("tosa.mul", exp, e.unary("tosa.reciprocal", total), result=result)


@LOWERINGS.register("Softmax", "LogSoftmax")
def _softmax(e: Emitter, node: Node) -> List[T]:
    x = e.input(0)
    log = node.op_type == "LogSoftmax"
    axes = softmax_axes(e.graph, node, x.rank)
    axis = axes[0]
    if len(axes) > 1:
        # opsets < 13 coerce to 2-D at axis: softmax over all of the trailing dims
        inner = x.shape[axis:]
        if not static(inner):
            raise Unsupported("the coerced 2-D softmax over dynamic dims needs static shapes")
        flat = e.reshape(x, tuple(x.shape[:axis]) + (int(np.prod(inner)),))
        y = _softmax_last(e, flat, log, None)
        return [e.reshape(y, x.shape, result=e.result_name())]
    if axis != x.rank - 1:
        perm = [i for i in range(x.rank) if i != axis] + [axis]
        inv = list(np.argsort(perm))
        y = _softmax_last(e, e.transpose(x, perm), log, None)
        return [e.transpose(y, inv, result=e.result_name())]
    return [_softmax_last(e, x, log, e.result_name())]


def _channel_param(e: Emitter, i: int, rank: int) -> T:
    """A per-channel parameter (size C) reshaped to 1xCx1...x1."""
    t = e.input(i)
    return e.reshape(t, (1, t.shape[0]) + (1,) * (rank - 2))


@LOWERINGS.register("BatchNormalization")
def _batch_norm(e: Emitter, node: Node) -> List[Optional[T]]:
    if any(e.used(i) for i in range(1, len(node.outputs))):
        raise Unsupported("training-mode outputs (running mean/var) are used")
    if attr(node, "training_mode", 0):
        raise Unsupported("training mode")
    x = e.input(0)
    eps = float(attr(node, "epsilon", 1e-5))
    params = [e.const_input(i) for i in range(1, 5)]
    shape = (1, x.shape[1]) + (1,) * (x.rank - 2)
    if all(p is not None for p in params):  # constants: y = x * a + b, folded now
        scale, bias, mean, var = (np.asarray(p, np.float64) for p in params)
        a = scale / np.sqrt(var + eps)
        b = bias - mean * a
        nd = numpy_dtype(x.dtype)
        ta = e.const(np.broadcast_to(a.astype(nd), (x.shape[1],)).reshape(shape) if is_splat(a)
                     else a.astype(nd).reshape(shape), x.dtype)
        tb = e.const(np.broadcast_to(b.astype(nd), (x.shape[1],)).reshape(shape) if is_splat(b)
                     else b.astype(nd).reshape(shape), x.dtype)
        return [e.binary("tosa.add", e.binary("tosa.mul", x, ta), tb, result=e.result_name())] + \
            [None] * (len(node.outputs) - 1)
    scale, bias, mean, var = (_channel_param(e, i, x.rank) for i in range(1, 5))
    inv = e.unary("tosa.rsqrt", e.binary("tosa.add", var, e.scalar(eps, x.dtype, x.rank)))
    y = e.binary("tosa.mul", e.binary("tosa.sub", x, mean), e.binary("tosa.mul", scale, inv))
    return [e.binary("tosa.add", y, bias, result=e.result_name())] + [None] * (len(node.outputs) - 1)


@LOWERINGS.register("LayerNormalization")
def _layer_norm(e: Emitter, node: Node) -> List[Optional[T]]:
    if any(e.used(i) for i in range(1, len(node.outputs))):
        raise Unsupported("its Mean / InvStdDev outputs are used")
    x = e.input(0)
    axis = axis_index(attr(node, "axis", -1), x.rank)
    eps = float(attr(node, "epsilon", 1e-5))
    axes = list(range(axis, x.rank))
    count = [x.shape[a] for a in axes]
    if not static(count):
        raise Unsupported("normalizing over dynamic dims needs static shapes")
    inv_n = 1.0 / float(np.prod(count))
    mean = e.mul_scalar(e.reduce("tosa.reduce_sum", x, axes), inv_n)
    centered = e.binary("tosa.sub", x, mean)
    var = e.mul_scalar(e.reduce("tosa.reduce_sum", e.binary("tosa.mul", centered, centered), axes), inv_n)
    inv = e.unary("tosa.rsqrt", e.binary("tosa.add", var, e.scalar(eps, x.dtype, x.rank)))
    y = e.binary("tosa.mul", centered, inv)
    has_bias = e.has_input(2)
    y = e.binary("tosa.mul", y, e.expand_rank(e.input(1), x.rank), result=None if has_bias else e.result_name())
    if has_bias:
        y = e.binary("tosa.add", y, e.expand_rank(e.input(2), x.rank), result=e.result_name())
    return [y] + [None] * (len(node.outputs) - 1)


@LOWERINGS.register("LRN")
def _lrn(e: Emitter, node: Node) -> List[T]:
    """x / (bias + alpha / size * sum of x^2 over a window of channels) ^ beta; the
    window sum is a 1x1 convolution with a band matrix."""
    x = e.input(0)
    if x.rank != 4 or not isinstance(x.shape[1], int):
        raise Unsupported("LRN needs a 4-D input with a static channel dim")
    size = int(attr(node, "size"))
    alpha, beta, bias = (float(attr(node, k, d)) for k, d in (("alpha", 1e-4), ("beta", 0.75), ("bias", 1.0)))
    c = x.shape[1]
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    band = np.zeros((c, 1, 1, c), numpy_dtype(x.dtype))
    for o in range(c):
        band[o, 0, 0, max(0, o - lo):min(c, o + hi + 1)] = 1
    sq = e.transpose(e.binary("tosa.mul", x, x), [0, 2, 3, 1])
    w = e.const(band, x.dtype)
    zero_bias = e.shared_const(0.0, x.dtype, (c,))
    zp = e.zp(x.dtype)
    sums = e.op("tosa.conv2d", [sq, w, zero_bias, zp, zp], x.dtype, sq.shape,
                {"pad": i64_array([0, 0, 0, 0]), "stride": i64_array([1, 1]), "dilation": i64_array([1, 1]),
                 "acc_type": _acc_type(x.dtype)})
    sums = e.transpose(sums, [0, 3, 1, 2])
    base = e.binary("tosa.add", e.mul_scalar(sums, alpha / size), e.scalar(bias, x.dtype, 4))
    denom = e.binary("tosa.pow", base, e.scalar(beta, x.dtype, 4))
    return [e.binary("tosa.mul", x, e.unary("tosa.reciprocal", denom), result=e.result_name())]


# -- matrix products ---------------------------------------------------------------------

def _acc_type(dtype: str) -> str:
    if dtype in ("float", "float16", "bfloat16"):
        return "f32"
    if dtype == "int8":
        return "i32"
    if dtype == "int16":
        return "i48"
    raise Unsupported(f"no TOSA accumulator for {dtype}")


def _product(dims: Sequence):
    if static(dims):
        return int(np.prod(dims)) if dims else 1
    return None


def _matmul3(e: Emitter, a: T, b: T) -> T:
    """tosa.matmul of rank-3 operands [B, M, K] x [B, K, N]."""
    if a.dtype not in ("float", "float16", "bfloat16"):
        raise Unsupported(f"{a.dtype} matrix products (only float ones)")
    zp = e.zp(a.dtype)
    return e.op("tosa.matmul", [a, b, zp, zp], a.dtype, (a.shape[0], a.shape[1], b.shape[2]))


@LOWERINGS.register("MatMul")
def _matmul(e: Emitter, node: Node) -> List[T]:
    a, b = e.input(0), e.input(1)
    _, out_shape = e.out_type()
    if a.rank == 1:
        a = e.reshape(a, (1,) + a.shape)
    if b.rank == 1:
        b = e.reshape(b, b.shape + (1,))
    ba, bb = a.shape[:-2], b.shape[:-2]
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    if not bb or all(d == 1 for d in bb):
        # B is one matrix: fold A's batch dims into its rows
        a3 = e.reshape(a, (1, _product(tuple(ba) + (m,)), k))
        b3 = e.reshape(b, (1, k, n))
    else:
        rank = max(len(ba), len(bb))
        ba, bb = (1,) * (rank - len(ba)) + tuple(ba), (1,) * (rank - len(bb)) + tuple(bb)
        if tuple(ba) != tuple(bb):
            if not (static(ba) and static(bb)):
                raise Unsupported("MatMul with broadcast batch dims needs static shapes")
            batch = broadcast_shape(ba, bb)
            a = tile(e, e.expand_rank(a, rank + 2), [o // d for d, o in zip(ba, batch)] + [1, 1],
                      tuple(batch) + (m, k)) if tuple(ba) != batch else e.expand_rank(a, rank + 2)
            b = tile(e, e.expand_rank(b, rank + 2), [o // d for d, o in zip(bb, batch)] + [1, 1],
                      tuple(batch) + (k, n)) if tuple(bb) != batch else e.expand_rank(b, rank + 2)
            ba = batch
        nb = _product(ba)
        a3 = e.reshape(a, (nb, m, k))
        b3 = e.reshape(b, (nb, k, n))
    y = _matmul3(e, a3, b3)
    return [e.reshape(y, out_shape, result=e.result_name())]


@LOWERINGS.register("Gemm")
def _gemm(e: Emitter, node: Node) -> List[T]:
    a = e.input(0)
    if a.rank != 2 or node.inputs[1].type.rank != 2:
        raise Unsupported("Gemm operands must be matrices")
    if attr(node, "transA", 0):
        a = e.transpose(a, [1, 0])
    wb = e.const_input(1)
    if attr(node, "transB", 0):
        b = e.const(np.asarray(wb).T, node.inputs[1].type.dtype or "float") if wb is not None \
            else e.transpose(e.input(1), [1, 0])
    else:
        b = e.input(1)
    m, k = a.shape
    n = b.shape[1]
    y = _matmul3(e, e.reshape(a, (1, m, k)), e.reshape(b, (1, k, n)))
    alpha, beta = float(attr(node, "alpha", 1.0)), float(attr(node, "beta", 1.0))
    has_c = e.has_input(2) and beta != 0.0
    y = e.reshape(y, (m, n), result=None if (has_c or alpha != 1.0) else e.result_name())
    if alpha != 1.0:
        y = e.mul_scalar(y, alpha, result=None if has_c else e.result_name())
    if has_c:
        c = e.expand_rank(e.input(2), 2)
        if beta != 1.0:
            c = e.mul_scalar(c, beta)
        y = e.binary("tosa.add", y, c, result=e.result_name())
    return [y]


# -- convolution and pooling ---------------------------------------------------------------

@dataclass
class _Window:
    """A sliding window's parameters over the two spatial dims (1-D ops get a leading 1)."""

    kernel: List[int]
    stride: List[int]
    dilation: List[int]
    pad: List[int]  # TOSA order: top, bottom, left, right
    declared_end: List[int]  # the end pads the op declares (the rest makes ceil_mode's size)


def _window(e: Emitter, x: T, kernel: List[int], out_spatial: Sequence) -> Tuple[T, _Window]:
    """The window of the current Conv/Pool node on ``x`` (NCHW, 2-D spatial): pads from
    ``pads``/``auto_pad`` at the start, at the end what gives the output size shape
    inference found (TOSA wants it exact; ceil_mode is this too). A negative end pad
    crops ``x`` instead."""
    node = e.node
    n = len(kernel)
    stride = list(attr(node, "strides", [1] * n))
    dilation = list(attr(node, "dilations", [1] * n))
    pads = list(attr(node, "pads", [0] * (2 * n)))
    auto = attr(node, "auto_pad", "NOTSET")
    spatial = list(x.shape[2:])
    if not (static(spatial) and static(out_spatial)):
        raise Unsupported(f"a window over dynamic spatial dims ({shape_text(x.shape)}) needs static shapes")
    begin, declared = [], []
    for i in range(n):
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            total = max((out_spatial[i] - 1) * stride[i] + (kernel[i] - 1) * dilation[i] + 1 - spatial[i], 0)
            begin.append(total // 2 if auto == "SAME_UPPER" else total - total // 2)
            declared.append(total - begin[-1])
        elif auto == "VALID":
            begin.append(0)
            declared.append(0)
        else:
            begin.append(pads[i])
            declared.append(pads[n + i])
    end, crop = [], [0] * n
    for i in range(n):
        need = (out_spatial[i] - 1) * stride[i] + (kernel[i] - 1) * dilation[i] + 1 - spatial[i] - begin[i]
        if need < 0:
            crop[i], need = -need, 0
        end.append(need)
    if any(crop):
        size = list(x.shape[:2]) + [s - c for s, c in zip(spatial, crop)]
        x = e.slice(x, [0] * x.rank, size)
    if n == 1:
        kernel, stride, dilation = [1] + kernel, [1] + stride, [1] + dilation
        begin, end, declared = [0] + begin, [0] + end, [0] + declared
    return x, _Window(list(kernel), stride, dilation, [begin[0], end[0], begin[1], end[1]], declared)


def _to_2d(e: Emitter, x: T) -> T:
    if x.rank == 3:
        return e.reshape(x, (x.shape[0], x.shape[1], 1, x.shape[2]))
    if x.rank != 4:
        raise Unsupported(f"{x.rank - 2}-D windows (only 1-D and 2-D)")
    return x


def _nhwc(e: Emitter, x: T) -> T:
    return e.transpose(x, [0, 2, 3, 1])


def _back(e: Emitter, y: T, out_shape: Sequence) -> T:
    """NHWC result -> the ONNX layout (NCHW, or NCW for 1-D)."""
    y = e.transpose(y, [0, 3, 1, 2], result=None if len(out_shape) == 3 else e.result_name())
    if len(out_shape) == 3:
        y = e.reshape(y, out_shape, result=e.result_name())
    return y


class _ConvWeight:
    """A Conv's weight (OIHW; a 1-D one's OIW as OI1W) made into the layout a TOSA
    convolution takes: a constant transposed at emission time, else by TOSA ops."""

    def __init__(self, e: Emitter, w_const: Optional[np.ndarray], w_shape: Tuple, dtype: str, one_d: bool):
        self.e, self.dtype, self.one_d = e, dtype, one_d
        self.array = None if w_const is None else np.asarray(w_const)
        if self.array is not None and one_d:
            self.array = self.array.reshape(w_shape[0], w_shape[1], 1, w_shape[2])

    def __call__(self, perm, o_slice: Optional[slice] = None, reshape=None) -> T:
        """The weight (its output channels ``o_slice``, reshaped), permuted by ``perm``."""
        e = self.e
        if self.array is not None:
            arr = self.array if o_slice is None else self.array[o_slice]
            if reshape is not None:
                arr = arr.reshape(reshape)
            return e.const(np.transpose(arr, perm), self.dtype)
        w = e.input(1)
        w = e.reshape(w, w.shape[:2] + (1,) + w.shape[2:]) if self.one_d else w
        if o_slice is not None:
            start = [o_slice.start, 0, 0, 0]
            w = e.slice(w, start, [o_slice.stop - o_slice.start] + list(w.shape[1:]))
        if reshape is not None:
            w = e.reshape(w, reshape)
        return e.transpose(w, perm)


@LOWERINGS.register("Conv")
def _conv(e: Emitter, node: Node) -> List[T]:
    x = e.input(0)
    dtype, out_shape = e.out_type()
    if dtype not in ("float", "float16", "bfloat16"):
        raise Unsupported(f"{dtype} convolution (only float ones)")
    w_val = node.inputs[1]
    w_shape = tuple(w_val.type.shape) if w_val.type.shape is not None else None
    if w_shape is None or not static(w_shape):
        raise Unsupported("the weight's shape must be static")
    kernel = list(attr(node, "kernel_shape", w_shape[2:]))
    group = int(attr(node, "group", 1))
    one_d = x.rank == 3
    if x.rank not in (3, 4):
        raise Unsupported(f"{x.rank - 2}-D convolution (only 1-D and 2-D)")
    out4 = tuple(out_shape) if not one_d else (out_shape[0], out_shape[1], 1, out_shape[2])
    x, win = _window(e, x, kernel, out_shape[2:])
    xh = _nhwc(e, _to_2d(e, x))
    m = w_shape[0]
    weight = _ConvWeight(e, e.const_of(w_val), w_shape, x.dtype, one_d)
    bias = e.input(2) if e.has_input(2) else e.shared_const(0.0, x.dtype, (m,))
    zp = e.zp(x.dtype)
    attrs = {"pad": i64_array(win.pad), "stride": i64_array(win.stride), "dilation": i64_array(win.dilation),
             "acc_type": _acc_type(x.dtype)}
    out_nhwc = (xh.shape[0], out4[2], out4[3], m)
    c_in = xh.shape[3]
    if group == 1:
        y = e.op("tosa.conv2d", [xh, weight([0, 2, 3, 1]), bias, zp, zp], x.dtype, out_nhwc, attrs)
    elif isinstance(c_in, int) and group == c_in and m % c_in == 0:
        w = weight([2, 3, 0, 1], reshape=(c_in, m // c_in) + tuple(kernel if not one_d else [1] + kernel))
        y = e.op("tosa.depthwise_conv2d", [xh, w, bias, zp, zp], x.dtype, out_nhwc, attrs)
    else:
        y = _grouped_conv(e, xh, weight, bias, group, out_nhwc, attrs)
    return [_back(e, y, out_shape)]


def _grouped_conv(e: Emitter, xh: T, weight: _ConvWeight, bias: T, group: int, out_nhwc: Tuple,
                  attrs: dict) -> T:
    """A convolution of ``group`` groups (not depthwise): one tosa.conv2d per group, on
    its slice of the input channels, concatenated along the channels."""
    c_in, m = xh.shape[3], out_nhwc[3]
    if not isinstance(c_in, int) or c_in % group or m % group:
        raise Unsupported(f"group={group} with {c_in} input channels")
    ci, co = c_in // group, m // group
    zp = e.zp(xh.dtype)
    parts = []
    for g in range(group):
        xg = e.slice(xh, [0, 0, 0, g * ci], list(xh.shape[:3]) + [ci])
        bg = e.slice(bias, [g * co], [co]) if bias.shape[0] == m else bias
        wg = weight([0, 2, 3, 1], o_slice=slice(g * co, (g + 1) * co))
        parts.append(e.op("tosa.conv2d", [xg, wg, bg, zp, zp], xh.dtype, out_nhwc[:3] + (co,), attrs))
    return e.concat(parts, 3)


@LOWERINGS.register("MaxPool", "AveragePool")
def _pool(e: Emitter, node: Node) -> List[Optional[T]]:
    if node.op_type == "MaxPool" and e.used(1):
        raise Unsupported("its Indices output is used")
    x = e.input(0)
    dtype, out_shape = e.out_type()
    kernel = list(attr(node, "kernel_shape"))
    if any(d != 1 for d in attr(node, "dilations", [1] * len(kernel))):
        raise Unsupported("dilated pooling")
    one_d = x.rank == 3
    if not one_d and x.rank != 4:
        raise Unsupported(f"{x.rank - 2}-D pooling (only 1-D and 2-D)")
    include_pad = node.op_type == "AveragePool" and attr(node, "count_include_pad", 0)
    x, win = _window(e, x, kernel, out_shape[2:])
    x4 = _to_2d(e, x)
    xh = _nhwc(e, x4)
    oh, ow = (1, out_shape[2]) if one_d else (out_shape[2], out_shape[3])
    if include_pad and any(win.pad):
        # the declared pads count in the average (TOSA's do not): pad with zeros explicitly;
        # what ceil_mode adds beyond them stays out of the count, as in onnxruntime
        ends = [min(win.pad[1], win.declared_end[0]), min(win.pad[3], win.declared_end[1])]
        xh = tosa_pad(e, xh, [(0, 0), (win.pad[0], ends[0]), (win.pad[2], ends[1]), (0, 0)], 0.0)
        win.pad = [0, win.pad[1] - ends[0], 0, win.pad[3] - ends[1]]
    attrs = {"kernel": i64_array(win.kernel), "stride": i64_array(win.stride), "pad": i64_array(win.pad)}
    shape = (xh.shape[0], oh, ow, xh.shape[3])
    if node.op_type == "MaxPool":
        y = e.op("tosa.max_pool2d", [xh], x.dtype, shape, attrs)
    else:
        zp = e.zp(x.dtype)
        attrs["acc_type"] = _acc_type(x.dtype)
        y = e.op("tosa.avg_pool2d", [xh, zp, zp], x.dtype, shape, attrs)
    return [_back(e, y, out_shape)] + [None] * (len(node.outputs) - 1)

