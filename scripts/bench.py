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

Usage: python scripts/bench.py [--nodes 100000] [--repeat 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
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
