"""Where two models start to differ: compare their intermediate values on the same
inputs, and name the earliest value that differs whose operands all match (the culprit).

The candidate (the legalized model, or the model given to ``--against``) and the
reference run on the runners of their formats (``runtimes.py``), which give their
intermediate values (``Runner.values``). Values
are matched by name: ONNX value names, TFLite tensor names (the passes keep them). A
TOSA module's values are matched to the reference's by their op's ``loc`` name, its
arguments and results by position, and any other value by content: the reference
tensor of its size that 90% of its elements agree with within 1% (a converter that
drops the names, as tosa-converter-for-tflite does, still gets its ops placed).

``Localization.divergence`` lists the matched values that differ beyond the tolerances,
in the candidate's topological order; the first is the culprit (every value before it
agrees, so its operands do). When its operands have no counterpart in the reference
(ops a converter inserted), ``region`` names the ops between it and the matching values
it is computed from.

On IREE, the first run returns every value (the module cut at all of them). If that run
agrees where the whole module did not (returning a value keeps IREE from fusing across
it), the matched values that feed a differing result are bisected: each run cuts the
module at one of them, and ``budget`` bounds the runs.
"""

from __future__ import annotations

import pathlib
import time
from dataclasses import dataclass, field
from collections.abc import Mapping
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from ..ir.graph import CONST, OP, Graph
from . import BUDGET
from .compare import compare, tol_of
from .results import OutputResult
from .probes import CHUNK_BYTES, chunks
from .runner import Runner
from .runtimes import MODULE, ONNX, TFLITE, runner_for
from .settings import CheckSettings

# Content matching: a value corresponds to a reference tensor of its size when this
# share of its elements agrees within LOOSE_RTOL (and LOOSE_ATOL of the tensor's
# median magnitude). Loose, so that a value that differs a little is still placed.
AGREE_SHARE, LOOSE_RTOL, LOOSE_ATOL = 0.9, 1e-2, 1e-3
MIN_CONTENT_SIZE = 4  # smaller tensors agree by chance
MAX_CONTENT_TESTS = 200_000  # pairs of (value, reference tensor) content matching tries at most


@dataclass
class Step:
    """One op of the candidate: its node's label and op, operand and result names."""

    node: str
    op: str
    inputs: List[str]
    outputs: List[str]


def steps_of(graph: Graph) -> List[Step]:
    """The ops of ``graph`` in topological order."""
    return [Step(n.label, n.op, [v.name for v in n.inputs if v is not None], [v.name for v in n.outputs])
            for n in graph.nodes() if n.kind == OP]


@dataclass
class Divergence:
    value: str
    node: str
    op: str
    max_abs_err: float
    max_rel_err: float
    mismatched: int
    total: int
    reference: str = ""  # the reference value it was compared with, when named otherwise
    reference_op: str = ""
    detail: str = ""  # shape or NaN positions, when the values were not compared element by element

    def where(self) -> str:
        """``node 'n' (Op) value 'v'``; the value left out where the node is named by it."""
        value = "" if self.node in (self.value, "%" + self.value) else f" value '{self.value}'"
        return f"node '{self.node}' ({self.op}){value}"

    def error(self) -> str:
        return self.detail or f"max abs err {self.max_abs_err:.3g}, {self.mismatched} of {self.total} elements differ"

    def to_json(self) -> dict:
        out = {"value": self.value, "node": self.node, "op": self.op, "max_abs_err": self.max_abs_err,
               "max_rel_err": self.max_rel_err, "mismatched": self.mismatched, "total": self.total}
        if self.reference and self.reference != self.value:
            out["reference"] = self.reference
        if self.reference_op:
            out["reference_op"] = self.reference_op
        if self.detail:
            out["detail"] = self.detail
        return out


