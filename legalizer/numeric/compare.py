"""Comparison, once for every check: one output against its reference (``compare``:
float tolerances, exact integers, one step of slack for a quantized output), the
outputs of one run against the reference's (``Pairing``: by name or by position), and
one dim binding (``Comparator``: the reference runner, then the candidate, on the same
inputs, into one ``CheckResult``; ``plan.run_plan`` feeds it every binding).

A binding the reference rejects is skipped (and its error kept, for the search of
bindings); one the candidate fails on fails each output with the runtime's words; one
whose outputs are all empty is skipped too: it compared no element.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Type, Union

import numpy as np

from ..errors import first_line
from . import ATOL, RTOL  # noqa: F401 - the check's defaults (defined in the light package init)
from .child import Held, RunFault
from .results import BindingResult, CheckResult, OutputResult
from .runner import Runner


@dataclass(frozen=True)
class Tolerance:
    """A check tolerance as Polygraphy takes it: one for every output, and per output
    by name (``--rtol out1:1e-3 --rtol 1e-5``). A plain float still works wherever a
    Tolerance does (``tol_of``)."""

    default: float
    per_output: Tuple[Tuple[str, float], ...] = ()

    def of(self, name: str) -> float:
        return dict(self.per_output).get(name, self.default)

    def __float__(self) -> float:
        return float(self.default)


def tol_of(tol, name: str) -> float:
    """The tolerance of output ``name``: ``tol`` is a Tolerance or a float."""
    return tol.of(name) if isinstance(tol, Tolerance) else float(tol)


# Absolute errors are counted per decade for the histogram of the stats: up to 1e-9,
# then (1e-9, 1e-8], ..., (1, 10], and beyond 10.
HISTOGRAM_EDGES = tuple(10.0 ** k for k in range(-9, 2))


def error_stats(diff: np.ndarray, rel: np.ndarray, bad: np.ndarray, full: bool = True) -> dict:
    """The statistics of an output's element errors: ``diff`` absolute, ``rel``
    relative, ``bad`` where the tolerances do not hold (without ``full``, the count of
    those only: localization compares every value of a model)."""
    d = diff.reshape(-1)
    out = {"mismatched": int(np.count_nonzero(bad)), "total": int(d.size)}
    if not d.size or not full:
        return out
    p50, p90, p99 = (float(v) for v in np.percentile(d, [50, 90, 99]))
    counts = np.bincount(np.searchsorted(np.asarray(HISTOGRAM_EDGES), d, side="left"),
                         minlength=len(HISTOGRAM_EDGES) + 1)
    out.update({"mean_abs_err": float(d.mean()), "p50_abs_err": p50, "p90_abs_err": p90, "p99_abs_err": p99,
                "mean_rel_err": float(rel.mean()) if rel.size else 0.0,
                "histogram": {"edges": list(HISTOGRAM_EDGES), "counts": [int(c) for c in counts]}})
    return out


STEP_DETAIL = "more than one quantization step"


def compare(name: str, expected: np.ndarray, got: np.ndarray, rtol: float, atol: float,
            full_stats: bool = True, quantized: bool = False) -> OutputResult:
    """``got`` against ``expected``: the same shape and dtype; floats within
    ``atol + rtol * |expected|`` (NaNs at the same positions), other values equal. A
    ``quantized`` integer output may be one quantization step off (LiteRT's integer
    kernels and a float-then-requantize round differently). An output of more than a
    chunk (``CHUNK``), or one held in the child, is compared a chunk at a time."""
    if isinstance(expected, Held) or isinstance(got, Held) or max(np.size(expected), np.size(got)) > CHUNK:
        return _compare_in_chunks(name, expected, got, rtol, atol, full_stats, quantized)
    expected, got = np.asarray(expected), np.asarray(got)
    if quantized and expected.dtype == got.dtype and expected.dtype.kind in "iu":
        return _steps(name, expected, got, full_stats)
    if expected.shape != got.shape:
        return OutputResult(name, False, detail=f"shape {got.shape} != {expected.shape}")
    if expected.dtype != got.dtype:
        return OutputResult(name, False, detail=f"dtype {got.dtype} != {expected.dtype}")
    if expected.dtype.kind in "fc":
        e, g = expected.astype(np.float64), got.astype(np.float64)
        nan_e, nan_g = np.isnan(e), np.isnan(g)
        if not np.array_equal(nan_e, nan_g):
            where = nan_e != nan_g
            return OutputResult(name, False, float("nan"), float("nan"), "NaNs at different positions",
                                {"mismatched": int(np.count_nonzero(where)), "total": int(where.size)})
        mask = ~nan_e
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.where(mask, np.abs(e - g), 0.0)
            diff = np.where(np.isinf(e) & (e == g), 0.0, diff)
            denom = np.abs(e)
            rel = np.where(denom > 0, diff / np.where(denom > 0, denom, 1), diff)
            bad = diff > atol + rtol * np.abs(e)
        max_abs = float(diff.max()) if diff.size else 0.0
        max_rel = float(rel.max()) if rel.size else 0.0
        ok = not bad.any()
        return OutputResult(name, ok, max_abs, max_rel, stats=error_stats(diff, rel, bad, full_stats))
    same = bool(np.array_equal(expected, got))
    if expected.dtype.kind in "iub" and expected.size:
        diff = np.abs(expected.astype(np.float64) - got.astype(np.float64))
        return OutputResult(name, same, float(diff.max()), 0.0, stats=error_stats(diff, np.zeros(0), diff != 0,
                                                                                     full_stats))
    return OutputResult(name, same)


# Elements compared at once: float64 copies of a chunk of each side and their errors hold
# about 60 bytes an element, so a comparison holds about 120 MiB whatever the outputs' size.
CHUNK = 2 << 20


def _compare_in_chunks(name: str, expected, got, rtol: float, atol: float, full_stats: bool,
                       quantized: bool) -> OutputResult:
    """``compare``, a chunk of elements at a time: the same verdict, maxima, counts,
    means and histogram; the percentiles from evenly spaced elements (every k-th, at
    most ``CHUNK`` of them) where there is more than one chunk."""
    e_shape, g_shape = tuple(np.shape(expected)), tuple(np.shape(got))
    e_dtype, g_dtype = _dtype(expected), _dtype(got)
    steps = quantized and e_dtype == g_dtype and e_dtype.kind in "iu"
    if e_shape != g_shape:
        return OutputResult(name, False, detail=f"shape {g_shape} != {e_shape}")
    if e_dtype != g_dtype and not steps:
        return OutputResult(name, False, detail=f"dtype {g_dtype} != {e_dtype}")
    total = int(np.prod(e_shape, dtype=object)) if e_shape else 1
    stride = -(-total // CHUNK)  # the percentiles' sample: every stride-th element
    acc = _Accumulated(full_stats)
    nan_off = 0
    for start in range(0, total, CHUNK):
        stop = min(total, start + CHUNK)
        e, g = _flat(expected, start, stop), _flat(got, start, stop)
        if steps:
            diff = np.abs(e.astype(np.int64) - g.astype(np.int64)).astype(np.float64)
            acc.add(diff, None, diff > 1, start, stride)
        elif e_dtype.kind in "fc":
            e, g = e.astype(np.float64), g.astype(np.float64)
            nan_e, nan_g = np.isnan(e), np.isnan(g)
            nan_off += int(np.count_nonzero(nan_e != nan_g))
            if nan_off:
                continue
            with np.errstate(invalid="ignore", over="ignore"):
                diff = np.where(~nan_e, np.abs(e - g), 0.0)
                diff = np.where(np.isinf(e) & (e == g), 0.0, diff)
                denom = np.abs(e)
                rel = np.where(denom > 0, diff / np.where(denom > 0, denom, 1), diff)
                bad = diff > atol + rtol * denom
            acc.add(diff, rel, bad, start, stride)
        elif e_dtype.kind in "iub":
            diff = np.abs(e.astype(np.float64) - g.astype(np.float64))
            acc.add(diff, None, diff != 0, start, stride)
        else:
            acc.add(None, None, ~(e == g), start, stride)
    if nan_off:
        return OutputResult(name, False, float("nan"), float("nan"), "NaNs at different positions",
                            {"mismatched": nan_off, "total": total})
    if steps:
        return OutputResult(name, acc.max_abs <= 1, acc.max_abs, 0.0, "" if acc.max_abs <= 1 else STEP_DETAIL,
                            acc.stats(total))
    if e_dtype.kind in "fc":
        return OutputResult(name, acc.mismatched == 0, acc.max_abs, acc.max_rel, stats=acc.stats(total))
    if e_dtype.kind in "iub":
        return OutputResult(name, acc.mismatched == 0, acc.max_abs, 0.0, stats=acc.stats(total))
    return OutputResult(name, acc.mismatched == 0)


def _arrays(outputs: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
    return {k: np.asarray(v) if isinstance(v, Held) else v for k, v in outputs.items()}


def _dtype(a) -> np.dtype:
    return a.dtype if isinstance(a, (Held, np.ndarray)) else np.asarray(a).dtype


def _flat(a, start: int, stop: int) -> np.ndarray:
    if isinstance(a, Held):
        return a.piece(start, stop)
    return np.asarray(a).reshape(-1)[start:stop]


class _Accumulated:
    """``error_stats`` over chunks of the errors."""

    def __init__(self, full: bool):
        self.full = full
        self.mismatched, self.max_abs, self.max_rel = 0, 0.0, 0.0
        self.sum_abs, self.sum_rel, self.rel_count = 0.0, 0.0, 0
        self.counts = np.zeros(len(HISTOGRAM_EDGES) + 1, np.int64)
        self.sample: List[np.ndarray] = []

    def add(self, diff, rel, bad, start: int, stride: int) -> None:
        self.mismatched += int(np.count_nonzero(bad))
        if diff is None or not diff.size:
            return
        self.max_abs = max(self.max_abs, float(diff.max()))
        if rel is not None and rel.size:
            self.max_rel = max(self.max_rel, float(rel.max()))
            self.sum_rel += float(rel.sum())
            self.rel_count += rel.size
        if self.full:
            self.sum_abs += float(diff.sum())
            self.counts += np.bincount(np.searchsorted(np.asarray(HISTOGRAM_EDGES), diff, side="left"),
                                       minlength=len(HISTOGRAM_EDGES) + 1)
            first = (-start) % stride  # the chunk's elements at a multiple of stride
            self.sample.append(diff[first::stride].copy())

    def stats(self, total: int) -> dict:
        out = {"mismatched": self.mismatched, "total": total}
        if not total or not self.full:
            return out
        p50, p90, p99 = (float(v) for v in np.percentile(np.concatenate(self.sample), [50, 90, 99]))
        out.update({"mean_abs_err": self.sum_abs / total, "p50_abs_err": p50, "p90_abs_err": p90, "p99_abs_err": p99,
                    "mean_rel_err": self.sum_rel / self.rel_count if self.rel_count else 0.0,
                    "histogram": {"edges": list(HISTOGRAM_EDGES), "counts": [int(c) for c in self.counts]}})
        return out


def _steps(name: str, expected: np.ndarray, got: np.ndarray, full_stats: bool) -> OutputResult:
    e, g = expected.astype(np.int64), got.astype(np.int64)
    if e.shape != g.shape:
        return OutputResult(name, False, detail=f"shape {g.shape} != {e.shape}")
    steps = np.abs(e - g).astype(np.float64)
    diff = float(steps.max()) if e.size else 0.0
    return OutputResult(name, diff <= 1, diff, 0.0, "" if diff <= 1 else STEP_DETAIL,
                        error_stats(steps, np.zeros(0), steps > 1, full_stats))


def across_kernels(expected: np.ndarray, rtol: float, atol: float) -> float:
    """The absolute tolerance of a float output computed by other kernels (onnxruntime's
    against LiteRT's). Their sums run in another order, and the rounding error of a sum
    grows with the magnitudes summed: with the output's scale, not with each element (a
    deep conv net's logit of -0.9 among logits up to 1,198 was 1.2e-3 off, 3e-6 of the
    largest, with no change to the graph). So an element may be off by ``rtol`` of the
    largest finite magnitude."""
    e = np.asarray(expected)
    if e.dtype.kind != "f" or not e.size:
        return atol
    finite = np.abs(e[np.isfinite(e)])
    return max(atol, rtol * float(finite.max())) if finite.size else atol


def _named(index: int, name: str) -> str:
    return name


def _never(name: str) -> bool:
    return False


@dataclass
class Pairing:
    """How a check pairs the reference's outputs with the candidate's, and names the
    results. Each pair's tolerance is its name's (``tol_of``)."""

    by_position: bool = False  # the i-th with the i-th (their names differ); else by name
    names: Optional[Sequence[str]] = None  # by position: each pair's name (default: the reference's)
    label: Callable[[int, str], str] = _named  # what the result of pair i, named n, is called
    quantized: Callable[[str], bool] = _never  # whether output n has one quantization step of slack
    # By position, when the counts differ: the results to report (None: the shorter run's pairs are compared).
    count_mismatch: Optional[Callable[[int, int], List[OutputResult]]] = None

    def _names(self, expected: Mapping[str, np.ndarray]) -> List[str]:
        return list(self.names) if self.by_position and self.names is not None else list(expected)

    def failed(self, expected: Mapping[str, np.ndarray], detail: str) -> List[OutputResult]:
        """Every output failed: the candidate did not run (``detail`` says why)."""
        return [OutputResult(self.label(i, n), False, detail=detail) for i, n in enumerate(self._names(expected))]

    def compare(self, expected: Mapping[str, np.ndarray], got: Mapping[str, np.ndarray], rtol, atol,
                full_stats: bool = True) -> List[OutputResult]:
        names = self._names(expected)
        if self.by_position:
            want, have = list(expected.values()), list(got.values())
            if len(want) != len(have) and self.count_mismatch is not None:
                return self.count_mismatch(len(want), len(have))
            pairs = [(i, n, e, g) for i, (n, e, g) in enumerate(zip(names, want, have))]
        else:
            pairs = [(i, n, expected[n], got.get(n)) for i, n in enumerate(names)]
        outs = []
        for i, n, e, g in pairs:
            if g is None and not self.by_position:
                outs.append(OutputResult(self.label(i, n), False, detail="missing from the legalized model's outputs"))
                continue
            outs.append(compare(self.label(i, n), e, g, tol_of(rtol, n), tol_of(atol, n), full_stats,
                                self.quantized(n)))
        return outs


# Why a binding whose outputs are all empty (a size-0 dim) is not counted as compared.
NOTHING_COMPARED = "every output is empty at these dims: no element was compared"

Errors = Union[Type[BaseException], Tuple[Type[BaseException], ...]]
Also = Callable[[Mapping[str, np.ndarray], Mapping[str, np.ndarray]], List[OutputResult]]


class Comparator:
    """A candidate runner against a reference runner (both activated), binding by
    binding, into ``result``. ``refused`` words a binding the reference rejects;
    ``reference_errors`` / ``candidate_errors`` are what a run that fails raises (others
    propagate: a check that cannot go on); ``also`` adds results of the binding's
    feeds and expected outputs (a second candidate)."""

    def __init__(self, reference: Runner, candidate: Runner, result: CheckResult, rtol, atol, *,
                 pairing: Optional[Pairing] = None, refused: Callable[[BaseException], str] = None,
                 reference_errors: Errors = Exception, candidate_errors: Errors = Exception,
                 also: Optional[Also] = None):
        self.reference, self.candidate, self.result = reference, candidate, result
        self.rtol, self.atol = rtol, atol
        self.pairing = pairing or Pairing()
        self.refused = refused or (lambda e: f"original fails: {first_line(e)}")
        self.reference_errors, self.candidate_errors = reference_errors, candidate_errors
        self.also = also
        # When a list: each compared binding's (feeds, expected, got or None), for
        # --save-inputs / --save-outputs (``golden``).
        self.runs: Optional[List[tuple]] = None

    def binding(self, dims: Dict[str, int], feeds: Mapping[str, np.ndarray], source: str = "synthesized",
                label: Optional[Dict[str, int]] = None, sample: Optional[int] = None) -> Optional[str]:
        """Compare one binding (reported as ``label``, default ``dims``; ``sample``: the
        index of the stored sample it fed); the reference's error when it rejects it."""
        label = dims if label is None else label
        try:
            expected = self.reference.infer_held(feeds)
        except RunFault:  # the child running it faulted: no binding of this check runs
            raise
        except self.reference_errors as e:
            self.result.bindings.append(BindingResult(label, True, skipped=self.refused(e), source=source,
                                                      sample=sample))
            return str(e)
        got = None
        try:
            got = self.candidate.infer_held(feeds)
        except RunFault:
            raise
        except self.candidate_errors as e:
            outs = self.pairing.failed(expected, first_line(e))
        else:
            outs = self.pairing.compare(expected, got, self.rtol, self.atol)
        if self.also is not None:
            outs += self.also(feeds, expected)
        if self.runs is not None:  # kept past the next run: made arrays here
            self.runs.append((dict(feeds), _arrays(expected), None if got is None else _arrays(got)))
        ok = all(o.ok for o in outs)
        if ok and expected and all(np.size(v) == 0 for v in expected.values()):
            # agreeing on empty outputs compares nothing: not a pass
            self.result.bindings.append(BindingResult(label, True, skipped=NOTHING_COMPARED, source=source,
                                                      sample=sample))
            return None
        self.result.bindings.append(BindingResult(label, ok, outs, source=source, sample=sample))
        return None


def unless_compared(result: CheckResult, why: str) -> CheckResult:
    """``result``, not run when no binding was compared: ``why``, then the first
    binding's reason for skipping."""
    if not result.compared:
        result.ran = False
        if any(b.skipped == NOTHING_COMPARED for b in result.bindings):
            result.error = "no element was compared: every output is empty at each binding tried"
        else:
            result.error = why + (result.bindings[0].skipped if result.bindings else "")
    return result
