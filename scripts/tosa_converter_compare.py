#!/usr/bin/env python3
"""Where does Arm's tosa-converter-for-tflite make rank-mismatched elementwise operands
explicit? For each .tflite model, run the converter (TOSA MLIR text with locations), and
for every TOSA elementwise op find which operands it fed through a ``tosa.reshape`` that
it inserted itself (a rank reshape that prepends 1s), or through a constant it folded to
the result's rank at convert time.

How an inserted reshape is recognized: with ``--emit-debug-info`` every TOSA op carries
the location of the TFLite op it came from, which is that op's output tensor name
(``loc("y"(...))``). A ``tosa.reshape`` feeding an elementwise op (directly or through
``tosa.rescale``/``tosa.cast``, as for quantized ops) with the elementwise op's own
location and a higher output rank than input rank was made by the converter; a reshape
with another location is a RESHAPE of the model (e.g. the one legalize writes). A
``tosa.const`` operand with the op's location, where the TFLite op has a constant input
of lower rank, is a folded rank reshape.

The converter runs in its own environment (it pins its own LLVM/TensorFlow):

  python -m venv /tmp/venv-tosa && /tmp/venv-tosa/bin/pip install tosa-converter-for-tflite
  python scripts/tosa_converter_compare.py --converter-python /tmp/venv-tosa/bin/python [MODEL.tflite ...]

Without models: all of models/**/*.tflite. The converter is found as: --converter (the
``tosa-converter-for-tflite`` CLI), --converter-python (a python with the package),
$TOSA_CONVERTER / $TOSA_CONVERTER_PYTHON, the CLI on PATH, this python if it has the
package. Prints a table; --json PATH writes the records (``-`` for stdout).

Per model the record is ``{"model": path, "tflite": {...}, "converter": {...}}``, so
another side (``record["legalize"]``) and a table column (``COLUMNS``) can be added.
``converter_reshapes(path)`` returns the "converter" part and is importable.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parent.parent

# TOSA elementwise ops that broadcast, and how many of their operands are data (the
# third operand of tosa.mul is the shift).
ELEMENTWISE = {
    "tosa.add": 2, "tosa.sub": 2, "tosa.mul": 2, "tosa.maximum": 2, "tosa.minimum": 2,
    "tosa.pow": 2, "tosa.greater": 2, "tosa.greater_equal": 2, "tosa.equal": 2,
    "tosa.logical_and": 2, "tosa.logical_or": 2, "tosa.logical_xor": 2,
    "tosa.bitwise_and": 2, "tosa.bitwise_or": 2, "tosa.bitwise_xor": 2,
    "tosa.logical_left_shift": 2, "tosa.logical_right_shift": 2,
    "tosa.arithmetic_right_shift": 2, "tosa.intdiv": 2, "tosa.select": 3,
}
# Ops an operand may pass through between a reshape and the elementwise op.
PASS_THROUGH = {"tosa.rescale", "tosa.cast"}
# Ops that are not TOSA yet still fine in the output.
STRUCTURAL = {"func.func", "func.return", "return", "func.call", "call"}

# TFLite ops whose reshape feeding an elementwise op is the model's own.
MODEL_RESHAPES = {"RESHAPE", "EXPAND_DIMS", "SQUEEZE"}

CLI_NAME = "tosa-converter-for-tflite"
TIMEOUT_S = 300


# -- running the converter -------------------------------------------------------------

def find_converter(converter: Optional[str] = None, converter_python: Optional[str] = None) -> List[str]:
    """The command prefix that runs the converter CLI (model path and flags follow)."""
    converter = converter or os.environ.get("TOSA_CONVERTER")
    converter_python = converter_python or os.environ.get("TOSA_CONVERTER_PYTHON")
    if converter:
        return [converter]
    if converter_python:
        return [converter_python, "-m", "tosa_converter_for_tflite.cli"]
    on_path = shutil.which(CLI_NAME)
    if on_path:
        return [on_path]
    try:
        import importlib.util
        if importlib.util.find_spec("tosa_converter_for_tflite") is not None:
            return [sys.executable, "-m", "tosa_converter_for_tflite.cli"]
    except (ImportError, ValueError):
        pass
    raise SystemExit(f"{CLI_NAME} not found: pass --converter PATH or --converter-python PYTHON"
                     " (pip install tosa-converter-for-tflite in a separate venv)")


def run_converter(path: str, command: Sequence[str]) -> Tuple[int, str, str]:
    """(exit code, MLIR text, stderr) of ``CLI path --text --emit-debug-info``."""
    try:
        proc = subprocess.run([*command, str(path), "--text", "--emit-debug-info"],
                              capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return 124, "", f"timed out after {TIMEOUT_S}s"
    return proc.returncode, proc.stdout, proc.stderr


def first_error(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for ln in lines:
        if "error:" in ln:
            return ln
    for ln in lines:
        if not ln.startswith(("[INFO]", "[WARNING]")):
            return ln
    return lines[0] if lines else ""


# -- MLIR text -------------------------------------------------------------------------

class Op:
    __slots__ = ("result", "name", "operands", "operand_types", "result_type", "loc", "func", "line")

    def __init__(self, result, name, operands, operand_types, result_type, loc, func, line):
        self.result, self.name, self.operands = result, name, operands
        self.operand_types, self.result_type, self.loc = operand_types, result_type, loc
        self.func, self.line = func, line


_ALIAS = re.compile(r"^(#loc\d*)\s*=\s*loc\((.*)\)\s*$")
_FUNC = re.compile(r"^\s*func\.func\s+(?:\w+\s+)?@([\w.$-]+)")
_OP = re.compile(r'^\s*(%[\w.$-]+)(?::\d+)?\s*=\s*(?:"([\w.]+)"|([\w.]+))(.*)$')
_RET = re.compile(r"^\s*(return|func\.return)\b(.*)$")
_GENERIC_NO_RESULT = re.compile(r'^\s*"([\w.]+)"\((.*)$')
_NAME_LOC = re.compile(r'^"((?:[^"\\]|\\.)*)"\s*(\(|$)')


def _split_top(text: str) -> List[str]:
    """Split on commas outside <>, (), [], {}."""
    out, depth, cur = [], 0, []
    for ch in text:
        if ch in "<([{":
            depth += 1
        elif ch in ">)]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


def _strip_loc(text: str) -> Tuple[str, str]:
    """(text without its trailing loc(...), the loc's inside)."""
    k = text.rfind(" loc(")
    if k < 0 or not text.rstrip().endswith(")"):
        return text, ""
    return text[:k], text[k + 5:].rstrip()[:-1]


def loc_name(expr: str, aliases: Dict[str, str], depth: int = 0) -> Optional[str]:
    """The name of a location: ``"y"(#loc)`` -> y; an alias resolves; fused[...] and
    callsite(...) give their first name; a file location has no name."""
    expr = expr.strip()
    if depth > 20 or not expr:
        return None
    if expr.startswith("#loc"):
        return loc_name(aliases.get(expr, ""), aliases, depth + 1)
    m = _NAME_LOC.match(expr)
    if m:
        return m.group(1) if m.group(2) else None  # "file":0:0 has no "(" after the string
    for prefix in ("fused", "callsite("):
        if expr.startswith(prefix):
            inner = expr[expr.index("[") + 1:] if expr.startswith("fused") and "[" in expr else expr[len(prefix):]
            for part in _split_top(inner.rstrip("])")):
                name = loc_name(part, aliases, depth + 1)
                if name:
                    return name
    return None


def rank_of(type_text: str) -> Optional[int]:
    """Rank of a ``tensor<...>`` type; None for unranked or non-tensor types."""
    m = re.match(r"\s*tensor<(.*)>\s*$", type_text)
    if not m or m.group(1).startswith("*"):
        return None
    dims = re.match(r"((?:(?:\?|\d+)x)*)", m.group(1)).group(1)
    return dims.count("x")


def parse_mlir(text: str) -> List[Op]:
    lines = text.splitlines()
    aliases = {}
    for ln in lines:
        m = _ALIAS.match(ln.strip())
        if m:
            aliases[m.group(1)] = m.group(2)
    ops: List[Op] = []
    func = ""
    for number, ln in enumerate(lines, 1):
        mf = _FUNC.match(ln)
        if mf:
            func = mf.group(1)
            continue
        m = _OP.match(ln)
        if m:
            result, name, rest = m.group(1), m.group(2) or m.group(3), m.group(4)
        else:
            mr = _RET.match(ln) or _GENERIC_NO_RESULT.match(ln)
            if not mr:
                continue
            result, name, rest = "", mr.group(1), mr.group(2)
        body, loc = _strip_loc(rest)
        k = body.rfind(" : (")
        if k >= 0:
            sig = body[k + 3:]
            head = body[:k]
            m2 = re.match(r"\((.*)\)\s*->\s*(.*)$", sig)
            operand_types = _split_top(m2.group(1)) if m2 else []
            result_type = m2.group(2).strip() if m2 else ""
        else:
            k = body.rfind(" : ")
            head = body if k < 0 else body[:k]
            result_type = "" if k < 0 else body[k + 3:].strip()
            operand_types = []
        head = re.sub(r"<\{.*\}>|\{.*\}", "", head)  # attributes
        operands = re.findall(r"%[\w.$-]+(?:#\d+)?", head)
        if len(operand_types) != len(operands):
            operand_types = operand_types[:len(operands)] + [result_type] * (len(operands) - len(operand_types))
        ops.append(Op(result, name, operands, operand_types, result_type,
                      loc_name(loc, aliases) if loc else None, func, number))
    return ops


# -- the TFLite side ---------------------------------------------------------------------

def _broadcasting_tflite_ops() -> set:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        return set()
    try:
        with open(ROOT / "rules" / "tflite.toml", "rb") as f:
            table = tomllib.load(f)
    except OSError:
        return set()
    return {k for k, v in table.items() if isinstance(v, dict) and v.get("category") in ("binary", "ternary", "unidirectional")}


def tflite_ops(path: str) -> Optional[Dict[str, Dict[str, Any]]]:
    """Per output tensor name (what the converter's locations name), the TFLite op that
    writes it: op name, input ranks, which inputs are constants, output rank. None when
    the ``tflite`` package is missing or the file does not parse."""
    try:
        import tflite
    except ImportError:
        return None
    try:
        data = Path(path).read_bytes()
        model = tflite.Model.GetRootAs(data, 0)
        names = {v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_")}
        out: Dict[str, Dict[str, Any]] = {}
        for s in range(model.SubgraphsLength()):
            sg = model.Subgraphs(s)
            for i in range(sg.OperatorsLength()):
                op = sg.Operators(i)
                code = model.OperatorCodes(op.OpcodeIndex())
                opname = names.get(max(code.BuiltinCode(), code.DeprecatedBuiltinCode()), "?")
                ins = [int(v) for v in op.InputsAsNumpy()] if op.InputsLength() else []
                outs = [int(v) for v in op.OutputsAsNumpy()] if op.OutputsLength() else []

                def rank(t):
                    return sg.Tensors(t).ShapeLength() if t >= 0 else None

                def const(t):
                    return t >= 0 and model.Buffers(sg.Tensors(t).Buffer()).DataLength() > 0

                for o in outs:
                    out[sg.Tensors(o).Name().decode()] = {
                        "op": opname, "subgraph": s, "input_ranks": [rank(t) for t in ins],
                        "const_inputs": [const(t) for t in ins], "output_rank": rank(o)}
        return out
    except Exception:  # noqa: BLE001 - a model the flatbuffer reader cannot read
        return None


def tflite_summary(path: str) -> Dict[str, Any]:
    """Broadcasting TFLite ops and their rank-mismatched operands."""
    ops = tflite_ops(path)
    if ops is None:
        return {"parsed": False}
    bcast = _broadcasting_tflite_ops()
    elementwise = {n: o for n, o in ops.items() if o["op"] in bcast}
    mismatched = sum(1 for o in elementwise.values() for r in o["input_ranks"]
                     if r is not None and o["output_rank"] is not None and r < o["output_rank"])
    return {"parsed": True, "elementwise_ops": len(elementwise), "rank_mismatched_operands": mismatched}


# -- analysis ----------------------------------------------------------------------------

def analyse(text: str, tflite_info: Optional[Dict[str, Dict[str, Any]]] = None) -> Dict[str, Any]:
    """Per elementwise TOSA op, where its data operands come from."""
    ops = parse_mlir(text)
    info = tflite_info or {}
    bcast = _broadcasting_tflite_ops()
    defs = {(op.func, op.result): op for op in ops if op.result}
    records = []
    inserted: set = set()
    folded = 0
    unconverted = sorted({op.name for op in ops if not op.name.startswith("tosa.") and op.name not in STRUCTURAL})
    for op in ops:
        n = ELEMENTWISE.get(op.name)
        if n is None:
            continue
        out_rank = rank_of(op.result_type)
        operands = []
        for k, (value, vtype) in enumerate(zip(op.operands[:n], op.operand_types[:n])):
            rec = {"index": k, "source": "value", "inserted": False, "rank": rank_of(vtype)}
            d = defs.get((op.func, value))
            hops = 0
            while d is not None and d.name in PASS_THROUGH and d.operands and hops < 4:
                d = defs.get((op.func, d.operands[0]))
                hops += 1
            if d is not None and d.name == "tosa.reshape":
                r_in = rank_of(d.operand_types[0]) if d.operand_types else None
                r_out = rank_of(d.result_type)
                mine = d.loc is not None and d.loc == op.loc
                expands = r_in is not None and r_out is not None and r_out > r_in
                if mine:
                    # made while lowering this TFLite op: a rank reshape when it expands
                    source = "reshape" if expands else "lowering_reshape"
                elif info.get(d.loc or "", {}).get("op") in MODEL_RESHAPES:
                    source = "model_reshape"  # a RESHAPE/EXPAND_DIMS/SQUEEZE of the model
                else:
                    source = "other_reshape"  # from the lowering of another TFLite op
                rec.update(source=source, from_rank=r_in, to_rank=r_out, inserted=bool(mine and expands))
                if rec["inserted"]:
                    inserted.add((d.func, d.result))
            elif d is not None and d.name == "tosa.const":
                rec["source"] = "const"
                t = info.get(op.loc or "")
                if d.loc is not None and d.loc == op.loc and t and t["op"] in bcast and \
                        t["output_rank"] is not None and any(
                            c and r is not None and r < t["output_rank"]
                            for c, r in zip(t["const_inputs"], t["input_ranks"])):
                    rec["source"] = "folded_const"
                    folded += 1
            operands.append(rec)
        records.append({"func": op.func, "op": op.name, "tflite_tensor": op.loc,
                        "tflite_op": info.get(op.loc or "", {}).get("op"), "rank": out_rank,
                        "line": op.line, "operands": operands})
    return {
        "elementwise_ops": len(records),
        "ops_with_inserted_reshape": sum(1 for r in records if any(o["inserted"] for o in r["operands"])),
        "reshaped_operands": sum(1 for r in records for o in r["operands"] if o["inserted"]),
        "inserted_reshapes": len(inserted),
        "folded_constants": folded,
        "model_reshape_operands": sum(1 for r in records for o in r["operands"] if o["source"] == "model_reshape"),
        "unconverted_ops": unconverted,
        "ops": records,
    }


def converter_reshapes(path, *, converter: Optional[str] = None, converter_python: Optional[str] = None,
                       command: Optional[Sequence[str]] = None, keep_mlir: bool = False) -> Dict[str, Any]:
    """Run the converter on one .tflite and return its side of the comparison: status
    (ok | partial: exit 0 but non-TOSA ops left | rejected: non-zero exit), exit code,
    first error line, and the counts and per-op records of ``analyse``."""
    command = list(command) if command else find_converter(converter, converter_python)
    rc, text, err = run_converter(str(path), command)
    rec: Dict[str, Any] = {"exit_code": rc}
    if rc != 0 or not text.strip():
        rec.update(status="rejected", error=first_error(err) or f"exit code {rc}")
        return rec
    rec.update(analyse(text, tflite_ops(str(path))))
    rec["status"] = "partial" if rec["unconverted_ops"] else "ok"
    if keep_mlir:
        rec["mlir"] = text
    return rec


def compare_model(path, command: Sequence[str]) -> Dict[str, Any]:
    """The per-model record; other sides go in as further keys."""
    return {"model": str(path), "tflite": tflite_summary(str(path)),
            "converter": converter_reshapes(path, command=command)}


# -- table ---------------------------------------------------------------------------------

def _conv(key: str, default: Any = "") -> Callable[[Dict[str, Any]], Any]:
    return lambda r: r["converter"].get(key, default)


def _note(r: Dict[str, Any]) -> str:
    c = r["converter"]
    if c.get("status") == "rejected":
        return c.get("error", "")[:110]
    if c.get("unconverted_ops"):
        return "left: " + ", ".join(c["unconverted_ops"])
    return ""


# (header, value of a record). Append to add a column (e.g. legalize's RESHAPE count).
COLUMNS: List[Tuple[str, Callable[[Dict[str, Any]], Any]]] = [
    ("model", lambda r: Path(r["model"]).name),
    ("tfl ew", lambda r: r["tflite"].get("elementwise_ops", "")),
    ("tfl lowrank", lambda r: r["tflite"].get("rank_mismatched_operands", "")),
    ("status", _conv("status")),
    ("tosa ew", _conv("elementwise_ops")),
    ("ops w/ reshape", _conv("ops_with_inserted_reshape")),
    ("reshapes", _conv("inserted_reshapes")),
    ("folded", _conv("folded_constants")),
    ("model rs", _conv("model_reshape_operands")),
    ("note", _note),
]


def table(records: Sequence[Dict[str, Any]], columns=None) -> str:
    columns = columns or COLUMNS
    rows = [[h for h, _ in columns]] + [[str(f(r)) for _, f in columns] for r in records]
    widths = [max(len(row[i]) for row in rows) for i in range(len(columns))]
    out = []
    for k, row in enumerate(rows):
        out.append("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
        if k == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", help=".tflite files (default: models/**/*.tflite)")
    ap.add_argument("--converter", help=f"path of the {CLI_NAME} CLI")
    ap.add_argument("--converter-python", help="a python that has tosa-converter-for-tflite installed")
    ap.add_argument("--json", help="write the records as JSON to this path ('-': stdout)")
    args = ap.parse_args(argv)
    models = args.models or sorted(glob.glob(str(ROOT / "models" / "**" / "*.tflite"), recursive=True))
    if not models:
        print("no .tflite models given or found under models/", file=sys.stderr)
        return 2
    command = find_converter(args.converter, args.converter_python)
    records = [compare_model(m, command) for m in models]
    if args.json != "-":
        print(table(records))
        rejected = sum(1 for r in records if r["converter"].get("status") == "rejected")
        print(f"\n{len(records)} models, {rejected} rejected by the converter; "
              f"{sum(r['converter'].get('inserted_reshapes', 0) for r in records)} reshapes inserted, "
              f"{sum(r['converter'].get('folded_constants', 0) for r in records)} constants folded")
    if args.json:
        text = json.dumps(records, indent=2)
        if args.json == "-":
            print(text)
        else:
            Path(args.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
