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

from ..errors import CheckUnavailable, first_line
from ..importers.reader import sniff
from .compare import Pairing, unless_compared
from .user_inputs import check_dim_names, dynamic_keys
from .inputs import make_feeds, small_then_one
from .plan import Artifact, Comparison, Feed, Plan, run_plan
from .results import CheckResult, OutputResult
from .runner import Runner
from .runtimes import MODULE, Runtime, reference_for, reference_formats, runner_for
from .settings import CheckSettings, settings_of


def module_text(path: Path) -> str:
    """A TOSA module file's text as IREE's parser reads it: MLIR bytecode printed; text
    as written, or, in the TOSA syntax IREE's build does not take, tosa-opt's generic form."""
    from ..kinds.mlir.importer import BYTECODE_MAGIC, bytecode_to_text
    from ..kinds.mlir.tool import iree_text

    data = path.read_bytes()
    return bytecode_to_text(data, str(path)) if data.startswith(BYTECODE_MAGIC) else iree_text(data, str(path))


def reference_runner(path: Path, provider: str) -> Runner:
    """The activated runner of the model the module came from, on the runtime that runs
    its format (``runtimes.py``), in the child process (LiteRT: its default resolver for
    a custom op only that runs, as the TFLite check)."""
    return reference_runtime(path, provider).runner(path, provider).activate()


def reference_runtime(path: Path, provider: str) -> Runtime:
    """The runtime of the model at ``path`` as ``--against``'s reference (CheckUnavailable
    for a format none runs as one)."""
    kind = sniff(path)
    runtime = reference_for(kind, provider)
    if runtime is None:
        raise CheckUnavailable(f"--against takes a {' or '.join('.' + f for f in reference_formats())} model,"
                               f" not {kind}")
    return runtime


def feeds_for(reference: Path, binding: Mapping[str, int], given: Mapping[str, np.ndarray], provider: str = "auto",
              seed: int = 0) -> Dict[str, np.ndarray]:
    """The inputs ``check_against`` feeds at ``binding`` (to localize a difference)."""
    runner = reference_runner(reference, provider)
    try:
        return make_feeds(runner.input_specs(), binding, given, seed)
    finally:
        runner.deactivate()


def check_against(module: Path, reference: Path, settings: Optional[CheckSettings] = None, *,
                  given: Optional[Mapping[str, np.ndarray]] = None, dims: Optional[Mapping[str, int]] = None,
                  **changes) -> CheckResult:
    """Run ``module`` on IREE and ``reference`` on its runtime, per binding of the
    reference's dynamic input dims (a given input fixes its own); the module is
    compiled for each binding with its dynamic arguments bound to the binding's shapes
    (``iree_run.IreeRunner``). Both run in the child process; one that crashes or runs
    out of its memory or time is ``RunFault``, a run that did not happen (exit 2).
    ``settings``: as ``ort.check``'s."""
    settings = settings_of(settings, **changes)
    try:  # (a reference of a format no runtime runs, or no file, does not load: nothing to compare)
        runtime = reference_runtime(reference, settings.provider)
    except Exception as e:  # noqa: BLE001 - its own words are the reason
        return _not_loaded(reference, e)
    return run_plan(_against_plan(module, reference, runtime, settings, given=dict(given or {}), dims=dims))


def _not_loaded(reference: Path, e: BaseException) -> CheckResult:
    """The result when ``reference`` does not load: ``e``'s words."""
    if isinstance(e, CheckUnavailable):
        return CheckResult(False, "IREE", error=str(e))
    return CheckResult(False, "IREE", error=f"{reference}: does not load: {first_line(e)}")


def _against_plan(module: Path, reference: Path, runtime: Runtime, settings: CheckSettings, *, given, dims) -> Plan:
    from .iree_run import TosaError

    provider = settings.provider
    ref = Artifact(str(reference), lambda: runtime.runner(reference, provider),
                   refused=lambda e, _: _not_loaded(reference, e))
    new = Artifact(str(module), lambda: runner_for(MODULE, provider).runner(module_text(module), provider,
                                                                            what=str(module)))
    pairing = Pairing(by_position=True, label=lambda i, n: f"result #{i}",
                      # an integer result of a TFLite model is taken as quantized: one step of slack
                      quantized=lambda n: runtime.quantized,
                      count_mismatch=lambda want, have: [OutputResult(
                          f"result #{i}", False, detail=f"the module has {have} results, the model {want} outputs")
                          for i in range(want)])

    def feeds(ref: Runner, new: Runner) -> List[Feed]:
        specs = ref.input_specs()
        # a --dim binds a dynamic dim of the reference, as the runtime declares it (input[axis])
        check_dim_names(dims, dynamic_keys([(s.name, s.shape) for s in specs]), whose=str(reference))
        keys = [d for s in specs if s.name not in given for d in s.shape if isinstance(d, str)]
        return [Feed(binding, lambda binding=binding: make_feeds(specs, binding, given, settings.seed))
                for binding in small_then_one(keys, dims or {})]

    # IREE refusing the module leaves nothing to compare; the runners name what ran (a
    # runtime's runner is named as the runtime)
    compared = Comparison(ref, new, feeds, pairing, provider=lambda ref, new: f"{new.name} vs {ref.name}",
                          refused=lambda e: f"{reference} fails on {runtime.name}: {first_line(e)}",
                          candidate_errors=(), unavailable=(TosaError, CheckUnavailable))
    return Plan([compared], settings.rtol, settings.atol, "IREE", lambda result: unless_compared(result, ""),
                raise_faults=True, reads=(module, reference))
