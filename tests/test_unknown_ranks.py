"""Ranks of contrib ops' results (onnxruntime's symbolic shape inference; a rank rule for
DynamicQuantizeLSTM, which neither inference knows), checked by running the model before
and after; and operands whose rank stays unknown: the legalized model that cannot be
proved legal says why, not that legalize has a bug."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import legalizer
from helpers import cli_in_process
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


@pytest.mark.parametrize("target", ["tosa", "xla"])
def test_the_rank_agnostic_rewrite_makes_it_legal(tmp_path, target):
    # tosa: Add(u: rank len(s), c: [3]): every operand becomes Reshape(v, Concat(ones(R -
    # rank v), Shape(v))) with R = Max(Size(Shape(u)), 1): one rank symbol, which the
    # verifier proves. xla: t = Expand(c, Shape(u)), u' = Expand(u, Shape(t)): one shape
    # symbol, nothing broadcast.
    path = value_ranked(tmp_path)
    m = legalizer.load(path)
    legalizer.legalize(m, target)
    (add,) = [n for n in m.graph.ops() if n.op == "Add"]
    types = [v.type for v in add.inputs] + [add.outputs[0].type]
    if target == "tosa":
        assert {(t.shape, t.rank_of, t.shape_of) for t in types} == {(None, "rank(y)", None)}
        assert [v.producer.op for v in add.inputs] == ["Reshape", "Reshape"]
    else:
        assert {(t.shape, t.rank_of, t.shape_of) for t in types} == {(None, "shape(y)", "shape(y)")}
        assert [v.producer.op for v in add.inputs] == ["Expand", "Expand"]
        assert add.inputs[1].producer.inputs[0].name == "c"  # Expand(c, Shape(u))
    assert legalizer.verify(m.graph, target).violations == []
    # u of rank 0 to 4 (s's length): each run gives the original's outputs
    for k in (0, 1, 2, 4):
        np.save(tmp_path / "s.npy", np.full(k, 2, np.int64))
        code, out, err = cli_in_process(path, "-q", "--force", "--target", target, "--input", f"s={tmp_path / 's.npy'}")
        assert code == 0, out + err


def value_ranked_prelu(tmp_path):
    """PRelu(u, slope): slope broadcasts onto u, whose rank is a value (s's length)."""
    g = helper.make_graph(
        [helper.make_node("ConstantOfShape", ["s"], ["u"], value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])),
         helper.make_node("PRelu", ["u", "slope"], ["y"], name="prelu")], "g",
        [helper.make_tensor_value_info("s", TensorProto.INT64, ["K"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.arange(3, dtype=np.float32), "slope")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp_path / "prelu.onnx"
    onnx.save(m, str(path))
    return path


@pytest.mark.parametrize("target", ["tosa", "xla"])
def test_the_cli_says_the_rank_depends_on_values(tmp_path, target):
    # PRelu's slope broadcasts one way, onto an operand of a rank no inference fixes:
    # no rank-agnostic rewrite covers it, and the run says why.
    code, out, err = cli_in_process(value_ranked_prelu(tmp_path), "-q", "--target", target)
    assert code == 1
    assert (f"the legalized model has 1 violation under '{target}' (unprovable: an operand of 'prelu' has a rank no"
            " shape inference fixes (it depends on values at run time, or comes from an op no inference knows));"
            " nothing written") in out
    assert "legalize bug" not in out + err


def test_the_api_says_so_too(tmp_path):
    with pytest.raises(NotLegal, match="unprovable: an operand of 'prelu' has a rank no shape inference fixes"):
        legalizer.legalize(onnx.load(str(value_ranked_prelu(tmp_path))), "xla")


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


@pytest.mark.parametrize("target", ["tosa", "xla"])
@pytest.mark.parametrize("form", ["2d", "2d_align_corners", "3d", "3d_align_corners"])
def test_affine_grid_expanded_is_legal_and_computes_the_same(form, target, tmp_path):
    import onnx_suite as suite

    case = suite.case_by_name(f"test_affine_grid_{form}_expanded")
    path = tmp_path / "m.onnx"
    onnx.save(case.model, str(path))
    np.savez(tmp_path / "in.npz", **case.feeds()[0])
    code, out, err = cli_in_process(path, "-q", "--target", target, "--input", tmp_path / "in.npz", "--require-check",
                                    "--report", tmp_path / "r.json")
    assert code == 0, out + err
    rep = __import__("json").loads((tmp_path / "r.json").read_text())
    assert rep["check"]["ok"] and rep["violations"] == []
    got = __import__("onnxruntime").InferenceSession(str(tmp_path / "m.legal.onnx")).run(None, case.feeds()[0])
    for g, want in zip(got, case.refs[0]):  # and the node test's own reference outputs
        np.testing.assert_allclose(g, want, rtol=case.rtol, atol=case.atol)


def squeezed_state(tmp_path, axis, batch="batch"):
    """PyTorch's export of an LSTM cell's ``h.squeeze(axis)`` (Silero VAD's opset-15
    decoder): If(Shape(h)[axis] == 1, Squeeze(h, axis), Identity(h)), whose branches
    differ in rank, then ``+ bias`` (a [hidden] constant). h is LSTM's Y_h: [1 (one
    direction), batch, hidden]."""
    rng = np.random.default_rng(3)
    i, h = 4, 3
    inits = [numpy_helper.from_array(rng.standard_normal((1, 4 * h, i)).astype(np.float32), "W"),
             numpy_helper.from_array(rng.standard_normal((1, 4 * h, h)).astype(np.float32), "R"),
             numpy_helper.from_array(rng.standard_normal(h).astype(np.float32), "bias"),
             numpy_helper.from_array(np.asarray([axis], np.int64), "axis"),
             numpy_helper.from_array(np.asarray([1], np.int64), "one")]
    then = helper.make_graph([helper.make_node("Squeeze", ["Yh", "axis"], ["sq"], name="squeeze")], "then", [],
                             [helper.make_tensor_value_info("sq", TensorProto.FLOAT, None)])
    other = helper.make_graph([helper.make_node("Identity", ["Yh"], ["same"], name="keep")], "else", [],
                              [helper.make_tensor_value_info("same", TensorProto.FLOAT, None)])
    nodes = [helper.make_node("LSTM", ["x", "W", "R"], ["Y", "Yh"], hidden_size=h, name="lstm"),
             helper.make_node("Shape", ["Yh"], ["shape"], name="shape"),
             helper.make_node("Gather", ["shape", "axis"], ["dim"], axis=0, name="dim"),
             helper.make_node("Equal", ["dim", "one"], ["is1"], name="is1"),
             helper.make_node("If", ["is1"], ["state"], then_branch=then, else_branch=other, name="if"),
             helper.make_node("Add", ["state", "bias"], ["y"], name="add")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, batch, i])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 15)])
    m.ir_version = 8
    path = tmp_path / f"squeeze{axis}_{batch}.onnx"
    onnx.save(m, str(path))
    return path


