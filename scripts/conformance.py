#!/usr/bin/env python3
"""Conformance of ``legalize --target tosa|xla`` over the ONNX test corpus.

Every ONNX node test (``onnx.backend.test.loader.load_model_tests(kind="node")``) and
every model of the onnx wheel's ``light``, ``pytorch-converted``, ``pytorch-operator``
and ``simple`` folders goes through:

1. import (``legalizer.load`` for files, ``kinds.onnx.importer.import_model`` for the
   in-memory node tests) and ``verify(graph, "mlir")``: an input with violations is a
   category of its own and is not legalized;
2. ``target_passes.legalize(model, TARGET, assume_dynamic_not_one=...)``, then
   (a) ``verify(graph, PROFILE)`` must report no violation, where PROFILE is the
       target's profile (``tosa``: equal ranks; ``xla``: no implicit broadcasting);
   (b) ``onnx.checker.check_model(out, full_check=True)`` must pass whenever it
       passes on the original;
   (c) the legalized model's outputs on onnxruntime (CPU) must equal the reference
       outputs shipped with the case, within the case's rtol/atol (node tests: their
       TestCase's; light models: onnx's own table; else 1e-3/1e-7), NaN-aware.

Reference outputs: node tests' data sets; the wheel folders' ``test_data_set_*/
output_*.pb``; for the ``light`` models, their ``light_*_output_*.pb``, produced by
onnx's backend runner from a deterministic input (``Runner.generate_dummy_data``,
``arange(n) / n``), which is rebuilt here. A model without reference outputs is
compared with onnxruntime running the original on synthesized inputs.

A case whose original onnxruntime cannot run is reported as "original does not run
on onnxruntime: <reason>", not as a mismatch; when the legalized model runs (e.g. an
opset-6 model raised to opset 7 by legalize) it is still compared with the reference
outputs and counted. Where onnxruntime itself disagrees with the reference on the
original, the legalized model must agree with the original instead.

With ``--assume-dynamic-not-one`` (strict symbolic mode) the cases are legalized as if
no dynamic dim were 1 at run time (``xla`` elides its runtime broadcast checks); they are
still fed the corpus's own inputs and compared with its reference outputs.

Usage:
  python scripts/conformance.py [--target tosa|xla] [--assume-dynamic-not-one]
                                [--filter SUBSTR] [--json PATH] [-j N]
  python scripts/conformance.py --latency [--target tosa|xla] [--runs 30] [--warmup 5] [--threads 1]

Exit status: 0 iff no failure is attributable to legalize (an exception in it, a
verification failure after it, a checker regression, a legalized model that fails
on onnxruntime where the original runs, or an output mismatch); 1 otherwise.
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import os
import statistics
import sys
import time
import traceback
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # onnx_suite: the corpus and the onnxruntime runner

import multiprocessing  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnx.numpy_helper  # noqa: E402
from onnx import helper  # noqa: E402

import onnx_suite as suite  # noqa: E402

SUITES = ("node",) + suite.WHEEL_FOLDERS
DEFAULT_RTOL, DEFAULT_ATOL = 1e-3, 1e-7

TARGETS = ("tosa", "xla")
# The verifier profile each target's output must be legal under.
# Reasons that are failures of legalize (everything else is a property of the case).
ATTRIBUTABLE = ("exception in", "violations under", "onnx.checker fails on legalized",
                "legalized model fails on onnxruntime", "output mismatch", "legalize modified its input",
                "worker crashed")



def _profile(target: str) -> str:
    """The verifier profile a target's legal form satisfies (``legalizer.targets``)."""
    from legalizer.targets import TARGETS

    return TARGETS[target].profile.name

def attributable(reason: Optional[str]) -> bool:
    return reason is not None and reason.startswith(ATTRIBUTABLE)


# ---- the corpus -----------------------------------------------------------------------
def suite_of(case: suite.Case) -> str:
    return "node" if case.path is None else case.name.split("/", 1)[0]


