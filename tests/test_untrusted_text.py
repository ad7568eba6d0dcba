"""Names in a model are untrusted text: whatever a run prints (the IR of -v, warnings,
diagnostics, tables, check lines, batch output) shows their control characters
escaped, never raw, so a model cannot drive the user's terminal."""

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tflite_build import build_tflite, op, tensor

ROOT = Path(__file__).resolve().parent.parent

# An ANSI colour sequence, NUL, BEL and the Unicode line/paragraph separators.
HOSTILE = "\x1b[31m\x00\x07\u2028\u2029\x85"


def _onnx(path: Path, nodes, inputs, outputs, inits=(), extra_opsets=()) -> Path:
    g = helper.make_graph(nodes, "g" + HOSTILE, inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), *extra_opsets])
    m.ir_version = 8
    onnx.save(m, str(path))
    return path


def _vi(name, shape):
    return helper.make_tensor_value_info(name + HOSTILE, TensorProto.FLOAT, shape)


@pytest.fixture
def models(tmp_path) -> dict:
    h = HOSTILE
    bias = helper.make_tensor("b" + h, TensorProto.FLOAT, [4], np.arange(4, dtype=np.float32))
    legal = _onnx(tmp_path / "names.onnx",
                  [helper.make_node("Add", ["x" + h, "b" + h], ["t" + h], name="add" + h),
                   helper.make_node("Relu", ["t" + h], ["y" + h], name="relu" + h)],
                  [_vi("x", ["batch" + h, 4])], [_vi("y", ["batch" + h, 4])], [bias])
    bad = _onnx(tmp_path / "bad.onnx", [helper.make_node("Add", ["x" + h, "z" + h], ["y" + h], name="bad" + h)],
                [_vi("x", [3, 4]), _vi("z", [2])], [_vi("y", [3, 4])])
    custom = _onnx(tmp_path / "custom.onnx",
                   [helper.make_node("Evil" + h, ["x" + h], ["y" + h], name="custom" + h, domain="com.evil" + h)],
                   [_vi("x", [2])], [_vi("y", [2])], extra_opsets=[helper.make_opsetid("com.evil" + h, 1)])
    tfl = tmp_path / "names.tflite"
    tfl.write_bytes(build_tflite(
        [tensor("x" + h, "float32", [1, 2, 3]), tensor("c" + h, "float32", [3], data=np.ones(3, np.float32)),
         tensor("y" + h, "float32", [1, 2, 3])],
        [op("ADD", [0, 1], [2], "AddOptions", fused_activation_function=0)], [0], [2], name="main" + h))
    return {"legal": legal, "bad": bad, "custom": custom, "tflite": tfl}


CASES = {
    "legalize -v": (["legal"], ["-v", "--provider", "cpu"], 0),
    "verify-only tosa -v": (["legal"], ["--verify-only", "--profile", "tosa", "-v"], 1),
    "violation": (["bad"], ["-v"], 1),
    "custom op -v": (["custom"], ["--verify-only", "-v"], 0),
    "tflite -v": (["tflite"], ["-v", "--no-check"], 0),
    "batch -v": (["legal", "bad", "custom"], ["-v", "--verify-only"], 1),
}


@pytest.mark.parametrize("case", list(CASES))
def test_no_raw_control_characters_reach_the_terminal(models, case, tmp_path, legalize):
    names, flags, code = CASES[case]
    p = legalize(*(models[n] for n in names), *flags, text=False)
    assert p.returncode == code, p.stderr.decode(errors="replace")
    for stream in (p.stdout, p.stderr):
        text = stream.decode("utf-8")
        raw = sorted({hex(ord(c)) for c in text if c != "\n" and not c.isprintable()})
        assert raw == [], (raw, text[-2000:])
    # The names are there, escaped, so the user can still tell which node is meant.
    assert "\\x1b[31m\\x00\\x07\\u2028\\u2029\\x85" in (p.stdout + p.stderr).decode()
