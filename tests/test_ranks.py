"""Unknown ranks are not proofs (issue 16, item 5): ranks inferred where ONNX's shape
inference gives up (shapes/ranks.py), an operand of unknown rank reported under tosa
and xla, and the legal form verified on the shapes the model has at run time
(check/runtime_shapes.py)."""

from __future__ import annotations

import functools
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import legalizer
from legalizer.numeric.ort import check
from legalizer.numeric.runtime_shapes import describe, verify_run_time
from legalizer.exporters.as_onnx import to_onnx
from legalizer.kinds.onnx.importer import import_model
from legalizer.target_passes import legalize

from helpers import vi


def reshaped_add() -> onnx.ModelProto:
    """``Add(Reshape(x, s), b)``: ``s`` has a dynamic length, so no rank is known."""
    nodes = [helper.make_node("Reshape", ["x", "s"], ["r"], name="reshape"),
             helper.make_node("Add", ["r", "b"], ["y"], name="add")]
    g = helper.make_graph(nodes, "g", [vi("x", TensorProto.FLOAT, [1, 4]), vi("s", TensorProto.INT64, [None])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [helper.make_tensor("b", TensorProto.FLOAT, [], [1.0])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


UNRANKED = ("error: node 'add': 'Add' op operand #0 of unknown rank cannot be proved to have the result's"
            " rank: ('*', '') -> '*'")


@pytest.mark.parametrize("profile", ["tosa", "xla"])
def test_unranked_operand_is_a_violation_under_the_targets(profile):
    (d,) = legalizer.verify(import_model(reshaped_add()).graph, profile).violations
    assert (d.code, d.node, d.op) == ("unranked-operand", "add", "Add")
    assert str(d) == UNRANKED


@pytest.mark.parametrize("profile", ["mlir", "strict"])
def test_unranked_operand_is_legal_under_mlir(profile):
    assert legalizer.verify(import_model(reshaped_add()).graph, profile).violations == []


def test_run_time_shapes_are_verified():
    """At run time the operands are 1x1x1x4 and a scalar: legal for MLIR, not for TOSA."""
    feeds = {"x": np.ones((1, 4), np.float32), "s": np.array([1, 1, 1, 4], np.int64)}
    got = verify_run_time(reshaped_add(), feeds, {}, "tosa", ["CPUExecutionProvider"])
    assert got.nodes == 1 and not got.ok
    (d,) = got.violations
    assert (d.code, d.node, d.stage) == ("operand-rank-mismatch", "add", "run time")
    assert describe(d) == ("error: node 'add': 'Add' op operands don't have matching ranks:"
                           " ('1x1x1x4', '') -> '1x1x1x4' (at run time: ('1x1x1x4', '') -> '1x1x1x4')")
    assert verify_run_time(reshaped_add(), feeds, {}, "mlir", ["CPUExecutionProvider"]).ok


def test_check_fails_on_illegal_run_time_shapes():
    m = reshaped_add()
    m.graph.input[1].CopyFrom(vi("s", TensorProto.INT64, [4]))  # fed below: [1, 1, 1, 4]
    given = {"x": np.ones((1, 4), np.float32), "s": np.array([1, 1, 1, 4], np.int64)}
    res = check(m, m, inputs=given, provider="cpu", profile="tosa")
    assert all(b.ok for b in res.bindings) and not res.ok
    assert res.to_json()["runtime_shapes"]["violations"][0]["code"] == "operand-rank-mismatch"
    assert check(m, m, inputs=given, provider="cpu").ok  # without a profile: outputs only


def test_keepdims_reduction_with_runtime_axes_keeps_the_rank():
    nodes = [helper.make_node("ReduceMean", ["x", "axes"], ["m"], name="mean"),
             helper.make_node("Add", ["m", "eps"], ["y"], name="add")]
    g = helper.make_graph(nodes, "g", [vi("x", TensorProto.FLOAT, [2, 1, 3]), vi("axes", TensorProto.INT64, [None])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [helper.make_tensor("eps", TensorProto.FLOAT, [], [1e-5])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    graph = import_model(m).graph
    add = next(n for n in graph.ops() if n.op == "Add")
    assert add.inputs[0].type.shape == (None, 1, None) and add.outputs[0].type.shape == (None, 1, None)
    assert [d.code for d in legalizer.verify(graph, "tosa").violations] == ["operand-rank-mismatch"]


# ---- ONNX's own expanded node tests ---------------------------------------------------
@functools.lru_cache(maxsize=None)
def node_tests():
    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {t.name: t for t in load_model_tests(kind="node")
                if t.name.startswith(("test_rms_normalization_", "test_affine_grid_")) and t.name.endswith("_expanded")}


# affine_grid chooses its 2-D or 3-D form with an If on Size(size): a condition the
# shapes fix (shapes.conditions), so the If has its taken branch's rank. What stays
# unranked (a Squeeze without axes of a symbolic dim, a ConstantOfShape of a computed
# length) gets the rank-agnostic rewrites: one rank symbol under tosa, one shape symbol
# (Expand) under xla - legal, and legal at run time too.
STILL_UNRANKED = {"tosa": (), "xla": ()}
AT_RUN_TIME: dict = {}


@pytest.mark.parametrize("target", ["tosa", "xla"])
def test_expanded_node_tests(target):
    import onnxruntime as ort

    tests = node_tests()
    assert len(tests) == 23  # 19 rms_normalization, 4 affine_grid
    for name, t in sorted(tests.items()):
        model = import_model(t.model)
        legalize(model, target)
        static = legalizer.verify(model.graph, target).violations
        if name.startswith(STILL_UNRANKED[target]):
            assert {d.code for d in static} == {"unranked-operand"}, name
        else:
            assert static == [], (name, [str(d) for d in static[:3]])
        out = to_onnx(model)
        sess = ort.InferenceSession(out.SerializeToString(), providers=["CPUExecutionProvider"])
        names = [i.name for i in t.model.graph.input]
        for inputs, outputs in t.data_sets:
            got = sess.run(None, dict(zip(names, inputs)))
            for g, w in zip(got, outputs):
                np.testing.assert_allclose(g, w, rtol=t.rtol, atol=t.atol, err_msg=name)
        inputs = t.data_sets[0][0]
        runtime = verify_run_time(out, dict(zip(names, inputs)), {}, target, ["CPUExecutionProvider"])
        assert runtime.error == "" and runtime.nodes > 0, name
        if name.startswith(STILL_UNRANKED[target]):
            assert AT_RUN_TIME[target] in {d.code for d in runtime.violations}, name
        else:
            assert runtime.ok, (name, [describe(d) for d in runtime.violations[:3]])
