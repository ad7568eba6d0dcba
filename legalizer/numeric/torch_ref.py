"""The check's second reference for a model exported from PyTorch: the program itself,
run by PyTorch (``program.module()(*inputs)``), against the legalized model on
onnxruntime, for the same dim bindings and the same synthesized inputs as the
onnxruntime check (whose reference is the original ONNX export)."""

from __future__ import annotations

from typing import List, Mapping, Optional, Sequence

import numpy as np

from ..errors import first_line
from .compare import Pairing, unless_compared
from .inputs import InputSpec, make_feeds
from .ort import bindings_for, input_specs, model_key, runner, source_of
from .plan import Artifact, Comparison, Feed, Plan, Session, run_plan
from .results import CheckResult, OutputResult
from .runner import Runner, positional
from .settings import CheckSettings, settings_of


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
        from ..kinds.pt2 import onnx_export as pytorch

        return positional(pytorch.run_program(self.source, feed))


def check_torch(source, legalized, settings: Optional[CheckSettings] = None, *,
                dims: Optional[Mapping[str, int]] = None, inputs: Optional[Mapping[str, np.ndarray]] = None,
                choices: Optional[Mapping[str, List[int]]] = None, searched: bool = False,
                session: Optional[Session] = None, **changes) -> CheckResult:
    """Compare PyTorch running ``source.program`` (a ``TorchSource``) with
    ``legalized`` (a ModelProto or a path) on onnxruntime. The result's ``provider``
    is ``"torch"``; a binding the program rejects (a guard on a dim's range) is
    skipped, as the onnxruntime check skips one the original rejects. ``searched``:
    ``choices`` are what the onnxruntime check's search found. PyTorch runs the program
    here, where the library's caller handed it (and already ran it). ``settings`` and
    ``session`` (the legalized model loaded once for the ONNX check and this one): as
    ``ort.check``'s."""
    return run_plan(_torch_plan(source, legalized, settings_of(settings, **changes), dims=dims, inputs=inputs,
                                choices=choices, searched=searched), session)


def program_feeds(declared, settings: CheckSettings, dims, inputs, choices, searched: bool = False) -> List[Feed]:
    """The bindings every PyTorch check feeds (and ExecuTorch's): the onnxruntime
    check's, and its inputs."""
    specs = input_specs(declared)
    source = source_of(declared, dims or {}, searched)
    return [Feed(binding, lambda binding=binding: make_feeds(specs, binding, inputs or {}, settings.seed), source)
            for binding in bindings_for(declared, dims or {}, settings.max_bindings, settings.seed, settings.not_one,
                                        choices)]


def _torch_plan(source, legalized, settings: CheckSettings, *, dims, inputs, choices, searched) -> Plan:
    ref = Artifact("the program", lambda: TorchRunner(source), refused=lambda e, _: CheckResult(
        False, "torch", error=f"PyTorch cannot load the program: {first_line(e)}"))
    new = Artifact("the legalized model", lambda: runner(legalized, settings.provider, "the legalized model"),
                   key=model_key(legalized, settings.provider),
                   refused=lambda e, _: CheckResult(True, "torch", error="the legalized model does not load on"
                                                                      f" onnxruntime: {first_line(e)}"))
    # PyTorch's outputs have no names: by position, named as the legalized model names them
    pairing = lambda ref, new: Pairing(by_position=True, names=new.outputs, count_mismatch=lambda want, have: [  # noqa: E731
        OutputResult("*", False, detail=f"torch returns {want} outputs, the model {have}")])
    compared = Comparison(ref, new, program_feeds(source.onnx, settings, dims, inputs, choices, searched), pairing,
                          refused=lambda e: f"torch fails: {first_line(e)}", candidate_first=True)
    return Plan([compared], settings.rtol, settings.atol, "torch",
                lambda result: unless_compared(result, "PyTorch fails on every input binding tried: "),
                reads=(legalized,))


def _original_pairing(declared, what: str) -> Pairing:
    """PyTorch's outputs against ``what``'s, by position, named as the ONNX export names them."""
    outputs = [o.name for o in declared.graph.output]
    return Pairing(by_position=True, names=outputs, count_mismatch=lambda want, have: [OutputResult(
        "*", False, detail=f"the original returns {want} outputs, {what} {have}")])


def against_original(original, declared, input_names: Sequence[str], new: Artifact, feeds: List[Feed],
                     what: str) -> Comparison:
    """``new`` (``what`` runs there: "the legal program", "the .pte") against PyTorch
    running ``original`` (an ``ExportedProgram``) on ``feeds``, outputs paired by
    position; a binding the original's guards reject is skipped. ``new`` loads first:
    its refusal is the one reported."""
    from ..kinds.pt2 import onnx_export as pytorch

    ref = Artifact("the original program",
                   lambda: TorchRunner(pytorch.TorchSource(original, declared, list(input_names))))
    return Comparison(ref, new, feeds, _original_pairing(declared, what),
                      refused=lambda e: f"the original program fails: {first_line(e)}", candidate_first=True)


def check_programs(original, declared, input_names: Sequence[str], legalized_path, settings: Optional[CheckSettings] = None,
                   *, dims: Optional[Mapping[str, int]] = None, inputs: Optional[Mapping[str, np.ndarray]] = None,
                   choices: Optional[Mapping[str, List[int]]] = None, **changes) -> CheckResult:
    """PyTorch running the legal ``.pt2`` at ``legalized_path`` (read back by the safe
    loader: what is written is what is checked) against PyTorch running ``original``
    (an ``ExportedProgram``), at the same bindings and inputs as every check makes them:
    ``declared`` (a ModelProto that declares the programs' user inputs, named
    ``input_names``, their dims keyed by the program's symbols). The result's provider is
    ``"torch"``; a binding the original's guards reject is skipped."""
    from pathlib import Path

    from ..kinds.pt2 import onnx_export as pytorch
    from ..kinds.pt2.safety import load_untrusted

    settings = settings_of(settings, **changes)
    new = Artifact("the legal program", lambda: TorchRunner(pytorch.TorchSource(
        load_untrusted(Path(legalized_path)), declared, list(input_names))), refused=lambda e, _: CheckResult(
        True, "torch", error=f"the legal program does not load: {first_line(e)}"))
    compared = against_original(original, declared, input_names, new,
                                program_feeds(declared, settings, dims, inputs, choices), "the legal program")
    return run_plan(Plan([compared], settings.rtol, settings.atol, "torch",
                         lambda result: unless_compared(result, "PyTorch fails on every input binding tried: ")))
