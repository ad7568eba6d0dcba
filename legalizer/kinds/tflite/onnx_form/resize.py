"""RESIZE_BILINEAR and RESIZE_NEAREST_NEIGHBOR: ONNX's Resize over the NHWC H and W axes."""

from __future__ import annotations

from .emitter import NoForm, option
from .registry import op


# tflite ResizeBilinear/NearestNeighborOptions -> ONNX Resize's coordinate transformation.
# TFLite maps output pixel x to input x * scale (scale = in / out); align_corners uses
# (in - 1) / (out - 1); half_pixel_centers (x + 0.5) * scale - 0.5 for bilinear and
# (x + 0.5) * scale for nearest, which half_pixel followed by rounding half up gives.
# TFLite rounds nearest neighbours down, and half away from zero with align_corners.
@op("RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR")
def _resize(e, n):
    x, size = n.inputs[:2]
    align, half = bool(option(n, "align_corners", False)), bool(option(n, "half_pixel_centers", False))
    if align and half:
        raise NoForm("align_corners with half_pixel_centers")  # LiteRT refuses it too
    if x.type.rank != 4:
        raise NoForm("not 4-D")
    attrs = {"coordinate_transformation_mode": "align_corners" if align else "half_pixel" if half else "asymmetric",
             "axes": [1, 2]}  # NHWC: H and W
    if n.op_type == "RESIZE_BILINEAR":
        attrs["mode"] = "linear"
    else:
        attrs.update(mode="nearest", nearest_mode="round_prefer_ceil" if align or half else "floor")
    return [e.emit("Resize", [e.real(x), "", "", e.index(size)], **attrs)]