@dataclass
class Localization:
    runtimes: str  # "candidate runtime vs reference runtime"
    binding: Dict[str, int] = field(default_factory=dict)
    divergence: List[Divergence] = field(default_factory=list)
    compared: int = 0  # matched values compared
    runs: int = 0
    seconds: float = 0.0
    region: List[Step] = field(default_factory=list)  # unmatched ops the culprit is computed through
    note: str = ""  # how it was found (bisected), or why it could not be
    # what reduce.py needs: both runs' values and the matching (not in the report)
    values: Tuple[Dict[str, np.ndarray], Dict[str, np.ndarray], Dict[str, str]] = \
        field(default_factory=lambda: ({}, {}, {}))
    graph: Optional[Graph] = None  # the candidate's IR as localized, when it is not the model's (MLIR)

    @property
    def culprit(self) -> Optional[Divergence]:
        return self.divergence[0] if self.divergence else None

    def to_json(self) -> dict:
        out = {"runtimes": self.runtimes, "binding": dict(self.binding), "compared": self.compared,
               "runs": self.runs, "seconds": round(self.seconds, 6),
               "culprit": self.culprit.value if self.culprit else None,
               "region": [{"node": s.node, "op": s.op} for s in self.region]}
        if self.note:
            out["note"] = self.note
        return out

    def line(self) -> str:
        """The culprit in one line, for the terminal."""
        c = self.culprit
        if c is None:
            why = self.note or f"all {self.compared} matched values agree"
            return f"localize: no intermediate value differs ({why})"
        ref = f", the reference's '{c.reference}'" if c.reference and c.reference != c.value else ""
        ref += f" ({c.reference_op})" if c.reference_op and ref else ""
        through = ""
        if self.region:
            ops = ", ".join(f"{s.op} {s.node}" for s in self.region)
            through = f"; computed from matching values through {ops}"
        more = len(self.divergence) - 1
        tail = f" ({more} later value{' differs' if more == 1 else 's differ'} too)" if more > 0 else ""
        return f"culprit: {c.where()}{ref}: {c.error()}{through}{tail}"


# -- comparing ---------------------------------------------------------------------------

def compare_value(name: str, got: np.ndarray, expected: np.ndarray, rtol: float, atol: float,
                   quantized: bool) -> OutputResult:
    """``got`` against ``expected`` (reshaped to it when only unit dims differ, as a
    converter's reshapes do); a quantized integer tensor within one step."""
    got, expected = np.asarray(got), np.asarray(expected)
    if got.shape != expected.shape and got.size == expected.size:
        got = got.reshape(expected.shape)
    if not quantized and got.dtype == expected.dtype and got.dtype.kind == "f" and got.shape == expected.shape:
        with np.errstate(invalid="ignore", over="ignore"):  # most values agree: one pass, in their own dtype
            if np.all(np.abs(got - expected) <= atol + rtol * np.abs(expected)):  # (a NaN or inf: compare)
                return OutputResult(name, True)
    return compare(name, expected, got, rtol, atol, full_stats=False, quantized=quantized)


def diverging(steps: Sequence[Step], cand: Mapping[str, np.ndarray], ref: Mapping[str, np.ndarray],
              pairs: Mapping[str, str], settings: CheckSettings, quantized: Iterable[str] = (),
              outputs: Mapping[str, str] = {}) -> Tuple[List[Divergence], int]:
    """The matched values that differ, in ``steps``' order, and how many were compared.
    ``atomic_files`` maps a graph output's value to its output name (its tolerance)."""
    quantized = set(quantized)
    out: List[Divergence] = []
    compared = 0
    for step in steps:
        for v in step.outputs:
            r = pairs.get(v)
            if r is None or v not in cand or r not in ref:
                continue
            key = outputs.get(v)
            rtol, atol = settings.rtol, settings.atol
            rt, at = (tol_of(rtol, key), tol_of(atol, key)) if key else (float(rtol), float(atol))
            res = compare_value(v, cand[v], ref[r], rt, at, v in quantized)
            compared += 1
            if not res.ok:
                stats = res.stats or {}
                total = int(np.asarray(ref[r]).size)
                out.append(Divergence(v, step.node, step.op, res.max_abs_err, res.max_rel_err,
                                      stats.get("mismatched", total), stats.get("total", total), r,
                                      detail=res.detail if res.detail.startswith(("shape", "dtype", "NaN")) else ""))
    return out, compared


