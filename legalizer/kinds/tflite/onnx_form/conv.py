"""NHWC convolutions, pools and block moves: computed in NCHW inside (Transpose, the
ONNX op, Transpose back); transposed convolutions, MediaPipe's custom one included."""

from __future__ import annotations

from functools import partial
from typing import List, Optional, Sequence, Tuple

import numpy as np

from ....ir.graph import Node, Value
from .emitter import Emitter, NoForm, const_data, operand, option, static_sizes
from .quantization import real_bias
from .registry import custom_op, op
from ....ir.types import all_static

_SAME, _VALID = 0, 1  # tflite.Padding
_TFLITE_SAME, _TFLITE_VALID = 1, 2  # TfLitePadding, as a custom op's C struct holds it
_TO_NCHW, _TO_NHWC = [0, 3, 1, 2], [0, 2, 3, 1]


def _padding_and_strides(n: Node) -> Tuple[int, List[int]]:
    padding = option(n, "padding")
    if padding not in (_SAME, _VALID):
        raise NoForm(f"padding {padding}")
    return padding, [int(option(n, "stride_h", 1)), int(option(n, "stride_w", 1))]


def _check_4d(x: Value, w: Value) -> None:
    if x.type.rank != 4 or w.type.shape is None or len(w.type.shape) != 4:
        raise NoForm("not 4-D")



