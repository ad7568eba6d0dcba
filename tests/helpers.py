"""Small builders shared by the tests."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterable, List, Mapping, Optional, Sequence, Tuple

import onnx
from onnx import TensorProto, helper

import legalizer
from legalizer.kinds.onnx.importer import import_model

ROOT = Path(__file__).resolve().parent.parent
DTYPES = {"f32": TensorProto.FLOAT, "i1": TensorProto.BOOL, "i32": TensorProto.INT32, "i64": TensorProto.INT64}


def parse_type(text: str):
    """MLIR-style 'tensor<4x?xi32>' body ('4x?xi32', '*xi32', 'i32') -> (elem, shape)."""
    *dims, dtype = text.split("x")
    if dims == ["*"]:
        return DTYPES[dtype], None
    return DTYPES[dtype], [None if d == "?" else (int(d) if d.isdigit() else d) for d in dims]


def vi(name: str, elem: int, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def make_model(nodes: Sequence[onnx.NodeProto], inputs: Sequence[onnx.ValueInfoProto],
               outputs: Sequence[onnx.ValueInfoProto], inits: Iterable[onnx.TensorProto] = (),
               value_info: Iterable[onnx.ValueInfoProto] = (), opset: int = 17,
               domains: Iterable[Tuple[str, int]] = (),
               sparse: Iterable[onnx.SparseTensorProto] = ()) -> onnx.ModelProto:
    """The ONNX model of graph "g" over ``nodes``: the default domain at ``opset``, plus
    ``domains`` as (domain, version) pairs; IR version 8 (what every runtime here reads).
    Not checked: tests build invalid models with it on purpose."""
    g = helper.make_graph(list(nodes), "g", list(inputs), list(outputs), list(inits),
                          value_info=list(value_info), sparse_initializer=list(sparse))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset),
                                            *(helper.make_opsetid(d, v) for d, v in domains)])
    m.ir_version = 8
    return m


def op_model(op: str, operands: Sequence[str], result: str, opset: int = 17,
             attrs: Optional[dict] = None) -> onnx.ModelProto:
    """One node ``op`` over graph inputs typed as given (MLIR-style type bodies), whose
    output is the graph output typed ``result``."""
    names = [f"arg{i}" for i in range(len(operands))]
    inputs = [vi(n, *parse_type(t)) for n, t in zip(names, operands)]
    out = vi("result", *parse_type(result))
    node = helper.make_node(op, names, ["result"], name="n0", **(attrs or {}))
    return make_model([node], inputs, [out], opset=opset)


def verify_proto(model: onnx.ModelProto, profile: str = "mlir"):
    return legalizer.verify(import_model(model).graph, profile)


def save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, str(path))
    return path


def cli_in_process(*args) -> Tuple[int, str, str]:
    """``legalize ARGS`` in this process (so that a test can patch a stage or hook
    file opens): exit status, stdout, stderr."""
    from legalizer.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main([str(a) for a in args])
            code = 0
        except SystemExit as e:
            code = e.code
    return code, out.getvalue(), err.getvalue()


# What the terminal running the tests sets and rich reads (colour, width): removed, so
# that what the command prints does not depend on where the tests run.
TERMINAL_VARS = ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS", "LINES")


def cli_env(env: Optional[Mapping[str, Optional[str]]] = None, isolated: bool = False) -> dict:
    """The environment of a ``legalize`` process: this one's less the terminal's
    variables, or with ``isolated`` only PATH, this checkout on PYTHONPATH and 120
    columns; then ``env`` on top (a None value removes a variable)."""
    if isolated:
        out = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "COLUMNS": "120",
               "LEGALIZE_VALIDATE_REPORTS": os.environ.get("LEGALIZE_VALIDATE_REPORTS", "")}
    else:
        out = {k: v for k, v in os.environ.items() if k not in TERMINAL_VARS}
    for k, v in (env or {}).items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out


def cli_command(*args, prelude: Optional[str] = None) -> List[str]:
    """The command line of ``legalize ARGS`` run by this python: ``-m legalizer.cli``, or
    with ``prelude`` (Python run first, e.g. to hide a module) ``-c``."""
    if prelude is None:
        return [sys.executable, "-m", "legalizer.cli", *map(str, args)]
    code = f"{prelude}import sys; from legalizer.cli import main; main(sys.argv[1:])"
    return [sys.executable, "-c", code, *map(str, args)]


def cli_process(*args, cwd: Optional[Path] = ROOT, env: Optional[Mapping[str, Optional[str]]] = None,
                isolated: bool = False, prelude: Optional[str] = None, timeout: float = 300, text: bool = True,
                **run) -> subprocess.CompletedProcess:
    """``legalize ARGS`` in a process of its own (for a test that needs one: exit codes
    from a real interpreter, resource limits, signals, a clean import state), its output
    captured (as text, else bytes). ``env``, ``isolated``: see ``cli_env``; ``prelude``:
    see ``cli_command``; ``run``: more of ``subprocess.run``'s arguments."""
    return subprocess.run(cli_command(*args, prelude=prelude), capture_output=True, text=text, cwd=cwd,
                          env=cli_env(env, isolated), timeout=timeout, **run)


def lines(text: str) -> List[str]:
    """The lines of ``text`` that are not blank."""
    return [ln for ln in text.splitlines() if ln.strip()]


def assert_clean(p: subprocess.CompletedProcess) -> None:
    """The command ended without a traceback or an internal error."""
    assert "Traceback" not in p.stdout + p.stderr, p.stderr[-2000:]
    assert "internal error" not in p.stderr, p.stderr[-2000:]
