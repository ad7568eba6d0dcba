"""Numeric check on onnxruntime: run the original and the legalized model on the same
inputs, for each binding of the dynamic input dims, and compare every output.

Inputs are synthesized per dtype with a fixed seed (or given). Dynamic dims get a
small size and 1 (where the original accepts 1, so runtime broadcasting runs); with
several dynamic dims, every combination up to ``max_bindings``, then a seeded sample.
"""

from __future__ import annotations

import itertools
import random
import re
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import onnx
from onnx import helper

from ..errors import CheckUnavailable, first_line
from . import ATOL, RTOL  # noqa: F401 - re-exported: the check's defaults
from .given import Declared, as_arrays, user_dims
from .search import SearchResult, TooBig, graph_sizes, search, sizes_in_name

SMALL = 3  # the "small size" a dynamic dim gets besides 1
# The check makes its inputs in memory: one bigger than this, or of a rank numpy cannot
# hold, is not made (the check does not run, and says why) rather than tried.
MAX_INPUT_BYTES = 1 << 30
MAX_INPUT_RANK = 32


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


@dataclass
class OutputResult:
    name: str
    ok: bool
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    detail: str = ""
    # error_stats of the comparison: elements outside the tolerances, mean, percentiles,
    # histogram (None when the values were not compared: shape, dtype, a failed run)
    stats: Optional[dict] = None

    def to_json(self) -> dict:
        out = {"name": self.name, "max_abs_err": self.max_abs_err, "max_rel_err": self.max_rel_err, "ok": self.ok}
        if self.detail:
            out["detail"] = self.detail
        if self.stats is not None:
            out["stats"] = self.stats
        return out


@dataclass
class BindingResult:
    dims: Dict[str, int]
    ok: bool
    outputs: List[OutputResult] = field(default_factory=list)
    skipped: str = ""  # why this binding was not compared (the original rejects it)
    # Where its dim sizes came from: "synthesized" (3 and 1, or the runtime constraints'),
    # "search" (found by the search, when the original rejects every synthesized one),
    # "user" (every dynamic dim bound by --dim, --input-shape or a given array).
    source: str = "synthesized"

    def to_json(self) -> dict:
        out = {"dims": self.dims, "ok": self.ok, "source": self.source,
               "outputs": [o.to_json() for o in self.outputs]}
        if self.skipped:
            out["skipped"] = self.skipped
        return out


@dataclass
class CheckResult:
    ran: bool
    provider: str
    bindings: List[BindingResult] = field(default_factory=list)
    error: str = ""  # the check could not compare (e.g. the original does not run)
    # For a model exported from PyTorch: the legalized model against PyTorch running the
    # program (provider "torch"), besides this one against the original ONNX export.
    torch: Optional["CheckResult"] = None
    # The search for bindings the original accepts, when it rejected every synthesized one.
    search: Optional[SearchResult] = None

    @property
    def ok(self) -> bool:
        """Every compared binding matches, against each reference that ran."""
        compared = [b for b in self.bindings if not b.skipped]
        own = self.ran and bool(compared) and all(b.ok for b in compared)
        return own and (self.torch is None or not self.torch.ran or self.torch.ok)

    def to_json(self) -> dict:
        out = {"ran": self.ran, "provider": self.provider, "ok": self.ok,
               "bindings": [b.to_json() for b in self.bindings]}
        if self.error:
            out["error"] = self.error
        if self.search is not None:
            out["search"] = self.search.to_json()
        if self.torch is not None:
            out["torch"] = self.torch.to_json()
        return out


def providers(choice: str = "auto") -> List[str]:
    """Execution providers for ``cpu``, ``cuda`` or ``auto`` (CUDA when present)."""
    import onnxruntime as ort

    available = ort.get_available_providers()
    if choice == "cpu":
        return ["CPUExecutionProvider"]
    if choice == "cuda":
        if "CUDAExecutionProvider" not in available:
            from ..errors import UsageError
            raise UsageError("--provider cuda: onnxruntime has no CUDAExecutionProvider here"
                             " (install onnxruntime-gpu instead of onnxruntime; see the README)")
        return ["CUDAExecutionProvider", "CPUExecutionProvider"]
    if "CUDAExecutionProvider" in available:
        return ["CUDAExecutionProvider", "CPUExecutionProvider"]
    return ["CPUExecutionProvider"]