def _ort(path, feeds):
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("target", ["tosa", "xla"])
def test_an_if_that_squeezes_a_dim_of_size_1_has_the_rank_of_its_taken_branch(tmp_path, target):
    # Y_h's dim 0 is num_directions, 1: the shapes fix the condition, the Squeeze branch is
    # taken, the If's result is [batch, 3] and Add's operands broadcast with a known rank.
    path = squeezed_state(tmp_path, 0)
    model = legalizer.load(path)
    (node,) = [n for n in model.graph.ops() if n.op == "If"]
    assert node.outputs[0].type.shape == ("batch", 3)
    out = tmp_path / f"{target}.onnx"
    code, text, err = cli_in_process(path, "-q", "--target", target, "-o", out)
    assert code == 0, text + err
    feeds = {"x": np.random.default_rng(4).standard_normal((5, 2, 4)).astype(np.float32)}
    (want,), (got,) = _ort(path, feeds), _ort(out, feeds)
    assert want.shape == got.shape == (2, 3)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("target", ["tosa", "xla"])
def test_a_squeeze_of_a_symbolic_batch_keeps_an_unknown_rank_which_the_rewrite_covers(tmp_path, target):
    # Squeeze of dim 1 (batch, Silero's inner If): taken only where batch is 1 at run
    # time - the If's rank depends on a value; the rank-agnostic rewrite makes the Add
    # legal for either rank, and each gives the original's outputs.
    path, legal = squeezed_state(tmp_path, 1), tmp_path / "legal.onnx"
    (node,) = [n for n in legalizer.load(path).graph.ops() if n.op == "If"]
    assert node.outputs[0].type.shape is None
    code, out, err = cli_in_process(path, "-q", "--target", target, "-o", legal)
    assert code == 0, out + err
    for batch, shape in ((1, (1, 3)), (2, (1, 2, 3))):
        feeds = {"x": np.random.default_rng(5).standard_normal((5, batch, 4)).astype(np.float32)}
        (want,), (got,) = _ort(path, feeds), _ort(legal, feeds)
        assert want.shape == got.shape == shape
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    # at a declared batch of 1 the shapes fix the condition: [1, 3], nothing to rewrite
    (node,) = [n for n in legalizer.load(squeezed_state(tmp_path, 1, batch=1)).graph.ops() if n.op == "If"]
    assert node.outputs[0].type.shape == (1, 3)


