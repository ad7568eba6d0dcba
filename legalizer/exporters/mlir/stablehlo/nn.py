"""StableHLO lowerings of ONNX's neural-network ops: contractions (MatMul, Gemm),
convolution and pooling, normalizations, reductions, quantization. Broadcasts an op's
own semantics make (a Conv bias along the channels, MatMul's batch dims) are written
out here, the runtime ones asserted."""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

from ....ir.graph import Node
from ..onnx_attrs import axis_index, softmax_axes
from ..printer import int_list, is_float
from ..registry import Unsupported, rule_op_names
from .emitter import LOWERINGS, TT, Emitter, RDim, arg, dims_equal, has_input, np_type, result_type
from ....ir.types import all_static


def _dot(cx: Emitter, a: str, b: str, contracting: Tuple[int, int], batching: int, out: TT) -> str:
    batch = f"batching_dims = {int_list(range(batching))} x {int_list(range(batching))}, " if batching else ""
    return cx.emit(f"stablehlo.dot_general {a}, {b}, {batch}contracting_dims = [{contracting[0]}] x"
                   f" [{contracting[1]}] : ({cx.tt(a)}, {cx.tt(b)}) -> {out}", out)


@LOWERINGS.register("MatMul")
def _matmul(cx: Emitter, node: Node):
    a, b, out = arg(cx, node, 0), arg(cx, node, 1), result_type(node)
    ta, tb = cx.tt(a), cx.tt(b)
    ra, rb = ta.rank, tb.rank
    if ra == 1 or rb == 1 or ra == 2:
        # One side has no batch dims: a plain contraction, whose free dims come out as
        # lhs-free then rhs-free. Only a 2-D lhs with a batched rhs needs a transpose.
        lc, rc = ra - 1, (0 if rb == 1 else rb - 2)
        if ra == 2 and rb >= 3:
            nb = rb - 2
            mid = out.with_dims([out.dims[nb]] + list(out.dims[:nb]) + [out.dims[nb + 1]])
            r = _dot(cx, a, b, (lc, rc), 0, mid)
            perm = list(range(1, nb + 1)) + [0, nb + 1]
            return [cx.emit(f"stablehlo.transpose {r}, dims = {int_list(perm)} : ({mid}) -> {out}", out)]
        return [_dot(cx, a, b, (lc, rc), 0, out)]
    if rb == 2:
        return [_dot(cx, a, b, (ra - 1, 0), 0, out)]
    # Both batched: the batch dims broadcast (numpy rules) - made explicit here, then
    # dot_general with batching dims.
    nb = out.rank - 2
    batch: List[RDim] = []
    for k in range(nb):
        ka, kb = k - (nb - (ra - 2)), k - (nb - (rb - 2))
        if ka < 0:
            batch.append(cx.rdim(b, kb))
        elif kb < 0:
            batch.append(cx.rdim(a, ka))
        else:
            batch.append(cx.broadcast_rdim((a, ka), (b, kb), f"MatMul '{node.label}' batch dim {k}"))
    ops = []
    for x, t in ((a, ta), (b, tb)):
        full = t.with_dims(list(out.dims[:nb]) + list(t.dims[-2:]))
        same = t.rank == out.rank and all(dims_equal(p, q) for p, q in zip(t.dims[:nb], out.dims[:nb]))
        if same:
            ops.append(x)
            continue
        rd = None if full.static else batch + [cx.rdim(x, t.rank - 2), cx.rdim(x, t.rank - 1)]
        ops.append(cx.broadcast(x, full, list(range(out.rank - t.rank, out.rank)), rd))
    return [_dot(cx, ops[0], ops[1], (out.rank - 1, out.rank - 2), nb, out)]