def region_of(steps: Sequence[Step], value: str, matched: Iterable[str]) -> List[Step]:
    """The ops ``value`` is computed through from matched values (or inputs and
    constants), its own producer last: nothing when its operands all match."""
    producer = {v: s for s in steps for v in s.outputs}
    matched = set(matched)
    seen, todo = set(), [value]
    while todo:
        v = todo.pop()
        s = producer.get(v)
        if s is None or id(s) in seen:
            continue
        seen.add(id(s))
        todo += [x for x in s.inputs if x not in matched]
    region = [s for s in steps if id(s) in seen]
    return region[:-1] if region and value in region[-1].outputs else region


# -- matching ------------------------------------------------------------------------------

def by_name(steps: Sequence[Step], ref_names: Iterable[str]) -> Dict[str, str]:
    names = set(ref_names)
    return {v: v for s in steps for v in s.outputs if v in names}


def _agreement(a: np.ndarray, b: np.ndarray) -> float:
    """The share of elements of ``a`` within the loose tolerances of ``b``."""
    a, b = a.reshape(-1).astype(np.float64), b.reshape(-1).astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        scale = LOOSE_ATOL * float(np.median(np.abs(b))) if b.size else 0.0
        close = np.abs(a - b) <= LOOSE_RTOL * np.abs(b) + scale
    return float(np.count_nonzero(close | (np.isnan(a) & np.isnan(b)))) / max(a.size, 1)


def by_content(cand: Mapping[str, np.ndarray], ref: Mapping[str, np.ndarray],
               skip: Iterable[str] = (), cand_counts: Mapping[str, int] = {},
               ref_counts: Mapping[str, int] = {}) -> Dict[str, str]:
    """Each float value of ``cand`` (but ``skip``) matched to the reference tensor of
    its size and dtype that most of its elements agree with, if ``AGREE_SHARE`` do.
    The arrays may be ``sketch``es: ``cand_counts``/``ref_counts`` give the element
    counts of those that are."""
    groups: Dict[tuple, List[str]] = {}
    for r, b in ref.items():
        b = np.asarray(b)
        size = ref_counts.get(r, b.size)
        if b.dtype.kind == "f" and size >= MIN_CONTENT_SIZE:
            groups.setdefault((size, b.dtype), []).append(r)
    skip, pairs, tests = set(skip), {}, 0
    for v, a in cand.items():
        a = np.asarray(a)
        size = cand_counts.get(v, a.size)
        if v in skip or a.dtype.kind != "f" or size < MIN_CONTENT_SIZE:
            continue
        best, best_share = None, AGREE_SHARE
        for r in groups.get((size, a.dtype), []):
            tests += 1
            if tests > MAX_CONTENT_TESTS:
                return pairs
            share = _agreement(a, np.asarray(ref[r]))
            if share >= best_share:  # the later of equals: a converter's copy comes after
                best, best_share = r, share
        if best is not None:
            pairs[v] = best
    return pairs


def loc_name(loc: Optional[str]) -> str:
    """The name an MLIR location gives (``loc("name")``, ``loc("name"(...))``,
    ``loc(fused["name", ...])``; MLIR's parser has resolved ``#loc`` aliases), or ""
    (a file's line and column name nothing)."""
    if loc is None:
        return ""
    inner = loc.strip()
    if inner.startswith("loc(") and inner.endswith(")"):
        inner = inner[4:-1].strip()
    start = inner.find('"')
    end = inner.find('"', start + 1)
    if start < 0 or end < 0 or inner[end + 1:end + 2] == ":":  # none, or a file's ("f.mlir":3:7)
        return ""
    return inner[start + 1:end]


# -- one localization ------------------------------------------------------------------------