def all_cases(filter_: Optional[str] = None) -> List[suite.Case]:
    # Node test names hold no "/": a filter with one needs no node tests (4 s to load).
    cases = suite.wheel_cases() + (suite.node_cases() if not filter_ or "/" not in filter_ else [])
    if filter_:
        cases = [c for c in cases if filter_ in c.name]
    return cases


@functools.lru_cache(maxsize=None)
def _light_tolerances() -> Dict[str, Tuple[float, float]]:
    """onnx's own rtol/atol of each light model (densenet121 has 2e-3)."""
    try:
        from onnx.backend.test.case.model import collect_testcases

        return {os.path.basename(t.url): (t.rtol, t.atol) for t in collect_testcases() if t.url}
    except Exception:  # noqa: BLE001 - then the defaults
        return {}


def _dummy_input(vi: onnx.ValueInfoProto) -> np.ndarray:
    """The input onnx's backend runner feeds a light model (and made its outputs with)."""
    try:
        from onnx.backend.test.runner import Runner

        return Runner.generate_dummy_data(vi, seed=0, random=False)
    except ImportError:  # the same thing, as onnx 1.17-1.20 write it
        shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in vi.type.tensor_type.shape.dim)
        n = int(np.prod(shape))
        return (np.arange(n).reshape(shape) / n).astype(np.float32)


def _read_outputs(model: onnx.ModelProto, files: List[str]) -> list:
    return [suite._read_value(Path(f).read_bytes(), model.graph.output[i].type) for i, f in enumerate(files)]


def _numbered(folder: str, prefix: str) -> List[str]:
    import glob
    import re

    files = glob.glob(os.path.join(folder, f"{prefix}_*.pb"))
    return sorted(files, key=lambda p: int(re.search(r"_(\d+)\.pb$", p).group(1)))


def case_data(case: suite.Case) -> Tuple[List[Dict[str, Any]], Optional[List[list]], float, float, str]:
    """(feeds, reference outputs per feed or None, rtol, atol, where the references come from)."""
    if case.path is None:
        return case.feeds(), case.refs, case.rtol, case.atol, "node test data set"
    model = case.model
    folder = os.path.dirname(case.path)
    if suite_of(case) == "light":
        stem = case.path[: -len(".onnx")]
        outs = [f"{stem}_output_{i}.pb" for i in range(len(model.graph.output))]
        rtol, atol = _light_tolerances().get(os.path.basename(case.path), (DEFAULT_RTOL, DEFAULT_ATOL))
        if all(os.path.exists(f) for f in outs):
            inits = {t.name for t in model.graph.initializer}
            feed = {vi.name: _dummy_input(vi) for vi in model.graph.input if vi.name not in inits}
            return [feed], [_read_outputs(model, outs)], rtol, atol, "shipped output, onnx runner's input"
        return [suite.synthesize(model)], None, rtol, atol, "original on onnxruntime, synthesized input"
    sets = sorted(d for d in (os.path.join(folder, n) for n in os.listdir(folder))
                  if os.path.basename(d).startswith("test_data_set_") and os.path.isdir(d))
    if not sets:
        return [suite.synthesize(model)], None, DEFAULT_RTOL, DEFAULT_ATOL, "original on onnxruntime, synthesized input"
    feeds = suite._wheel_feeds(case)
    refs = [_read_outputs(model, _numbered(d, "output")) for d in sets]
    return feeds, refs, DEFAULT_RTOL, DEFAULT_ATOL, "test_data_set outputs"


