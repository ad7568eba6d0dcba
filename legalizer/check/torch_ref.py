"""The check's second reference for a model exported from PyTorch: the program itself,
run by PyTorch (``program.module()(*inputs)``), against the legalized model on
onnxruntime, for the same dim bindings and the same synthesized inputs as the
onnxruntime check (whose reference is the original ONNX export)."""

from __future__ import annotations

from typing import List, Mapping, Optional

import numpy as np

from ..errors import first_line
from .ort import (ATOL, RTOL, BindingResult, CheckResult, CheckUnavailable, OutputResult, bindings_for, compare, tol_of,
                  providers, session, source_of, synthesize)


def check_torch(source, legalized, *, provider: str = "auto", dims: Optional[Mapping[str, int]] = None,
                inputs: Optional[Mapping[str, np.ndarray]] = None, rtol: float = RTOL, atol: float = ATOL,
                max_bindings: int = 8, seed: int = 0, not_one: bool = False,
                choices: Optional[Mapping[str, List[int]]] = None, searched: bool = False) -> CheckResult:
    """Compare PyTorch running ``source.program`` (a ``TorchSource``) with
    ``legalized`` (a ModelProto or a path) on onnxruntime. The result's ``provider``
    is ``"torch"``; a binding the program rejects (a guard on a dim's range) is
    skipped, as the onnxruntime check skips one the original rejects. ``searched``:
    ``choices`` are what the onnxruntime check's search found."""
    from ..importers.pytorch import run_program

    declared = source.onnx
    provider_list = providers(provider)
    try:
        new = session(legalized, provider_list)
    except Exception as e:  # noqa: BLE001 - onnxruntime's own words are the reason
        return CheckResult(True, "torch", error=f"the legalized model does not load on onnxruntime: {first_line(e)}")
    out_names = [o.name for o in new.get_outputs()]
    result = CheckResult(True, "torch")
    label = source_of(declared, dims or {}, searched)
    for binding in bindings_for(declared, dims or {}, max_bindings, seed, not_one, choices):
        try:
            feeds = synthesize(declared, binding, inputs or {}, seed)
        except CheckUnavailable as e:
            return CheckResult(False, "torch", error=str(e))
        try:
            expected = run_program(source, feeds)
        except Exception as e:  # noqa: BLE001 - the program rejects this binding
            result.bindings.append(BindingResult(binding, True, skipped=f"torch fails: {first_line(e)}",
                                                 source=label))
            continue
        try:
            got = new.run(None, feeds)
        except Exception as e:  # noqa: BLE001
            result.bindings.append(BindingResult(binding, False, [OutputResult(n, False, detail=first_line(e))
                                                                   for n in out_names], source=label))
            continue
        if len(expected) != len(got):
            result.bindings.append(BindingResult(binding, False, [OutputResult(
                "*", False, detail=f"torch returns {len(expected)} outputs, the model {len(got)}")], source=label))
            continue
        outs = [compare(n, e, g, tol_of(rtol, n), tol_of(atol, n)) for n, e, g in zip(out_names, expected, got)]
        result.bindings.append(BindingResult(binding, all(o.ok for o in outs), outs, source=label))
    if not any(not b.skipped for b in result.bindings):
        result.error = "PyTorch fails on every input binding tried: " + \
            (result.bindings[0].skipped if result.bindings else "")
        result.ran = False
    return result
