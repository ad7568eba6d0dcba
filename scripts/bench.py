#!/usr/bin/env python3
"""Benchmark: legalize's stages against onnx.load on the same model, side by side.

Each measurement runs in a fresh Python process, so its peak RSS is its own. Ratios
are what to quote (absolute times drift on shared machines):

  import / onnx.load   legalize.load (parse + shape inference + IR) over onnx.load
  verify / onnx.load   the Broadcastable verifier over onnx.load
  rss / onnx.load      peak RSS of load + verify over peak RSS of onnx.load alone
  legalize / (load+save)  the main job without its numeric check (load, verify, tosa
                       passes, verify, save) over onnx.load + onnx.save

Models: the largest model of the onnx wheel (light_densenet121) and a generated model
of --nodes nodes (default 100,000) dominated by mixed-rank elementwise ops, cached in
.cache/bench/ (git-ignored; rebuilt when missing).

With --targets, instead: the legal forms side by side (tosa; xla; xla in strict
symbolic mode, --assume-dynamic-not-one) for the sample models of models/ (all but
incompatible_add.onnx) and the onnx wheel's light models: nodes each form adds, the
broadcasts made explicit and the Expand nodes they lower to, the runtime broadcast
computations emitted (Where(a == 1, b, a) per result dim) and elided, and onnxruntime
CPU latency of each form over the original's (same synthesized inputs, same session
options, median of --runs runs interleaved in rotating order after --warmup); xla/tosa
is the cost of materializing every broadcast with Expand.

Usage: python scripts/bench.py [--nodes 100000] [--repeat 3] [--json out.json]
       python scripts/bench.py --targets [--runs 50] [--warmup 5] [--threads 1] [--models SUBSTR]
                               [--opt all|extended|basic|none] [--dim NAME=SIZE ...] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict, Optional

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache" / "bench"

_CHILD = textwrap.dedent("""
    import json, resource, sys, time
    stage, path = sys.argv[1], sys.argv[2]
    import onnx
    import legalizer
    t0 = time.perf_counter()
    out = {}
    if stage == "onnx.load":
        m = onnx.load(path)
        out["onnx.load"] = time.perf_counter() - t0
        out["nodes"] = len(m.graph.node)
    elif stage == "onnx.load+save":
        m = onnx.load(path)
        onnx.save(m, path + ".bench-copy.onnx")
        out["onnx.load+save"] = time.perf_counter() - t0
    elif stage == "legalize":
        # the main job without the numeric check: load, verify, passes, verify, save
        from legalizer.transform import legalize
        model = legalizer.load(path)
        res = legalizer.verify(model.graph, "mlir")
        legalize(model, "tosa")
        legalizer.verify(model.graph, "tosa")
        legalizer.save(model, path + ".bench-copy.onnx", force=True)
        out["legalize"] = time.perf_counter() - t0
    else:
        model = legalizer.load(path)
        t1 = time.perf_counter()
        res = legalizer.verify(model.graph, "mlir")
        t2 = time.perf_counter()
        out["import"] = t1 - t0
        out["verify"] = t2 - t1
        out["violations"] = len(res.violations)
        out["elementwise"] = res.elementwise_nodes
    out["maxrss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(out))
""")


def synthetic_model(nodes: int) -> Path:
    """A chain of mixed-rank elementwise ops over x:[N,64]: rank-1 and rank-2
    constants, a scalar, and unary ops between them."""
    path = CACHE / f"synthetic_{nodes}.onnx"
    if path.exists():
        return path
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    CACHE.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal(64).astype(np.float32), "bias"),
        numpy_helper.from_array(rng.standard_normal((1, 64)).astype(np.float32), "scale"),
        numpy_helper.from_array(np.array(0.5, np.float32), "half"),
    ]
    pattern = [("Add", "bias"), ("Mul", "scale"), ("Tanh", None), ("Sub", "half"), ("Max", "bias")]
    made, prev = [], "x"
    for i in range(nodes):
        op, const = pattern[i % len(pattern)]
        out = f"v{i}"
        made.append(helper.make_node(op, [prev, const] if const else [prev], [out], name=f"n{i}"))
        prev = out
    g = helper.make_graph(made, "synthetic", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64])],
                          [helper.make_tensor_value_info(prev, TensorProto.FLOAT, ["N", 64])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(m, str(path))
    return path


def wheel_model(name: str) -> Path:
    import onnx

    return Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / name


def measure(stage: str, path: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", _CHILD, stage, str(path)], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise SystemExit(f"{stage} on {path} failed:\n{r.stderr}")
    copy = Path(str(path) + ".bench-copy.onnx")
    if copy.exists():
        copy.unlink()
    return json.loads(r.stdout)


def bench(path: Path, repeat: int) -> dict:
    runs = {"onnx.load": [], "verify": [], "onnx.load+save": [], "legalize": []}
    # "verify" is the child's default stage: legalizer.load + legalizer.verify
    for _ in range(repeat):  # interleaved, so drift hits all alike
        for stage in runs:
            runs[stage].append(measure(stage, path))
    best = lambda key, stage: min(r[key] for r in runs[stage])  # noqa: E731
    load = best("onnx.load", "onnx.load")
    row = {
        "model": path.name, "nodes": runs["onnx.load"][0]["nodes"],
        "onnx.load_s": load, "import_s": best("import", "verify"), "verify_s": best("verify", "verify"),
        "onnx.load_rss_mb": best("maxrss_mb", "onnx.load"), "legalize_rss_mb": best("maxrss_mb", "verify"),
        "violations": runs["verify"][0]["violations"], "elementwise": runs["verify"][0]["elementwise"],
        "onnx.load+save_s": best("onnx.load+save", "onnx.load+save"), "legalize_s": best("legalize", "legalize"),
        "legalize_rss_mb_full": best("maxrss_mb", "legalize"),
    }
    row["legalize/(load+save)"] = row["legalize_s"] / row["onnx.load+save_s"]
    row["import/onnx.load"] = row["import_s"] / load
    row["verify/onnx.load"] = row["verify_s"] / load
    row["rss/onnx.load"] = row["legalize_rss_mb"] / row["onnx.load_rss_mb"]
    row["verify_nodes_per_s"] = row["nodes"] / row["verify_s"]
    return row


def latency(path: Path, runs: int = 50, warmup: int = 5) -> dict:
    """onnxruntime CPU latency of the legalized (tosa) model over the original's: same
    synthesized inputs, same session options (1 intra-op thread), median of ``runs``
    interleaved runs after ``warmup``."""
    import time

    import numpy as np
    import onnx
    import onnxruntime as ort

    import legalizer
    from legalizer.check.ort import bindings_for, synthesize
    from legalizer.transform import legalize

    original = onnx.load(str(path))
    model = legalizer.load(path)
    legalize(model, "tosa")
    legal = legalizer.to_onnx(model)
    feeds = synthesize(original, bindings_for(original, {})[0], {})
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads, so.log_severity_level = 1, 1, 4
    sessions = [ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
                for m in (original, legal)]
    times = [[], []]
    for i in range(warmup + runs):
        for k in ((0, 1) if i % 2 == 0 else (1, 0)):  # A B B A: drift hits both alike
            t0 = time.perf_counter()
            sessions[k].run(None, feeds)
            if i >= warmup:
                times[k].append(time.perf_counter() - t0)
    orig_ms, legal_ms = (float(np.median(t)) * 1e3 for t in times)
    return {"model": path.name, "original_ms": orig_ms, "legalized_ms": legal_ms, "ratio": legal_ms / orig_ms}


# ---- --targets: the legal forms side by side ------------------------------------------
FORMS = (("tosa", "tosa", False), ("xla", "xla", False), ("xla-strict", "xla", True))
OPT_LEVELS = ("all", "extended", "basic", "none")


def target_models() -> list:
    models = sorted(p for p in (ROOT / "models").glob("*.onnx") if p.name != "incompatible_add.onnx")
    return models + sorted(wheel_model("").glob("*.onnx"))


def _count_nodes(graph, op_type=None) -> int:
    """Nodes of ``graph`` and of its subgraphs (If/Loop/Scan bodies), of ``op_type`` if given."""
    from onnx import AttributeProto

    n = 0
    for node in graph.node:
        n += op_type is None or node.op_type == op_type
        for a in node.attribute:
            if a.type == AttributeProto.GRAPH:
                n += _count_nodes(a.g, op_type)
            elif a.type == AttributeProto.GRAPHS:
                n += sum(_count_nodes(g, op_type) for g in a.graphs)
    return n


def compare_targets(path: Path, runs: int = 50, warmup: int = 5, threads: int = 1, opt: str = "all",
                    dims: Optional[Dict[str, int]] = None) -> dict:
    """One model in each legal form (FORMS): node counts, legalize's broadcast stats, and
    onnxruntime CPU latency of the original and every form, run in rotating order
    (each run visits all of them, starting one further each time) so drift hits all."""
    import time

    import numpy as np
    import onnx
    import onnxruntime as ort

    import legalizer
    from legalizer.check.ort import bindings_for, choices_from_constraints, synthesize
    from legalizer.transform import legalize

    original = onnx.load(str(path))
    row = {"model": path.name, "nodes": _count_nodes(original.graph), "forms": {}}
    protos = [original]
    for key, target, strict in FORMS:
        model = legalizer.load(path)
        res = legalize(model, target, assume_dynamic_not_one=strict)
        out = legalizer.to_onnx(model)
        protos.append(out)
        row["forms"][key] = {
            "nodes": _count_nodes(out.graph), "nodes_added": _count_nodes(out.graph) - row["nodes"],
            "expand_nodes": _count_nodes(out.graph, "Expand") - _count_nodes(original.graph, "Expand"),
            **{k: int(res.stats.get(k, 0)) for k in ("reshapes_inserted", "broadcasts_made_explicit",
                                                     "runtime_broadcast_checks", "runtime_broadcast_checks_elided")}}
    # Inputs: the first dim binding the original runs on, among those legalize's own check
    # would try with no dynamic dim 1 (valid for the strict form too), with the sizes the
    # verifier's constraints allow (dynamic_broadcast: a[2x?] + b[?x?] needs b's dim 0 = 2).
    found = legalizer.verify(legalizer.load(path).graph, "mlir").constraints.to_json()
    choices = choices_from_constraints([c["text"] for c in found])
    quiet = ort.SessionOptions()
    quiet.log_severity_level = 4
    probe = ort.InferenceSession(original.SerializeToString(), quiet, providers=["CPUExecutionProvider"])
    for binding in bindings_for(original, dims or {}, not_one=True, choices=choices):
        feeds = synthesize(original, binding, {})
        try:
            probe.run(None, feeds)
            break
        except Exception:  # noqa: BLE001 - the original rejects this binding; try the next
            continue
    else:
        raise SystemExit(f"{path.name}: the original runs on none of the input bindings tried")
    row["input_shapes"] = {k: list(v.shape) for k, v in feeds.items()}
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads, so.log_severity_level = threads, 1, 4
    so.graph_optimization_level = {
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL, "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC, "none": ort.GraphOptimizationLevel.ORT_DISABLE_ALL}[opt]
    sessions = [ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"]) for m in protos]
    # Every form computes what the original does (else its time would mean nothing).
    want = sessions[0].run(None, feeds)
    for (key, _, _), sess in zip(FORMS, sessions[1:]):
        for w, g in zip(want, sess.run(None, feeds)):
            if not np.allclose(np.asarray(g, np.float64), np.asarray(w, np.float64), rtol=1e-4, atol=1e-5,
                               equal_nan=True):
                raise SystemExit(f"{path.name}: the {key} form's outputs differ from the original's")
    times = [[] for _ in sessions]
    n = len(sessions)
    for i in range(warmup + runs):
        for j in range(n):
            k = (i + j) % n
            t0 = time.perf_counter()
            sessions[k].run(None, feeds)
            if i >= warmup:
                times[k].append(time.perf_counter() - t0)
    med = [float(np.median(t)) * 1e3 for t in times]
    row["original_ms"] = med[0]
    for (key, _, _), ms in zip(FORMS, med[1:]):
        row["forms"][key]["ms"] = ms
        row["forms"][key]["ratio"] = ms / med[0]
    row["xla/tosa"] = row["forms"]["xla"]["ms"] / row["forms"]["tosa"]["ms"]
    return row


def print_targets(rows: list, runs: int, warmup: int, threads: int, opt: str) -> None:
    import math

    from rich.console import Console
    from rich.table import Table

    console = Console(width=220)
    t = Table(title="Legal forms side by side: nodes added, broadcasts made explicit (xla) and runtime broadcast"
                    " computations emitted / elided (strict: --assume-dynamic-not-one)")
    for col in ("model", "nodes", "+tosa", "+xla", "+xla strict", "reshapes (tosa)", "explicit bcasts (xla)",
                "Expand (xla)", "runtime checks (xla)", "runtime checks (strict)", "elided (strict)"):
        t.add_column(col, justify="right")
    for r in rows:
        f = r["forms"]
        t.add_row(r["model"], str(r["nodes"]), f"{f['tosa']['nodes_added']:+d}", f"{f['xla']['nodes_added']:+d}",
                  f"{f['xla-strict']['nodes_added']:+d}", str(f["tosa"]["reshapes_inserted"]),
                  str(f["xla"]["broadcasts_made_explicit"]), str(f["xla"]["expand_nodes"]),
                  str(f["xla"]["runtime_broadcast_checks"]), str(f["xla-strict"]["runtime_broadcast_checks"]),
                  str(f["xla-strict"]["runtime_broadcast_checks_elided"]))
    tot = lambda form, key: sum(r["forms"][form][key] for r in rows)  # noqa: E731
    t.add_row("total", str(sum(r["nodes"] for r in rows)), f"{tot('tosa', 'nodes_added'):+d}",
              f"{tot('xla', 'nodes_added'):+d}", f"{tot('xla-strict', 'nodes_added'):+d}",
              str(tot("tosa", "reshapes_inserted")), str(tot("xla", "broadcasts_made_explicit")),
              str(tot("xla", "expand_nodes")), str(tot("xla", "runtime_broadcast_checks")),
              str(tot("xla-strict", "runtime_broadcast_checks")), str(tot("xla-strict", "runtime_broadcast_checks_elided")),
              style="bold", end_section=False)
    console.print(t)

    t = Table(title=f"onnxruntime CPU latency of each form over the original (median of {runs} runs in rotating"
                    f" order after {warmup} warm-up; intra-op threads {threads or 'default'}, graph optimizations {opt})")
    for col in ("model", "inputs", "original ms", "tosa ms", "xla ms", "xla strict ms", "tosa/orig", "xla/orig",
                "xla strict/orig", "xla/tosa"):
        t.add_column(col, justify="right")
    for r in rows:
        f = r["forms"]
        shapes = ", ".join("x".join(map(str, s)) for s in r["input_shapes"].values())
        t.add_row(r["model"], shapes if len(shapes) <= 28 else shapes[:27] + "…", f"{r['original_ms']:.4f}",
                  f"{f['tosa']['ms']:.4f}", f"{f['xla']['ms']:.4f}", f"{f['xla-strict']['ms']:.4f}",
                  f"{f['tosa']['ratio']:.3f}", f"{f['xla']['ratio']:.3f}", f"{f['xla-strict']['ratio']:.3f}",
                  f"{r['xla/tosa']:.3f}")
    if rows:
        gm = lambda xs: math.exp(sum(math.log(x) for x in xs) / len(xs))  # noqa: E731
        t.add_row("geometric mean", "", "", "", "", "", *(f"{gm([r['forms'][k]['ratio'] for r in rows]):.3f}"
                                                       for k in ("tosa", "xla", "xla-strict")),
                  f"{gm([r['xla/tosa'] for r in rows]):.3f}", style="bold")
    console.print(t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--targets", action="store_true", help="compare the legal forms (tosa, xla, xla strict) of the"
                    " sample and light models instead: nodes added, runtime broadcast checks, latency")
    ap.add_argument("--runs", type=int, default=50, help="latency runs per model with --targets")
    ap.add_argument("--warmup", type=int, default=5, help="warm-up runs per model with --targets")
    ap.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads with --targets (0: its default)")
    ap.add_argument("--opt", choices=OPT_LEVELS, default="all", help="onnxruntime graph optimizations with --targets")
    ap.add_argument("--dim", action="append", default=[], metavar="NAME=SIZE",
                    help="with --targets: bind a symbolic input dim (e.g. batch=64) where a model has it; repeatable")
    ap.add_argument("--models", metavar="SUBSTR", help="with --targets: only the models whose file name contains SUBSTR")
    args = ap.parse_args()
    if args.targets:
        dims = {k: int(v) for k, v in (d.split("=", 1) for d in args.dim)}
        rows = [compare_targets(p, args.runs, args.warmup, args.threads, args.opt, dims)
                for p in target_models() if not args.models or args.models in p.name]
        print_targets(rows, args.runs, args.warmup, args.threads, args.opt)
        if args.json:
            args.json.write_text(json.dumps({"targets": rows, "runs": args.runs, "warmup": args.warmup,
                                             "threads": args.threads, "opt": args.opt, "dims": dims},
                                            indent=2) + "\n")
        return
    rows = [bench(wheel_model("light_densenet121.onnx"), args.repeat),
            bench(synthetic_model(args.nodes), args.repeat)]
    from rich.console import Console
    from rich.table import Table

    t = Table(title="legalize --verify-only vs onnx.load (best of %d, fresh process each)" % args.repeat)
    for col in ("model", "nodes", "onnx.load s", "import s", "verify s", "import/load", "verify/load",
                "verify nodes/s", "peak RSS MB (load → verify)", "rss ratio", "load+save s", "legalize s",
                "legalize/(load+save)"):
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(r["model"], f"{r['nodes']:,}", f"{r['onnx.load_s']:.3f}", f"{r['import_s']:.3f}",
                  f"{r['verify_s']:.3f}", f"{r['import/onnx.load']:.1f}×", f"{r['verify/onnx.load']:.2f}×",
                  f"{r['verify_nodes_per_s']:,.0f}",
                  f"{r['onnx.load_rss_mb']:.0f} → {r['legalize_rss_mb']:.0f}", f"{r['rss/onnx.load']:.2f}×",
                  f"{r['onnx.load+save_s']:.3f}", f"{r['legalize_s']:.3f}", f"{r['legalize/(load+save)']:.1f}×")
    Console(width=200).print(t)
    lat = [latency(ROOT / "models" / name) for name in
           ("transformer_block.dynamo.onnx", "transformer_block.torchscript.onnx", "small_cnn.dynamo.onnx")]
    t = Table(title="onnxruntime CPU latency, tosa form over original (median of 50 interleaved runs)")
    for col in ("model", "original ms", "legalized ms", "ratio"):
        t.add_column(col, justify="right")
    for r in lat:
        t.add_row(r["model"], f"{r['original_ms']:.4f}", f"{r['legalized_ms']:.4f}", f"{r['ratio']:.3f}")
    Console(width=200).print(t)
    if args.json:
        args.json.write_text(json.dumps({"models": rows, "latency": lat}, indent=2) + "\n")


if __name__ == "__main__":
    main()