def localize(steps: Sequence[Step], cand_probe: Runner, ref_probe: Runner, feeds: Mapping[str, np.ndarray], *,
             match: Callable[[Dict[str, np.ndarray], Dict[str, np.ndarray]], Dict[str, str]], settings: CheckSettings,
             binding: Mapping[str, int] = {}, quantized: Iterable[str] = (), outputs: Mapping[str, str] = {},
             producers: Mapping[str, str] = {}) -> Localization:
    """Run both runners on ``feeds`` for their values, match them (``match(cand, ref)`` -> candidate
    name to reference name) and list those that differ. ``producers``: the reference's
    op per value, to name it beside a value matched under another name."""
    t0 = time.perf_counter()
    loc = Localization(f"{cand_probe.name} vs {ref_probe.name}", dict(binding))
    ref = ref_probe.values(feeds)
    cand = cand_probe.values(feeds)
    pairs = match(cand, ref)
    loc.divergence, loc.compared = diverging(steps, cand, ref, pairs, settings, quantized, outputs)
    _finish(loc, steps, pairs, producers)
    loc.values = (cand, ref, pairs)
    loc.runs = cand_probe.runs + ref_probe.runs
    loc.seconds = time.perf_counter() - t0
    return loc


class LazyValues(Mapping):
    """The values a runner gives for ``feeds``, by name, fetched when asked for (one run
    of the runner each) and a few kept (``CHUNK_BYTES``): what ``reduce.py`` reads of a
    chunked localization, without holding every value."""

    def __init__(self, probe: Runner, feeds: Mapping[str, np.ndarray], names: Iterable[str]):
        self.probe, self.feeds, self.names = probe, feeds, list(dict.fromkeys(names))
        self._known = set(self.names)
        self._cache: Dict[str, np.ndarray] = {}

    def __contains__(self, name) -> bool:
        return name in self._known

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._known:
            raise KeyError(name)
        if name not in self._cache:
            got = self.probe.values(self.feeds, [name])
            if name not in got:
                raise KeyError(name)
            while self._cache and sum(a.nbytes for a in self._cache.values()) + got[name].nbytes > CHUNK_BYTES:
                self._cache.pop(next(iter(self._cache)))
            self._cache[name] = got[name]
        return self._cache[name]

    def __iter__(self):
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)


def localize_chunked(steps: Sequence[Step], cand_probe, ref_probe, feeds: Mapping[str, np.ndarray],
                     settings: CheckSettings, *,
                     binding: Mapping[str, int] = {}, outputs: Mapping[str, str] = {},
                     producers: Mapping[str, str] = {}, budget: int = CHUNK_BYTES,
                     quantized: Iterable[str] = (), skip: Iterable[str] = ()) -> Localization:
    """As ``localize``, values matched by name (but ``skip``), compared a chunk at a
    time (``chunks``): the candidate's values' sizes first (one run that gives out
    their shapes), then per chunk one run of each model that gives out those values.
    Its ``values`` are ``LazyValues``."""
    t0 = time.perf_counter()
    loc = Localization(f"{cand_probe.name} vs {ref_probe.name}", dict(binding))
    skip = set(skip)
    pairs = {v: r for v, r in by_name(steps, ref_probe.all_names()).items() if v not in skip}
    order = [v for s in steps for v in s.outputs if v in pairs]
    sizes = cand_probe.sizes(feeds, order) if order else {}
    return _compare_in_chunks(loc, steps, cand_probe, ref_probe, feeds, chunks(order, sizes, budget), pairs, settings,
                              quantized, outputs, producers, t0)


def _compare_in_chunks(loc: Localization, steps: Sequence[Step], cand_probe, ref_probe, feeds, parts, pairs,
                       settings: CheckSettings, quantized, outputs, producers, t0: float,
                       ref_names: Optional[List[str]] = None) -> Localization:
    """``loc`` once the values of each of ``parts`` are compared, one run of each model
    a part (its values alone held at once); its ``values`` are ``LazyValues`` (of the
    reference: ``ref_names``, or the values it gave)."""
    cand_keys: List[str] = []
    ref_keys: List[str] = []
    for part in parts:
        cand = cand_probe.values(feeds, part)
        ref = ref_probe.values(feeds, list(dict.fromkeys(pairs[v] for v in part)))
        found, compared = diverging(steps, cand, ref, pairs, settings, quantized, outputs)
        loc.divergence += found
        loc.compared += compared
        cand_keys += list(cand)
        ref_keys += list(ref)
        del cand, ref
    _finish(loc, steps, pairs, producers)
    loc.values = (LazyValues(cand_probe, feeds, cand_keys),
                  LazyValues(ref_probe, feeds, ref_keys if ref_names is None else ref_names), pairs)
    loc.runs = cand_probe.runs + ref_probe.runs
    loc.seconds = time.perf_counter() - t0
    return loc


