#!/usr/bin/env python3
"""The MLIR figures: for the sample models, the onnx wheel's light models and the TFLite
sample models, per format (StableHLO of the xla form, TOSA of the tosa form): emitted,
parsed and verified by the real MLIR (jaxlib's for StableHLO, IREE's for TOSA), executed
(XLA CPU, IREE llvm-cpu), and outputs equal to onnxruntime's on the same inputs.
Dynamic dims run at 3. Needs the jax and iree extras.

    python scripts/mlir_table.py [--json out.json] [--only sample|light|tflite]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import onnx  # noqa: E402

import legalizer  # noqa: E402
from legalizer.api import to_onnx  # noqa: E402
from legalizer.numeric.ort import synthesize  # noqa: E402
from legalizer.numeric.ort_session import session  # noqa: E402
from legalizer.emit_formats import render_mlir  # noqa: E402
from legalizer.targets import TARGET_OF_DIALECT  # noqa: E402
from legalizer.pipeline import is_output  # noqa: E402
from legalizer.errors import LegalizeError  # noqa: E402

SIZE = 3
FORMATS = ("stablehlo", "tosa")


def models(only: Optional[str]) -> Dict[str, List[Path]]:
    light = Path(onnx.__file__).parent / "backend/test/data/light"
    sets = {"sample": sorted(p for p in (ROOT / "models").glob("*.onnx") if p.stem != "incompatible_add"
                             and not is_output(p)),
            "light": sorted(light.glob("*.onnx")),
            "tflite": sorted(p for p in (ROOT / "models" / "tflite").glob("*.tflite") if not is_output(p))}
    return {k: v for k, v in sets.items() if only in (None, k)}


def _feeds(proto: onnx.ModelProto, size: int, seed: int = 0) -> Dict[str, np.ndarray]:
    """The check's synthesized inputs with every dynamic dim at ``size``."""
    dims = {d.dim_param or f"{vi.name}[{k}]": size for vi in proto.graph.input
            for k, d in enumerate(vi.type.tensor_type.shape.dim) if not d.HasField("dim_value")}
    return synthesize(proto, dims, {}, seed)


def _symbols(proto: onnx.ModelProto, size: int) -> Dict[str, int]:
    return {d.dim_param: size for vi in proto.graph.input for d in vi.type.tensor_type.shape.dim if d.dim_param}


def _reference(proto: onnx.ModelProto):
    """(size of every dynamic dim, inputs, onnxruntime's outputs): 3, or the first of 2
    and 1 that the model accepts (a dynamic dim may have to match a static 2)."""
    sess = session(proto, ["CPUExecutionProvider"], basic=True)  # see check.tflite: QDQ fusion bug
    for size in (SIZE, 2, 1):
        feeds = _feeds(proto, size)
        try:
            return size, feeds, sess.run(None, feeds)
        except Exception:  # noqa: BLE001 - the model rejects this size; try the next
            continue
    raise RuntimeError("onnxruntime rejects every size tried")


def row(path: Path, fmt: str) -> dict:
    out = {"emitted": False, "verified": None, "executed": None, "equal": None}
    try:
        model = legalizer.load(path)
        legalizer.legalize(model, TARGET_OF_DIALECT[fmt])
        proto = to_onnx(model)
        size, feeds, expected = _reference(proto)
        text = render_mlir(model, [fmt], _symbols(proto, size))[fmt]
    except LegalizeError as e:
        out["error"] = str(e)[:300]
        return out
    out["emitted"] = True
    if fmt == "stablehlo":
        from legalizer.numeric import xla_run as runner
        errors = (runner.StableHLOError,)
    else:
        from legalizer.numeric import iree_run as runner
        errors = (runner.TosaError,)
    try:
        runner.parse(text)
        out["verified"] = True
    except errors as e:
        out.update(verified=False, error=str(e)[:300])
        return out
    try:
        got = runner.run(text, list(feeds.values()))
        out["executed"] = True
    except errors as e:
        out.update(executed=False, error=str(e)[:300])
        return out
    worst = 0.0
    equal = len(got) == len(expected)
    for e, g in zip(expected, got):
        e, g = np.asarray(e), np.asarray(g)
        if e.shape != g.shape:
            equal = False
            continue
        if e.dtype.kind in "fc":
            err = np.abs(e.astype(np.float64) - g.astype(np.float64))
            worst = max(worst, float(err.max()) if err.size else 0.0)
            equal &= bool(np.allclose(g, e, rtol=1e-4, atol=1e-5, equal_nan=True))
        else:
            equal &= bool(np.array_equal(e, g.astype(e.dtype)))
    out.update(equal=equal, max_abs_err=worst)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--only", choices=["sample", "light", "tflite"])
    args = ap.parse_args()
    table = {}
    for group, paths in models(args.only).items():
        for path in paths:
            table[f"{group}/{path.name}"] = {fmt: row(path, fmt) for fmt in FORMATS}
            r = table[f"{group}/{path.name}"]
            print(f"{group}/{path.name}: " + "; ".join(
                f"{fmt} " + ("equal" if r[fmt]["equal"] else r[fmt].get("error", "differs")[:90])
                for fmt in FORMATS), flush=True)
    print()
    print("set | format | models | emitted | verified | executed | outputs equal")
    for group in models(args.only):
        keys = [k for k in table if k.startswith(group + "/")]
        for fmt in FORMATS:
            rs = [table[k][fmt] for k in keys]
            print(f"{group} | {fmt} | {len(rs)} | {sum(r['emitted'] for r in rs)} | "
                  f"{sum(bool(r['verified']) for r in rs)} | {sum(bool(r['executed']) for r in rs)} | "
                  f"{sum(bool(r['equal']) for r in rs)}")
    if args.json:
        args.json.write_text(json.dumps(table, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