@LOWERINGS.register("Gemm")
def _gemm(cx: Emitter, node: Node):
    a, b, out = arg(cx, node, 0), arg(cx, node, 1), result_type(node)
    ta, tb = cx.attr(node, "transA", 0), cx.attr(node, "transB", 0)
    alpha, beta = cx.attr(node, "alpha", 1.0), cx.attr(node, "beta", 1.0)
    y = _dot(cx, a, b, (0 if ta else 1, 1 if tb else 0), 0, out)
    if alpha != 1.0:
        y = cx.op("stablehlo.multiply", [y, cx.splat_like(alpha, y)], out)
    if has_input(node, 2):
        c = node.inputs[2]  # the result's shape: checked by _no_implicit_broadcast
        cv = cx.v(c)
        if beta != 1.0:
            cv = cx.op("stablehlo.multiply", [cv, cx.splat_like(beta, cv)], cx.tt(cv))
        y = cx.op("stablehlo.add", [y, cv], out)
    return [y]


# ---- convolution and pooling ---------------------------------------------------------------

def _spatial(cx: Emitter, node: Node, x: str, kernel: Sequence[int], out: TT):
    """(strides, dilations, [(pad_lo, pad_hi)]) of a Conv/pool node; auto_pad is
    resolved against the static input dims."""
    n = len(kernel)
    strides = list(cx.attr(node, "strides", [1] * n))
    dilations = list(cx.attr(node, "dilations", [1] * n))
    pads = list(cx.attr(node, "pads", [0] * (2 * n)))
    auto = cx.attr(node, "auto_pad", "NOTSET")
    padding = [(pads[i], pads[i + n]) for i in range(n)]
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        padding = []
        for i in range(n):
            d = cx.tt(x).dims[2 + i]
            if not isinstance(d, int):
                raise Unsupported(f"auto_pad {auto} on a dynamic spatial dim")
            o = -(-d // strides[i])
            total = max(0, (o - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - d)
            small, big = total // 2, total - total // 2
            padding.append((small, big) if auto == "SAME_UPPER" else (big, small))
    elif auto == "VALID":
        padding = [(0, 0)] * n
    return strides, dilations, padding


def _dim_numbers(n: int) -> str:
    sp = ", ".join(str(i) for i in range(n))
    return f"[b, f, {sp}]x[o, i, {sp}]->[b, f, {sp}]"


@LOWERINGS.register("Conv")
def _conv(cx: Emitter, node: Node):
    x, w, out = arg(cx, node, 0), arg(cx, node, 1), result_type(node)
    wt = cx.tt(w)
    kernel = cx.attr(node, "kernel_shape") or list(wt.dims[2:])
    if not all(isinstance(k, int) for k in kernel):
        raise Unsupported("dynamic kernel shape")
    strides, dilations, padding = _spatial(cx, node, x, kernel, out)
    group = cx.attr(node, "group", 1)
    pad = "[" + ", ".join(f"[{a}, {b}]" for a, b in padding) + "]"
    y = cx.emit(f"stablehlo.convolution({x}, {w}) dim_numbers = {_dim_numbers(len(kernel))},"
                f" window = {{stride = {int_list(strides)}, pad = {pad}, rhs_dilate = {int_list(dilations)}}}"
                f" {{batch_group_count = 1 : i64, feature_group_count = {group} : i64}}"
                f" : ({cx.tt(x)}, {wt}) -> {out}", out)
    if has_input(node, 2):
        # The bias lies along the channel dim: the op's own broadcast, written out.
        bias = cx.broadcast(arg(cx, node, 2), out, [1], None if out.static else cx.rdims(y))
        y = cx.op("stablehlo.add", [y, bias], out)
    return [y]


def _ceil_extra(x_dims, out: TT, kernel, strides, dilations, padding):
    """Extra high padding so a ceil_mode pool makes the output size the IR says."""
    extra = []
    for i, k in enumerate(kernel):
        d, o = x_dims[2 + i], out.dims[2 + i]
        if not (isinstance(d, int) and isinstance(o, int)):
            raise Unsupported("ceil_mode with dynamic spatial dims")
        lo, hi = padding[i]
        need = (o - 1) * strides[i] + (k - 1) * dilations[i] + 1 - (d + lo + hi)
        extra.append(max(0, need))
    return extra


def _pool_window(cx: Emitter, node: Node, x: str, out: TT):
    kernel = list(cx.attr(node, "kernel_shape"))
    strides, dilations, padding = _spatial(cx, node, x, kernel, out)
    extra = [0] * len(kernel)
    if cx.attr(node, "ceil_mode", 0):
        extra = _ceil_extra(cx.tt(x).dims, out, kernel, strides, dilations, padding)
    return kernel, strides, dilations, padding, extra


@LOWERINGS.register("MaxPool")
def _maxpool(cx: Emitter, node: Node):
    if len(node.outputs) > 1 and node.outputs[1] is not None and node.graph.users(node.outputs[1]):
        raise Unsupported("Indices output")
    x, out = arg(cx, node, 0), result_type(node)
    kernel, strides, dilations, padding, extra = _pool_window(cx, node, x, out)
    elem = out.elem
    init = cx.scalar(-np.inf, elem)
    pads = [(0, 0), (0, 0)] + [(lo, hi + e) for (lo, hi), e in zip(padding, extra)]
    return [cx.reduce_window(x, init, "stablehlo.maximum", [1, 1] + kernel, [1, 1] + strides,
                             [1, 1] + dilations, pads, out)] + [None] * (len(node.outputs) - 1)


@LOWERINGS.register("AveragePool")
def _avgpool(cx: Emitter, node: Node):
    x, out = arg(cx, node, 0), result_type(node)
    kernel, strides, dilations, padding, extra = _pool_window(cx, node, x, out)
    pads = [(0, 0), (0, 0)] + [(lo, hi + e) for (lo, hi), e in zip(padding, extra)]
    s = cx.reduce_window(x, cx.scalar(0, out.elem), "stablehlo.add", [1, 1] + kernel, [1, 1] + strides,
                         [1, 1] + dilations, pads, out)
    if not any(lo or hi for lo, hi in padding) and not any(extra):
        return [cx.op("stablehlo.divide", [s, cx.splat_like(float(np.prod(kernel)), s)], out)]
    # With padding, each window's divisor is how many of its cells count: input cells,
    # plus the explicit pads with count_include_pad, never the ceil_mode extra. Known
    # at compile time from the static spatial dims.
    xd = cx.tt(x).dims[2:]
    if not all_static(list(xd) + list(out.dims[2:])):
        raise Unsupported("padding with dynamic spatial dims")
    include = cx.attr(node, "count_include_pad", 0)
    counts = np.ones(xd, np.float64)
    counts = np.pad(counts, [(lo, hi) for lo, hi in padding], constant_values=1.0 if include else 0.0)
    counts = np.pad(counts, [(0, e) for e in extra])
    div = np.zeros(out.dims[2:], np.float64)
    for o in np.ndindex(*div.shape):
        sl = tuple(slice(o[i] * strides[i], o[i] * strides[i] + (kernel[i] - 1) * dilations[i] + 1, dilations[i])
                   for i in range(len(kernel)))
        div[o] = counts[sl].sum()
    np_dt = np_type(out.elem) if out.elem != "bf16" else np.float32
    dtt = TT(out.elem, tuple(div.shape))
    d = cx.const(div.astype(np_dt), dtt, "divisor")
    rd = None if out.static else cx.rdims(s)
    return [cx.op("stablehlo.divide", [s, cx.broadcast(d, out, list(range(2, out.rank)), rd)], out)]


@LOWERINGS.register("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(cx: Emitter, node: Node):
    x, out = arg(cx, node, 0), result_type(node)
    src = cx.tt(x)
    axes = list(range(2, src.rank))
    red = TT(src.elem, src.dims[:2])
    if node.op == "GlobalMaxPool":
        r = cx.reduce(x, cx.scalar(-np.inf, src.elem), "stablehlo.maximum", axes, red)
    else:
        r = cx.reduce(x, cx.scalar(0, src.elem), "stablehlo.add", axes, red)
        n = cx.product([cx.rdim(x, k) for k in axes])
        nb = cx.broadcast(cx.rdim_scalar(n, src.elem), red, [], None if red.static else cx.rdims(r))
        r = cx.op("stablehlo.divide", [r, nb], red)
    rd = None if out.static else [cx.rdim(x, 0), cx.rdim(x, 1)] + [1] * len(axes)
    return [cx.reshape(r, out, rd)]


@LOWERINGS.register("LRN")
def _lrn(cx: Emitter, node: Node):
    # y = x / (bias + alpha/size * sum of x^2 over a window of channels)^beta
    x, out = arg(cx, node, 0), result_type(node)
    t = cx.tt(x)
    size = cx.attr(node, "size")
    alpha, beta, bias = cx.attr(node, "alpha", 1e-4), cx.attr(node, "beta", 0.75), cx.attr(node, "bias", 1.0)
    sq = cx.op("stablehlo.multiply", [x, x], t)
    window = [1] * t.rank
    window[1] = size
    pads = [(0, 0)] * t.rank
    pads[1] = ((size - 1) // 2, size - 1 - (size - 1) // 2)
    s = cx.reduce_window(sq, cx.scalar(0, t.elem), "stablehlo.add", window, [1] * t.rank, [1] * t.rank, pads, t)
    base = cx.op("stablehlo.add", [cx.splat_like(bias, s), cx.op("stablehlo.multiply",
                                                                 [s, cx.splat_like(alpha / size, s)], t)], t)
    den = cx.op("stablehlo.power", [base, cx.splat_like(beta, s)], t)
    return [cx.op("stablehlo.divide", [x, den], out)]


# ---- normalizations and reductions ------------------------------------------------------------

def _reduce_keep(cx: Emitter, x: str, axes: Sequence[int], init, body: str) -> Tuple[str, TT]:
    src = cx.tt(x)
    red = src.with_dims([d for k, d in enumerate(src.dims) if k not in axes])
    return cx.reduce(x, cx.scalar(init, src.elem), body, axes, red), red


def _back(cx: Emitter, r: str, x: str, axes: Sequence[int]) -> str:
    """A reduction's result broadcast back over the reduced ``axes`` of ``x``."""
    src = cx.tt(x)
    kept = [k for k in range(src.rank) if k not in axes]
    return cx.broadcast(r, src, kept, None if src.static else cx.rdims(x))


def _count(cx: Emitter, x: str, axes: Sequence[int], elem: str) -> str:
    return cx.rdim_scalar(cx.product([cx.rdim(x, k) for k in axes]), elem)


@LOWERINGS.register("Softmax", "LogSoftmax")
def _softmax(cx: Emitter, node: Node):
    x, out = arg(cx, node, 0), result_type(node)
    t = cx.tt(x)
    axes = softmax_axes(cx.graph, node, t.rank)
    m, _ = _reduce_keep(cx, x, axes, -np.inf, "stablehlo.maximum")
    shifted = cx.op("stablehlo.subtract", [x, _back(cx, m, x, axes)], t)
    e = cx.op("stablehlo.exponential", [shifted], t)
    s, _ = _reduce_keep(cx, e, axes, 0, "stablehlo.add")
    if node.op == "LogSoftmax":
        ls = cx.op("stablehlo.log", [s], cx.tt(s))
        return [cx.op("stablehlo.subtract", [shifted, _back(cx, ls, x, axes)], out)]
    return [cx.op("stablehlo.divide", [e, _back(cx, s, x, axes)], out)]


# Each reduction's binary ONNX op and its identity; the body's StableHLO op is the
# binary op's, as rules/onnx.toml names it.
_REDUCE = {"ReduceSum": ("Add", 0), "ReduceMean": ("Add", 0), "ReduceMax": ("Max", -np.inf),
           "ReduceMin": ("Min", np.inf), "ReduceProd": ("Mul", 1)}
_BODY = rule_op_names("stablehlo", {binary for binary, _ in _REDUCE.values()})


@LOWERINGS.register(*_REDUCE)
def _reduce_op(cx: Emitter, node: Node):
    x, out = arg(cx, node, 0), result_type(node)
    t = cx.tt(x)
    axes = cx.ints_arg(node, "axes", 1)
    if not axes:
        if cx.attr(node, "noop_with_empty_axes", 0):
            return [x]
        axes = list(range(t.rank))
    axes = sorted({axis_index(a, t.rank) for a in axes})
    binary, init = _REDUCE[node.op]
    r, red = _reduce_keep(cx, x, axes, init, _BODY[binary])
    if node.op == "ReduceMean":
        n = cx.broadcast(_count(cx, x, axes, t.elem), red, [], None if red.static else cx.rdims(r))
        r = cx.op("stablehlo.divide", [r, n], red)
    if out.rank == red.rank:
        return [cx.reshape(r, out)] if red != out else [r]
    rd = None if out.static else [1 if k in axes else cx.rdim(x, k) for k in range(t.rank)]
    return [cx.reshape(r, out, rd)]


@LOWERINGS.register("LayerNormalization")
def _layer_norm(cx: Emitter, node: Node):
    x, out = arg(cx, node, 0), result_type(node)
    t = cx.tt(x)
    axis = axis_index(cx.attr(node, "axis", -1), t.rank)
    eps = cx.attr(node, "epsilon", 1e-5)
    axes = list(range(axis, t.rank))
    n = _count(cx, x, axes, t.elem)
    s, red = _reduce_keep(cx, x, axes, 0, "stablehlo.add")
    mean = cx.op("stablehlo.divide", [s, cx.broadcast(n, red, [], None if red.static else cx.rdims(s))], red)
    xc = cx.op("stablehlo.subtract", [x, _back(cx, mean, x, axes)], t)
    v, _ = _reduce_keep(cx, cx.op("stablehlo.multiply", [xc, xc], t), axes, 0, "stablehlo.add")
    var = cx.op("stablehlo.divide", [v, cx.broadcast(n, red, [], None if red.static else cx.rdims(v))], red)
    inv = cx.op("stablehlo.rsqrt", [cx.op("stablehlo.add", [var, cx.splat_like(eps, var)], red)], red)
    y = cx.op("stablehlo.multiply", [xc, _back(cx, inv, x, axes)], t)
    # Scale and bias span the normalized dims (right-aligned): the op's own broadcast.
    rd = None if t.static else cx.rdims(x)
    for i, name in ((1, "stablehlo.multiply"), (2, "stablehlo.add")):
        if has_input(node, i):
            p = arg(cx, node, i)
            pr = cx.tt(p).rank
            y = cx.op(name, [y, cx.broadcast(p, t, list(range(t.rank - pr, t.rank)), rd)], t)
    if t != out:
        y = cx.emit(f"stablehlo.convert {y} : ({t}) -> {out}", out)
    # Mean and InvStdDev keep the normalized dims as 1s.
    extra = []
    for o, v in zip(node.outputs[1:], (mean, inv)):
        if not o.name or not node.graph.users(o):
            extra.append(None)
            continue
        ot = TT.of(o)
        rd = None if ot.static else [cx.rdim(x, k) if k < axis else 1 for k in range(t.rank)]
        extra.append(cx.reshape(cx.convert(v, ot.elem), ot, rd))
    return [y] + extra


@LOWERINGS.register("BatchNormalization")
def _batch_norm(cx: Emitter, node: Node):
    if cx.attr(node, "training_mode", 0) or any(o is not None and node.graph.users(o) for o in node.outputs[1:]):
        raise Unsupported("training mode")
    if cx.attr(node, "spatial", 1) != 1:
        raise Unsupported("spatial=0")
    x, out = arg(cx, node, 0), result_type(node)
    t = cx.tt(x)
    scale, bias, mean, var = (arg(cx, node, i) for i in range(1, 5))
    eps = cx.attr(node, "epsilon", 1e-5)
    # Per channel: a = scale / sqrt(var + eps), b = bias - mean * a; then y = x * a + b
    # with a and b along dim 1.
    pt = cx.tt(scale)
    a = cx.op("stablehlo.multiply", [scale, cx.op("stablehlo.rsqrt", [
        cx.op("stablehlo.add", [var, cx.splat_like(eps, var)], pt)], pt)], pt)
    b = cx.op("stablehlo.subtract", [bias, cx.op("stablehlo.multiply", [mean, a], pt)], pt)
    rd = None if t.static else cx.rdims(x)
    y = cx.op("stablehlo.multiply", [x, cx.broadcast(a, t, [1], rd)], t)
    return [cx.op("stablehlo.add", [y, cx.broadcast(b, t, [1], rd)], out)] + [None] * (len(node.outputs) - 1)


@LOWERINGS.register("DequantizeLinear")
def _dequantize(cx: Emitter, node: Node):
    # y = (x - zero_point) * scale, in the scale's float type
    x, out = arg(cx, node, 0), result_type(node)
    if cx.attr(node, "block_size", 0):
        raise Unsupported("blocked quantization")
    xf = cx.convert(x, out.elem)
    t = cx.tt(xf)
    rd = None if cx.tt(x).static else cx.rdims(x)
    scale = _quant_param(cx, node, 1, t, rd)
    zp = _quant_param(cx, node, 2, t, rd)
    if zp is not None:
        xf = cx.op("stablehlo.subtract", [xf, zp], t)
    return [cx.op("stablehlo.multiply", [xf, scale], out)]


@LOWERINGS.register("QuantizeLinear")
def _quantize(cx: Emitter, node: Node):
    # y = saturate(round_half_to_even(x / scale) + zero_point), in the integer type
    x, out = arg(cx, node, 0), result_type(node)
    if cx.attr(node, "block_size", 0) or is_float(out.elem):
        raise Unsupported("blocked or float8 quantization")
    t = cx.tt(x)
    rd = None if cx.tt(x).static else cx.rdims(x)
    # The quotient in f64, rounded once to f32: XLA turns a division by a constant into a
    # product with its reciprocal, which in f32 may cross a rounding tie that ONNX's
    # division does not (requantized values sit near ties); in f64 it lands where x / s does.
    wide = t.with_elem("f64") if t.elem in ("f32", "f16", "bf16") else t
    q = cx.op("stablehlo.divide", [cx.convert(x, wide.elem), _quant_param(cx, node, 1, wide, rd)], wide)
    q = cx.op("stablehlo.round_nearest_even", [cx.convert(q, t.elem)], t)
    zp = _quant_param(cx, node, 2, t, rd)
    if zp is not None:
        q = cx.op("stablehlo.add", [q, zp], t)
    info = np.iinfo(np_type(out.elem))
    q = cx.emit(f"stablehlo.clamp {cx.scalar(info.min, t.elem)}, {q}, {cx.scalar(info.max, t.elem)}"
                f" : (tensor<{t.elem}>, {t}, tensor<{t.elem}>) -> {t}", t)
    return [cx.convert(q, out.elem)]


def _quant_param(cx: Emitter, node: Node, i: int, like: TT, rd) -> Optional[str]:
    """Operand ``i`` (a scale or zero point: a scalar, or 1-D along ``axis``) converted
    to ``like``'s element type and broadcast to its shape: the op's own broadcast."""
    if not has_input(node, i):
        return None
    p = cx.convert(arg(cx, node, i), like.elem)
    pt = cx.tt(p)
    if pt.rank == 1 and pt.dims[0] == 1:
        p, pt = cx.reshape(p, TT(like.elem, ())), TT(like.elem, ())
    if pt.rank > 1:
        raise Unsupported("blocked quantization")
    bdims = [] if pt.rank == 0 else [axis_index(cx.attr(node, "axis", 1), like.rank)]
    return cx.broadcast(p, like, bdims, rd)


@LOWERINGS.register("Constant")
def _constant(cx: Emitter, node: Node):
    # A Constant with a tensor or number is known at compile time (see ``_fold``); what
    # reaches here holds a sparse tensor or strings.
    raise Unsupported("sparse or string value")

