"""Old opsets: a model below the opset a rewrite needs is brought up with onnx's version
converter (and the run says why its opset changed); a model that needs none keeps its
opset."""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from helpers import cli_in_process

F = TensorProto.FLOAT


def _squeeze_add(tmp_path, opset):
    """y = Squeeze(x) + b, x [1, N, 4]: Squeeze without axes leaves a rank that depends
    on N at run time, so only the rank-agnostic rewrite (Reshape's allowzero, opset 14)
    makes the Add provable."""
    g = helper.make_graph([helper.make_node("Squeeze", ["x"], ["s"], name="sq"),
                           helper.make_node("Add", ["s", "b"], ["y"], name="add")], "g",
                          [helper.make_tensor_value_info("x", F, [1, "N", 4])],
                          [helper.make_tensor_value_info("y", F, None)],
                          [numpy_helper.from_array(np.arange(4, dtype=np.float32), "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    path = tmp_path / f"sq{opset}.onnx"
    onnx.save(m, str(path))
    return path


def test_an_opset_13_model_is_raised_to_what_the_rewrite_needs(tmp_path):
    src, out, rep = _squeeze_add(tmp_path, 13), tmp_path / "o.onnx", tmp_path / "r.json"
    code, text, err = cli_in_process(src, "-o", out, "--report", rep, "-q")
    assert code == 0, text + err  # it was: 1 violation, unprovable
    why = ("opset raised from 13 to 14 by onnx's version converter: the legal form needs opset 14 (Reshape's"
           " allowzero, for operands of unknown rank)")
    report = json.loads(rep.read_text())
    assert report["warnings"] == [why] and report["violations"] == []  # the output's opset says why it changed
    assert [b["dims"] for b in report["check"]["bindings"]] == [{"N": 3}, {"N": 1}] and report["check"]["ok"]
    assert [o.version for o in onnx.load(str(out)).opset_import if o.domain == ""] == [14]


def test_a_model_that_needs_no_rewrite_of_a_newer_opset_keeps_its_own(tmp_path):
    g = helper.make_graph([helper.make_node("Add", ["x", "b"], ["y"], name="add")], "g",
                          [helper.make_tensor_value_info("x", F, ["N", 4])], [helper.make_tensor_value_info("y", F, ["N", 4])],
                          [numpy_helper.from_array(np.arange(4, dtype=np.float32), "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)])
    m.ir_version = 8
    onnx.save(m, str(tmp_path / "a.onnx"))
    code, text, err = cli_in_process(tmp_path / "a.onnx", "-o", tmp_path / "o.onnx", "-q")
    assert code == 0 and err == "", text + err
    assert [o.version for o in onnx.load(str(tmp_path / "o.onnx")).opset_import if o.domain == ""] == [11]
