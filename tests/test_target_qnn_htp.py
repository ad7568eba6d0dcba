"""``--target qnn-htp`` on the kinds Qualcomm's HTP refuses (tests/htp_cases.py): each is
legalized to rank <= 5 with the exact shapes asserted here and checked on onnxruntime's CPU
EP (the pipeline's own check); the backend's rules (rules/backends.toml, its probed table
rules/qnn_htp.toml) refuse each original and nothing afterwards. Where ``onnxruntime-qnn``
is installed (the ``qnn`` extra), the HTP itself judges: with CPU fallback off it refuses
each original and takes each result whole, and ``--provider qnn`` compares the result on
the HTP with the original on the CPU."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from helpers import cli_in_process
from htp_cases import CASES, KINDS, rank6_input
from needs import require
from onnx import TensorProto, helper

import legalizer
from legalizer.importers.onnx import import_model
from legalizer.numeric.runtimes import QNN_TOLERANCE
from legalizer.passes import PassContext, PassManager, dead_code_elimination, fold_ranks, fold_transposes
from legalizer.passes.fold_ranks import _block_swaps, _transpose_groups

RNG = np.random.default_rng(0)

# The ranks each kind reaches before and the shapes of its legal form's ops (op -> result shapes).
SHAPES = {
    # [2,2,4,2,4,4] by (0,1,3,2,4,5): dims 0-1 and 4-5 stay together
    "window_partition": {"Transpose": [(4, 2, 4, 16)], "Add": [(8, 64)]},
    "transpose_chain": {"Transpose": [(5, 4, 3, 2), (2, 5, 2, 2, 3)], "Relu": [(120,)]},
    # each operand copied, one run of broadcast dims at a time at rank 3, then one Add at rank 1
    "two_sided_broadcast": {"Add": [(720,)], "Expand": [(2, 5, 12), (30, 2, 4), (240, 3, 1),
                                                      (1, 2, 30), (10, 3, 6), (60, 4, 3)]},
    "expand_chain": {"Expand": [(2, 2, 3, 4, 5)], "Mul": [(2, 2, 3, 4, 5)], "Sigmoid": [(2, 2, 3, 4, 5)]},
    "low_rank_operand": {"Mul": [(12, 2, 20)], "Add": [(12, 2, 20)]},
}


def _feeds(proto):
    return {i.name: RNG.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
            for i in proto.graph.input}


def _cpu(proto, feeds):
    return ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def _legalize(tmp_path, name, *extra):
    src = tmp_path / f"{name}.onnx"
    onnx.save(CASES[name](), src)
    out, rep = tmp_path / f"{name}.qnn.onnx", tmp_path / f"{name}.json"
    code, text, err = cli_in_process(src, "--target", "qnn-htp", "-o", out, "--report", rep, *extra)
    return code, text + err, out, rep


def _ranks(proto):
    inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=True)
    return {v.name: len(v.type.tensor_type.shape.dim) for v in
            list(inferred.graph.value_info) + list(inferred.graph.output) + list(inferred.graph.input)}


@pytest.mark.parametrize("name", sorted(KINDS))
def test_each_kind_is_legal_for_htp_at_rank_5_and_computes_the_same(tmp_path, name):
    code, out, path, rep = _legalize(tmp_path, name)
    assert code == 0, out
    original, legal = CASES[name](), onnx.load(str(path))
    assert max(_ranks(original).values()) >= 6
    assert max(_ranks(legal).values()) <= 5
    got = {}
    m = import_model(legal)
    for n in m.graph.ops():
        got.setdefault(n.op, []).append(tuple(n.outputs[0].type.shape))
    for op, shapes in SHAPES[name].items():
        assert sorted(got[op]) == sorted(shapes), (op, got)
    feeds = _feeds(original)
    for a, b in zip(_cpu(legal, feeds), _cpu(original, feeds)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    rules = json.loads(rep.read_text())["target_rules"]
    assert rules["profile"]["backend"] == "QNN HTP" and rules["profile"]["max_rank"] == 5
    assert rules["refused_before"] and rules["refused_after"] == []


def test_the_rules_name_the_refused_ops_in_the_backends_words(tmp_path):
    _, _, _, rep = _legalize(tmp_path, "window_partition")
    before = {r["node"]: r["reasons"] for r in json.loads(rep.read_text())["target_rules"]["refused_before"]}
    # (the probed table's words for a rank-6 Add and Transpose; the node is this model's)
    assert before["bias_add"] == ["QNN.backendValidateOpConfig() failed for node `bias_add` of type"
                                  " `ElementWiseAdd` with error code 3110"]
    assert before["windows"] == ["QNN.backendValidateOpConfig() failed for node `windows` of type"
                                 " `Transpose` with error code 3110"]
    assert set(before) == {"to6", "windows", "bias_add", "back"}  # (each has a rank-6 operand or result)


@pytest.mark.parametrize("target,limit", [("qnn-htp", 5), ("litert-gpu", 4), ("ethos-u55", 4)])
def test_an_interface_over_the_rank_limit_is_refused_naming_it(tmp_path, target, limit):
    src, out = tmp_path / "r6.onnx", tmp_path / "out.onnx"
    onnx.save(rank6_input(), src)
    code, text, err = cli_in_process(src, "--target", target, "-o", out)
    assert code == 2
    assert err.strip().splitlines() == [f"legalize: error: target '{target}' takes rank <= {limit}, and no legal"
                                        " form keeps the model's interface: input 'x' has rank 6, output 'y' has rank 6"]
    assert not out.exists()


def test_a_rank5_input_is_not_made_worse_for_vela_legacy_core(tmp_path):
    """It was: one CPU op became three (the fold's reshapes around a rank-5 interface)."""
    g = helper.make_graph([helper.make_node("Add", ["x", "c"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3, 4, 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 3, 4, 5])],
                          [onnx.numpy_helper.from_array(np.ones([5], np.float32), "c")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    src, out = tmp_path / "r5.onnx", tmp_path / "out.onnx"
    onnx.save(m, src)
    code, _, err = cli_in_process(src, "--target", "ethos-u55", "-o", out)
    assert code == 2 and "input 'x' has rank 5, output 'y' has rank 5" in err and not out.exists()
    # a target that takes rank 5 takes it as it is
    code, text, err = cli_in_process(src, "--target", "qnn-htp", "-o", out, "--report", tmp_path / "r.json")
    assert code == 0, text + err
    assert [n.op_type for n in onnx.load(str(out)).graph.node] == ["Add"]


def test_a_transpose_with_no_dims_kept_together_becomes_a_chain_within_the_limit():
    perm = [1, 3, 5, 0, 2, 4]
    groups, gperm = _transpose_groups([2, 3, 4, 5, 6, 7], perm)
    assert groups == [[0], [1], [2], [3], [4], [5]] and gperm == perm
    steps = _block_swaps(gperm, 4)
    assert len(steps) == 3  # 3, 5 and 1 brought forward in turn (0, 2, 4 then already in order)
    g = helper.make_graph([helper.make_node("Transpose", ["x"], ["t"], perm=perm),
                           helper.make_node("Relu", ["t"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4, 5, 6, 7])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 5, 7, 2, 4, 6])])
    proto = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m = import_model(proto)
    PassManager([fold_transposes, fold_ranks, dead_code_elimination]).run(m.graph, PassContext(max_rank=4))
    out = legalizer.to_onnx(m)
    ts = [n for n in m.graph.ops() if n.op == "Transpose"]
    assert len(ts) == 3 and all(len(t.outputs[0].type.shape) <= 4 for t in ts)
    feeds = _feeds(proto)
    np.testing.assert_array_equal(_cpu(out, feeds)[0], _cpu(proto, feeds)[0])


def test_provider_qnn_without_the_extra_names_it(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "onnxruntime_qnn", None)  # (an import of it fails)
    src = tmp_path / "m.onnx"
    onnx.save(CASES["rank4_already"](), src)
    code, text, err = cli_in_process(src, "--target", "qnn-htp", "-o", tmp_path / "o.onnx", "--provider", "qnn")
    assert code == 2
    assert err.strip().splitlines()[-1] == ("legalize: error: --provider qnn needs onnxruntime's QNN execution"
                                            " provider: pip install 'legalizer[qnn]'")


# -- on the HTP --------------------------------------------------------------------------

@pytest.fixture
def htp():
    require("qnn")
    from legalizer.numeric import qnn_ep

    return qnn_ep


@pytest.mark.parametrize("name", sorted(KINDS))
def test_htp_refuses_each_original_and_takes_the_result_whole(htp, tmp_path, name):
    original = CASES[name]()
    with pytest.raises(Exception, match="assigned to the default CPU EP|Failed to finalize"):
        htp.qnn_session(original.SerializeToString(), quiet=True)
    code, out, path, _ = _legalize(tmp_path, name)
    assert code == 0, out
    feeds = _feeds(original)
    got = htp.qnn_session(str(path), quiet=True).run(None, feeds)  # CPU fallback off: whole, or it raises
    for a, b in zip(got, _cpu(original, feeds)):
        np.testing.assert_allclose(a, b, rtol=QNN_TOLERANCE[0], atol=QNN_TOLERANCE[1] * 10)


@pytest.mark.parametrize("name", sorted(CASES))
def test_provider_qnn_checks_the_result_on_htp_against_the_original_on_the_cpu(htp, tmp_path, name):
    code, out, path, rep = _legalize(tmp_path, name, "--provider", "qnn")
    assert code == 0, out
    check = json.loads(rep.read_text())["check"]
    assert check["ok"] and check["provider"] == "QNNExecutionProvider"


def test_a_model_htp_already_takes_stays_placed_and_equal(htp, tmp_path):
    code, out, path, _ = _legalize(tmp_path, "rank4_already")
    assert code == 0, out
    original, legal = CASES["rank4_already"](), onnx.load(str(path))
    assert [n.op_type for n in legal.graph.node] == [n.op_type for n in original.graph.node]
    feeds = _feeds(original)
    a = htp.qnn_session(original.SerializeToString(), quiet=True).run(None, feeds)[0]
    b = htp.qnn_session(str(path), quiet=True).run(None, feeds)[0]
    np.testing.assert_array_equal(a, b)