# ---- comparison -----------------------------------------------------------------------
def _array(x: Any) -> Any:
    """A value as numpy (ml_dtypes for bfloat16, float8, int4, ...), recursively."""
    if isinstance(x, onnx.TensorProto):
        return onnx.numpy_helper.to_array(x)
    if isinstance(x, tuple) and len(x) == 4 and x[0] == "raw":  # onnx_suite._from_ort
        _, elem, shape, raw = x
        return onnx.numpy_helper.to_array(helper.make_tensor("x", elem, shape, raw, raw=True))
    if isinstance(x, (list, tuple)):
        return [_array(y) for y in x]
    if isinstance(x, dict):
        return {k: _array(v) for k, v in x.items()}
    if x is None or isinstance(x, np.ndarray):
        return x
    return np.asarray(x)


def mismatch(got: Any, want: Any, rtol: float, atol: float, where: str = "output") -> Optional[str]:
    """None when ``got`` equals ``want`` within rtol/atol (NaN equals NaN, inf equals the
    same inf, integers, bools and strings exactly), else what differs."""
    got, want = _array(got), _array(want)
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return f"{where}: {type(got).__name__} of {len(got) if isinstance(got, list) else '-'} vs list of {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            bad = mismatch(g, w, rtol, atol, f"{where}[{i}]")
            if bad:
                return bad
        return None
    if isinstance(want, dict):
        if not isinstance(got, dict) or got.keys() != want.keys():
            return f"{where}: map keys differ"
        for k in want:
            bad = mismatch(got[k], want[k], rtol, atol, f"{where}[{k!r}]")
            if bad:
                return bad
        return None
    if want is None or got is None:
        return None if got is None and want is None else f"{where}: {got!r} vs {want!r}"
    if got.shape != want.shape:
        return f"{where}: shape {got.shape} vs {want.shape}"
    if got.dtype != want.dtype and got.dtype == np.uint8 and want.dtype.isbuiltin != 1 and want.dtype.itemsize == 1:
        got = got.view(want.dtype)  # onnxruntime hands float8 outputs to numpy as their bits
    if got.dtype != want.dtype:
        return f"{where}: dtype {got.dtype} vs {want.dtype}"
    if want.dtype.kind in "OSU" or want.dtype.kind in "biu" and want.dtype.isbuiltin == 1:
        if np.array_equal(got, want):
            return None
        return f"{where}: {int(np.sum(got != want))} of {want.size} elements differ"
    if want.dtype.name == "bfloat16":
        rtol = max(rtol, 2.0 ** -6)  # two bfloat16 ulps, as onnx's runner allows
    if want.dtype.kind == "c":
        g, w = got.astype(np.complex128), want.astype(np.complex128)
    else:
        # ml_dtypes (bfloat16, float8, int4, ...) go through float32, exactly.
        g, w = (x.astype(np.float64) if x.dtype.isbuiltin == 1 else x.astype(np.float32).astype(np.float64)
                for x in (got, want))
    with np.errstate(invalid="ignore", over="ignore"):
        nan_g, nan_w = np.isnan(g), np.isnan(w)
        if not np.array_equal(nan_g, nan_w):
            return f"{where}: NaNs at different positions"
        same = (g == w) | nan_w
        diff = np.where(same, 0.0, np.abs(g - w))
        bad = ~same & ~(diff <= atol + rtol * np.abs(w))
    if not bad.any():
        return None
    return f"{where}: {int(bad.sum())} of {w.size} elements differ, max abs err {float(np.nanmax(diff)):.3g}"


def outputs_mismatch(got: List[list], want: List[list], rtol: float, atol: float) -> Optional[str]:
    for k, (g, w) in enumerate(zip(got, want)):
        if len(w) > len(g):
            return f"data set {k}: {len(g)} outputs, {len(w)} expected"
        # A reference data set may hold fewer outputs than the graph (optional ones).
        bad = mismatch(list(g[: len(w)]), list(w), rtol, atol, f"data set {k}, output")
        if bad:
            return bad
    return None


# ---- one case -------------------------------------------------------------------------
def _exc(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:300] if text else ''}"


