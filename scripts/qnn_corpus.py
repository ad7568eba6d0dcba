#!/usr/bin/env python3
"""The corpus's ONNX models on Qualcomm's HTP (onnxruntime's QNN EP, CPU fallback off),
before and after ``legalize --target qnn-htp``: per model, whether HTP takes it whole, the
nodes it does not place, and the error. Both at the same static sizes (every dynamic dim
1, sequence dims 8, as ``--dim`` binds them; rapidocr's images at the sizes its pipeline
feeds them, as ``--input-shape`` does): before,
the original with its inputs made static by the same specialization (no other change);
after, the legalized model. A model taken whole is run and compared with the original
on the CPU EP (max abs error).

    python scripts/corpus.py --only 'hf_*'      # build the models (the corpus extra)
    python scripts/qnn_corpus.py [--only hf_vit] [--json rows.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.append(str(ROOT / "tests"))
from corpus_models import CACHE, cached  # noqa: E402

SIZES = {"batch": 1, "seq": 8, "time": 800}
# Models whose image dims have no name ('?', -1): the sizes their pipelines feed them
# (rapidocr: text lines 48 high, pages a multiple of 32), as --input-shape gives them.
INPUT_SHAPES = {"wheel_rapidocr_cls": "x:1x3x48x192", "wheel_rapidocr_rec": "x:1x3x48x320",
                "wheel_rapidocr_v4_rec_op12": "x:1x3x48x320", "wheel_rapidocr_det": "x:1x3x320x320"}


def _dims(path: Path) -> list:
    manifest = json.loads(path.with_suffix(".json").read_text())
    keys = {d for shape in manifest.get("dims", {}).get("inputs", {}).values() for d in shape if isinstance(d, str)}
    return [f"{k}={SIZES.get(k, 1)}" for k in sorted(keys)]


def _options(path: Path, dims: list) -> list:
    """The command line's bindings: --input-shape where the model has one, else --dim."""
    shape = INPUT_SHAPES.get(path.stem)
    return ["--input-shape", shape] if shape else [a for d in dims for a in ("--dim", d)]


def _sizes(path: Path, dims: list) -> dict:
    """The same bindings keyed as the specialization keys dims (a name, or input[axis])."""
    shape = INPUT_SHAPES.get(path.stem)
    if not shape:
        return {k: int(v) for k, v in (d.split("=") for d in dims)}
    import onnx

    from legalizer.ir.types import names_a_dim
    from legalizer.numeric.inputs import dim_key

    name, _, sizes = shape.partition(":")
    vi = next(i for i in onnx.load(str(path), load_external_data=False).graph.input if i.name == name)
    return {d.dim_param if names_a_dim(d.dim_param) else dim_key(name, k): int(n)
            for k, (d, n) in enumerate(zip(vi.type.tensor_type.shape.dim, sizes.split("x")))}


def _static(path: Path, sizes: dict, out: Path) -> None:
    """The original at the static sizes: its inputs' dims fixed, shapes folded (as the
    target's specialization does), nothing legalized."""
    from legalizer.api import load
    from legalizer.exporters.as_onnx import to_onnx
    from legalizer.numeric.static_onnx import specialize_onnx

    import onnx

    model = load(path)
    specialize_onnx(model, sizes)
    onnx.save(to_onnx(model), out)


def _on_htp(path: Path, original: Path) -> dict:
    """HTP's placement of ``path``, in a child process (the backend may abort)."""
    code = f"""
import json, sys, numpy as np, onnx, onnxruntime as ort
from legalizer.numeric.qnn_ep import placement
m = onnx.load({str(path)!r})
rng = np.random.default_rng(0)
feeds = {{}}
for i in m.graph.input:
    t = i.type.tensor_type
    shape = [d.dim_value for d in t.shape.dim]
    dt = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type)
    feeds[i.name] = (rng.integers(1, 100, shape) if np.issubdtype(dt, np.integer) else rng.standard_normal(shape)).astype(dt)
    if "mask" in i.name: feeds[i.name] = np.ones(shape, dt)
got = placement({str(path)!r}, feeds)
row = {{k: got[k] for k in ("whole", "refused", "reasons", "error")}}
if got["outputs"] is not None:
    want = ort.InferenceSession({str(original)!r}, providers=["CPUExecutionProvider"]).run(None, feeds)
    row["max_abs_err"] = max(float(np.max(np.abs(a.astype(np.float64) - b))) for a, b in zip(got["outputs"], want)
                            if a.dtype.kind == "f")
print(json.dumps(row))
"""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=900)
    if done.returncode != 0:
        return {"whole": False, "refused": [], "reasons": [], "error": f"the process ended with {done.returncode}: "
                + (done.stderr.strip().splitlines() or ["?"])[-1][:200]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", default=[])
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    rows = []
    paths = [p for p in cached(CACHE) if p.suffix == ".onnx" and (not args.only or p.stem in args.only)]
    with tempfile.TemporaryDirectory() as tmp:
        for path in paths:
            dims = _dims(path)
            before = Path(tmp) / f"{path.stem}.static.onnx"
            _static(path, _sizes(path, dims), before)
            row = {"model": path.stem, "dims": _options(path, dims)[1::2], "before": _on_htp(before, before)}
            after = Path(tmp) / f"{path.stem}.qnn.onnx"
            # (--allow-fallback: the legal form is written even where the rules leave ops
            # off the HTP, so that HTP itself judges it)
            cmd = [sys.executable, "-m", "legalizer.cli", str(path), "--target", "qnn-htp", "-o", str(after),
                   "--force", "--no-check", "--allow-fallback"] + _options(path, dims)
            done = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
            row["legalize_exit"] = done.returncode
            row["after"] = _on_htp(after, before) if done.returncode in (0, 1) and after.exists() else \
                {"whole": False, "refused": [], "reasons": [], "error": (done.stderr.strip().splitlines() or ["?"])[-1]}
            rows.append(row)
            b, a = row["before"], row["after"]
            print(f"| {path.stem} | {_cell(b)} | {_cell(a)} |", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


def _cell(r: dict) -> str:
    if r["whole"]:
        err = r.get("max_abs_err")
        return "whole" + (f", max abs err {err:.2g}" if err is not None else "")
    ops = sorted({x["op"] for x in r["refused"]})
    what = f"{len(r['refused'])} refused ({', '.join(ops)})" if r["refused"] else "refused"
    return f"{what}: {(r['reasons'] or [r['error'] or ''])[0][:120]}"


if __name__ == "__main__":
    sys.exit(main())