def test_xla_expands_the_three_operands_of_a_where(tmp_path):
    # Where(cond [2,1,1], u: rank len(s), c [3]): t = Expand(u, Shape(cond)), then
    # Expand(c, Shape(t)) has the full broadcast shape S, and cond and u are Expand(., S).
    g = helper.make_graph(
        [helper.make_node("ConstantOfShape", ["s"], ["u"], value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])),
         helper.make_node("Where", ["cond", "u", "c"], ["y"], name="where")], "g",
        [helper.make_tensor_value_info("s", TensorProto.INT64, ["K"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray([True, False]).reshape(2, 1, 1), "cond"),
         numpy_helper.from_array(np.arange(3, dtype=np.float32) + 5, "c")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path, out = tmp_path / "where.onnx", tmp_path / "where.legal.onnx"
    onnx.save(m, str(path))
    code, text, err = cli_in_process(path, "-q", "--target", "xla", "-o", out, "--no-check")
    assert code == 0, text + err
    legal = legalizer.load(out)
    (where,) = [n for n in legal.graph.ops() if n.op == "Where"]
    assert [v.producer.op for v in where.inputs] == ["Expand", "Expand", "Expand"]
    for shape, want in (([], (2, 1, 3)), ([2, 3], (2, 2, 3)), ([1, 4, 1], (2, 4, 3))):  # u's shape: s
        feeds = {"s": np.asarray(shape, np.int64)}
        (a,), (b,) = _ort(path, feeds), _ort(out, feeds)
        assert a.shape == b.shape == want
        np.testing.assert_array_equal(a, b)


def declared_result(tmp_path, c_shape):
    """y = ConstantOfShape(s) + c, y declared rank 3 (Silero VAD's opset-15 stateN =
    Concat(...) + a scalar, declared [2, batch, 128])."""
    g = helper.make_graph(
        [helper.make_node("ConstantOfShape", ["s"], ["u"], value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])),
         helper.make_node("Add", ["u", "c"], ["y"], name="add")], "g",
        [helper.make_tensor_value_info("s", TensorProto.INT64, ["K"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b", "c"])],
        [numpy_helper.from_array(np.full(c_shape, 0.5, np.float32), "c")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = tmp_path / f"declared{len(c_shape)}.onnx"
    onnx.save(m, str(path))
    return path


@pytest.mark.parametrize("target", ["mlir", "tosa", "xla"])
def test_a_declared_result_rank_ranks_the_one_unranked_operand(tmp_path, target):
    # c is a scalar: the broadcast rank 3 is u's. The input verifies (no 'rank 3 vs 0'),
    # and the legalized model computes the original's outputs.
    path = declared_result(tmp_path, ())
    (add,) = [n for n in legalizer.load(path).graph.ops() if n.op == "Add"]
    assert add.inputs[0].type.shape == (None, None, None)
    out = tmp_path / f"{target}.onnx"
    args = ("--verify-only",) if target == "mlir" else ("--target", target, "-o", out)
    code, text, err = cli_in_process(path, "-q", *args, "--no-check")
    assert code == 0, text + err
    if target != "mlir":
        feeds = {"s": np.asarray([2, 1, 3], np.int64)}
        (want,), (got,) = _ort(path, feeds), _ort(out, feeds)
        assert want.shape == got.shape == (2, 1, 3)
        np.testing.assert_array_equal(got, want)


def test_an_operand_of_the_results_rank_leaves_the_other_unranked(tmp_path):
    # c has rank 3 too: u may have any rank up to 3, nothing is inferred
    (add,) = [n for n in legalizer.load(declared_result(tmp_path, (1, 1, 3))).graph.ops() if n.op == "Add"]
    assert add.inputs[0].type.shape is None
