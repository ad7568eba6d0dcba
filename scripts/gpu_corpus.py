#!/usr/bin/env python3
"""The corpus's TFLite models on LiteRT's GPU accelerator, before and after
``legalize --target litert-gpu`` (and with ``--static``): whether the whole graph
compiles on the GPU (``numeric.litert_gpu.gpu_compile``: GPU only, enforce_f32; the
delegate's reasons when not), and where it runs, the largest difference between its
outputs and LiteRT's CPU kernels on the original, same inputs (seed 0; a dynamic dim
is 1). One model at a time, each step under a timeout.

    python scripts/gpu_corpus.py [MODEL.tflite ...] [--out DIR] [--json rows.json] [--expose]

Without models: every .tflite of .cache/corpus/. ``--expose`` also makes every
original and legalized file output a few inner tensors (the inputs of the last
SOFTMAX / FULLY_CONNECTED / MEAN, the outputs of ops 0, 8, .., 32), by tensor name: the
Keras models of the corpus have random weights, and their softmax reads 0.1 everywhere.
Prints a markdown table; exit 0 unless a step could not run at all.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from legalizer.numeric import litert_gpu  # noqa: E402
from legalizer.numeric.litert import LiteRTModel  # noqa: E402

LEGALIZE_TIMEOUT_S = 300
VARIANTS = {"after": [], "after --static": ["--static"]}
HEAD_OPS = ("SOFTMAX", "FULLY_CONNECTED", "MEAN")


def legalize(src: Path, out: Path, extra: List[str]) -> dict:
    """The CLI, as a user runs it; the command line and its exit status."""
    cmd = [sys.executable, "-m", "legalizer.cli", str(src), "--target", "litert-gpu", *extra,
           "-o", str(out), "--force", "--report", str(out.with_suffix(".json")), "-q"]
    t = time.time()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=LEGALIZE_TIMEOUT_S)
        rc, tail = proc.returncode, (proc.stderr + proc.stdout).strip().splitlines()[-1:]
    except subprocess.TimeoutExpired:
        rc, tail = 124, [f"timed out after {LEGALIZE_TIMEOUT_S} s"]
    return {"cmd": " ".join(cmd[2:]), "exit": rc, "s": round(time.time() - t, 1), "said": tail}


def feeds_for(model: LiteRTModel) -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    out = {}
    for s in model.input_specs():
        shape = [1 if d == -1 else d for d in s.shape_signature]
        if s.dtype.kind == "f":
            out[s.name] = rng.standard_normal(shape).astype(s.dtype)
        elif s.dtype.kind in "iu":
            info = np.iinfo(s.dtype)
            out[s.name] = rng.integers(info.min, info.max, shape, endpoint=True).astype(s.dtype)
        else:
            out[s.name] = rng.integers(0, 2, shape).astype(s.dtype)
    return out


def cpu_reference(path: Path):
    """(inputs, outputs on LiteRT's builtin kernels (the default resolver for a custom op
    only it has), the error when the CPU cannot run it)."""
    model = LiteRTModel(str(path))
    if model.unresolved_custom_op():
        model = LiteRTModel(str(path), kernels="default")
    feeds = feeds_for(model)
    try:
        return feeds, model.run(feeds), ""
    except Exception as e:  # noqa: BLE001 - a custom op no resolver has: the GPU is still tried
        return feeds, {}, str(e)


def gpu_row(path: Path, feeds, ref) -> dict:
    r = litert_gpu.gpu_compile(str(path), feeds)
    row = {"ok": r.ok, "refused": r.refused, "message": r.message}
    if r.outputs and ref:
        errs: Dict[str, float] = {}
        peak: Dict[str, float] = {}
        for name, want in ref.items():
            got = r.outputs.get(name)
            if got is None or got.shape != want.shape:
                errs[name] = float("nan")
                continue
            d = np.abs(got.astype(np.float64) - want.astype(np.float64))
            errs[name] = float(d.max()) if d.size else 0.0
            peak[name] = float(np.abs(want).max()) if want.size else 0.0
        row["max_abs_err"], row["peak_abs"] = errs, peak
    return row


def expose(original: Path, path: Path, out: Path) -> None:
    """``path`` with a few of ``original``'s inner tensors as extra outputs (by name)."""
    import tflite  # noqa: PLC0415 - the litert extra's flatbuffer reader

    from legalizer.kinds.tflite.schema import builtin_name, read, serialize  # noqa: PLC0415

    def load(p: Path):
        return read(tflite.Model.GetRootAsModel(p.read_bytes(), 0))

    def name(t) -> str:
        n = t.fields["name"]
        return n.decode() if isinstance(n, bytes) else n

    src = load(original)
    sg, codes = src.fields["subgraphs"][0], src.fields["operator_codes"]
    ops = sg.fields["operators"]

    def op_type(o) -> Optional[str]:
        c = codes[o.fields.get("opcode_index", 0)].fields
        return builtin_name(max(int(c.get("builtin_code") or 0), int(c.get("deprecated_builtin_code") or 0)))

    tensors = sg.fields["tensors"]
    want = [name(tensors[int(o.fields["inputs"][0])]) for o in reversed(ops) if op_type(o) in HEAD_OPS][:3]
    want += [name(tensors[int(o.fields["outputs"][0])]) for o in ops[:40:8]]
    model = load(path)
    g = model.fields["subgraphs"][0]
    index = {name(t): i for i, t in enumerate(g.fields["tensors"])}
    outs = [int(i) for i in g.fields["outputs"]]
    g.fields["outputs"] = np.array(outs + [index[w] for w in want if w in index and index[w] not in outs], np.int32)
    model.fields.pop("signature_defs", None)  # (its outputs are the old ones)
    out.write_bytes(serialize(model))


