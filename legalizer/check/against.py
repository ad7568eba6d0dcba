"""``--against MODEL``: run a TOSA MLIR module on IREE (CPU) and compare it with the
model it was converted from: a ``.tflite`` on LiteRT, or an ``.onnx`` on onnxruntime.
Arguments and results are matched by position (``@main``'s order is the model's input
and output order); a quantized output may differ by one step. A model with dynamic
input dims is compared per binding of them (a small size, then 1, as the TFLite check),
the module compiled with its arguments bound to each.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Mapping, Optional

import numpy as np

from ..importers.reader import sniff
from ..errors import first_line
from .ort import BindingResult, CheckResult, CheckUnavailable, OutputResult, _random, session, tol_of
from .tflite import SIZES, _compare


def _module_text(path: Path) -> str:
    from ..importers.mlir import BYTECODE_MAGIC, bytecode_to_text

    data = path.read_bytes()
    return bytecode_to_text(data, str(path)) if data.startswith(BYTECODE_MAGIC) else data.decode("utf-8")


class _Reference:
    """The model the module came from: its inputs (name, dtype, shape with -1 for a
    dynamic dim, quantized) and a runner."""

    def __init__(self, path: Path, provider: str):
        self.kind = sniff(path)
        if self.kind == "tflite":
            from .litert import LiteRTModel

            self.model = LiteRTModel(str(path))
            if self.model.unresolved_custom_op():  # as the TFLite check: its default resolver
                self.model = LiteRTModel(str(path), kernels="default")
            specs = self.model.input_specs()
            self.inputs = [(s.name, np.dtype(s.dtype), [d if d >= 0 else -1 for d in s.shape_signature],
                            s.quantization[0] != 0.0) for s in specs]
            self.runtime = "LiteRT"
            self.outputs = self.model.output_names()
        elif self.kind == "onnx":
            from .ort import providers

            self.model = session(str(path), providers(provider))
            self.inputs = [(i.name, np.dtype(_ort_dtype(i.type)),
                            [d if isinstance(d, int) and d >= 0 else -1 for d in i.shape], False)
                           for i in self.model.get_inputs()]
            self.runtime = "onnxruntime"
            self.outputs = [o.name for o in self.model.get_outputs()]
        else:
            raise CheckUnavailable(f"--against takes a .tflite or .onnx model, not {self.kind}")

    def run(self, feeds: Dict[str, np.ndarray]) -> List[np.ndarray]:
        if self.kind == "tflite":
            return list(self.model.run(feeds).values())
        return self.model.run(None, feeds)


def _ort_dtype(type_str: str) -> str:
    name = type_str[len("tensor("):-1]
    return {"float": "float32", "double": "float64"}.get(name, name)


def _bindings(ref: _Reference, given: Mapping[str, np.ndarray], fixed: Mapping[str, int]) -> List[Dict[str, int]]:
    """The sizes of the reference's dynamic input dims (``name[axis]``) to run at: as
    the TFLite check, a small size, then 1; ``--dim`` fixes a dim; a given input its own."""
    keys = [f"{name}[{a}]" for name, _, shape, _ in ref.inputs if name not in given
            for a, d in enumerate(shape) if d < 0]
    if not keys:
        return [{}]
    return [{k: int(fixed.get(k, size)) for k in keys} for size in SIZES
            if size != SIZES[-1] or any(k not in fixed for k in keys)]


def _feeds(ref: _Reference, binding: Mapping[str, int], given: Mapping[str, np.ndarray], seed: int):
    rng = np.random.default_rng(seed)
    feeds: Dict[str, np.ndarray] = {}
    for name, dtype, shape, quantized in ref.inputs:
        if name in given:
            feeds[name] = np.asarray(given[name])
            continue
        shape = [binding[f"{name}[{a}]"] if d < 0 else d for a, d in enumerate(shape)]
        if quantized and dtype.kind in "iu":
            info = np.iinfo(dtype)
            feeds[name] = rng.integers(info.min, info.max + 1, shape).astype(dtype)
        else:
            from onnx import helper

            feeds[name] = _random(rng, helper.np_dtype_to_tensor_dtype(dtype), shape, name)
    return feeds


def feeds_for(reference: Path, binding: Mapping[str, int], given: Mapping[str, np.ndarray], provider: str = "auto",
              seed: int = 0) -> Dict[str, np.ndarray]:
    """The inputs ``check_against`` feeds at ``binding`` (to localize a difference)."""
    return _feeds(_Reference(reference, provider), binding, given, seed)


def check_against(module: Path, reference: Path, *, provider: str = "auto", rtol=1e-4, atol=1e-5,
                  given: Optional[Mapping[str, np.ndarray]] = None, dims: Optional[Mapping[str, int]] = None,
                  seed: int = 0) -> CheckResult:
    """Run ``module`` on IREE and ``reference`` on its runtime, per binding of the
    reference's dynamic input dims; the module is compiled for each binding with its
    dynamic arguments bound to the binding's shapes (``iree_run.bind_dims``)."""
    from .iree_run import TosaError, bind_dims, run

    given = dict(given or {})
    try:
        ref = _Reference(reference, provider)
    except CheckUnavailable as e:
        return CheckResult(False, "IREE", error=str(e))
    except Exception as e:  # noqa: BLE001 - the runtime's own words
        return CheckResult(False, "IREE", error=f"{reference}: does not load: {first_line(e)}")
    label = f"IREE llvm-cpu vs {ref.runtime}"
    result = CheckResult(True, label)
    text = _module_text(module)
    for binding in _bindings(ref, given, dims or {}):
        try:
            feeds = _feeds(ref, binding, given, seed)
        except CheckUnavailable as e:
            return CheckResult(False, label, error=str(e))
        try:
            expected = ref.run(feeds)
        except Exception as e:  # noqa: BLE001
            result.bindings.append(BindingResult(binding, True, skipped=f"{reference} fails on {ref.runtime}:"
                                                                         f" {first_line(e)}"))
            continue
        try:
            got = run(bind_dims(text, [a.shape for a in feeds.values()]), list(feeds.values()))
        except (TosaError, CheckUnavailable) as e:
            return CheckResult(False, label, error=str(e))
        if len(got) != len(expected):
            outs = [OutputResult(f"result #{i}", False, detail=f"the module has {len(got)} results, the model"
                                 f" {len(expected)} outputs") for i in range(len(expected))]
        else:
            # an integer result of a TFLite model is taken as quantized: one step of slack
            outs = [_compare(f"result #{i}", np.asarray(e), np.asarray(g), ref.kind == "tflite", tol_of(rtol, n),
                             tol_of(atol, n)) for i, (n, e, g) in enumerate(zip(ref.outputs, expected, got))]
        result.bindings.append(BindingResult(binding, all(o.ok for o in outs), outs))
    if not any(not b.skipped for b in result.bindings):
        return CheckResult(False, label, result.bindings, error=result.bindings[0].skipped)
    return result
