"""Ranks of contrib ops' results (onnxruntime's symbolic shape inference; a rank rule for
DynamicQuantizeLSTM, which neither inference knows), checked by running the model before
and after; and operands whose rank stays unknown: the legalized model that cannot be
proved legal says why, not that legalize has a bug."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import legalizer
from legalizer.api import NotLegal
from needs import require


def value_ranked(tmp_path):
    """ConstantOfShape of a runtime shape (its rank is the shape's length, a value) + c."""
    g = helper.make_graph(
        [helper.make_node("ConstantOfShape", ["s"], ["u"], value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])),
         helper.make_node("Add", ["u", "c"], ["y"], name="add")], "g",
        [helper.make_tensor_value_info("s", TensorProto.INT64, ["K"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.arange(3, dtype=np.float32), "c")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp_path / "unranked.onnx"
    onnx.save(m, str(path))
    return path


def test_the_rank_agnostic_rewrite_makes_it_legal_under_tosa(tmp_path, legalize_in_process):
    # Add(u: rank len(s), c: [3]): every operand becomes Reshape(v, Concat(ones(R - rank v),
    # Shape(v))) with R = Max(Size(Shape(u)), 1): one rank symbol, which the verifier proves.
    path = value_ranked(tmp_path)
    m = legalizer.load(path)
    legalizer.legalize(m, "tosa")
    (add,) = [n for n in m.graph.ops() if n.op == "Add"]
    types = [v.type for v in add.inputs] + [add.outputs[0].type]
    assert {(t.shape, t.rank_of) for t in types} == {(None, "rank(y)")}
    assert [v.producer.op for v in add.inputs] == ["Reshape", "Reshape"]
    assert legalizer.verify(m.graph, "tosa").violations == []
    # u of rank 0 to 4 (s's length): each run gives the original's outputs
    for k in (0, 1, 2, 4):
        np.save(tmp_path / "s.npy", np.full(k, 2, np.int64))
        code, out, err = legalize_in_process(path, "-q", "--force", "--input", f"s={tmp_path / 's.npy'}")
        assert code == 0, out + err


def test_the_cli_says_the_rank_depends_on_values(tmp_path, legalize_in_process):
    code, out, err = legalize_in_process(value_ranked(tmp_path), "-q", "--target", "xla")
    assert code == 1
    assert ("the legalized model has 1 violation under 'xla' (unprovable: an operand of 'add' has a rank no shape"
            " inference fixes (it depends on values at run time, or comes from an op no inference knows));"
            " nothing written") in out
    assert "legalize bug" not in out + err


def test_the_api_says_so_too(tmp_path):
    with pytest.raises(NotLegal, match="unprovable: an operand of 'add' has a rank no shape inference fixes"):
        legalizer.legalize(onnx.load(str(value_ranked(tmp_path))), "xla")


def _contrib_model(tmp_path, nodes, inputs, inits, name):
    g = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    path = tmp_path / f"{name}.onnx"
    onnx.save(m, str(path))
    return path


def gelu(tmp_path):
    return _contrib_model(tmp_path, [helper.make_node("Gelu", ["x"], ["u"], domain="com.microsoft", name="gelu"),
                                     helper.make_node("Add", ["u", "c"], ["y"], name="add")],
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 4])],
                          [numpy_helper.from_array(np.arange(4, dtype=np.float32), "c")], "gelu")


def dq_lstm(tmp_path):
    rng = np.random.default_rng(0)
    i, h = 4, 3
    inits = [numpy_helper.from_array(rng.integers(-5, 5, (1, i, 4 * h)).astype(np.int8), "W"),
             numpy_helper.from_array(rng.integers(-5, 5, (1, h, 4 * h)).astype(np.int8), "R"),
             numpy_helper.from_array(rng.random((1, 8 * h)).astype(np.float32), "B"),
             numpy_helper.from_array(np.array([0.1], np.float32), "ws"), numpy_helper.from_array(np.array([0], np.int8), "wz"),
             numpy_helper.from_array(np.array([0.1], np.float32), "rs"), numpy_helper.from_array(np.array([0], np.int8), "rz"),
             numpy_helper.from_array(rng.random(h).astype(np.float32), "c")]
    lstm = helper.make_node("DynamicQuantizeLSTM", ["x", "W", "R", "B", "", "", "", "", "ws", "wz", "rs", "rz"],
                            ["Y", "Yh", "Yc"], domain="com.microsoft", hidden_size=h, name="lstm")
    return _contrib_model(tmp_path, [lstm, helper.make_node("Add", ["Yh", "c"], ["y"], name="add")],
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, "batch", i])], inits, "dqlstm")


@pytest.mark.parametrize("make,operand", [(gelu, ("batch", 3, 4)), (dq_lstm, (1, "batch", 3))], ids=["gelu", "dqlstm"])
def test_contrib_results_get_ranks_and_the_model_is_legalized(tmp_path, monkeypatch, make, operand,
                                                              legalize_in_process):
    if make is gelu:  # onnxruntime's symbolic inference; DynamicQuantizeLSTM has a rank rule of ours
        require("sympy")
    path = make(tmp_path)
    model = legalizer.load(path)
    (add,) = [n for n in model.graph.ops() if n.op == "Add"]
    assert add.inputs[0].type.shape == operand
    monkeypatch.chdir(tmp_path)
    code, out, err = legalize_in_process(path, "-q", "--report", tmp_path / "r.json")
    assert code == 0, out + err
    rep = __import__("json").loads((tmp_path / "r.json").read_text())
    assert rep["check"]["ok"] and rep["stats"]["reshapes_inserted"] + rep["stats"]["constants_folded"] == 1
    # onnxruntime's own entry point would have left sym_shape_infer_temp.onnx here
    assert not (tmp_path / "sym_shape_infer_temp.onnx").exists()


@pytest.mark.parametrize("form", ["2d", "2d_align_corners", "3d", "3d_align_corners"])
def test_affine_grid_expanded_is_legal_under_tosa_and_computes_the_same(form, tmp_path, legalize_in_process):
    import onnx_suite as suite

    case = suite.case_by_name(f"test_affine_grid_{form}_expanded")
    path = tmp_path / "m.onnx"
    onnx.save(case.model, str(path))
    np.savez(tmp_path / "in.npz", **case.feeds()[0])
    code, out, err = legalize_in_process(path, "-q", "--input", tmp_path / "in.npz", "--require-check",
                                         "--report", tmp_path / "r.json")
    assert code == 0, out + err
    rep = __import__("json").loads((tmp_path / "r.json").read_text())
    assert rep["check"]["ok"] and rep["violations"] == []
    got = __import__("onnxruntime").InferenceSession(str(tmp_path / "m.legal.onnx")).run(None, case.feeds()[0])
    for g, want in zip(got, case.refs[0]):  # and the node test's own reference outputs
        np.testing.assert_allclose(g, want, rtol=case.rtol, atol=case.atol)
