"""Dims as onnxruntime sees them: a dim_param with no letter in it (``?``, ``-1``) names
no dim, so each place it occurs is a dim of its own and two ``"?"`` dims may bind to
different sizes; a dim_param that is a name (``batch``, ``s0``) is one dim wherever it
occurs."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import legalizer
from corpus_models import model_path
from helpers import cli_in_process
from legalizer.ir.types import names_a_dim

F = TensorProto.FLOAT


def _model(tmp_path, h, w):
    """y = x + b, x [1, 3, h, w] with b [1, 3, 1, 1]: fine at any H and W."""
    g = helper.make_graph([helper.make_node("Add", ["x", "b"], ["y"], name="add")], "g",
                          [helper.make_tensor_value_info("x", F, [1, 3, h, w])],
                          [helper.make_tensor_value_info("y", F, [1, 3, h, w])],
                          [numpy_helper.from_array(np.ones([1, 3, 1, 1], np.float32), "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    return path


def test_which_dim_params_name_a_dim():
    assert [names_a_dim(p) for p in ("?", "-1", "", "*", "batch", "s0", "2*s0", "DynamicDimension.0")] == [
        False, False, False, False, True, True, True, True]


@pytest.mark.parametrize("unnamed", ["?", "-1"])
def test_two_unnamed_dims_bind_to_different_sizes(tmp_path, unnamed):
    src = _model(tmp_path, unnamed, unnamed)
    model = legalizer.load(src)
    assert model.graph.inputs[0].outputs[0].type.shape == (1, 3, None, None)
    code, out, err = cli_in_process(src, "-o", tmp_path / "o.onnx", "--input-shape", "x:1x3x48x192", "--report",
                                    tmp_path / "r.json", "-q")
    assert code == 0, out + err
    binding = json.loads((tmp_path / "r.json").read_text())["check"]["bindings"][0]
    assert binding["dims"] == {"x[2]": 48, "x[3]": 192} and binding["source"] == "user" and binding["ok"]


def test_a_named_dim_is_one_dim_wherever_it_occurs(tmp_path):
    code, _, err = cli_in_process(_model(tmp_path, "n", "n"), "-o", tmp_path / "o.onnx", "--input-shape",
                                  "x:1x3x48x192")
    assert code == 2
    assert err.strip() == "legalize: error: input shape 'x' (1x3x48x192): dim 3 ('n') is 192, but input shape 'x' binds it to 48"


def test_paddleocr_classifier_at_a_height_and_width_of_its_own(tmp_path):
    """rapidocr's PaddleOCR classifier declares x as [-1, 3, '?', '?']."""
    src = model_path("wheel_rapidocr_cls")
    if not src.is_file():
        pytest.skip("the corpus's rapidocr models (rapidocr wheel): python scripts/corpus.py --only wheel_rapidocr")
    out = tmp_path / "cls.onnx"
    res = legalizer.legalize(src, output=out, input_shapes={"x": (1, 3, 48, 192)}, provider="cpu")
    assert res.check.state == "ran" and res.check.ok is True and out.is_file()
    assert res.report["check"]["bindings"][0]["dims"] == {"x[0]": 1, "x[2]": 48, "x[3]": 192}