def run_case(name: str, target: str = "tosa", assume_dynamic_not_one: bool = False) -> dict:
    import legalizer
    from legalizer.kinds.onnx.importer import import_model
    from legalizer.target_passes import legalize

    case = suite.case_by_name(name)
    r: Dict[str, Any] = {"name": name, "suite": suite_of(case), "target": target,
                         "profile": _profile(target), "legalized": False, "legal": None,
                         "checker_original": None, "checker_ok": None, "outputs_equal": None,
                         "original_runs": None, "legalized_runs": None, "reason": None,
                         "attributable": False, "problems": [], "notes": [], "detail": "",
                         "opset_in": None, "opset_out": None, "warnings": [], "seconds": 0.0}
    t0 = time.perf_counter()

    def problem(reason: str, detail: str = "") -> None:
        r["problems"].append(reason)
        if detail and not r["detail"]:
            r["detail"] = detail

    try:
        _run_case(case, r, problem, legalizer, import_model,
                  functools.partial(legalize, target=target, assume_dynamic_not_one=assume_dynamic_not_one))
    except Exception as e:  # noqa: BLE001 - a bug of this script is a finding too
        problem(f"exception in conformance script: {type(e).__name__}", traceback.format_exc()[-800:])
    first_bad = [p for p in r["problems"] if attributable(p)]
    r["reason"] = first_bad[0] if first_bad else (r["problems"][0] if r["problems"] else None)
    r["attributable"] = bool(first_bad)
    r["seconds"] = round(time.perf_counter() - t0, 3)
    return r


def _run_case(case, r, problem, legalizer, import_model, legalize) -> None:
    proto = case.model
    original = proto.SerializeToString()
    r["opset_in"] = _opset(proto)
    try:
        onnx.checker.check_model(proto, full_check=True)
        r["checker_original"] = True
    except Exception as e:  # noqa: BLE001
        r["checker_original"] = False
        r["notes"].append(f"original fails onnx.checker: {_exc(e)}")

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = legalizer.load(case.path) if case.path else import_model(proto)
    except Exception as e:  # noqa: BLE001
        return problem(f"exception in load: {type(e).__name__}", _exc(e))
    try:
        before = legalizer.verify(model.graph, "mlir")
    except Exception as e:  # noqa: BLE001
        return problem(f"exception in verify: {type(e).__name__}", _exc(e))
    if before.violations:
        return problem("input has violations under mlir", str(before.violations[0]))

    try:
        done = legalize(model)
    except Exception as e:  # noqa: BLE001
        return problem(f"exception in legalize: {type(e).__name__}", _exc(e))
    r["legalized"] = True
    r["warnings"] = list(done.warnings)
    r["stats"] = {k: int(v) for k, v in done.stats.items() if v}
    try:
        after = legalizer.verify(model.graph, r["profile"])
    except Exception as e:  # noqa: BLE001
        return problem(f"exception in verify: {type(e).__name__}", _exc(e))
    r["legal"] = not after.violations
    if after.violations:
        problem(f"violations under {r['profile']} after legalize", str(after.violations[0]))
    try:
        out = legalizer.to_onnx(model)
    except Exception as e:  # noqa: BLE001
        return problem(f"exception in export: {type(e).__name__}", _exc(e))
    r["opset_out"] = _opset(out)
    r["rewritten"] = bool(r["stats"]) or r["opset_out"] != r["opset_in"]
    if case.path is None and proto.SerializeToString() != original:
        problem("legalize modified its input ModelProto")
    try:
        onnx.checker.check_model(out, full_check=True)
        r["checker_ok"] = True
    except Exception as e:  # noqa: BLE001
        r["checker_ok"] = False
        if r["checker_original"]:
            problem("onnx.checker fails on legalized model", _exc(e))

    feeds, refs, rtol, atol, source = case_data(case)
    r["reference"] = source
    orig = suite.ort_run(original, feeds)
    new = suite.ort_run(out.SerializeToString(), feeds)
    r["original_runs"], r["legalized_runs"] = orig.outputs is not None, new.outputs is not None
    if refs is None:
        refs = orig.outputs
    if orig.outputs is None:
        cause = f"{ORT_FAILS}: {ort_category(orig.reason)}"
        r["original_ort_error"] = orig.reason
        if new.outputs is None or refs is None:
            return problem(cause, f"{orig.stage}: {orig.reason}")
        bad = outputs_mismatch(new.outputs, refs, rtol, atol)
        r["outputs_equal"] = bad is None
        if bad is None:
            return problem(cause + " (the legalized model runs, equal)", f"{orig.stage}: {orig.reason}")
        return problem("output mismatch (original does not run on onnxruntime)", bad)
    if new.outputs is None:
        return problem("legalized model fails on onnxruntime", f"{new.stage}: {new.reason}")
    bad = outputs_mismatch(new.outputs, refs, rtol, atol)
    r["outputs_equal"] = bad is None
    if bad is None:
        return None
    # onnxruntime may itself disagree with the reference: then match the original.
    if outputs_mismatch(orig.outputs, refs, rtol, atol) is not None:
        vs_orig = outputs_mismatch(new.outputs, orig.outputs, rtol, atol)
        if vs_orig is None:
            return problem("onnxruntime disagrees with the reference on the original too", bad)
        return problem("output mismatch (against the original on onnxruntime)", vs_orig)
    return problem("output mismatch", bad)