def session(model, provider_list: Sequence[str], basic: bool = False):
    """An onnxruntime session for a ModelProto or a model path (a path resolves
    external data beside the model). ``basic`` keeps to onnxruntime's basic graph
    optimizations (no QDQ fusion into integer kernels)."""
    import onnxruntime as ort

    # Quiet: a binding the original rejects is an expected outcome, reported by us.
    ort.set_default_logger_severity(4)
    opts = ort.SessionOptions()
    opts.log_severity_level = 4
    if basic:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    # CUDA multiplies in TF32 by default: ~1e-3 relative, beyond the check's tolerance against
    # an fp32 reference (PyTorch on CPU, LiteRT); the check wants the model's fp32 numbers.
    providers = [(p, CUDA_OPTIONS) if p == "CUDAExecutionProvider" else p for p in provider_list]
    # onnxruntime 1.32's WeightBiasQuantization quantizes the float weights of a Conv that
    # sits between QuantizeLinear/DequantizeLinear nodes per tensor, which loses the
    # per-channel precision a TFLite model's weights had (59 int8 steps off on a per-axis
    # conv): the check computes what the graph says.
    return ort.InferenceSession(source, opts, providers=providers, disabled_optimizers=UNSAFE_OPTIMIZERS)


UNSAFE_OPTIMIZERS = ["WeightBiasQuantization"]


CUDA_OPTIONS = {"use_tf32": "0"}


# -- inputs ---------------------------------------------------------------------------

def _static(d) -> bool:
    """Whether a declared dim has a size: a negative ``dim_value`` (-1, as Paddle2ONNX
    and older exporters write a dynamic dim) is dynamic, as onnxruntime and the
    importer read it."""
    return d.HasField("dim_value") and d.dim_value >= 0


def declared_shapes(model: onnx.ModelProto) -> Declared:
    """Each fed graph input (a tensor, not an initializer): its name and per axis its
    static size or its dim key - the symbol, or ``input[axis]`` for an anonymous dim.
    An unranked input has None."""
    inits = {t.name for t in model.graph.initializer}
    out: Declared = []
    for vi in model.graph.input:
        if vi.name in inits or not vi.type.HasField("tensor_type"):
            continue
        tt = vi.type.tensor_type
        out.append((vi.name, [d.dim_value if _static(d) else (d.dim_param or f"{vi.name}[{k}]")
                              for k, d in enumerate(tt.shape.dim)] if tt.HasField("shape") else None))
    return out


def _dims_of(model: onnx.ModelProto) -> List[Tuple[str, str, int]]:
    """(input name, dim key, axis) for every dynamic dim of the graph inputs."""
    return [(name, d, k) for name, shape in declared_shapes(model) for k, d in enumerate(shape or [])
            if isinstance(d, str)]


_BCAST = re.compile(r"^(\S+) == (\d+) or \1 == 1$")
_EQUAL = re.compile(r"^(\S+) == (\d+)$")


def choices_from_constraints(texts: Sequence[str]) -> Dict[str, List[int]]:
    """Sizes a dynamic dim may take, read off the verifier's runtime constraints
    (``x[0] == 2 or x[0] == 1``: 2 or 1; ``N == 4``: 4). A dim's key is its symbol or
    ``input[axis]``, the same as the constraints name it."""
    out: Dict[str, List[int]] = {}
    for text in texts:
        m = _BCAST.match(text)
        if m:
            out[m.group(1)] = [int(m.group(2)), 1]
            continue
        m = _EQUAL.match(text)
        if m:
            out[m.group(1)] = [int(m.group(2))]
    return out


def _options(key: str, not_one: bool, choices: Optional[Mapping[str, List[int]]]) -> List[int]:
    """The sizes the check runs a free dynamic dim at: its ``choices``, else {SMALL, 1}
    (just SMALL with ``not_one``, strict symbolic mode, where no dynamic dim is 1)."""
    return list((choices or {}).get(key, [SMALL] if not_one else [SMALL, 1]))


def bindings_for(model: onnx.ModelProto, fixed: Mapping[str, int], max_bindings: int = 8,
                 seed: int = 0, not_one: bool = False,
                 choices: Optional[Mapping[str, List[int]]] = None) -> List[Dict[str, int]]:
    """Dim bindings to run: every combination of each free dynamic dim's ``_options``
    up to ``max_bindings``, then a seeded sample that keeps the first and the last
    combination (all large, all small)."""
    keys = sorted({key for _, key, _ in _dims_of(model)} - set(fixed))
    if not keys:
        return [dict(fixed)]
    options = [_options(k, not_one, choices) for k in keys]
    total = 1
    for o in options:
        total *= len(o)
    if total <= max_bindings:
        combos = list(itertools.product(*options))
    else:
        rng = random.Random(seed)
        sample = {tuple(o[0] for o in options), tuple(o[-1] for o in options)}
        while len(sample) < max_bindings:
            sample.add(tuple(rng.choice(o) for o in options))
        combos = sorted(sample, reverse=True)
    return [dict(fixed, **dict(zip(keys, c))) for c in combos]