def measure(src: Path, out_dir: Path, exposed: bool) -> dict:
    row: dict = {"model": src.stem, "legalize": {}}
    files = {"before": src}
    for label, extra in VARIANTS.items():
        dst = out_dir / f"{src.stem}.litert-gpu{''.join(extra).replace('--', '.')}.tflite"
        row["legalize"][label] = legalize(src, dst, extra)
        files[label] = dst
    if exposed:
        files = {k: _exposed(src, p, out_dir) for k, p in files.items()}
    feeds, ref, row["cpu_error"] = cpu_reference(files["before"])
    for label, path in files.items():
        row[label] = gpu_row(path, feeds, ref) if path.exists() else {"ok": False, "refused": {},
                                                                        "message": "legalize wrote nothing"}
    return row


def _exposed(original: Path, path: Path, out_dir: Path) -> Path:
    dst = out_dir / f"{path.stem}.exposed.tflite"
    if path.exists():
        expose(original, path, dst)
    return dst


def _cell(r: dict) -> str:
    if r["ok"]:
        return "yes"
    why = "; ".join(f"{op}: {reason}" if reason else op for op, reason in r["refused"].items())
    return f"no ({why or r['message']})"


def _err(r: dict) -> str:
    """The largest absolute difference over the outputs, and the largest relative to its
    output's peak |value|."""
    errs, peaks = r.get("max_abs_err"), r.get("peak_abs", {})
    if not errs:
        return "-"
    if any(np.isnan(e) for e in errs.values()):
        return "outputs differ in name or shape"
    rel = max((e / peaks[k] if peaks.get(k) else (0.0 if e == 0 else float("inf"))) for k, e in errs.items())
    return f"{max(errs.values()):.3g} ({rel:.2g} of peak)"


def table(rows: List[dict]) -> str:
    lines = ["| model | before | after | after --static | max abs err GPU vs CPU (rel. to peak): before / after /"
             " --static |",
             "|---|---|---|---|---|"]
    for row in rows:
        note = " (no CPU reference: custom op)" if row["cpu_error"] else ""
        errs = " / ".join(_err(row[k]) for k in ("before", "after", "after --static"))
        lines.append(f"| {row['model']}{note} | {_cell(row['before'])} | {_cell(row['after'])} | "
                     f"{_cell(row['after --static'])} | {errs} |")
    n = len(rows)
    counts = [sum(r[k]["ok"] for r in rows) for k in ("before", "after", "after --static")]
    lines.append("")
    lines.append(f"Whole graph on the GPU, of {n}: before {counts[0]}, after {counts[1]}, after --static {counts[2]}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", type=Path)
    ap.add_argument("--out", type=Path, default=Path("/tmp/legalize-gpu-corpus"))
    ap.add_argument("--json", type=Path)
    ap.add_argument("--expose", action="store_true")
    args = ap.parse_args()
    ok, why = litert_gpu.gpu_available()
    if not ok:
        print(f"gpu_corpus: {why}", file=sys.stderr)
        return 2
    models = args.models or sorted((ROOT / ".cache" / "corpus").glob("*.tflite"))
    if not models:
        print(f"gpu_corpus: no .tflite given, and none in {ROOT / '.cache' / 'corpus'} (scripts/corpus.py)",
              file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for src in models:
        rows.append(measure(src, args.out, args.expose))
        print(f"{src.stem}: before {rows[-1]['before']['ok']}, after {rows[-1]['after']['ok']}, "
              f"--static {rows[-1]['after --static']['ok']}", file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, default=str))
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
