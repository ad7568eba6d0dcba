#!/usr/bin/env python3
"""Benchmark: legalize against onnx.load / onnx.save on the same models, side by side.

Each measurement runs in a fresh Python process, so its peak RSS (VmHWM) is its own. Ratios
are what to quote (absolute times drift on shared machines). Per model:

  legalize / (load+save)  the main job without its numeric check (pipeline.run with
                       --no-check: load, verify, tosa passes, verify, save) over
                       onnx.load + onnx.save of the same file. For TFLite models the
                       baseline is reading the file's bytes and writing them back (the
                       tflite package parses lazily: it has no load step to time).
  rss / onnx.load      peak RSS of that run over peak RSS of onnx.load alone (TFLite:
                       of reading the file)
  nodes/s per stage    import (legalize's load: parse, shape inference, IR), verify
                       (input and output), passes, export (the save), check (a separate
                       run with --check: onnxruntime on original and legalized)
  latency tosa/orig    onnxruntime CPU latency of the legalized (tosa) model over the
                       original's (median of interleaved runs, 1 thread); ONNX models

Models (generated ones cached in .cache/bench/, git-ignored, rebuilt when missing):
the sample transformer at depth (24 layers of tests/sample_models.py's TransformerBlock,
width 512, ~300 MB of weights, torch.onnx.export(dynamo=True)); a synthetic chain of
--nodes mixed-rank elementwise ops (default 1,000,000); the onnx wheel's
light models; the TFLite sample models of models/tflite/.

--scaling: every stage's time and time per node on synthetic graphs of 10k, 100k and 1M
nodes (--sizes to change them). --big: a >2 GB model with external data (35 MatMuls of
4096x4096 weights, rank-1 biases), run through the CLI with --check: peak RSS and time.

--peers: the synthetic graphs of --sizes, the transformer and the light models through
the Python graph rewriters users would run in the same step (onnxsim, onnxslim,
onnxscript's optimizer, onnxoptimizer; each onnx.load, its entry point with its
defaults, onnx.save, in a venv of their own: scripts/setup_peers.sh), beside legalize
--no-check and the I/O floor (onnx.load + onnx.save) on the same model in the same run:
seconds over the floor's and peak RSS over onnx.load's, a run over --peer-timeout (240
s) reported as "> cap". --baseline DIR runs another checkout's legalize beside (an older
commit, e.g. `git worktree add /tmp/base COMMIT`): before and after in one run.
--baseline DIR alone: legalize --no-check of this tree and of DIR side by side on the
synthetic chains of --sizes (total and per-stage seconds, best of --repeat, interleaved).

--each-once: issue 31's figures on the chains of --sizes: onnx.load + onnx.save of the
ONNX chain, the same with the least an IR whose topology networkx holds costs between
them (the nodes as a DiGraph and their order: a bound no legalize run can beat), legalize
--no-check of it for tosa and for xla, and of the TFLite chain of as many ADDs
(tests/tflite_build.add_chain) for tosa; the median of --repeat rounds, each
run a whole process, the runs of a round one after the other; with --baseline DIR, that
checkout's three legalize runs beside (up to --baseline-max nodes).

--profile: where the time and the memory of legalize --no-check (tosa) go on the ONNX
chains of --sizes: each size in two fresh processes, one under cProfile (each stage's
share of the run, and the functions with the most time of their own), one under
tracemalloc (the Python bytes a node after the import, and the lines that allocated
them); --baseline DIR profiles that checkout beside (before and after in one run).

With --targets, instead: the legal forms side by side (tosa; xla; xla in strict
symbolic mode, --assume-dynamic-not-one) for the sample models of models/ (all but
incompatible_add.onnx) and the onnx wheel's light models: nodes each form adds, the
broadcasts made explicit and the Expand nodes they lower to, the runtime broadcast
computations emitted (Where(a == 1, b, a) per result dim) and elided, and onnxruntime
CPU latency of each form over the original's (same synthesized inputs, same session
options, median of --runs runs interleaved in rotating order after --warmup); xla/tosa
is the cost of materializing every broadcast with Expand.

Every mode prints a table and writes its JSON (--json, default .cache/bench/<mode>.json).

Usage: python scripts/bench.py [--nodes 1000000] [--repeat 1] [--only SUBSTR] [--no-transformer] [--json out.json]
       python scripts/bench.py --scaling [--sizes 10000,100000,1000000] [--json out.json]
       python scripts/bench.py --big [--json out.json]
       python scripts/bench.py --peers [--sizes 10000,100000,1000000] [--peer-timeout 240] [--baseline DIR]
                               [--peers-python PY] [--repeat 1] [--no-transformer] [--only SUBSTR] [--json out.json]
       python scripts/bench.py --baseline DIR [--sizes 100000] [--repeat 5] [--json out.json]
       python scripts/bench.py --each-once [--sizes 10000,100000,1000000] [--repeat 3] [--baseline DIR]
                               [--baseline-max 100000] [--json out.json]
       python scripts/bench.py --profile [--sizes 10000,100000,1000000] [--baseline DIR] [--json out.json]
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
import time
from pathlib import Path
from typing import Dict, Optional

ROOT = Path(__file__).resolve().parent.parent
# onnxruntime's providers for the latency runs (--provider cuda: CUDA first, as the check takes it)
PROVIDERS = ["CPUExecutionProvider"]
CACHE = ROOT / ".cache" / "bench"

_CHILD = textwrap.dedent("""
    import json, resource, sys, time
    stage, path = sys.argv[1], sys.argv[2]
    target = sys.argv[3] if len(sys.argv) > 3 else "tosa"
    out = {}
    t0 = time.perf_counter()
    if stage == "onnx.load":
        import onnx
        t0 = time.perf_counter()
        m = onnx.load(path)
        out["onnx.load"] = time.perf_counter() - t0
    elif stage == "onnx.load+save":
        import onnx
        t0 = time.perf_counter()
        m = onnx.load(path)
        onnx.save(m, path + ".bench-copy.onnx")
        out["onnx.load+save"] = time.perf_counter() - t0
    elif stage == "onnx.load+topology+save":
        # the least an IR whose topology networkx holds can cost: the file's nodes as a
        # DiGraph (int ids, an edge per value one node passes another), in order, and
        # nothing else: no node object, no type, no pass
        import onnx
        import networkx as nx
        t0 = time.perf_counter()
        m = onnx.load(path)
        g = nx.DiGraph()
        nodes = m.graph.node
        g.add_nodes_from(range(len(nodes)))
        producer = {o: i for i, n in enumerate(nodes) for o in n.output}
        g.add_edges_from((producer[x], i) for i, n in enumerate(nodes) for x in n.input if x in producer)
        order = list(nx.topological_sort(g))
        onnx.save(m, path + ".bench-copy.onnx")
        out[stage] = time.perf_counter() - t0
    elif stage == "read":  # TFLite baseline: the file's bytes
        t0 = time.perf_counter()
        data = open(path, "rb").read()
        out["read"] = time.perf_counter() - t0
    elif stage == "read+write":
        t0 = time.perf_counter()
        data = open(path, "rb").read()
        open(path + ".bench-copy", "wb").write(data)
        out["read+write"] = time.perf_counter() - t0
    else:  # "legalize" (no numeric check) or "legalize+check"
        from pathlib import Path
        from legalizer.pipeline import RunOptions, run
        suffix = Path(path).suffix
        t0 = time.perf_counter()
        r = run(Path(path), RunOptions(output=Path(path + ".bench-copy" + suffix), force=True, target=target,
                                       check=stage == "legalize+check"))
        out[stage] = time.perf_counter() - t0
        out["exit"] = r.exit_code
        out["timings"] = dict(r.timings)
        out["nodes_in"] = r.report.stats.get("nodes_in", 0)
        out["nodes_out"] = r.report.stats.get("nodes_out", 0)
        if r.check is not None:
            out["check_ok"] = r.check.ok
    # the whole process's CPU seconds (user + system; its helper children's included,
    # those waited for): steadier than wall time on a shared machine
    ru, rc = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    out["cpu_s"] = ru.ru_utime + ru.ru_stime + rc.ru_utime + rc.ru_stime
    # VmHWM, this process's own peak: ru_maxrss would carry the parent's across exec
    hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")]
    out["maxrss_mb"] = (int(hwm[0].split()[1]) if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) / 1024
    print(json.dumps(out))