def _opset(m: onnx.ModelProto) -> Optional[int]:
    for o in m.opset_import:
        if o.domain in ("", "ai.onnx"):
            return o.version
    return None


# ---- running many ---------------------------------------------------------------------
def _crashed(name: str, why: str, target: str = "tosa") -> dict:
    case = suite.case_by_name(name)
    return {"name": name, "suite": suite_of(case), "target": target, "profile": _profile(target),
            "legalized": False, "legal": None,
            "checker_original": None, "checker_ok": None, "outputs_equal": None, "reason": "worker crashed",
            "attributable": True, "problems": ["worker crashed"], "notes": [], "detail": why, "seconds": 0.0}


def run_all(names: List[str], jobs: int, progress=None, target: str = "tosa",
            assume_dynamic_not_one: bool = False) -> List[dict]:
    one = functools.partial(run_case, target=target, assume_dynamic_not_one=assume_dynamic_not_one)
    if jobs <= 1:
        out = []
        for n in names:
            out.append(one(n))
            if progress:
                progress(out[-1])
        return out
    ctx = multiprocessing.get_context("fork")  # workers inherit the loaded corpus
    results: Dict[str, dict] = {}
    try:
        with ProcessPoolExecutor(jobs, mp_context=ctx) as pool:
            for f in as_completed([pool.submit(one, n) for n in names]):
                r = f.result()
                results[r["name"]] = r
                if progress:
                    progress(r)
    except BrokenProcessPool:
        # A worker died (a crash in onnxruntime?): run what is left one at a time, each
        # in its own process, so that the culprit is named.
        for n in [n for n in names if n not in results]:
            results[n] = _isolated(ctx, n, one, target)
            if progress:
                progress(results[n])
    return [results[n] for n in names]


def _isolated(ctx, name: str, one=run_case, target: str = "tosa") -> dict:
    with ProcessPoolExecutor(1, mp_context=ctx) as pool:
        try:
            return pool.submit(one, name).result()
        except BrokenProcessPool as e:
            return _crashed(name, f"the process running it died: {e}", target)


# ---- report ----------------------------------------------------------------------------
COUNTS = ("cases", "legalized", "legal", "checker_ok", "outputs_equal", "failures")
# legalize's stats summed over the cases of a suite (runtime_broadcast_checks: the
# Where(a == 1, b, a) dims xla emits; _elided: those strict symbolic mode left out).
STATS = ("reshapes_inserted", "broadcasts_made_explicit", "constants_folded", "runtime_broadcast_checks",
         "runtime_broadcast_checks_elided")
