"""ONNX shape inference as the bounded helper runs it (``kinds.onnx.importer._infer``): a
module of its own that imports none of onnx's Python package, only onnx's C extension
that does the work, so that the helper, a fresh interpreter, is ready for it at once
(importing onnx takes ten times as long as starting Python)."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from typing import Callable, Optional

_EXTENSION = "onnx.onnx_cpp2py_export"


def _c_infer_shapes() -> Optional[Callable]:
    """onnx's ``infer_shapes(bytes, check_type, strict_mode, data_prop) -> bytes``, from
    its C extension (loaded as the module onnx itself imports, if onnx has not loaded
    it), or None where this onnx has no such function."""
    module = sys.modules.get(_EXTENSION)
    if module is None:
        package = importlib.util.find_spec("onnx")
        locations = package.submodule_search_locations if package is not None else None
        spec = importlib.machinery.PathFinder.find_spec(_EXTENSION, locations) if locations else None
        if spec is None:
            return None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[_EXTENSION] = module
    return getattr(getattr(module, "shape_inference", None), "infer_shapes", None)


def infer_here(serialized: bytes, data_prop: bool = True) -> bytes:
    """``_infer``'s work, in the helper: the inferred model's bytes after a tag: ``+``
    with data propagation, ``m`` without it after it ran out of memory, ``0`` without it
    after it failed; ``M`` alone where it ran out of memory without it too, ``-`` where
    it failed."""
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
        except MemoryError:  # the bound, not the model: the caller says so
            return b"M"
        except Exception:  # noqa: BLE001
            return b"-"
    return tag + model


def infer_bytes(serialized: bytes, data_prop: bool) -> bytes:
    """The serialized model ``onnx.shape_inference.infer_shapes`` makes of ``serialized``,
    not parsed back into a ModelProto (its C function, where this onnx has it)."""
    c_infer = _c_infer_shapes()
    if c_infer is None:
        import onnx.shape_inference

        return onnx.shape_inference.infer_shapes(serialized, check_type=False, strict_mode=False,
                                                 data_prop=data_prop).SerializeToString()
    return c_infer(serialized, False, False, data_prop)
