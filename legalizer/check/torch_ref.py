"""The check's second reference for a model exported from PyTorch: the program itself,
run by PyTorch (``program.module()(*inputs)``), against the legalized model on
onnxruntime, for the same dim bindings and the same synthesized inputs as the
onnxruntime check (whose reference is the original ONNX export)."""

from __future__ import annotations

from typing import List, Mapping, Optional

import numpy as np

from ..errors import CheckUnavailable, first_line
from .compare import ATOL, RTOL, Comparator, Pairing, unless_compared
from .inputs import InputSpec, make_feeds
from .ort import OrtRunner, bindings_for, input_specs, source_of
from .ort_session import providers
from .results import CheckResult, OutputResult
from .runner import Runner, positional


class TorchRunner(Runner):
    """A program exported from PyTorch (a ``TorchSource``), run by PyTorch on its ONNX
    export's inputs; its outputs flattened, in order."""

    name = "torch"

    def __init__(self, source):
        super().__init__()
        self.source = source

    def input_specs(self) -> List[InputSpec]:
        return input_specs(self.source.onnx)

    def infer_impl(self, feed):
        from ..importers import pytorch

        return positional(pytorch.run_program(self.source, feed))


def check_torch(source, legalized, *, provider: str = "auto", dims: Optional[Mapping[str, int]] = None,
                inputs: Optional[Mapping[str, np.ndarray]] = None, rtol: float = RTOL, atol: float = ATOL,
                max_bindings: int = 8, seed: int = 0, not_one: bool = False,
                choices: Optional[Mapping[str, List[int]]] = None, searched: bool = False) -> CheckResult:
    """Compare PyTorch running ``source.program`` (a ``TorchSource``) with
    ``legalized`` (a ModelProto or a path) on onnxruntime. The result's ``provider``
    is ``"torch"``; a binding the program rejects (a guard on a dim's range) is
    skipped, as the onnxruntime check skips one the original rejects. ``searched``:
    ``choices`` are what the onnxruntime check's search found."""
    declared = source.onnx
    new = OrtRunner(legalized, providers(provider))
    try:
        new.activate()
    except Exception as e:  # noqa: BLE001 - onnxruntime's own words are the reason
        return CheckResult(True, "torch", error=f"the legalized model does not load on onnxruntime: {first_line(e)}")
    result = CheckResult(True, "torch")
    torch = TorchRunner(source).activate()
    # PyTorch's outputs have no names: by position, named as the legalized model names them
    pairing = Pairing(by_position=True, names=new.outputs, count_mismatch=lambda want, have: [OutputResult(
        "*", False, detail=f"torch returns {want} outputs, the model {have}")])
    comparator = Comparator(torch, new, result, rtol, atol, pairing=pairing,
                            refused=lambda e: f"torch fails: {first_line(e)}")
    specs = torch.input_specs()
    try:
        comparator.bindings(bindings_for(declared, dims or {}, max_bindings, seed, not_one, choices),
                            lambda binding: make_feeds(specs, binding, inputs or {}, seed),
                            source_of(declared, dims or {}, searched))
    except CheckUnavailable as e:
        return CheckResult(False, "torch", error=str(e))
    return unless_compared(result, "PyTorch fails on every input binding tried: ")