""")


_PROFILE_CHILD = textwrap.dedent("""
    import cProfile, json, pstats, sys, tracemalloc
    from pathlib import Path
    path, how = Path(sys.argv[1]), sys.argv[2]
    from legalizer.pipeline import RunOptions, run
    out = {}
    short = lambda f: "/".join(Path(f).parts[-2:])  # (a package's module: onnx/importer.py)
    if how == "cprofile":
        options = RunOptions(output=Path(str(path) + ".bench-copy" + path.suffix), force=True, target="tosa",
                             check=False)
        prof = cProfile.Profile()
        prof.enable()
        r = run(path, options)
        prof.disable()
        stats = pstats.Stats(prof).stats  # (file, line, name) -> (calls, all calls, own s, cumulative s, callers)
        out["exit"] = r.exit_code
        out["stages"] = dict(r.timings)
        out["own_s"] = sum(v[2] for v in stats.values())
        out["top"] = [{"function": f"{short(k[0])}:{k[1]}({k[2]})", "own_s": v[2], "calls": v[1]}
                      for k, v in sorted(stats.items(), key=lambda kv: -kv[1][2])[:int(sys.argv[3])]]
    else:  # tracemalloc, over the import alone
        from legalizer.api import load
        tracemalloc.start()
        m = load(path)
        snap = tracemalloc.take_snapshot()
        out["traced_b"], out["traced_peak_b"] = tracemalloc.get_traced_memory()
        out["nodes"] = sum(len(g) for top in m.graphs for g in top.graphs())
        out["top"] = [{"line": f"{short(st.traceback[0].filename)}:{st.traceback[0].lineno}", "b": st.size,
                       "count": st.count} for st in snap.statistics("lineno")[:int(sys.argv[3])]]
    print(json.dumps(out))
""")


def profile_run(path: Path, how: str, root: Path = ROOT, top: int = 8) -> dict:
    """One fresh process of ``root``'s legalize on ``path``: under cProfile (``how`` =
    "cprofile": the whole --no-check tosa run) or tracemalloc ("tracemalloc": the import)."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run([sys.executable, "-c", _PROFILE_CHILD, str(path), how, str(top)], cwd=root, env=env,
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def profile(sizes: list, baseline: Optional[Path]) -> list:
    """Where the time and the Python memory go, per size of the ONNX chain and per tree."""
    rows = []
    for n in sizes:
        path = synthetic_model(n)
        for tree, root in (("this", ROOT),) + ((("before", baseline),) if baseline is not None else ()):
            row = {"nodes": n, "tree": tree, "cprofile": profile_run(path, "cprofile", root),
                   "tracemalloc": profile_run(path, "tracemalloc", root)}
            rows.append(row)
            print(f"{n:,} nodes, {tree}: {row['cprofile']['own_s']:.2f} s profiled,"
                  f" {row['tracemalloc']['traced_b'] / max(1, row['tracemalloc']['nodes']):.0f} B a node",
                  file=sys.stderr, flush=True)
    return rows


def print_profile(rows: list) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=200)
    t = Table(title="legalize --no-check (tosa) under cProfile: each stage's share, and the functions with the most"
              " time of their own")
    for col in ("nodes", "tree", "s (profiled)", "load", "verify", "passes", "save", "most own time"):
        t.add_column(col, justify="left" if col == "most own time" else "right")
    for row in rows:
        c = row["cprofile"]
        total = sum(c["stages"].values()) or 1
        share = {k: f"{100 * c['stages'].get(k, 0) / total:.0f}%" for k in ("load", "verify", "passes", "save")}
        top = "; ".join(f"{f['function']} {100 * f['own_s'] / c['own_s']:.0f}%" for f in c["top"][:5])
        t.add_row(f"{row['nodes']:,}", row["tree"], f"{total:.2f}", *share.values(), top)
    console.print(t)
    t = Table(title="The import under tracemalloc: Python bytes a node, and the lines that allocated them")
    for col in ("nodes", "tree", "B a node", "peak B a node", "by line (B a node)"):
        t.add_column(col, justify="left" if col.startswith("by line") else "right")
    for row in rows:
        m = row["tracemalloc"]
        n = max(1, m["nodes"])
        t.add_row(f"{row['nodes']:,}", row["tree"], f"{m['traced_b'] / n:.0f}", f"{m['traced_peak_b'] / n:.0f}",
                  "; ".join(f"{x['line']} {x['b'] / n:.0f}" for x in m["top"][:6]))
    console.print(t)


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


