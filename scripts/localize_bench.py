#!/usr/bin/env python3
"""How well ``--localize`` finds an injected fault, and what it costs.

For each model, N of its weights in turn (spread over the graph) are moved - each
element of a float weight up or down by half its largest magnitude plus 0.1, of an int8
one by 40 steps - and the copy
is compared with the original as ``--verify-only --against`` does (onnxruntime for
ONNX, LiteRT for TFLite). When the outputs differ, the comparison is localized; a hit
is a culprit that is a node reading the weight. One row per model, then the totals:

    python scripts/localize_bench.py                       # the sample models in models/
    python scripts/localize_bench.py --corpus --weights 3  # and the cached corpus
    python scripts/localize_bench.py --corpus --only 'hf_*' --max-mb 30
"""

from __future__ import annotations

import argparse
import fnmatch
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.append(str(ROOT / "tests"))  # corpus_models: the corpus's table

from legalizer.numeric.ort import ATOL, RTOL, check  # noqa: E402
from legalizer.numeric.reduce import _outer_names  # noqa: E402
from legalizer.numeric.settings import CheckSettings  # noqa: E402
from legalizer.numeric.tflite import check_tflite  # noqa: E402
from legalizer.localize_reduce import localize  # noqa: E402
from legalizer.formats import FORMATS, Sides  # noqa: E402

SAMPLES = ["mlp_bias.onnx", "mlp.dynamo.onnx", "small_cnn.dynamo.onnx", "small_cnn.torchscript.onnx",
           "transformer_block.dynamo.onnx", "transformer_block.torchscript.onnx", "tflite/mobilenet_like.tflite",
           "tflite/mobilenet_like_int8.tflite", "tflite/transformer_like.tflite"]


def _spread(items, n):
    return [items[round(k * (len(items) - 1) / max(n - 1, 1))] for k in range(min(n, len(items)))] if items else []


def _moved(a: np.ndarray) -> np.ndarray:
    """Every element moved up or down at random (a shift of all by one amount would be
    undone by a LayerNorm or a softmax downstream)."""
    sign = np.where(np.random.default_rng(0).random(a.shape) < 0.5, -1, 1)
    if a.dtype.kind == "f":
        return (a + sign * 0.5 * (np.abs(a).max() + 0.1)).astype(a.dtype)
    info = np.iinfo(a.dtype)
    return np.clip(a.astype(np.int64) + 40 * sign, info.min, info.max).astype(a.dtype)


def onnx_faults(path: Path, n: int, work: Path):
    """(perturbed copy, readers) for n float weights read at the top level."""
    m = onnx.load(str(path))
    inits = {t.name: t for t in m.graph.initializer}
    order = []
    for node in m.graph.node:
        for x in list(node.input) + sorted(_outer_names([node])):
            t = inits.get(x)
            if t is not None and x not in order and numpy_helper.to_array(t).dtype.kind == "f" \
                    and numpy_helper.to_array(t).size > 1:
                order.append(x)
    for k, name in enumerate(_spread(order, n)):
        copy = onnx.ModelProto()
        copy.CopyFrom(m)
        t = next(t for t in copy.graph.initializer if t.name == name)
        t.CopyFrom(numpy_helper.from_array(_moved(numpy_helper.to_array(t)), name))
        out = work / f"{path.stem}.{k}.onnx"
        onnx.save(copy, str(out))
        readers = {nd.name or nd.output[0] for nd in m.graph.node if name in nd.input or name in _outer_names([nd])}
        yield name, out, readers


def tflite_faults(path: Path, n: int, work: Path):
    import legalizer
    from legalizer.ir.constdata import ConstData
    from legalizer.ir.graph import CONST

    names = []
    model = legalizer.load(path)
    for node in model.graph.nodes():
        if node.kind == CONST and node.output.type.dtype in ("float", "float16", "int8") and model.graph.users(node.output):
            a = node.data.array
            if a.size > 1 and (a.dtype.kind == "f" or node.output.quant is not None):
                names.append(node.output.name)
    for k, name in enumerate(_spread(names, n)):
        model = legalizer.load(path)
        node = next(nd for nd in model.graph.nodes() if nd.kind == CONST and nd.output.name == name)
        node.data = ConstData.from_array(_moved(np.array(node.data.array)))
        users = [u for u, _ in model.graph.users(node.output)]
        # a float16 weight is read through its DEQUANTIZE (which XNNPACK folds away)
        users += [w for u in users if u.op_type == "DEQUANTIZE" for w, _ in model.graph.users(u.output)]
        readers = {u.label for u in users}
        out = work / f"{path.stem}.{k}.tflite"
        legalizer.save(model, out, force=True)
        yield name, out, readers, legalizer.load(out)