def _finish(loc: Localization, steps: Sequence[Step], pairs: Mapping[str, str], producers: Mapping[str, str]) -> None:
    for d in loc.divergence:
        d.reference_op = producers.get(d.reference, "") if d.reference != d.value else ""
    if loc.culprit is not None:
        loc.region = region_of(steps, loc.culprit.value, pairs)


def bisect(loc: Localization, steps: Sequence[Step], probe: Runner, feeds, ref: Mapping[str, np.ndarray],
           pairs: Mapping[str, str], differing: Sequence[str], budget: int, settings: CheckSettings,
           producers: Mapping[str, str] = {}, why: str = "every value agrees when the module returns them all") -> None:
    """Find the earliest matched value that differs among those ``differing[0]``
    (a result that differs when the whole module runs) is computed from, one cut of
    the module per run, at most ``budget`` runs: binary search in topological order,
    which takes a value computed from a differing one to differ too. ``why`` it
    bisects, for the note."""
    ancestors = _ancestors(steps, differing[0])
    order = [v for s in steps for v in s.outputs if v in ancestors and v in pairs and pairs[v] in ref]
    if not order:
        loc.note = f"{why}; no value it is computed from has a counterpart to bisect over"
        return
    lo, hi, seen = -1, len(order) - 1, {}
    seen[order[hi]] = None
    while hi - lo > 1 and budget > 0:
        mid = (lo + hi) // 2
        got = probe.values(feeds, [order[mid]])
        budget -= 1
        found, _ = diverging(steps, got, ref, pairs, settings)
        if found:
            hi, seen[order[mid]] = mid, found[0]
        else:
            lo = mid
    first = seen.get(order[hi])
    if first is None:  # the result itself: as the whole module computed it
        first = Divergence(order[hi], *_producer(steps, order[hi]), float("nan"), float("nan"), 0, 0, pairs[order[hi]],
                           detail="differs when the whole module runs")
    loc.divergence = [first]
    narrowed = "" if hi - lo <= 1 else f" (the budget ran out: it lies among {hi - lo} values up to this one)"
    loc.note = f"{why}; bisected over {len(order)} values the differing result is computed from{narrowed}"
    _finish(loc, steps, pairs, producers)


def _producer(steps: Sequence[Step], value: str) -> Tuple[str, str]:
    for s in steps:
        if value in s.outputs:
            return s.node, s.op
    return value, ""


def _ancestors(steps: Sequence[Step], value: str) -> set:
    producer = {v: s for s in steps for v in s.outputs}
    seen, todo = set(), [value]
    while todo:
        v = todo.pop()
        if v in seen:
            continue
        seen.add(v)
        if v in producer:
            todo += producer[v].inputs
    return seen


# -- per format ------------------------------------------------------------------------------

def onnx_steps(model) -> List[Step]:
    """The top-level nodes of an ONNX ModelProto (in graph order, which is topological)."""
    return [Step(n.name or (n.output[0] if n.output else n.op_type),
                 n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}",
                 [x for x in n.input if x], [x for x in n.output if x]) for n in model.graph.node]


def localize_onnx(candidate, reference, feeds, settings: CheckSettings, *,
                  binding: Mapping[str, int] = {}) -> Localization:
    """ONNX against ONNX on the runtime that runs ONNX on the ``settings``' provider,
    values matched by name (ModelProtos, their external data loaded)."""
    provider = settings.provider
    runtime = runner_for(ONNX, provider)
    steps = onnx_steps(candidate)
    producers = {o: n.op_type for n in reference.graph.node for o in n.output}
    return localize_chunked(steps, runtime.runner(candidate, provider, what="the candidate"),
                            runtime.runner(reference, provider, what="the reference"), feeds, settings,
                            binding=binding,
                            outputs={o.name: o.name for o in candidate.graph.output}, producers=producers)