ORT_FAILS = "original does not run on onnxruntime"


def ort_category(reason: Optional[str]) -> str:
    """onnxruntime's reason (onnx_suite._reason), as a short category."""
    import re

    text = reason or "?"
    for pattern, short in ((r"Unsupported model IR version", "IR version too new"),
                           (r"Current official support for domain \S+ is till opset", "opset too new"),
                           (r"is not a registered function/op", "op not registered"),
                           (r"\blocale\b", "locale missing"),
                           (r"Type Error", "type error at load"),
                           (r"^not supported", "type not supported")):
        if re.search(pattern, text):
            return short
    m = re.search(r"Could not find an implementation for (\w+)", text)
    if m:
        return f"no kernel for {m.group(1)}"
    m = re.search(r"Unrecognized attribute: (\w+)", text)
    if m:
        return f"unrecognized attribute {m.group(1)}"
    m = re.search(r"while running (\w+) node", text)
    if m:
        return f"run-time error in {m.group(1)}"
    return text[:60]


def summarize(results: List[dict]) -> Dict[str, dict]:
    rows: Dict[str, dict] = {}
    for key in [s for s in SUITES if any(r["suite"] == s for r in results)] + ["total"]:
        rs = results if key == "total" else [r for r in results if r["suite"] == key]
        rows[key] = {
            "cases": len(rs),
            "legalized": sum(bool(r["legalized"]) for r in rs),
            "rewritten": sum(bool(r.get("rewritten")) for r in rs),
            "rewritten_and_equal": sum(bool(r.get("rewritten")) and r["outputs_equal"] is True for r in rs),
            "legal": sum(r["legal"] is True for r in rs),
            "checker_ok": sum(r["checker_ok"] is True for r in rs),
            "checker_original_ok": sum(r["checker_original"] is True for r in rs),
            "outputs_equal": sum(r["outputs_equal"] is True for r in rs),
            "failures": sum(r["attributable"] for r in rs),
            "original_fails_on_ort": sum(r.get("original_runs") is False for r in rs),
            "reasons": dict(collections.Counter(r["reason"] for r in rs if r["reason"]).most_common()),
            "stats": {k: sum(int(r.get("stats", {}).get(k, 0)) for r in rs) for k in STATS},
        }
    return rows


def print_table(rows: Dict[str, dict], seconds: float, jobs: int, target: str = "tosa",
                assume_dynamic_not_one: bool = False) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 150)
    flags = f"--target {target}" + (" --assume-dynamic-not-one" if assume_dynamic_not_one else "")
    table = Table(title=f"legalize {flags} over the ONNX test corpus ({seconds:.0f} s, {jobs} processes)")
    table.add_column("suite", style="bold")
    heads = ("cases", "legalized", f"legal under {_profile(target)}", "checker ok", "outputs equal",
             "legalize failures",
             "original fails on onnxruntime", "rewritten (equal)")
    for head in heads:
        table.add_column(head, justify="right")
    for key, row in rows.items():
        fails = row["failures"]
        table.add_row(key, *(str(row[c]) for c in COUNTS[:-1]), f"[red]{fails}[/red]" if fails else "0",
                      str(row["original_fails_on_ort"]), f"{row['rewritten']} ({row['rewritten_and_equal']})",
                      style="bold" if key == "total" else None, end_section=key == list(rows)[-2])
    console.print(table)

    suites = list(rows)
    reasons = sorted(rows["total"]["reasons"], key=lambda k: (not attributable(k), -rows["total"]["reasons"][k], k))
    by = Table(title="Outcomes other than success, by reason (✗: a failure attributable to legalize)")
    by.add_column("reason")
    for key in suites:
        by.add_column(key, justify="right", style="bold" if key == "total" else None)
    for reason in reasons:
        label = ("[red]✗ " + reason + "[/red]") if attributable(reason) else reason
        by.add_row(label, *(str(rows[k]["reasons"].get(reason, "")) for k in suites))
    if reasons:
        console.print(by)
    console.print("rewritten: cases legalize changed (reshapes inserted, broadcasts made explicit, constants"
                  " folded, variadic ops split, legacy broadcasts made explicit, ...); in parentheses those whose"
                  " outputs are equal")
    stats = Table(title="legalize's stats, summed over the cases")
    stats.add_column("stat")
    for key in suites:
        stats.add_column(key, justify="right", style="bold" if key == "total" else None)
    for k in STATS:
        stats.add_row(k, *(str(rows[s]["stats"][k]) for s in suites))
    console.print(stats)
    console.print("runtime_broadcast_checks: result dims computed at run time as Where(a == 1, b, a);"
                  " _elided: those strict symbolic mode (--assume-dynamic-not-one) left out")
    console.print("checker ok: legalized models that pass onnx.checker.check_model(full_check=True); originals"
                  " that pass it: " + ", ".join(f"{k} {v['checker_original_ok']}" for k, v in rows.items()))


