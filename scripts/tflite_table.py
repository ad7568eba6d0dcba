#!/usr/bin/env python3
"""The TFLite figures: for every model in models/tflite/ (or the files given), per
target: legalized, legal under the target's profile when read back, the legalized
.tflite agrees with the original on LiteRT, and the legalized model's ONNX form agrees
on onnxruntime. With ``--converter``, also where tosa-converter-for-tflite inserts
``tosa.reshape`` before elementwise ops, beside where legalize inserts ``RESHAPE``.

    python scripts/tflite_table.py [--json out.json] [--converter-python /venv/bin/python]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import legalizer  # noqa: E402
from legalizer.errors import LegalizeError  # noqa: E402
from legalizer.ir.graph import OP  # noqa: E402
from legalizer.pipeline import RunOptions, is_output, run, verify_model  # noqa: E402


def _runtime_ok(check: dict, runtime: str):
    outs = [o for b in check.get("bindings", []) if not b.get("skipped") for o in b["outputs"]
            if o["name"].endswith(f"({runtime})")]
    return all(o["ok"] for o in outs) if outs else None


def legalize_row(path: Path, target: str, tmp: Path) -> dict:
    out = tmp / f"{path.stem}.{target}.tflite"
    try:
        res = run(path, RunOptions(target=target, output=out, force=True))
    except LegalizeError as e:
        return {"legalized": False, "error": str(e)}
    check = res.report.check or {}
    row = {"legalized": res.exit_code == 0 and out.exists(), "exit": res.exit_code,
           "litert": _runtime_ok(check, "LiteRT"), "onnxruntime": _runtime_ok(check, "onnxruntime"),
           "reshapes": res.report.stats.get("reshapes_inserted", 0),
           "folded": res.report.stats.get("constants_folded", 0),
           "broadcasts": res.report.stats.get("broadcasts_made_explicit", 0)}
    if row["legalized"]:
        back = legalizer.load(out)
        row["legal"] = not verify_model(back, target).violations
        # which elementwise ops read a RESHAPE result: the places legalize reshaped
        reshaped = Counter()
        for g in back.graphs:
            for n in g.nodes():
                if n.kind == OP and any(v is not None and v.producer is not None and v.producer.op == "tflite.RESHAPE"
                                        for v in n.inputs):
                    reshaped[n.op.split(".", 1)[1]] += 1
        row["reshaped_ops"] = dict(reshaped)
        row["reshaped_operands"] = sum(1 for g in back.graphs for n in g.nodes() if n.kind == OP
                                       for v in n.inputs if v is not None and v.producer is not None
                                       and v.producer.op == "tflite.RESHAPE")
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", type=Path)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--converter-python", help="a python with tosa-converter-for-tflite installed")
    args = ap.parse_args()
    models = args.models or sorted(p for p in (ROOT / "models" / "tflite").glob("*.tflite") if not is_output(p))
    rows = {}
    with tempfile.TemporaryDirectory() as d:
        for path in models:
            rows[path.name] = {t: legalize_row(path, t, Path(d)) for t in ("tosa", "xla")}
            if args.converter_python:
                from tosa_converter_compare import converter_reshapes

                c = converter_reshapes(path, converter_python=args.converter_python)
                c.pop("ops", None)
                rows[path.name]["converter"] = c
    _print(rows, bool(args.converter_python))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, sort_keys=True))
    return 0


def _mark(v) -> str:
    return {True: "yes", False: "NO", None: "-"}[v]


def _print(rows: dict, converter: bool) -> None:
    head = ["model", "tosa: legal", "LiteRT", "ORT", "RESHAPEs", "xla: legal", "LiteRT", "ORT", "BROADCAST_TOs"]
    if converter:
        head += ["converter: status", "reshaped operands (ours)", "folded constants (ours)"]
    print(" | ".join(head))
    for name, r in rows.items():
        t, x = r["tosa"], r["xla"]
        cells = [name, _mark(t.get("legal")), _mark(t.get("litert")), _mark(t.get("onnxruntime")),
                 f"{t.get('reshapes', 0)} (+{t.get('folded', 0)} folded)", _mark(x.get("legal")),
                 _mark(x.get("litert")), _mark(x.get("onnxruntime")), str(x.get("broadcasts", 0))]
        if converter:
            c = r.get("converter", {})
            status = c.get("status", "-") + (f" ({c['error'][:50]})" if c.get("error") else "")
            cells += [status, f"{c.get('reshaped_operands', '-')} ({t.get('reshaped_operands', '-')})",
                      f"{c.get('folded_constants', '-')} ({t.get('folded', '-')})"]
        print(" | ".join(cells))
    n = len(rows)
    for target in ("tosa", "xla"):
        ok = sum(1 for r in rows.values() if r[target].get("legal") and r[target].get("litert")
                 and r[target].get("onnxruntime"))
        print(f"{target}: {ok}/{n} legalized, legal, and equal on LiteRT and onnxruntime")


if __name__ == "__main__":
    sys.exit(main())