def _window(n: Node, x: Value, kernel: Sequence[int], dilations: Sequence[int]) -> dict:
    """The ONNX attributes shared by conv and pool: strides and padding. TFLite's SAME
    puts the odd padding at the end, as SAME_UPPER does; explicit pads where the
    spatial dims are known, since onnxruntime has no SAME_UPPER with dilation."""
    padding, strides = _padding_and_strides(n)
    attrs = {"strides": strides}
    sizes = x.type.shape[1:3] if x.type.rank == 4 else (None, None)
    if padding == _VALID:
        attrs["pads"] = [0, 0, 0, 0]
    elif all_static(sizes):
        before, after = [], []
        for size, k, s, d in zip(sizes, kernel, strides, dilations):
            total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
            before.append(total // 2)
            after.append(total - total // 2)
        attrs["pads"] = before + after
    elif any(d != 1 for d in dilations):
        raise NoForm("SAME padding with dilation on dynamic spatial dims")
    else:
        attrs["auto_pad"] = "SAME_UPPER"
    return attrs


def _nchw(e: Emitter, op_type: str, x: str, extra: Sequence[str], **attrs) -> str:
    y = e.emit(op_type, [e.emit("Transpose", [x], perm=_TO_NCHW), *extra], **attrs)
    return e.emit("Transpose", [y], perm=_TO_NHWC)


def _conv(e: Emitter, n: Node, depthwise: bool) -> List[str]:
    x, w, b = n.inputs[0], n.inputs[1], operand(n, 2)
    _check_4d(x, w)
    channels = x.type.shape[3]
    if depthwise:
        # [1, H, W, C*mult] -> [C*mult, 1, H, W]: a conv of C groups, output channel
        # c*mult + m reading input channel c, as TFLite's depthwise does.
        mult = int(option(n, "depth_multiplier", 1)) or 1
        groups = channels if isinstance(channels, int) else w.type.shape[3] // mult
        perm = (3, 0, 1, 2)
    else:
        # OHWI -> OIHW; fewer filter than input channels is a grouped conv.
        if not isinstance(channels, int):
            raise NoForm("unknown input channels")
        groups = channels // w.type.shape[3]
        perm = (0, 3, 1, 2)
    dilations = [int(option(n, "dilation_h_factor", 1)), int(option(n, "dilation_w_factor", 1))]
    attrs = _window(n, x, w.type.shape[1:3], dilations)
    attrs.update(dilations=dilations, group=int(groups))
    return [_nchw(e, "Conv", e.real(x), [e.permuted(w, perm), real_bias(e, b, x, w)], **attrs)]


op("CONV_2D")(partial(_conv, depthwise=False))
op("DEPTHWISE_CONV_2D")(partial(_conv, depthwise=True))


@op("AVERAGE_POOL_2D", "MAX_POOL_2D")
def _pool(e, n):
    kernel = [int(option(n, "filter_height")), int(option(n, "filter_width"))]
    attrs = _window(n, n.inputs[0], kernel, (1, 1))
    attrs["kernel_shape"] = kernel
    if n.op_type == "AVERAGE_POOL_2D":
        attrs["count_include_pad"] = 0  # TFLite averages over the valid cells only
    return [_nchw(e, "AveragePool" if n.op_type == "AVERAGE_POOL_2D" else "MaxPool",
                  e.real(n.inputs[0]), [], **attrs)]


# TFLite's DEPTH_TO_SPACE and SPACE_TO_DEPTH order the block's cells before the
# channels (channel (i * b + j) * C + c), as ONNX's DCR mode (SpaceToDepth has no other).
@op("DEPTH_TO_SPACE", "SPACE_TO_DEPTH")
def _depth_space(e, n):
    if n.inputs[0].type.rank != 4:
        raise NoForm("not 4-D")
    block = int(option(n, "block_size"))
    if n.op_type == "DEPTH_TO_SPACE":
        return [_nchw(e, "DepthToSpace", e.real(n.inputs[0]), [], blocksize=block, mode="DCR")]
    return [_nchw(e, "SpaceToDepth", e.real(n.inputs[0]), [], blocksize=block)]


def _conv_transpose(e: Emitter, x: Value, w: Value, b: Optional[Value], strides: Sequence[int],
                    pads: Sequence[int], out: Sequence[int]) -> str:
    """A transposed conv of NHWC ``x`` by OHWI ``w``, plus ``b``: each input pixel adds
    the filter times itself at (y * stride - pad) of the output, which keeps the ``out``
    cells from there (spatial dims)."""
    sizes = static_sizes(x, (1, 2), "dynamic spatial dims")
    end, extra = [], []
    for size, o, k, s, pad in zip(sizes, out, w.type.shape[1:3], strides, pads):
        cut = s * (size - 1) + k - pad - o  # what the full result has past the output
        if -cut >= s:
            raise NoForm("output larger than the input covers")
        end.append(max(cut, 0))
        extra.append(max(-cut, 0))
    attrs = {"strides": list(strides), "pads": list(pads) + end}
    if any(extra):
        attrs["output_padding"] = extra
    return _nchw(e, "ConvTranspose", e.real(x), [e.permuted(w, (3, 0, 1, 2)), real_bias(e, b, x, w)], **attrs)


@op("TRANSPOSE_CONV")
def _transpose_conv(e, n):
    """TRANSPOSE_CONV(output_shape, weights, x, bias?): the output of the size given, the
    pad the padding of the conv that would map the output back to x."""
    shape, w, x = n.inputs[:3]
    _check_4d(x, w)
    out = const_data(shape)
    out = [int(d) for d in out.reshape(-1)] if out is not None else n.outputs[0].type.shape
    if out is None or not all_static(out[1:3]):
        raise NoForm("dynamic output size")
    padding, strides = _padding_and_strides(n)
    pads = []
    for o, k, s in zip(out[1:3], w.type.shape[1:3], strides):
        forward = -(-o // s) if padding == _SAME else (o - k + s) // s
        pads.append(max((forward - 1) * s + k - o, 0) // 2)
    return [_conv_transpose(e, x, w, operand(n, 3), strides, pads, out[1:3])]


@custom_op("Convolution2DTransposeBias")
def _mediapipe_transpose_conv_bias(e, n):
    """MediaPipe's transposed conv with a bias (its own kernel; XNNPACK's in LiteRT's
    default resolver): options are a TfLiteTransposeConvParams (padding, stride_width,
    stride_height); SAME pads k - (in - 1) % stride - 1 in all, the odd cell at the end,
    and the output is stride * (in - 1) + k less that padding."""
    x, w, b = n.inputs
    _check_4d(x, w)
    raw = n.proto.rest.get("custom_options") if n.proto is not None else None
    params = np.frombuffer(np.asarray(raw, np.uint8).tobytes(), "<i4") if raw is not None else np.zeros(0, "<i4")
    if len(params) < 3 or params[0] not in (_TFLITE_SAME, _TFLITE_VALID) or any(params[3:4]):
        raise NoForm(f"options {params.tolist()}")
    padding, strides = int(params[0]), [int(params[2]), int(params[1])]
    sizes = static_sizes(x, (1, 2), "dynamic spatial dims")
    totals = [max(0, k - (size - 1) % s - 1) if padding == _TFLITE_SAME else 0
              for size, k, s in zip(sizes, w.type.shape[1:3], strides)]
    out = [s * (size - 1) + k - t for size, k, s, t in zip(sizes, w.type.shape[1:3], strides, totals)]
    return [_conv_transpose(e, x, w, b, strides, [t // 2 for t in totals], out)]
