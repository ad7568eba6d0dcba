"""ONNX shape inference as the bounded helper runs it (``importers.onnx._infer``): a
module of its own that imports only onnx, so that the helper, a fresh interpreter,
is ready for it in the time onnx takes to import."""

from __future__ import annotations

import onnx
import onnx.shape_inference


def infer_here(serialized: bytes, data_prop: bool = True) -> bytes:
    """``_infer``'s work, in the helper: the inferred model's bytes after a tag: ``+``
    with data propagation, ``m`` without it after it ran out of memory, ``0`` without it
    after it failed, ``-`` for none."""
    tag, model = b"0", None
    if data_prop:
        try:
            tag, model = b"+", infer_bytes(serialized, True)
        except MemoryError:
            tag, model = b"m", None
        except Exception:  # noqa: BLE001 - inference is best effort; the verifier judges shapes
            tag, model = b"0", None
    if model is None:
        try:
            model = infer_bytes(serialized, False)
        except Exception:  # noqa: BLE001
            return b"-"
    return tag + model


def infer_bytes(serialized: bytes, data_prop: bool) -> bytes:
    """The serialized model ``onnx.shape_inference.infer_shapes`` makes of ``serialized``,
    not parsed back into a ModelProto (its C function, where this onnx has it)."""
    c_infer = getattr(getattr(onnx.shape_inference, "C", None), "infer_shapes", None)
    if c_infer is None:
        return onnx.shape_inference.infer_shapes(serialized, check_type=False, strict_mode=False,
                                                 data_prop=data_prop).SerializeToString()
    return c_infer(serialized, False, False, data_prop)