def transformer_model(layers: int = 24, width: int = 512) -> Path:
    """tests/sample_models.py's TransformerBlock, ``layers`` deep at ``width`` (heads of
    64, MLP 4x), exported with torch.onnx.export(dynamo=True): symbolic batch and seq."""
    path = CACHE / f"transformer_{layers}x{width}.dynamo.onnx"
    if path.exists():
        return path
    import torch

    sys.path.append(str(ROOT / "tests"))
    from sample_models import TORCH_OPSET, _torch_modules, strip
    from legalizer.kinds.pt2.onnx_export import quiet_torch

    block, _ = _torch_modules()["transformer_block"]

    class Stack(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = torch.nn.ModuleList(block(width, width // 64, 4 * width) for _ in range(layers))

        def forward(self, x, mask):
            for b in self.blocks:
                x = b(x, mask)
            return x

    torch.manual_seed(0)
    module = Stack().eval()
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq")
    s = 8
    args = (torch.randn(2, s, width), torch.triu(torch.full((s, s), -1e4), diagonal=1))
    CACHE.mkdir(parents=True, exist_ok=True)
    with torch.no_grad(), quiet_torch():
        program = torch.onnx.export(module, args, dynamo=True, input_names=["x", "mask"], output_names=["y"],
                                    opset_version=TORCH_OPSET, external_data=False, optimize=True, verbose=False,
                                    dynamic_shapes={"x": {0: batch, 1: seq}, "mask": {0: seq, 1: seq}})
    import onnx

    tmp = path.with_suffix(".tmp")
    onnx.save(strip(program.model_proto), str(tmp))
    tmp.replace(path)
    return path


def big_model(matmuls: int = 35, width: int = 4096) -> Path:
    """A model over 2 GB, its weights external (``big.onnx.data``): x:[N,width] through
    ``matmuls`` MatMuls of width x width float32 (64 MiB each), each followed by a
    rank-1 bias Add and a Tanh."""
    path = CACHE / "big" / "big.onnx"
    if path.exists():
        return path
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    data = path.with_name("big.onnx.data")
    inits, nodes, prev = [], [], "x"
    with open(data, "wb") as f:
        for i in range(matmuls):
            for name, shape in ((f"w{i}", (width, width)), (f"b{i}", (width,))):
                arr = (rng.standard_normal(shape, dtype=np.float32) * (1 / np.sqrt(width))).astype(np.float32)
                t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=shape)
                t.data_location = TensorProto.EXTERNAL
                for k, v in (("location", data.name), ("offset", str(f.tell())), ("length", str(arr.nbytes))):
                    t.external_data.add(key=k, value=v)
                f.write(arr.tobytes())
                inits.append(t)
            nodes += [helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"], name=f"mm{i}"),
                      helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"], name=f"bias{i}"),
                      helper.make_node("Tanh", [f"a{i}"], [f"t{i}"], name=f"act{i}")]
            prev = f"t{i}"
    g = helper.make_graph(nodes, "big", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", width])],
                          [helper.make_tensor_value_info(prev, TensorProto.FLOAT, ["N", width])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(m, str(path))
    return path


def tflite_models() -> list:
    from legalizer.pipeline import is_output

    return sorted(p for p in (ROOT / "models" / "tflite").glob("*.tflite") if not is_output(p))


def measure(stage: str, path: Path, root: Path = ROOT, target: str = "tosa") -> dict:
    """One stage on one model in a fresh process, legalize's code taken from ``root``
    (this tree, or another checkout: ``--peers --baseline``); ``target``: legalize's."""
    env = dict(os.environ, PYTHONPATH=str(root) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", _CHILD, stage, str(path), target], capture_output=True, text=True,
                       env=env, cwd=root)
    for copy in path.parent.glob(path.name + ".bench-copy*"):
        copy.unlink()
    if r.returncode != 0:
        raise SystemExit(f"{stage} on {path} failed:\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


STAGES = (("import", "load"), ("verify", "verify"), ("passes", "passes"), ("export", "save"), ("check", "check"))


def bench(path: Path, repeat: int, check: bool = True) -> dict:
    """One model: the main job against the baseline, fresh processes, best of ``repeat``
    (interleaved, so drift hits all alike); then one run with the numeric check."""
    tfl = path.suffix == ".tflite"
    base_load, base_both = ("read", "read+write") if tfl else ("onnx.load", "onnx.load+save")
    runs = {base_load: [], base_both: [], "legalize": []}
    for _ in range(repeat):
        for stage in runs:
            runs[stage].append(measure(stage, path))
    best = lambda key, stage: min(r[key] for r in runs[stage])  # noqa: E731
    leg = min(runs["legalize"], key=lambda r: r["legalize"])
    timings = dict(leg["timings"])
    row = {"model": path.name, "format": "tflite" if tfl else "onnx", "nodes": leg["nodes_in"],
           "nodes_out": leg["nodes_out"], "baseline": base_both,
           "load_s": best(base_load, base_load), "load+save_s": best(base_both, base_both),
           "legalize_s": leg["legalize"], "load_rss_mb": best("maxrss_mb", base_load),
           "legalize_rss_mb": leg["maxrss_mb"], "timings_s": timings, "exit": leg["exit"]}
    if check:
        chk = measure("legalize+check", path)
        row["timings_s"]["check"] = chk["timings"].get("check", 0.0)
        row["check_ok"] = chk.get("check_ok")
        row["check_rss_mb"] = chk["maxrss_mb"]
    row["legalize/(load+save)"] = row["legalize_s"] / row["load+save_s"]
    row["rss/load"] = row["legalize_rss_mb"] / row["load_rss_mb"]
    row["nodes_per_s"] = {name: (row["nodes"] / row["timings_s"][key] if row["timings_s"].get(key) else None)
                          for name, key in STAGES}
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
    from legalizer.numeric.ort import bindings_for, synthesize
    from legalizer.target_passes import legalize

    original = onnx.load(str(path))
    model = legalizer.load(path)
    legalize(model, "tosa")
    legal = legalizer.to_onnx(model)
    feeds = synthesize(original, bindings_for(original, {})[0], {})
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads, so.log_severity_level = 1, 1, 4
    sessions = [ort.InferenceSession(m.SerializeToString(), so, providers=PROVIDERS)
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
    from legalizer.pipeline import is_output

    models = sorted(p for p in (ROOT / "models").glob("*.onnx") if p.name != "incompatible_add.onnx" and not is_output(p))
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
    from legalizer.numeric.ort import bindings_for, choices_from_constraints, synthesize
    from legalizer.target_passes import legalize

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
    choices = choices_from_constraints(legalizer.verify(legalizer.load(path).graph, "mlir").constraints)
    quiet = ort.SessionOptions()
    quiet.log_severity_level = 4
    probe = ort.InferenceSession(original.SerializeToString(), quiet, providers=PROVIDERS)
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
    sessions = [ort.InferenceSession(m.SerializeToString(), so, providers=PROVIDERS) for m in protos]
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

    t = Table(title=f"onnxruntime {PROVIDERS[0].replace('ExecutionProvider', '')} latency of each form over the original (median of {runs} runs in rotating"
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


# ---- --peers: the Python graph rewriters users would run in the same step ---------------
# Each is run as a user would: onnx.load, the rewriter's entry point with its defaults,
# onnx.save; timed from the load to the save (imports excluded, as for legalize), in a
# fresh process of the peers' own venv (scripts/setup_peers.sh), with a time cap.
PEERS = {
    "onnxsim": "import onnxsim\nrewrite = lambda m: onnxsim.simplify(m)[0]",
    "onnxslim": "import onnxslim\nrewrite = onnxslim.slim",
    "onnxscript": "import onnxscript.optimizer\nrewrite = onnxscript.optimizer.optimize",
    "onnxoptimizer": "import onnxoptimizer\nrewrite = onnxoptimizer.optimize",
}
_PEER_CHILD = textwrap.dedent("""
    import json, sys, time
    import onnx
    exec(sys.argv[1])  # defines rewrite(ModelProto) -> ModelProto
    path, out = sys.argv[2], sys.argv[3]
    t0 = time.perf_counter()
    m = onnx.load(path)
    m = rewrite(m)
    onnx.save(m, out)
    seconds = time.perf_counter() - t0
    hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")]
    print(json.dumps({"s": seconds, "maxrss_mb": int(hwm[0].split()[1]) / 1024 if hwm else None}))
""")


def peers_python(given: Optional[Path]) -> Path:
    py = given or ROOT / ".venv-peers" / "bin" / "python"
    if not Path(py).exists():
        raise SystemExit(f"--peers: no {py}: make it with `bash scripts/setup_peers.sh` (or give --peers-python)")
    return Path(py)


def measure_peer(python: Path, peer: str, path: Path, cap: float) -> dict:
    """One peer on one model: seconds and peak RSS, ``{"over": cap}`` past the cap, or
    ``{"error": first line}`` where it fails."""
    out = path.with_name(path.name + ".bench-peer.onnx")
    try:
        r = subprocess.run([str(python), "-c", _PEER_CHILD, PEERS[peer], str(path), str(out)], capture_output=True,
                           text=True, timeout=cap, env=dict(os.environ, PYTHONPATH=""))
    except subprocess.TimeoutExpired:
        return {"over": cap}
    finally:
        for f in path.parent.glob(out.name + "*"):
            f.unlink()
    if r.returncode != 0:
        lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
        return {"error": lines[-1][:160] if lines else f"exit status {r.returncode}"}
    return json.loads(r.stdout.strip().splitlines()[-1])


def peers_models(sizes: list, transformer: bool) -> list:
    return [synthetic_model(n) for n in sizes] + ([transformer_model()] if transformer else []) + \
        sorted(wheel_model("").glob("*.onnx"))


def peers_bench(paths: list, python: Path, cap: float, baseline: Optional[Path], repeat: int = 1) -> list:
    """Every model through the I/O floor (onnx.load + onnx.save), legalize --no-check
    (and the ``baseline`` checkout's, if given; these best of ``repeat``, interleaved)
    and each peer (once), one after the other in this run. A peer over the cap on a
    synthetic model is not run on the larger ones (it would be over it there too):
    reported as over the cap, not run."""
    rows, gave_up = [], {}
    for path in paths:
        stages = [("onnx.load", ROOT), ("onnx.load+save", ROOT), ("legalize", ROOT)] + \
            ([("legalize", baseline)] if baseline is not None else [])
        runs = [[] for _ in stages]
        for _ in range(repeat):
            for got, (stage, root) in zip(runs, stages):
                got.append(measure(stage, path, root=root))
        load, floor, leg, *base = (min(got, key=lambda r, s=stage: r[s]) for got, (stage, _) in zip(runs, stages))
        row = {"model": path.name, "nodes": leg["nodes_in"], "floor_s": floor["onnx.load+save"],
               "load_rss_mb": load["maxrss_mb"], "floor_rss_mb": floor["maxrss_mb"],
               "runs": {"legalize": {"s": leg["legalize"], "maxrss_mb": leg["maxrss_mb"]}}}
        if base:
            row["runs"]["legalize (baseline)"] = {"s": base[0]["legalize"], "maxrss_mb": base[0]["maxrss_mb"]}
        synthetic = path.name.startswith("synthetic_")
        for peer in PEERS:
            if synthetic and peer in gave_up:
                row["runs"][peer] = {"over": cap, "not_run": f"over the cap at {gave_up[peer]:,} nodes"}
                continue
            got = row["runs"][peer] = measure_peer(python, peer, path, cap)
            if synthetic and "over" in got:
                gave_up[peer] = row["nodes"]
        for run in row["runs"].values():
            if "s" in run:
                run["time/floor"] = run["s"] / row["floor_s"]
                run["rss/load"] = run["maxrss_mb"] / row["load_rss_mb"] if run.get("maxrss_mb") else None
        rows.append(row)
        print(f"{path.name}: " + ", ".join(f"{k} {_peer_cell(v)}" for k, v in row["runs"].items()),
              file=sys.stderr, flush=True)
    return rows


def _peer_cell(run: dict, rss: bool = False) -> str:
    if "over" in run:
        return f"> {run['over']:.0f} s"
    if "error" in run:
        return "error"
    if rss:
        return f"{run['rss/load']:.2f}×" if run.get("rss/load") else "-"
    return f"{run['s']:.2f} s ({run['time/floor']:.1f}×)"


def print_peers(rows: list, cap: float, load: tuple, repeat: int = 1) -> None:
    from rich.console import Console
    from rich.table import Table

    names = list(rows[0]["runs"]) if rows else []
    console = Console(width=240)
    t = Table(title=f"Seconds from onnx.load to onnx.save (× the I/O floor, onnx.load + onnx.save, same run;"
                    f" floor and legalize best of {repeat}, peers once); cap {cap:.0f} s per run;"
                    f" load average {load[0]:.1f} → {load[1]:.1f}")
    for col in ["model", "nodes", "floor s"] + names:
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(r["model"], f"{r['nodes']:,}", f"{r['floor_s']:.2f}", *(_peer_cell(r["runs"][k]) for k in names))
    console.print(t)
    t = Table(title="Peak RSS over onnx.load's (the process's VmHWM)")
    for col in ["model", "onnx.load MB"] + names:
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(r["model"], f"{r['load_rss_mb']:.0f}", *(_peer_cell(r["runs"][k], rss=True) for k in names))
    console.print(t)
    errors = [(r["model"], k, v["error"]) for r in rows for k, v in r["runs"].items() if "error" in v]
    for model, peer, error in errors:
        console.print(f"{model}: {peer}: {error}", markup=False, highlight=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1_000_000, help="nodes of the synthetic model")
    ap.add_argument("--repeat", type=int, default=1, help="fresh-process runs per measurement (best is kept)")
    ap.add_argument("--only", metavar="SUBSTR", help="only the models whose file name contains SUBSTR")
    ap.add_argument("--no-transformer", action="store_true", help="leave out the 24-layer transformer")
    ap.add_argument("--no-check", action="store_true", help="leave out the run with the numeric check")
    ap.add_argument("--latency-max-nodes", type=int, default=200_000,
                    help="measure onnxruntime latency only on models up to this many nodes")
    ap.add_argument("--scaling", action="store_true", help="stage times on synthetic graphs of --sizes nodes")
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--big", action="store_true", help="the >2 GB external-data model through the CLI with --check")
    ap.add_argument("--peers", action="store_true", help="the synthetic graphs of --sizes, the transformer and the light"
                    " models through onnxsim, onnxslim, onnxscript's optimizer and onnxoptimizer, beside legalize"
                    " and the I/O floor (scripts/setup_peers.sh makes their venv)")
    ap.add_argument("--peers-python", type=Path, help="with --peers: the python of the peers' venv"
                    " (default .venv-peers/bin/python)")
    ap.add_argument("--peer-timeout", type=float, default=240.0, help="with --peers: seconds a peer run may take")
    ap.add_argument("--baseline", type=Path, help="with --peers: another checkout of legalize (an older commit)"
                    " to run beside this one; alone: this tree and that one side by side on the synthetic graphs"
                    " of --sizes (stage times, best of --repeat, interleaved)")
    ap.add_argument("--json", type=Path, help="where the JSON goes (default .cache/bench/<mode>.json)")
    ap.add_argument("--provider", choices=["cpu", "cuda"], default="cpu",
                    help="onnxruntime execution provider of the latency runs")
    ap.add_argument("--each-once", action="store_true", help="issue 31's figures on the chains of --sizes: the I/O"
                    " floor, tosa, xla and the TFLite chain (median of --repeat rounds; --baseline beside)")
    ap.add_argument("--baseline-max", type=int, default=100_000, help="with --each-once --baseline: the largest"
                    " size the baseline runs at")
    ap.add_argument("--light", action="store_true", help="the onnx wheel's light models (and models/*.onnx):"
                    " onnx.load + onnx.save, the legalize command and onnxoptimizer (with the peers' venv) as whole"
                    " processes and in process, median of --repeat rounds")
    ap.add_argument("--profile", action="store_true", help="where the time (cProfile) and the Python memory"
                    " (tracemalloc, the import) of legalize --no-check go on the ONNX chains of --sizes; --baseline"
                    " beside")
    ap.add_argument("--targets", action="store_true", help="compare the legal forms (tosa, xla, xla strict) of the"
                    " sample and light models instead: nodes added, runtime broadcast checks, latency")
    ap.add_argument("--runs", type=int, default=50, help="latency runs per model")
    ap.add_argument("--warmup", type=int, default=5, help="latency warm-up runs per model")
    ap.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads with --targets (0: its default)")
    ap.add_argument("--opt", choices=OPT_LEVELS, default="all", help="onnxruntime graph optimizations with --targets")
    ap.add_argument("--dim", action="append", default=[], metavar="NAME=SIZE",
                    help="with --targets: bind a symbolic input dim (e.g. batch=64) where a model has it; repeatable")
    ap.add_argument("--models", metavar="SUBSTR", help="with --targets: only the models whose file name contains SUBSTR")
    args = ap.parse_args()
    if args.json is None:
        mode = "targets" if args.targets else "profile" if args.profile else "scaling" if args.scaling else "big" if args.big else \
            "peers" if args.peers else "each-once" if args.each_once else "baseline" if args.baseline else "models"
        CACHE.mkdir(parents=True, exist_ok=True)
        args.json = CACHE / f"{mode}.json"
        print(f"JSON: {args.json}", file=sys.stderr)
    if args.provider == "cuda":
        import onnxruntime as ort

        if "CUDAExecutionProvider" not in ort.get_available_providers():
            raise SystemExit("--provider cuda: this onnxruntime has no CUDAExecutionProvider (CONTRIBUTING.md: GPU set-up)")
        PROVIDERS.insert(0, "CUDAExecutionProvider")
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
    if args.peers:
        python = peers_python(args.peers_python)
        paths = [p for p in peers_models([int(x) for x in args.sizes.split(",")], not args.no_transformer)
                 if not args.only or args.only in p.name]
        before = os.getloadavg()[0]
        rows = peers_bench(paths, python, args.peer_timeout, args.baseline, args.repeat)
        load = (before, os.getloadavg()[0])
        print_peers(rows, args.peer_timeout, load, args.repeat)
        if args.json:
            args.json.write_text(json.dumps({"peers": rows, "cap_s": args.peer_timeout, "load_average": load,
                                             "baseline": str(args.baseline) if args.baseline else None,
                                             "repeat": args.repeat},
                                            indent=2) + "\n")
        return
    if args.light:
        paths = [p for p in sorted(wheel_model("").glob("*.onnx")) + sorted((ROOT / "models").glob("*.onnx"))
                 if (not args.only or args.only in p.name) and "incompatible" not in p.name]
        py = args.peers_python or ROOT / ".venv-peers" / "bin" / "python"
        rows = light(paths, args.repeat, Path(py) if Path(py).exists() else None)
        print_light(rows, args.repeat)
        if args.json:
            args.json.write_text(json.dumps({"light": rows, "repeat": args.repeat}, indent=2) + "\n")
        return
    if args.profile:
        rows = profile([int(x) for x in args.sizes.split(",")], args.baseline)
        print_profile(rows)
        if args.json:
            args.json.write_text(json.dumps({"profile": rows, "baseline": str(args.baseline) if args.baseline else None},
                                            indent=2) + "\n")
        return
    if args.each_once:
        before = os.getloadavg()[0]
        rows = each_once([int(x) for x in args.sizes.split(",")], args.repeat, args.baseline, args.baseline_max)
        print_each_once(rows)
        if args.json:
            args.json.write_text(json.dumps({"each_once": rows, "load_average": (before, os.getloadavg()[0])},
                                            indent=2) + "\n")
        return
    if args.baseline is not None:
        rows = against_baseline([int(x) for x in args.sizes.split(",")], args.baseline, args.repeat)
        print_against_baseline(rows, args.repeat)
        if args.json:
            args.json.write_text(json.dumps({"baseline": str(args.baseline), "repeat": args.repeat, "rows": rows},
                                            indent=2) + "\n")
        return
    if args.scaling:
        rows = scaling([int(x) for x in args.sizes.split(",")])
        print_scaling(rows)
        if args.json:
            args.json.write_text(json.dumps({"scaling": rows}, indent=2) + "\n")
        return
    if args.big:
        row = big_run()
        print(json.dumps(row, indent=2))
        if args.json:
            args.json.write_text(json.dumps({"big": row}, indent=2) + "\n")
        return
    paths = ([] if args.no_transformer else [transformer_model()]) + [synthetic_model(args.nodes)] + \
        sorted(wheel_model("").glob("*.onnx")) + tflite_models()
    paths = [p for p in paths if not args.only or args.only in p.name]
    rows = []
    for p in paths:
        row = bench(p, args.repeat, check=not args.no_check)
        if p.suffix == ".onnx" and row["nodes"] <= args.latency_max_nodes:
            lat = latency(p, runs=args.runs, warmup=args.warmup)
            row.update({k: lat[k] for k in ("original_ms", "legalized_ms")}, **{"latency tosa/orig": lat["ratio"]})
        rows.append(row)
        print(f"{p.name}: legalize/(load+save) {row['legalize/(load+save)']:.2f}, rss/load {row['rss/load']:.2f}",
              file=sys.stderr, flush=True)
    print_models(rows, args.repeat)
    if args.json:
        args.json.write_text(json.dumps({"models": rows, "repeat": args.repeat}, indent=2) + "\n")


def tflite_chain(ops: int) -> Path:
    """The TFLite chain of ``ops`` ADDs (tests/tflite_build.add_chain, which
    scripts/tflite_chain.py writes), cached beside the synthetic ONNX chains."""
    path = CACHE / f"tflite_chain_{ops}.tflite"
    if not path.exists():
        sys.path.append(str(ROOT / "tests"))
        from tflite_build import add_chain

        CACHE.mkdir(parents=True, exist_ok=True)
        path.write_bytes(add_chain(ops))
    return path


# What --each-once runs per size: (label, stage, model kind, target); each in a fresh
# process, the rounds alternated, the median kept.
EACH_ONCE_RUNS = (("onnx.load+save", "onnx.load+save", "onnx", "tosa"),
                  ("networkx topology alone", "onnx.load+topology+save", "onnx", "tosa"),
                  ("tosa", "legalize", "onnx", "tosa"),
                  ("xla", "legalize", "onnx", "xla"), ("tflite tosa", "legalize", "tflite", "tosa"))


def each_once(sizes: list, repeat: int, baseline: Optional[Path], baseline_max: int) -> list:
    """Issue 31's figures: per size, the ONNX chain's I/O floor (onnx.load + onnx.save),
    legalize --no-check of it for tosa and for xla, and of the TFLite ADD chain of the
    same length (tosa); with ``baseline``, that checkout's legalize runs beside (up to
    ``baseline_max`` nodes: an old xla run of 1M nodes needs ~25 GB). Whole processes,
    the runs of one round one after the other, ``repeat`` rounds; the median of each."""
    import statistics

    rows = []
    for n in sizes:
        models = {"onnx": synthetic_model(n), "tflite": tflite_chain(n)}
        runs = [(label, stage, kind, target, ROOT) for label, stage, kind, target in EACH_ONCE_RUNS]
        if baseline is not None and n <= baseline_max:
            runs += [(label + " (before)", stage, kind, target, baseline)
                     for label, stage, kind, target in EACH_ONCE_RUNS if stage == "legalize"]
        got: Dict[str, list] = {r[0]: [] for r in runs}
        for _ in range(repeat):
            for label, stage, kind, target, root in runs:
                got[label].append(measure(stage, models[kind], root=root, target=target))
        row = {"nodes": n, "repeat": repeat, "runs": {}}
        for label, stage, *_ in runs:
            row["runs"][label] = {"s": statistics.median(r[stage] for r in got[label]),
                                  "maxrss_mb": statistics.median(r["maxrss_mb"] for r in got[label]),
                                  "cpu_s": statistics.median(r["cpu_s"] for r in got[label]),
                                  "all_s": [r[stage] for r in got[label]]}
        r = row["runs"]
        floor = r["onnx.load+save"]
        for suffix in ("", " (before)"):
            if "tosa" + suffix not in r:
                continue
            tosa, xla, tfl = r["tosa" + suffix], r["xla" + suffix], r["tflite tosa" + suffix]
            bound = r["networkx topology alone"]
            row["ratios" + suffix] = {"bound/floor s": bound["s"] / floor["s"],
                                      "bound/floor rss": bound["maxrss_mb"] / floor["maxrss_mb"],
                                      "tosa/floor s": tosa["s"] / floor["s"],
                                      "tosa/floor rss": tosa["maxrss_mb"] / floor["maxrss_mb"],
                                      "xla/tosa s": xla["s"] / tosa["s"], "tflite/onnx s": tfl["s"] / tosa["s"],
                                      "tflite/onnx cpu": tfl["cpu_s"] / tosa["cpu_s"]}
        rows.append(row)
        print(f"{n:,} nodes: " + "; ".join(f"{k} {v['s']:.2f} s {v['maxrss_mb']:.0f} MB" for k, v in r.items()),
              file=sys.stderr, flush=True)
    return rows


# ---- --light: small models, whole processes ---------------------------------------------
# What a user waits for on a small model is the process: the interpreter, the imports
# and the work. Each run here is timed from its spawn to its exit (and, inside it, from
# the load to the save), the runs of a round one after the other, the median of the rounds.
_LIGHT_CLI = "from legalizer.cli import console\nconsole()"


def _timed(fn, *args):
    """(seconds ``fn(*args)`` took, its result): a child's from its spawn to its exit."""
    t0 = time.perf_counter()
    got = fn(*args)
    return time.perf_counter() - t0, got


def _cli(argv: list, env: dict) -> None:
    r = subprocess.run(argv, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise SystemExit(f"legalize {' '.join(map(str, argv[3:]))}: exit status {r.returncode}:\n{r.stderr[-2000:]}")


def light(paths: list, repeat: int, peers: Optional[Path]) -> list:
    """Per model: ``onnx.load`` + ``onnx.save``, the ``legalize --no-check`` command
    and (with the peers' venv) onnxoptimizer, each as a whole process (spawn to exit),
    and load-to-save inside the process (legalize's: ``pipeline.run``, which starts its
    shape inference helper itself); median of ``repeat`` rounds."""
    import statistics

    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    rows = []
    for path in paths:
        out = path.with_name(path.name + ".bench-copy.onnx")
        runs: Dict[str, list] = {}
        nodes = None
        for _ in range(repeat):
            got = {"floor": _timed(measure, "onnx.load+save", path),
                   "legalize": _timed(_cli, [sys.executable, "-c", _LIGHT_CLI, str(path), "--no-check", "-o", str(out),
                                             "--force"], env)}
            if peers is not None:
                got["onnxoptimizer"] = _timed(measure_peer, peers, "onnxoptimizer", path, 240)
            inside = measure("legalize", path)  # (the command's own run has no timer to read)
            nodes = inside["nodes_in"]
            for name, (process_s, _) in got.items():
                runs.setdefault(f"{name} process", []).append(process_s)
            runs.setdefault("floor in process", []).append(got["floor"][1]["onnx.load+save"])
            runs.setdefault("legalize in process", []).append(inside["legalize"])
            if peers is not None:
                runs.setdefault("onnxoptimizer in process", []).append(got["onnxoptimizer"][1].get("s", float("nan")))
        for f in path.parent.glob(out.name + "*"):
            f.unlink()
        med = {k: statistics.median(v) for k, v in runs.items()}
        row = {"model": path.name, "nodes": nodes, "s": med, "all_s": runs,
               "legalize/floor (process)": med["legalize process"] / med["floor process"],
               "legalize/floor (in process)": med["legalize in process"] / med["floor in process"]}
        if peers is not None:
            row["legalize/onnxoptimizer (process)"] = med["legalize process"] / med["onnxoptimizer process"]
            row["legalize/onnxoptimizer (in process)"] = med["legalize in process"] / med["onnxoptimizer in process"]
        rows.append(row)
        print(f"{path.name}: " + ", ".join(f"{k} {v:.3f} s" for k, v in med.items()), file=sys.stderr, flush=True)
    return rows


def print_light(rows: list, repeat: int) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=220)
    peers = bool(rows) and "onnxoptimizer process" in rows[0]["s"]
    t = Table(title=f"Small models: seconds, whole processes (spawn to exit) and in process (load to save);"
                    f" median of {repeat}; × onnx.load + onnx.save's")
    cols = ["model", "nodes", "floor", "legalize", "legalize ×"] + (["onnxoptimizer", "legalize / onnxoptimizer"]
                                                                   if peers else [])
    for col in cols + ["floor (in)", "legalize (in)", "legalize × (in)"] + (["onnxoptimizer (in)"] if peers else []):
        t.add_column(col, justify="right")
    for r in rows:
        s = r["s"]
        cells = [r["model"], f"{r['nodes']:,}", f"{s['floor process']:.3f}", f"{s['legalize process']:.3f}",
                 f"{r['legalize/floor (process)']:.2f}×"]
        if peers:
            cells += [f"{s['onnxoptimizer process']:.3f}", f"{r['legalize/onnxoptimizer (process)']:.2f}×"]
        cells += [f"{s['floor in process'] * 1000:.1f} ms", f"{s['legalize in process'] * 1000:.1f} ms",
                  f"{r['legalize/floor (in process)']:.0f}×"]
        if peers:
            cells.append(f"{s['onnxoptimizer in process'] * 1000:.1f} ms")
        t.add_row(*cells)
    console.print(t)


def print_each_once(rows: list) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=200)
    t = Table(title="legalize --no-check: seconds and peak RSS (median of the rounds, whole processes)")
    for col in ("nodes", "run", "s", "CPU s (process)", "MB"):
        t.add_column(col, justify="right")
    for row in rows:
        for label, v in row["runs"].items():
            t.add_row(f"{row['nodes']:,}", label, f"{v['s']:.2f}", f"{v['cpu_s']:.2f}", f"{v['maxrss_mb']:.0f}")
    console.print(t)
    t = Table(title="Issue 31's ratios")
    for col in ("nodes", "tree", "topology alone / floor (s)", "topology alone / floor (RSS)", "tosa / floor (s)",
                "tosa / floor (RSS)", "xla / tosa (s)", "TFLite / ONNX chain (s)",
                "TFLite / ONNX chain (CPU s)"):
        t.add_column(col, justify="right")
    for row in rows:
        for suffix, tree in (("", "this"), (" (before)", "before")):
            if "ratios" + suffix in row:
                q = row["ratios" + suffix]
                t.add_row(f"{row['nodes']:,}", tree, *(f"{q[k]:.2f}×" for k in q))
    console.print(t)


def against_baseline(sizes: list, baseline: Path, repeat: int) -> list:
    """legalize --no-check of this tree and of ``baseline`` on the synthetic graphs, in
    fresh processes, interleaved (drift hits both alike); per tree the best of ``repeat``
    total and per-stage times."""
    rows = []
    for n in sizes:
        path = synthetic_model(n)
        runs = {"this": [], "baseline": []}
        for _ in range(repeat):
            for name, root in (("baseline", baseline), ("this", ROOT)):
                runs[name].append(measure("legalize", path, root=root))
        row = {"model": path.name, "nodes": n}
        for name, got in runs.items():
            row[name] = {"total_s": min(r["legalize"] for r in got),
                         "stages_s": {k: min(r["timings"].get(k, 0.0) for r in got) for k in got[0]["timings"]},
                         "all_total_s": [r["legalize"] for r in got]}
        row["total this/baseline"] = row["this"]["total_s"] / row["baseline"]["total_s"]
        row["passes this/baseline"] = row["this"]["stages_s"]["passes"] / row["baseline"]["stages_s"]["passes"]
        rows.append(row)
        print(f"{path.name}: total {row['total this/baseline']:.3f}x, passes {row['passes this/baseline']:.3f}x",
              file=sys.stderr, flush=True)
    return rows


def print_against_baseline(rows: list, repeat: int) -> None:
    print(f"legalize --no-check, this tree vs --baseline (best of {repeat}, interleaved)")
    print(f"{'model':<24} {'tree':<9} {'total s':>9} " + " ".join(f"{k + ' s':>10}" for k, _ in STAGES[:4]))
    for row in rows:
        for name in ("baseline", "this"):
            r = row[name]
            print(f"{row['model']:<24} {name:<9} {r['total_s']:>9.3f} "
                  + " ".join(f"{r['stages_s'].get(key, 0.0):>10.3f}" for _, key in STAGES[:4]))
        print(f"{'':<24} {'ratio':<9} {row['total this/baseline']:>9.3f}   (passes {row['passes this/baseline']:.3f})")


def _fmt_rate(x) -> str:
    if x is None:
        return "-"
    return f"{x / 1e6:.2f}M" if x >= 1e6 else f"{x / 1e3:.0f}k" if x >= 1e3 else f"{x:.0f}"


def print_models(rows: list, repeat: int) -> None:
    import math

    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"legalize (tosa, no check) vs onnx.load+onnx.save (TFLite: file read+write), fresh process"
                    f" each, best of {repeat}; nodes/s per stage; onnxruntime latency tosa/original")
    for col in ("model", "nodes", "load+save s", "legalize s", "legalize/(load+save)", "peak RSS MB (load → legalize)",
                "rss/load", "import n/s", "verify n/s", "passes n/s", "export n/s", "check n/s", "check RSS MB",
                "latency tosa/orig"):
        t.add_column(col, justify="right")
    for r in rows:
        rate = r["nodes_per_s"]
        t.add_row(r["model"], f"{r['nodes']:,}", f"{r['load+save_s']:.3f}", f"{r['legalize_s']:.3f}",
                  f"{r['legalize/(load+save)']:.1f}×", f"{r['load_rss_mb']:.0f} → {r['legalize_rss_mb']:.0f}",
                  f"{r['rss/load']:.2f}×", *(_fmt_rate(rate[k]) for k in ("import", "verify", "passes", "export", "check")),
                  f"{r['check_rss_mb']:.0f}" if "check_rss_mb" in r else "-",
                  f"{r['latency tosa/orig']:.3f}" if "latency tosa/orig" in r else "-")
    lat = [r["latency tosa/orig"] for r in rows if "latency tosa/orig" in r]
    gm = lambda xs: math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")  # noqa: E731
    t.add_row("geometric mean", "", "", "", f"{gm([r['legalize/(load+save)'] for r in rows]):.1f}×", "",
              f"{gm([r['rss/load'] for r in rows]):.2f}×", "", "", "", "", "", "", f"{gm(lat):.3f}", style="bold")
    Console(width=240).print(t)


def scaling(sizes: list) -> list:
    """Every stage's time on synthetic graphs of each size (one fresh process each)."""
    rows = []
    for n in sizes:
        path = synthetic_model(n)
        base = measure("onnx.load+save", path)
        r = measure("legalize", path)
        rows.append({"nodes": r["nodes_in"], "timings_s": r["timings"], "legalize_s": r["legalize"],
                     "onnx.load+save_s": base["onnx.load+save"], "maxrss_mb": r["maxrss_mb"],
                     "us_per_node": {k: 1e6 * v / r["nodes_in"] for k, v in r["timings"].items()}})
        print(f"{n:,} nodes: {r['legalize']:.2f} s", file=sys.stderr, flush=True)
    return rows


def print_scaling(rows: list) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title="Scaling on synthetic graphs: seconds per stage (µs per node); linear = constant µs/node")
    cols = [k for k in ("load", "verify", "passes", "save") if any(k in r["timings_s"] for r in rows)]
    for col in ["nodes"] + [{"load": "import", "save": "export"}.get(c, c) for c in cols] + \
            ["legalize total", "onnx.load+save", "peak RSS MB"]:
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(f"{r['nodes']:,}", *(f"{r['timings_s'][c]:.2f} ({r['us_per_node'][c]:.1f})" for c in cols),
                  f"{r['legalize_s']:.2f} ({1e6 * r['legalize_s'] / r['nodes']:.1f})",
                  f"{r['onnx.load+save_s']:.2f} ({1e6 * r['onnx.load+save_s'] / r['nodes']:.2f})",
                  f"{r['maxrss_mb']:.0f}")
    Console(width=200).print(t)


def big_run() -> dict:
    """The >2 GB model through the CLI (legalize MODEL -o OUT --check --force): wall time,
    peak RSS of that process, and where its data went."""
    import time

    path = big_model()
    out = path.with_name("big.legal.onnx")
    report = path.with_name("big.report.json")
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "legalizer.cli", str(path), "-o", str(out), "--check", "--force",
                          "--provider", "cpu", "--report", str(report), "-q"], env=env)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    load = measure("onnx.load", path)  # onnx.load, which reads the external data too, for scale
    data = sum(f.stat().st_size for f in path.parent.glob("big.onnx.data"))
    rep = json.loads(report.read_text()) if report.exists() else {}
    return {"model": str(path), "weights_bytes": data, "model_file_bytes": path.stat().st_size,
            "exit": os.waitstatus_to_exitcode(status), "wall_s": wall, "peak_rss_mb": usage.ru_maxrss / 1024,
            "onnx.load_rss_mb (with its external data)": load["maxrss_mb"],
            "output_bytes": out.stat().st_size if out.exists() else None,
            "output_data": [f.name for f in path.parent.glob("big.legal.onnx*")],
            "timings_s": rep.get("timings_s"), "check": (rep.get("check") or {}).get("ok")}


if __name__ == "__main__":
    main()
