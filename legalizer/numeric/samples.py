"""The check over stored samples (``--load-inputs``, ``--data-loader-script``): each
sample is one run of the original and the legalized model on onnxruntime, or, with
stored reference outputs (``--load-outputs``: another runtime's, the device's), one
run of the legalized model compared with them. With several samples, each output's
errors are summed up across them (``across``), not only the worst one reported.

Outputs are paired by the original's output names: the legalized model keeps the
original's outputs in order, and stored outputs are named as the original's are (as
``polygraphy run --save-outputs`` names them).
"""

from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Sequence

import numpy as np
import onnx

from ..errors import UsageError
from .compare import HISTOGRAM_EDGES, unless_compared
from .user_inputs import user_dims
from .inputs import make_feeds
from .ort import artifact, declarations, declared_shapes, input_specs
from .plan import Comparison, Feed, Plan, run_plan, stored
from .results import CheckResult
from .runner import Runner
from .runtimes import ONNX, runner_for
from .settings import CheckSettings, settings_of


class Renamed(Runner):
    """A runner whose outputs are given the names ``names`` by position (the
    legalized model's outputs, named as the original's), then only ``keep`` of them."""

    def __init__(self, inner: Runner, names: Sequence[str], keep: Optional[Sequence[str]] = None):
        super().__init__()
        self.inner, self.names = inner, list(names)
        self.keep = set(keep) if keep is not None else None
        self.name = inner.name

    @property
    def provider(self) -> str:
        return self.inner.provider

    def begin(self) -> "Renamed":
        self.inner.begin()
        return self

    def activate_impl(self):
        self.inner.activate()

    def deactivate(self) -> None:
        self.inner.deactivate()  # (begun and never loaded, too)
        self.is_active = False

    def infer_impl(self, feed):
        return self._named(self.inner.infer(feed))

    def infer_held(self, feed):
        if not self.is_active:
            raise RuntimeError(f"{self.name} runner: activate it before infer")
        return self._named(self.inner.infer_held(feed))

    def _named(self, outputs):
        got = dict(zip(self.names, outputs.values()))
        return {n: a for n, a in got.items() if self.keep is None or n in self.keep}


def check_samples(original, legalized, samples: Sequence[Mapping[str, np.ndarray]],
                  settings: Optional[CheckSettings] = None, *,
                  expected: Optional[Sequence[Mapping[str, np.ndarray]]] = None, reference: str = "",
                  dims: Optional[Mapping[str, int]] = None, declared: Optional[onnx.ModelProto] = None,
                  **changes) -> CheckResult:
    """Compare the legalized model with its reference on each of ``samples`` (feed
    dicts; an input a sample leaves out is synthesized, as for ``--input``). The
    reference is the original run on onnxruntime, or with ``expected`` (per sample the
    outputs by name; ``reference`` says where they came from) those outputs.
    UsageError when a sample does not fit the model's inputs, or stored outputs do not
    fit its outputs. ``settings``: as ``ort.check``'s."""
    settings = settings_of(settings, **changes)
    runtime = runner_for(ONNX, settings.provider)
    label = runtime.names(settings.provider)  # (UsageError for a provider onnxruntime does not have)
    declared = declarations(original, declared)
    decl = declared_shapes(declared)
    names = [o.name for o in declared.graph.output]
    specs = input_specs(declared)
    bound = []
    for k, sample in enumerate(samples):
        try:
            bound.append(user_dims(decl, dims, None, sample))
        except UsageError as e:
            raise UsageError(f"sample {k}: {e}") from None
    provider, notes, keep = settings.provider, [], None
    if expected is not None:
        keep, notes = _stored_names(expected, samples, names, [s.name for s in specs])
        ref = stored(expected, keep, reference)
    else:
        ref = artifact(runtime, original, provider, "the original", False, lambda reference: label)
    # outputs paired by the original's names: the legalized model's, named by position; the
    # original's runner (loaded first) names the legalized model's refusal
    new = artifact(runtime, legalized, provider, "the legalized model", expected is None,
                   lambda reference: reference.provider if expected is None and reference is not None else label,
                   make=lambda: Renamed(runtime.runner(legalized, provider, what="the legalized model"), names, keep))
    feeds = [Feed(binding, lambda binding=binding, sample=sample: make_feeds(specs, binding, sample, settings.seed),
                  "user", sample=k, prefix=f"sample {k}: ") for k, (binding, sample) in enumerate(zip(bound, samples))]

    def conclude(result: CheckResult) -> CheckResult:
        if len(samples) > 1:
            result.samples = across(result)
        return unless_compared(result, "the original model fails on onnxruntime for every sample: ")

    compared = Comparison(ref, new, feeds, record=settings.record,
                          provider=lambda ref, new: new.provider if expected is not None else ref.provider)
    return run_plan(Plan([compared], settings.rtol, settings.atol, label, conclude,
                         result=lambda: CheckResult(True, label, reference=reference, notes=notes), reads=(original, legalized)))