def print_failures(results: List[dict], limit: int = 60) -> None:
    bad = [r for r in results if r["attributable"]]
    for r in bad[:limit]:
        print(f"FAIL {r['name']}: {r['reason']}: {r['detail']}")
    if len(bad) > limit:
        print(f"... and {len(bad) - limit} more (see --json)")


# ---- latency --------------------------------------------------------------------------
OPT_LEVELS = ("all", "extended", "basic", "none")


def latency(cases: List[suite.Case], runs: int, warmup: int, threads: int, opt: str = "all",
            target: str = "tosa", assume_dynamic_not_one: bool = False) -> List[dict]:
    """Median onnxruntime latency of each model, original and legalized (to ``target``),
    on the same input and session options, run interleaved (A B B A ...) so drift hits
    both."""
    import onnxruntime as ort

    import legalizer
    from legalizer.kinds.onnx.importer import import_model
    from legalizer.target_passes import legalize

    rows = []
    for case in cases:
        model = legalizer.load(case.path) if case.path else import_model(case.model)
        legalize(model, target, assume_dynamic_not_one=assume_dynamic_not_one)
        out = legalizer.to_onnx(model)
        feeds, *_ = case_data(case)
        feed = {k: suite._ort_value(v) for k, v in feeds[0].items()}
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 4
        so.graph_optimization_level = {
            "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL, "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
            "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC, "none": ort.GraphOptimizationLevel.ORT_DISABLE_ALL}[opt]
        try:
            sessions = [ort.InferenceSession(b, so, providers=["CPUExecutionProvider"])
                        for b in (case.model.SerializeToString(), out.SerializeToString())]
            for sess in sessions:
                sess.run(None, feed)
        except Exception as e:  # noqa: BLE001 - not measurable here; say so
            print(f"{case.name}: not measured ({_exc(e)[:120]})", file=sys.stderr)
            continue
        times: List[List[float]] = [[], []]
        for i in range(warmup + runs):
            order = (0, 1) if i % 2 == 0 else (1, 0)
            for k in order:
                t0 = time.perf_counter()
                sessions[k].run(None, feed)
                dt = time.perf_counter() - t0
                if i >= warmup:
                    times[k].append(dt)
        med = [statistics.median(t) * 1e3 for t in times]
        rows.append({"name": case.name, "nodes_original": len(case.model.graph.node),
                     "nodes_legalized": len(out.graph.node), "original_ms": med[0], "legalized_ms": med[1],
                     "ratio": med[1] / med[0]})
    return rows


def print_latency(rows: List[dict], runs: int, warmup: int, threads: int, opt: str = "all",
                  target: str = "tosa") -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"onnxruntime CPU latency, {target} form vs original (median of {runs} interleaved runs"
                        f" after {warmup} warm-up, intra-op threads {threads or 'default'}, graph optimizations {opt})")
    for head, just in (("model", "left"), ("nodes orig", "right"), ("nodes legal", "right"),
                       ("original ms", "right"), ("legalized ms", "right"), ("ratio", "right")):
        table.add_column(head, justify=just)
    for r in rows:
        table.add_row(r["name"], str(r["nodes_original"]), str(r["nodes_legalized"]), f"{r['original_ms']:.3f}",
                      f"{r['legalized_ms']:.3f}", f"{r['ratio']:.3f}")
    if rows:
        gm = float(np.exp(np.mean([np.log(r["ratio"]) for r in rows])))
        table.add_row("geometric mean", "", "", "", "", f"{gm:.3f}", style="bold")
    Console(width=None if sys.stdout.isatty() else 160).print(table)