def synthesize(model: onnx.ModelProto, dims: Mapping[str, int], given: Mapping[str, np.ndarray],
               seed: int = 0) -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    feeds: Dict[str, np.ndarray] = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        if vi.name in given:
            feeds[vi.name] = given[vi.name]
            continue
        if vi.type.WhichOneof("value") != "tensor_type":
            kind = (vi.type.WhichOneof("value") or "untyped").replace("_type", "")
            raise CheckUnavailable(f"input '{vi.name}' is a {kind}, and the check makes tensor inputs only")
        tt = vi.type.tensor_type
        shape = []
        for k, d in enumerate(tt.shape.dim):
            if _static(d):
                shape.append(d.dim_value)
            else:
                shape.append(dims.get(d.dim_param or f"{vi.name}[{k}]", SMALL))
        feeds[vi.name] = _random(rng, tt.elem_type, tuple(shape), vi.name)
    return feeds


def _too_big(name: str, elem_type: int, shape) -> Optional[str]:
    """Why an input of this shape is not made, or None."""
    if len(shape) > MAX_INPUT_RANK:
        return f"input '{name}' has rank {len(shape)}, more than the check makes ({MAX_INPUT_RANK})"
    if any(d < 0 for d in shape):
        return f"input '{name}' has a negative dim in shape {list(shape)}"
    count = 1
    for d in shape:
        count *= int(d)
    try:
        itemsize = helper.tensor_dtype_to_np_dtype(elem_type).itemsize or 8
    except (KeyError, ValueError, TypeError):
        itemsize = 8
    if count * itemsize > MAX_INPUT_BYTES:
        return (f"input '{name}' of shape {list(shape)} would take {count * itemsize / 2**30:.3g} GiB, more than"
                f" the check makes ({MAX_INPUT_BYTES >> 30} GiB); bind its dims with --dim or give it with --input")
    return None


def _random(rng, elem_type: int, shape, name: str = "?") -> np.ndarray:
    why = _too_big(name, elem_type, shape)
    if why is not None:
        raise CheckUnavailable(why)
    if elem_type == onnx.TensorProto.STRING:
        words = np.array(["alpha", "beta", "gamma", "delta"], dtype=object)
        return rng.choice(words, size=shape)
    dtype = helper.tensor_dtype_to_np_dtype(elem_type)
    # np.asarray: a rank-0 draw is a numpy scalar, which onnxruntime does not take.
    if dtype == np.bool_:
        return np.asarray(rng.random(shape) < 0.5)
    if np.issubdtype(dtype, np.integer):
        # Small positive ints: safe as divisors, exponents and most indices.
        return np.asarray(rng.integers(1, 3, size=shape), dtype)
    return np.asarray(rng.standard_normal(shape), dtype)


# -- comparison -----------------------------------------------------------------------

def compare(name: str, expected: np.ndarray, got: np.ndarray, rtol: float, atol: float,
            full_stats: bool = True) -> OutputResult:
    expected, got = np.asarray(expected), np.asarray(got)
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


