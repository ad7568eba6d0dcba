"""Small builders shared by the tests."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Optional, Sequence, Tuple

import onnx
from onnx import TensorProto, helper

import legalizer
from legalizer.importers.onnx import import_model

DTYPES = {"f32": TensorProto.FLOAT, "i1": TensorProto.BOOL, "i32": TensorProto.INT32, "i64": TensorProto.INT64}


def parse_type(text: str):
    """MLIR-style 'tensor<4x?xi32>' body ('4x?xi32', '*xi32', 'i32') -> (elem, shape)."""
    *dims, dtype = text.split("x")
    if dims == ["*"]:
        return DTYPES[dtype], None
    return DTYPES[dtype], [None if d == "?" else (int(d) if d.isdigit() else d) for d in dims]


def vi(name: str, elem: int, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def op_model(op: str, operands: Sequence[str], result: str, opset: int = 17,
             attrs: Optional[dict] = None) -> onnx.ModelProto:
    """One node ``op`` over graph inputs typed as given (MLIR-style type bodies), whose
    output is the graph output typed ``result``."""
    names = [f"arg{i}" for i in range(len(operands))]
    inputs = [vi(n, *parse_type(t)) for n, t in zip(names, operands)]
    out = vi("result", *parse_type(result))
    node = helper.make_node(op, names, ["result"], name="n0", **(attrs or {}))
    g = helper.make_graph([node], "g", inputs, [out])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


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