def _stored_names(expected, samples, names: List[str], inputs: List[str]):
    """The outputs to compare (the model's outputs that the stored ones name, in the
    model's order) and notes on the rest; UsageError when they cannot be compared."""
    if len(expected) != len(samples):
        raise UsageError(f"--load-outputs holds {len(expected)} samples, but the inputs {len(samples)}:"
                         " give the inputs the outputs were computed from")
    for k, sample in enumerate(samples):
        missing = [n for n in inputs if n not in sample]
        if missing:
            raise UsageError(f"sample {k} lacks input {', '.join(repr(n) for n in missing)}: stored outputs"
                             " are compared only on the inputs they were computed from")
    stored = list(expected[0])
    keep = [n for n in names if n in stored]
    if not keep:
        raise UsageError(f"--load-outputs: none of its outputs ({', '.join(stored[:8]) or 'none'}) is an output of"
                         f" the model (its outputs: {', '.join(names)})")
    for k, outs in enumerate(expected):
        lost = [n for n in keep if n not in outs]
        if lost:
            raise UsageError(f"--load-outputs: sample {k} lacks output {', '.join(repr(n) for n in lost)}")
    notes = []
    other = [n for n in stored if n not in names]
    if other:
        notes.append(f"--load-outputs: {len(other)} stored value(s) are not outputs of the model and are not"
                     f" compared ({', '.join(other[:5])}{', ...' if len(other) > 5 else ''})")
    unstored = [n for n in names if n not in stored]
    if unstored:
        notes.append(f"--load-outputs: output(s) {', '.join(unstored)} have no stored reference and are not compared")
    return keep, notes


# -- statistics across samples ------------------------------------------------------

def _spread(values: List[float]) -> dict:
    v = np.asarray(values, dtype=np.float64)
    p50, p90 = (float(x) for x in np.percentile(v, [50, 90]))
    return {"min": float(v.min()), "p50": p50, "p90": p90, "max": float(v.max())}


def across(result: CheckResult) -> dict:
    """Per output, its errors over every compared sample: how many samples fail and
    which, the worst sample, the elements out of tolerance, the mean error over all
    elements, the spread of the per-sample max and p99 errors, and the sum of the
    per-sample histograms (the check's decades, ``HISTOGRAM_EDGES``)."""
    compared = [(b.sample if b.sample is not None else i, b) for i, b in enumerate(result.bindings)
                if not b.skipped]
    by_name: Dict[str, List] = {}
    for k, b in compared:
        for o in b.outputs:
            by_name.setdefault(o.name, []).append((k, o))
    outputs = []
    for name, runs in by_name.items():
        worst_k, worst = max(runs, key=lambda r: (np.nan_to_num(r[1].max_abs_err, nan=np.inf), -r[0]))
        entry = {"name": name, "samples": len(runs), "failed": [k for k, o in runs if not o.ok],
                 "worst_sample": worst_k, "max_abs_err": worst.max_abs_err,
                 "max_rel_err": max(o.max_rel_err for _, o in runs),
                 "max_abs_err_per_sample": _spread([o.max_abs_err for _, o in runs])}
        stats = [o.stats for _, o in runs if o.stats and "histogram" in o.stats]
        if stats:
            total = sum(s["total"] for s in stats)
            counts = np.sum([s["histogram"]["counts"] for s in stats], axis=0)
            entry.update({"mismatched": sum(s["mismatched"] for s in stats), "total": total,
                          "mean_abs_err": sum(s["mean_abs_err"] * s["total"] for s in stats) / max(total, 1),
                          "p99_abs_err_per_sample": _spread([s["p99_abs_err"] for s in stats]),
                          "histogram": {"edges": list(HISTOGRAM_EDGES), "counts": [int(c) for c in counts]}})
        outputs.append(entry)
    return {"count": len(compared), "outputs": outputs}