def check(original, legalized, *, provider: str = "auto", dims: Optional[Mapping[str, int]] = None,
          inputs=None, rtol: float = RTOL, atol: float = ATOL, max_bindings: int = 8, seed: int = 0,
          declared: Optional[onnx.ModelProto] = None, not_one: bool = False,
          choices: Optional[Mapping[str, List[int]]] = None,
          input_shapes: Optional[Mapping[str, Sequence[int]]] = None,
          hints: Optional[Mapping[str, Sequence[int]]] = None, max_search_tries: Optional[int] = None) -> CheckResult:
    """Run both models (ModelProtos or paths) for each dim binding and compare their
    outputs. ``declared`` is the original's proto, for its input declarations, when
    ``original`` is a path (its weights are not needed for that). ``inputs`` (arrays by
    input name, or an ``.npz`` path) and ``input_shapes`` bind the dims of their inputs,
    as ``dims`` does (UsageError when they do not fit the model). When the original
    rejects every synthesized binding, the bindings are searched for (``search.py``;
    ``hints``: per dim, sizes to try first, e.g. its range's bounds)."""
    provider_list = providers(provider)
    if declared is None:
        declared = original if isinstance(original, onnx.ModelProto) else \
            onnx.load_model(str(original), load_external_data=False)
    given = as_arrays(inputs)
    fixed = user_dims(declared_shapes(declared), dims, input_shapes, given)
    try:
        ref = session(original, provider_list)
    except Exception as e:  # noqa: BLE001 - onnxruntime's own words are the reason
        return CheckResult(False, provider_list[0], error=f"the original does not load on onnxruntime: {first_line(e)}")
    used = ref.get_providers()[0]
    if provider == "cuda" and used != "CUDAExecutionProvider":
        from ..errors import UsageError
        raise UsageError("--provider cuda: onnxruntime could not start its CUDA provider (missing CUDA or"
                         " cuDNN libraries?); see the README's GPU set-up")
    try:
        new = session(legalized, provider_list)
    except Exception as e:  # noqa: BLE001
        return CheckResult(True, used, error=f"the legalized model does not load on onnxruntime: {first_line(e)}")
    result = CheckResult(True, used)
    out_names = [o.name for o in ref.get_outputs()]

    def run_original(binding: Dict[str, int]):
        try:
            feeds = synthesize(declared, binding, given, seed)
        except CheckUnavailable:
            raise TooBig from None
        try:
            ref.run(None, feeds)
        except Exception as e:  # noqa: BLE001 - the original rejects this binding
            return str(e)
        return None

    def compare_binding(binding: Dict[str, int], source: str) -> Optional[str]:
        """Compare one binding; the original's error when it rejects it."""
        feeds = synthesize(declared, binding, given, seed)
        try:
            expected = ref.run(None, feeds)
        except Exception as e:  # noqa: BLE001 - the original rejects this binding
            result.bindings.append(BindingResult(binding, True, skipped=f"original fails: {first_line(e)}",
                                                 source=source))
            return str(e)
        try:
            got = new.run(None, feeds)
        except Exception as e:  # noqa: BLE001
            result.bindings.append(BindingResult(binding, False, [OutputResult(n, False, detail=first_line(e))
                                                                   for n in out_names], source=source))
            return None
        outs = [compare(n, e, g, tol_of(rtol, n), tol_of(atol, n)) for n, e, g in zip(out_names, expected, got)]
        result.bindings.append(BindingResult(binding, all(o.ok for o in outs), outs, source=source))
        return None

    free = _free_keys(declared, fixed)
    plan = bindings_for(declared, fixed, max_bindings, seed, not_one, choices)
    try:
        errors = [e for e in (compare_binding(b, source_of(declared, fixed)) for b in plan) if e is not None]
        if free and len(errors) == len(plan):
            all_hints = {k: [*(hints or {}).get(k, ()), *sizes_in_name(k)] for k in free}
            found = result.search = search(free, plan[0], run_original, errors=errors, hints=all_hints,
                                           constants=graph_sizes(declared), tried=plan, max_tries=max_search_tries)
            if found.found is not None:
                found.choices = {k: _with_found(_options(k, not_one, choices), found.found[k], plan[0][k])
                                 for k in free}
                for binding in bindings_for(declared, fixed, max_bindings, seed, not_one, found.choices):
                    if not found.knows_rejected(binding):  # no binding the original rejected again
                        compare_binding(binding, "search")
    except CheckUnavailable as e:
        return CheckResult(False, used, error=str(e))
    if not any(not b.skipped for b in result.bindings):
        searched = f"; a search of {result.search.tried} more found none it accepts" if result.search else ""
        result.error = (f"the original model fails on onnxruntime for every input binding tried ({len(plan)}"
                        f" synthesized{searched}): " + (result.bindings[0].skipped if result.bindings else ""))
        result.ran = False
    return result


def source_of(declared: onnx.ModelProto, fixed: Mapping[str, int], searched: bool = False) -> str:
    """A binding's ``source``: "search" (its sizes were searched for), "user" (every
    dynamic dim bound by the user) or "synthesized"."""
    if searched:
        return "search"
    return "user" if fixed and not _free_keys(declared, fixed) else "synthesized"


def _free_keys(declared: onnx.ModelProto, fixed: Mapping[str, int]) -> List[str]:
    """The dynamic dims not bound by the user, in the order the search grows them: the
    last axes first (a leading dim is usually a batch, which any size fits)."""
    axis: Dict[str, int] = {}
    for _, key, k in _dims_of(declared):
        if key not in fixed:
            axis[key] = max(axis.get(key, k), k)
    return sorted(axis, key=lambda key: -axis[key])


def _with_found(options: List[int], found: int, base: int) -> List[int]:
    """A dim's sizes after the search: the size found where it changed the dim (and 1,
    when the check would try 1 anyway), else the dim's own."""
    if found == base:
        return options
    return [found] + ([1] if 1 in options and found != 1 else [])