def needs(path: Path):
    try:
        from corpus_models import CHECK_NEEDS
    except ImportError:
        return {}, {}
    need = CHECK_NEEDS.get(path.stem, {})
    return need.get("dims", {}), {k: np.asarray(v, np.int64) for k, v in need.get("inputs", {}).items()}


def bench(path: Path, n: int, work: Path) -> dict:
    row = {"model": path.name, "faults": 0, "differ": 0, "hits": 0, "check_s": 0.0, "localize_s": 0.0, "misses": [],
           "not_run": "", "ratios": []}
    dims, given = needs(path)
    tflite = path.suffix == ".tflite"
    faults = tflite_faults(path, n, work) if tflite else onnx_faults(path, n, work)
    for fault in faults:
        name, cand, readers = fault[:3]
        row["faults"] += 1
        t0 = time.perf_counter()
        if tflite:
            chk = check_tflite(path, cand, fault[3], dims=dims, inputs=given, litert_only=True)
            sides = Sides(FORMATS["tflite"], cand, path, fault[3].graph)
        else:
            chk = check(path, cand, dims=dims, inputs=given)
            sides = Sides(FORMATS["onnx"], cand, path)
        check_s = time.perf_counter() - t0
        row["check_s"] += check_s
        if not chk.ran:
            row["not_run"] = chk.error
            continue
        if chk.ok:
            continue  # the fault does not reach an output
        row["differ"] += 1
        t0 = time.perf_counter()
        loc = localize(sides, chk, CheckSettings(rtol=RTOL, atol=ATOL), given=given)
        row["localize_s"] += time.perf_counter() - t0
        row["ratios"].append((time.perf_counter() - t0) / max(check_s, 1e-9))
        if loc is not None and loc.culprit is not None and loc.culprit.node in readers:
            row["hits"] += 1
        else:
            got = "none" if loc is None or loc.culprit is None else loc.culprit.node
            row["misses"].append(f"{name}: culprit {got} ({(loc.note if loc else '') or 'read by ' + ', '.join(sorted(readers))})")
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", action="store_true", help="also the cached corpus (.cache/corpus)")
    ap.add_argument("--weights", type=int, default=4, help="weights perturbed per model (default 4)")
    ap.add_argument("--only", action="append", default=[], help="model name patterns (fnmatch)")
    ap.add_argument("--max-mb", type=float, default=60.0, help="skip models larger than this")
    args = ap.parse_args(argv)
    paths = [ROOT / "models" / s for s in SAMPLES]
    if args.corpus:
        from corpus_models import cached

        paths += cached()
    if args.only:
        paths = [p for p in paths if any(fnmatch.fnmatch(p.stem, pat) for pat in args.only)]
    paths = [p for p in paths if p.stat().st_size <= args.max_mb * 2**20]
    total = {"faults": 0, "differ": 0, "hits": 0, "check_s": 0.0, "localize_s": 0.0, "ratios": []}
    print("| model | faults | outputs differ | culprit reads the weight | plain check s | localize s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory(prefix="localize-bench-") as d:
        for path in paths:
            try:
                row = bench(path, args.weights, Path(d))
            except Exception as e:  # noqa: BLE001 - a model the runtimes refuse: say so, go on
                print(f"| {path.name} | error: {type(e).__name__}: {str(e).splitlines()[0][:80]} | | | | |")
                continue
            for k in total:
                total[k] += row[k]
            print(f"| {row['model']} | {row['faults']} | {row['differ']} | {row['hits']} | {row['check_s']:.2f}"
                  f" | {row['localize_s']:.2f} |", flush=True)
            if row["not_run"]:
                print(f"|   not compared: {row['not_run'][:100]} | | | | | |")
            for miss in row["misses"]:
                print(f"|   miss: {miss} | | | | | |")
    rate = total["hits"] / total["differ"] if total["differ"] else 0.0
    ratios = sorted(total["ratios"]) or [0.0]
    print(f"\n{total['faults']} faults, {total['differ']} reach an output, {total['hits']} localized to a reader of the"
          f" weight ({rate:.0%}); a localization takes {np.median(ratios):.1f}x the time of the plain check of the"
          f" same fault (median; {ratios[0]:.1f}x to {ratios[-1]:.1f}x), {total['localize_s']:.0f} s in all against"
          f" {total['check_s']:.0f} s of checks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