# ---- main -----------------------------------------------------------------------------
def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--filter", metavar="SUBSTR", help="only the cases whose name contains SUBSTR"
                    " (node tests are test_*, wheel models <folder>/<name>)")
    ap.add_argument("--json", metavar="PATH", help="write the per-case results here")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1, help="processes (default: all cores)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every case as it finishes")
    ap.add_argument("--target", choices=TARGETS, default="tosa", help="legal form (default tosa); the output is"
                    " verified under the target's profile")
    ap.add_argument("--assume-dynamic-not-one", action="store_true",
                    help="strict symbolic mode: no dynamic dim is 1 at run time")
    ap.add_argument("--latency", action="store_true", help="measure onnxruntime latency of the light models"
                    " (or the --filter cases), original vs legalized, instead")
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads for --latency (0: its default)")
    ap.add_argument("--opt", choices=OPT_LEVELS, default="all", help="onnxruntime graph optimization level for --latency")
    args = ap.parse_args(argv)

    if args.latency:
        cases = [c for c in (all_cases(args.filter) if args.filter else suite.wheel_cases())
                 if args.filter or c.name.startswith("light/")]
        rows = latency(cases, args.runs, args.warmup, args.threads, args.opt, args.target,
                       args.assume_dynamic_not_one)
        print_latency(rows, args.runs, args.warmup, args.threads, args.opt, args.target)
        if args.json:
            Path(args.json).write_text(json.dumps({"target": args.target, "latency": rows}, indent=1))
        return 0

    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = all_cases(args.filter)
    # Costly cases first, so that no long one is left for the end.
    names = [c.name for c in sorted(cases, key=lambda c: (suite_of(c) != "light", suite_of(c) == "node"))]
    if not names:
        print(f"no case matches --filter {args.filter!r}", file=sys.stderr)
        return 2

    def progress(r: dict) -> None:
        if args.verbose or r["attributable"]:
            print(f"{'FAIL' if r['attributable'] else 'ok  '} {r['name']} {r['seconds']:.2f}s"
                  f"{': ' + r['reason'] if r['reason'] else ''}", file=sys.stderr, flush=True)

    results = run_all(names, args.jobs, progress, args.target, args.assume_dynamic_not_one)
    seconds = time.perf_counter() - t0
    rows = summarize(results)
    print_table(rows, seconds, args.jobs, args.target, args.assume_dynamic_not_one)
    print_failures(results)
    slowest = sorted(results, key=lambda r: -r["seconds"])[:5]
    print(f"{len(results)} cases in {seconds:.1f} s with {args.jobs} processes; slowest: "
          + ", ".join(f"{r['name']} {r['seconds']:.1f}s" for r in slowest))
    if args.json:
        Path(args.json).write_text(json.dumps({"schema": 1, "target": args.target,
                                               "profile": _profile(args.target),
                                               "assume_dynamic_not_one": args.assume_dynamic_not_one,
                                               "seconds": round(seconds, 1), "jobs": args.jobs,
                                               "summary": rows, "cases": results}, indent=1, default=str))
    return 1 if rows["total"]["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
