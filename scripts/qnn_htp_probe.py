#!/usr/bin/env python3
"""What Qualcomm's HTP takes, by its own validation: each ONNX op the rewrites emit (and
the axis ops they fold), at ranks 1-6, in each element type of DTYPES that ONNX defines
it for, as a one-node graph on onnxruntime's QNN execution
provider (``onnxruntime-qnn``, the ``qnn`` extra), HTP backend, CPU fallback off. A node
HTP refuses fails the session; the backend's own words for it (its
``backendValidateOpConfig()`` line, or the EP's) are kept. A node it takes is run and its
outputs compared with the CPU EP's.

Writes ``rules/qnn_htp.toml`` (``--out`` elsewhere): per op, the ranks HTP takes and,
for each rank it refuses, its words (a row per type; float32's has no ``@type``);
``legalizer.verifier.backend_rules`` reads the
table for ``--target qnn-htp``. Each op is probed in a child process of its own (a
backend that aborts takes only that op's row with it).

    python scripts/qnn_htp_probe.py                 # every op, write rules/qnn_htp.toml
    python scripts/qnn_htp_probe.py --only Add --print
    python scripts/qnn_htp_probe.py --fresh         # probe again what .cache/qnn_probe/ keeps
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RANKS = range(1, 7)
SIZES = (2, 3, 4, 2, 3, 2)  # dim k of a probe tensor (the last dims first: rank r takes SIZES[-r:])
# The element types probed: float32 (the table's plain rows), and those a model's ops also
# compute in on the HTP (fp16 models, integer index and shape arithmetic). HTP's verdict
# differs by type: int64 Add is refused at rank 5, int64 Transpose at every rank.
DTYPES = ("float32", "float16", "int32", "int64")

# op -> how its one-node graph is made at rank r: (kind, attrs)
PROBES = {
    # elementwise, as the rewrites leave them: same shapes, one-sided broadcasts (one
    # operand at the result's shape, the other with 1s) and two-sided ones
    **{op: ("binary", {}) for op in ("Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Equal", "Less", "Greater")},
    "Where": ("where", {}),
    **{op: ("unary", {}) for op in ("Relu", "Sigmoid", "Tanh", "Exp", "Sqrt", "Neg", "Abs")},
    # Erf alone, and in the Gelu that onnxruntime fuses (x * 0.5 * (1 + Erf(x / sqrt 2))):
    # the QNN EP has no Erf of its own, but takes the fused Gelu
    "Erf": ("erf", {}),
    # what the passes emit to reshape and copy
    "Reshape": ("reshape", {}), "Unsqueeze": ("unsqueeze", {}), "Squeeze": ("squeeze", {}),
    "Flatten": ("flatten", {}), "Transpose": ("transpose", {}), "Expand": ("expand", {}),
    "Tile": ("tile", {}), "Concat": ("concat", {}),
    # the axis ops folding keeps at a lower rank
    "Softmax": ("softmax", {}), "ReduceSum": ("reduce", {}), "ReduceMean": ("reduce", {}),
    "ReduceMax": ("reduce", {}), "Slice": ("slice", {}), "Gather": ("gather", {}),
    # (its rank is its indices': an attention mask's expansion, as torch.export writes it)
    "GatherND": ("gathernd", {}),
    # matrix products: both operands activations (QNN MatMul), a constant rank-2 weight
    # (the EP's FullyConnected)
    "MatMul": ("matmul", {}), "Gemm": ("gemm", {}),
}


def shape(r: int):
    return list(SIZES[-r:])


def build(op: str, r: int, variant: str, dtype: str = "float32"):
    """(ModelProto, feeds) of one probe in element type ``dtype``, or None where the op
    has no form at rank r."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    kind, _ = PROBES[op]
    rng = np.random.default_rng(r)
    s = shape(r)
    inits, nodes, ins, feeds = [], [], [], {}

    dt = np.dtype(dtype)
    integer = dt.kind in "iu"

    def inp(name, sh, low=0.5, high=2.0):
        # (integers from 1 up: no division by zero, no negative base of Pow)
        feeds[name] = (rng.integers(1, 4, sh) if integer else rng.uniform(low, high, sh)).astype(dt)
        ins.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(dt), sh))
        return name

    def const(name, array):
        inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    if kind == "binary":
        if variant != "same" and r == 1:
            return None
        odd = [1 if k % 2 else d for k, d in enumerate(s)]  # 1 at odd dims
        even = [1 if k % 2 == 0 else d for k, d in enumerate(s)]
        a = inp("a", odd if variant == "two-sided" else s)
        b = inp("b", {"same": s, "one-sided": odd, "two-sided": even}[variant])
        nodes.append(helper.make_node(op, [a, b], ["y"]))
    elif kind == "where":
        m = inp("m", s)
        feeds["m"] = feeds["m"] > 1.0
        ins[-1] = helper.make_tensor_value_info("m", onnx.TensorProto.BOOL, s)
        nodes.append(helper.make_node("Where", [m, inp("a", s), inp("b", s)], ["y"]))
    elif kind == "erf":
        x = inp("x", s, low=-2.0)
        if variant == "gelu":
            nodes += [helper.make_node("Div", [x, const("r2", np.asarray(np.sqrt(2.0), dt))], ["d"]),
                      helper.make_node("Erf", ["d"], ["e"]),
                      helper.make_node("Add", ["e", const("one", np.asarray(1.0, dt))], ["a"]),
                      helper.make_node("Mul", [x, "a"], ["m"]),
                      helper.make_node("Mul", ["m", const("half", np.asarray(0.5, dt))], ["y"])]
        else:
            nodes.append(helper.make_node("Erf", [x], ["y"]))
    elif kind == "unary":
        nodes.append(helper.make_node(op, [inp("x", s, low=-2.0 if op not in ("Sqrt",) else 0.5)], ["y"]))
    elif kind == "reshape":  # rank r from rank 1: the rank a reshape makes
        n = int(np.prod(s))
        nodes.append(helper.make_node("Reshape", [inp("x", [n]), const("s", np.array(s, np.int64))], ["y"]))
    elif kind == "unsqueeze":  # rank r from rank r-1
        if r == 1:
            return None
        nodes.append(helper.make_node("Unsqueeze", [inp("x", s[1:]), const("ax", np.array([0], np.int64))], ["y"]))
    elif kind == "squeeze":  # rank r to rank r-1
        nodes.append(helper.make_node("Squeeze", [inp("x", [1] + s[1:]), const("ax", np.array([0], np.int64))], ["y"]))
    elif kind == "flatten":
        nodes.append(helper.make_node("Flatten", [inp("x", s)], ["y"], axis=max(r - 1, 0)))
    elif kind == "transpose":
        if r == 1:
            return None
        nodes.append(helper.make_node("Transpose", [inp("x", s)], ["y"], perm=list(range(r))[::-1]))
    elif kind == "expand":
        nodes.append(helper.make_node("Expand", [inp("x", [1] * (r - 1) + s[-1:]), const("s", np.array(s, np.int64))],
                                      ["y"]))
    elif kind == "tile":
        nodes.append(helper.make_node("Tile", [inp("x", s), const("t", np.array([2] + [1] * (r - 1), np.int64))], ["y"]))
    elif kind == "concat":
        nodes.append(helper.make_node("Concat", [inp("a", s), inp("b", s)], ["y"], axis=0))
    elif kind == "softmax":
        nodes.append(helper.make_node("Softmax", [inp("x", s)], ["y"], axis=-1))
    elif kind == "reduce":  # (at opset 17 only ReduceSum takes its axes as an input)
        if op == "ReduceSum":
            nodes.append(helper.make_node(op, [inp("x", s), const("ax", np.array([r - 1], np.int64))], ["y"], keepdims=1))
        else:
            nodes.append(helper.make_node(op, [inp("x", s)], ["y"], axes=[r - 1], keepdims=1))
    elif kind == "slice":
        nodes.append(helper.make_node("Slice", [inp("x", s), const("st", np.array([1], np.int64)),
                                                const("en", np.array([s[-1]], np.int64)),
                                                const("ax", np.array([r - 1], np.int64))], ["y"]))
    elif kind == "gather":
        nodes.append(helper.make_node("Gather", [inp("x", s), const("i", np.array([1, 0], np.int64))], ["y"], axis=0))
    elif kind == "gathernd":  # indices of rank r, each a (row, column) of a [2, 8] matrix
        if r == 1:
            return None
        idx = np.stack([np.arange(8) % 2, np.arange(8)], -1).reshape([1] * (r - 2) + [8, 2])
        nodes.append(helper.make_node("GatherND", [inp("x", [2, 8]), const("i", idx.astype(np.int64))], ["y"]))
    elif kind == "matmul":
        if r == 1:
            return None
        if variant == "weights":
            w = const("w", rng.uniform(-1, 1, (s[-1], 5)).astype(dt))
            nodes.append(helper.make_node("MatMul", [inp("a", s), w], ["y"]))
        else:
            nodes.append(helper.make_node("MatMul", [inp("a", s), inp("b", s[:-2] + [s[-1], 5])], ["y"]))
    elif kind == "gemm":  # Gemm is rank 2 by definition
        if r != 2:
            return None
        w = const("w", rng.uniform(-1, 1, (5, s[-1])).astype(dt))
        nodes.append(helper.make_node("Gemm", [inp("a", s), w, const("c", np.zeros(5, dt))], ["y"], transB=1))
    graph = helper.make_graph(nodes, f"{op}_{r}_{dtype}", ins, [], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    # the output's type and shape as ONNX infers them (HTP takes static shapes only); an
    # op ONNX does not define in this type has no probe
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    except onnx.shape_inference.InferenceError:
        return None
    model.graph.output.append(next(v for v in inferred.graph.value_info if v.name == "y"))
    return model, feeds


def variants(op: str):
    kind = PROBES[op][0]
    return {"binary": ("same", "one-sided", "two-sided"), "matmul": ("activations", "weights"),
            "erf": ("", "gelu")}.get(kind, ("",))


_VALIDATE = re.compile(r"(QNN\.backendValidateOpConfig\(\) failed for node `[^`]*` of type `[^`]*` with error code \d+)")
_COLOUR = re.compile(r"\x1b\[[0-9;]*m")
_EP_LINE = re.compile(r"\[[WE]:onnxruntime:[^\]]*\] (.*)")


def probe_one(op: str, rank=None, dtype=None) -> list:
    """Run every rank (or ``rank``), type (or ``dtype``) and variant of ``op``; a list of
    rows (in this process)."""
    import numpy as np
    import onnxruntime as ort

    from legalizer.numeric.qnn_ep import qnn_session

    rows = []
    for dtype, variant, r in ((d, v, r) for d in (DTYPES if dtype is None else (dtype,)) for v in variants(op)
                             for r in (RANKS if rank is None else (rank,))):
        made = build(op, r, variant, dtype)
        if made is None:
            continue
        model, feeds = made
        raw = model.SerializeToString()
        try:  # (the CPU EP's kernels: an op and type it has none for is no probe)
            want = ort.InferenceSession(raw, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
        except Exception:  # noqa: BLE001
            continue
        row = {"op": op, "variant": variant, "rank": r, "dtype": dtype}
        with tempfile.TemporaryFile() as log:
            saved = os.dup(2)
            os.dup2(log.fileno(), 2)  # the backend's C++ log lines
            try:
                got = qnn_session(raw).run(None, feeds)[0]
                row["taken"] = True
                row["max_abs_err"] = float(np.max(np.abs(got.astype(np.float64) - want))) if want.size else 0.0
            except Exception as e:  # noqa: BLE001 - the session's refusal is the datum
                row["taken"] = False
                row["error"] = str(e).splitlines()[0]
            finally:
                os.dup2(saved, 2)
                os.close(saved)
            log.seek(0)
            text = log.read().decode(errors="replace")
        if not row["taken"]:
            found = _VALIDATE.search(text)
            lines = [m.group(1).strip() for m in _EP_LINE.finditer(text)
                     if "File mapped" not in m.group(1) and "EPContext" not in m.group(1)]
            reason = found.group(1) if found else (lines[0] if lines else row["error"])
            # the probe's node names are its own: the table says {node}
            row["reason"] = re.sub(r"for node `[^`]*`", "for node `{node}`", reason)
        rows.append(row)
    return rows


def table_text(rows: list) -> str:
    from onnxruntime_qnn import __version__ as qnn_version

    lines = [
        "# What Qualcomm's HTP backend takes: each op at ranks 1-6, as onnxruntime's QNN execution",
        f"# provider (onnxruntime-qnn {qnn_version}, HTP backend, CPU fallback off) validated a one-node",
        "# graph of it. Written by scripts/qnn_htp_probe.py; do not edit by hand, run it again.",
        "#",
        "# [OP]         the ONNX op (variant: a binary op's operands at the same shape, one operand",
        "#              broadcast (one-sided) or both (two-sided); MatMul with two activations or a",
        "#              constant rank-2 weight; Erf alone or in onnxruntime's Gelu pattern), in",
        "#              float32; [OP@TYPE] in another element type",
        "# takes        the ranks HTP took (and ran, within max_abs_err of the CPU EP)",
        "# refused      rank -> the backend's words for refusing it",
        "",
    ]
    by = {}
    for row in rows:
        by.setdefault((row["op"], row["variant"], row.get("dtype", "float32")), []).append(row)
    for (op, variant, dtype), group in by.items():
        name = (op if not variant else f"{op}:{variant}") + ("" if dtype == "float32" else f"@{dtype}")
        key = name if name.isidentifier() else json.dumps(name)
        taken = [g["rank"] for g in group if g["taken"]]
        lines.append(f"[{key}]")
        lines.append(f"takes = {json.dumps(taken)}")
        errs = [g["max_abs_err"] for g in group if g["taken"]]
        if errs:
            lines.append(f"max_abs_err = {max(errs):.3g}")
        refused = [g for g in group if not g["taken"]]
        if refused:
            lines.append(f"[{key}.refused]")
            for g in refused:  # (the log's colour codes left out)
                reason = _COLOUR.sub("", g["reason"]).strip()
                lines.append(f'"{g["rank"]}" = {json.dumps(reason)}')
        lines.append("")
    return "\n".join(lines)


_crashed = "the backend crashed the process (onnxruntime-qnn, while compiling the graph)"


def _in_child(op: str, rank=None, dtype=None):
    """The rows of ``op`` (at ``rank``, in ``dtype``) probed in a child process; None when
    it crashed."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, __file__, "--child", op] + ([] if rank is None else ["--rank", str(rank)]) + \
        ([] if dtype is None else ["--dtype", dtype])
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode < 0:
        return None
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"{op}: the probe's process failed (exit {done.returncode}): {tail}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", help="probe this op only (repeatable; writes no table)")
    ap.add_argument("--out", type=Path, default=ROOT / "rules" / "qnn_htp.toml")
    ap.add_argument("--print", action="store_true", help="print the rows; write nothing")
    ap.add_argument("--fresh", action="store_true", help="probe again the ops probed before (.cache/qnn_probe)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--dtype", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(probe_one(args.child, args.rank, args.dtype)))
        return 0
    rows = []
    from onnxruntime_qnn import __version__ as qnn_version

    cache = ROOT / ".cache" / "qnn_probe" / f"{qnn_version}-types"  # each op's rows, kept until --fresh
    cache.mkdir(parents=True, exist_ok=True)
    for op in args.only or PROBES:
        kept = cache / f"{op}.json"
        if kept.exists() and not args.fresh:
            rows += json.loads(kept.read_text())
            continue
        got = _in_child(op)
        if got is None:  # the backend took the process down: each rank and type alone, to see which
            got = []
            for d in DTYPES:
                for r in RANKS:
                    one = _in_child(op, r, d)
                    got += one if one is not None else \
                        [{"op": op, "variant": v, "rank": r, "dtype": d, "taken": False, "reason": _crashed}
                         for v in variants(op) if build(op, r, v, d) is not None]
        rows += got
        kept.write_text(json.dumps(got))
        taken = {}
        for g in got:
            taken.setdefault((g["variant"], g["dtype"]), []).append(g["rank"] if g["taken"] else f"!{g['rank']}")
        print(f"{op:12s} " + "  ".join(f"{v + '@' if v else ''}{d}: {' '.join(map(str, t))}" for (v, d), t in taken.items()))
    if args.print or args.only:  # (a part of the table is never written as the table)
        if args.print:
            print(json.dumps(rows, indent=1))
        return 0
    args.out.write_text(table_text(rows))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