def localize_tflite(candidate, reference, graph: Graph, feeds, settings: CheckSettings, *,
                    binding: Mapping[str, int] = {}) -> Localization:
    """TFLite against TFLite on LiteRT (paths; ``graph`` the candidate's primary
    subgraph), tensors matched by name and compared a chunk at a time
    (``localize_chunked``); a quantized tensor may differ by one step.
    Builtin kernels, or LiteRT's default resolver for a custom op only it runs (as
    the check)."""
    provider = settings.provider
    runtime = runner_for(TFLITE, provider)
    steps = steps_of(graph)
    quantized = [v.name for n in graph.nodes() for v in n.outputs
                 if v.quant is not None and v.quant.scale and v.type.dtype in ("int8", "uint8", "int16")]
    ref_probe = runtime.runner(reference, provider)
    kernels, folded = ref_probe.kwargs.get("kernels", "builtin"), set()
    if kernels != "builtin":
        # XNNPACK computes what depends on constants only (a float16 weight's
        # DEQUANTIZE) once, when it takes the graph: LiteRT never writes those tensors
        folded = {n.output.name for n in graph.nodes() if n.kind == CONST}
        for s in steps:
            if s.inputs and all(x in folded for x in s.inputs):
                folded.update(s.outputs)
    return localize_chunked(steps, runtime.runner(candidate, provider, kernels=kernels), ref_probe,
                            feeds, settings, binding=binding, quantized=quantized, skip=folded,
                            outputs={n.inputs[0].name: n.inputs[0].name for n in graph.outputs},
                            producers=ref_probe.call("producers"))


def reference_probe(reference, provider: str):
    """The runner of a ``.tflite`` or ``.onnx`` reference (a path) on the runtime that
    runs its format, its input and output names in order, and its op per value."""
    from ..importers.reader import check_external_data, sniff

    check_external_data(pathlib.Path(reference))  # the runtime reads it beside the file: inside its folder only
    runner = runner_for(sniff(reference), provider).runner(reference, provider)
    return runner, runner.call("input_names"), runner.call("output_names"), runner.call("producers")


def value_bytes(graph: Graph) -> Dict[str, int]:
    """The bytes each op result of ``graph`` takes, from its type (one of a dim or
    dtype not known: more than a chunk, so that it is fetched alone)."""
    out: Dict[str, int] = {}
    for n in graph.ops():
        for v in n.outputs:
            try:
                count = int(np.prod([int(d) for d in v.type.shape], dtype=np.int64))
                out[v.name] = count * np.dtype(v.type.dtype).itemsize
            except (TypeError, ValueError, AttributeError):
                out[v.name] = CHUNK_BYTES + 1
    return out


def localize_mlir(text: str, reference, feeds, settings: CheckSettings, *,
                  binding: Mapping[str, int] = {}, differing: Sequence[int] = (),
                  budget: int = BUDGET, chunk: int = CHUNK_BYTES) -> Localization:
    """A TOSA module (``text``) on IREE against the ``.tflite`` or ``.onnx`` it came
    from; ``feeds`` in ``@main``'s argument order; ``differing``: the positions of the
    results that differed when the whole module ran. When the module's values take
    more than ``chunk`` bytes, they are matched on ``sketch``es and compared a chunk
    at a time (``_mlir_chunked``), the module cut at a chunk of them per run."""
    from ..kinds.mlir.importer import parse_mlir
    from .iree_run import TosaError, bind_dims, printed

    t0 = time.perf_counter()
    ref_probe, ref_inputs, ref_outputs, producers = reference_probe(reference, settings.provider)
    text = printed(bind_dims(text, [np.shape(a) for a in feeds.values()]))  # names as MLIR prints them
    model = parse_mlir(text)
    graph = model.graph
    steps = steps_of(graph)
    results = [n.inputs[0].name for n in graph.outputs]
    fixed = dict(zip(results, ref_outputs))
    for n in graph.ops():
        name = loc_name(getattr(n.proto, "loc", None))
        if name and n.outputs and n.outputs[0].name not in fixed:
            fixed[n.outputs[0].name] = name

    def match(cand, ref):
        pairs = {v: r for v, r in fixed.items() if r in ref}
        pairs.update(by_content({v: a for v, a in cand.items() if v not in pairs}, ref))
        return pairs

    probe = runner_for(MODULE, settings.provider).runner(text, settings.provider)  # (compiled and run in the children)
    outputs = dict(zip(results, ref_outputs))
    sizes = value_bytes(graph)
    names = probe.all_names()
    whole = sum(sizes.get(n, chunk + 1) for n in names) <= chunk
    try:
        if whole:
            loc = localize(steps, probe, ref_probe, feeds, match=match, settings=settings, binding=binding,
                           outputs=outputs, producers=producers)
        else:
            loc = _mlir_chunked(steps, probe, ref_probe, feeds, names, sizes, fixed, settings,
                                binding=binding, outputs=outputs, producers=producers, chunk=chunk)
        budget -= 1
    except TosaError as e:  # the module cut at every value: bisect with names and positions only
        loc = Localization(f"{probe.name} vs {ref_probe.name}", dict(binding))
        loc.values = ({}, ref_probe.values(feeds) if whole else LazyValues(ref_probe, feeds, ref_probe.all_names()),
                      {})
        loc.note = f"IREE does not run the module cut at every value ({e})"
    cand, ref, pairs = loc.values
    if not pairs:
        pairs = {v: r for v, r in fixed.items() if r in ref}
        loc.values = (cand, ref, pairs)
    wrong = [results[i] for i in differing if i < len(results)]
    if not loc.divergence and wrong and budget > 0:
        bisect(loc, steps, probe, feeds, ref, pairs, wrong, budget, settings, producers,
               loc.note or "every value agrees when the module returns them all")
    loc.runs = probe.runs + ref_probe.runs
    loc.seconds = time.perf_counter() - t0
    loc.graph = graph
    return loc


def _mlir_chunked(steps: Sequence[Step], probe, ref_probe, feeds, names: Sequence[str], sizes: Mapping[str, int],
                  fixed: Mapping[str, str], settings: CheckSettings, *, binding: Mapping[str, int],
                  outputs: Mapping[str, str],
                  producers: Mapping[str, str], chunk: int) -> Localization:
    """``localize`` for a module whose values do not fit in ``chunk`` bytes: both
    models' values are summarized (``sketch``) a chunk at a time, the unnamed ones
    matched on their summaries, then the matched values compared a chunk at a time.
    Its ``values`` are ``LazyValues``."""
    t0 = time.perf_counter()
    loc = Localization(f"{probe.name} vs {ref_probe.name}", dict(binding))
    ref_names = ref_probe.all_names()
    known = set(ref_names)
    pairs = {v: r for v, r in fixed.items() if r in known}
    ref_sizes = ref_probe.sizes(feeds, ref_names)
    ref_sk = ref_probe.sketches(feeds, ref_names, ref_sizes, chunk)
    cand_sk = probe.sketches(feeds, [n for n in names if n not in pairs], sizes, chunk)
    pairs.update(by_content({v: sk for v, (_, sk) in cand_sk.items()}, {r: sk for r, (_, sk) in ref_sk.items()},
                            cand_counts={v: c for v, (c, _) in cand_sk.items()},
                            ref_counts={r: c for r, (c, _) in ref_sk.items()}))
    del cand_sk, ref_sk
    order = [v for s in steps for v in s.outputs if v in pairs]
    return _compare_in_chunks(loc, steps, probe, ref_probe, feeds, chunks(order, sizes, chunk), pairs, settings, (),
                              outputs, producers, t0, ref_names)
