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
from htp_cases import CASES, KINDS, MATMULS, rank6_input
from needs import require
from onnx import TensorProto, helper

import legalizer
from legalizer.kinds.onnx.importer import import_model
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
    # each acts along one merged axis, the dims before and after it merged
    "axis_ops_rank6": {"Add": [(12, 64)], "Softmax": [(96, 8)], "Slice": [(12, 4, 8)], "ReduceMean": [(12, 1, 8)],
                       "Concat": [(12, 5, 8)]},
    # FullyConnected's rows; the batch dims of the rank-6 scores merged (the 1 gone)
    "matmul_weights_rank5": {"MatMul": [(24, 6)]},
    "matmul_rank6": {"MatMul": [(12, 4, 4)]},
    # the region below rank 5: [2*3*4*5, 6] (the constant broadcasts along the last dim only)
    "tanh_rank5": {"Tanh": [(120, 6)], "Max": [(120, 6)]},
}


def _feeds(proto):
    out = {}
    for i in proto.graph.input:
        t = i.type.tensor_type
        shape = [d.dim_value for d in t.shape.dim]
        out[i.name] = RNG.integers(0, 2, shape).astype(np.int64) if t.elem_type == TensorProto.INT64 else \
            RNG.standard_normal(shape).astype(np.float32)
    return out


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


@pytest.mark.parametrize("name", sorted(KINDS) + sorted(MATMULS))
def test_each_kind_is_legal_for_htp_at_rank_5_and_computes_the_same(tmp_path, name):
    code, out, path, rep = _legalize(tmp_path, name)
    assert code == 0, out
    original, legal = CASES[name](), onnx.load(str(path))
    assert max(_ranks(original).values()) >= (5 if name in MATMULS else 6)
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


def _int8(model):
    """``model`` computing in int8: its graph's inputs, outputs and constants retyped."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for v in [*m.graph.input, *m.graph.output]:
        v.type.tensor_type.elem_type = TensorProto.INT8
    for i, t in enumerate(m.graph.initializer):
        m.graph.initializer[i].CopyFrom(
            onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(t).astype(np.int8), t.name))
    return m


@pytest.mark.parametrize("target,limit", [("qnn-htp", 5), ("litert-gpu", 4), ("ethos-u55", 4)])
def test_an_interface_over_the_rank_limit_is_refused_naming_it(tmp_path, target, limit):
    src, out = tmp_path / "r6.onnx", tmp_path / "out.onnx"
    # (int8 for Vela, which refuses a float model up front: quantize it first)
    onnx.save(_int8(rank6_input()) if target.startswith("ethos") else rank6_input(), src)
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
    onnx.save(_int8(m), tmp_path / "r5_int8.onnx")  # (Vela refuses a float model before anything else)
    code, _, err = cli_in_process(tmp_path / "r5_int8.onnx", "--target", "ethos-u55", "-o", out)
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


@pytest.mark.parametrize("name", sorted(KINDS) + sorted(MATMULS))
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


def test_a_matmul_by_a_constant_matrix_is_judged_as_htps_fully_connected(tmp_path):
    _, _, _, rep = _legalize(tmp_path, "matmul_weights_rank5")
    rules = json.loads(rep.read_text())["target_rules"]
    assert [(r["node"], r["reasons"]) for r in rules["refused_before"]] == [
        ("fc", ["QNN.backendValidateOpConfig() failed for node `fc` of type `FullyConnected` with error code 3110"])]
    assert rules["refused_after"] == []


def _dynamic_window_partition():
    """window_partition with a symbolic batch: its Reshape targets computed from Shape."""
    from onnx import numpy_helper

    ints = lambda n, v: numpy_helper.from_array(np.asarray(v, np.int64), n)  # noqa: E731
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Concat", ["n", "rest6"], ["s6"], axis=0), helper.make_node("Reshape", ["x", "s6"], ["v6"]),
             helper.make_node("Transpose", ["v6"], ["t6"], perm=[0, 1, 3, 2, 4, 5]),
             helper.make_node("Add", ["t6", "bias"], ["a6"]),
             helper.make_node("Concat", ["n", "rest3"], ["s3"], axis=0), helper.make_node("Reshape", ["a6", "s3"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8, 8, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 64, 4])],
                          [ints("zero", [0]), ints("rest6", [2, 4, 2, 4, 4]), ints("rest3", [64, 4]),
                           numpy_helper.from_array(RNG.standard_normal([4, 4, 4]).astype(np.float32), "bias")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("bind,batch", [((), 1), (("--dim", "batch=3"), 3)])
def test_dynamic_dims_are_made_static_at_the_bound_size_else_1(tmp_path, bind, batch):
    src, out, rep = tmp_path / "dyn.onnx", tmp_path / "out.onnx", tmp_path / "r.json"
    onnx.save(_dynamic_window_partition(), src)
    code, text, err = cli_in_process(src, "--target", "qnn-htp", "-o", out, "--report", rep, *bind)
    assert code == 0, text + err
    assert f"legalize: warning: shapes made static at batch={batch}: 1 input dims, 2 shape values folded" in err
    legal = onnx.load(str(out))
    assert [d.dim_value for d in legal.graph.input[0].type.tensor_type.shape.dim] == [batch, 8, 8, 4]
    assert "Shape" not in {n.op_type for n in legal.graph.node} and max(_ranks(legal).values()) <= 5
    report = json.loads(rep.read_text())
    assert report["target_rules"]["refused_after"] == []
    assert [b["dims"] for b in report["check"]["bindings"]] == [{"batch": batch}]


def test_a_boolean_mask_gathered_at_rank_5_is_gathered_as_int32_at_rank_2(tmp_path):
    code, out, path, rep = _legalize(tmp_path, "mask_gathernd")
    assert code == 0, out
    m = import_model(onnx.load(str(path)))
    (g,) = [n for n in m.graph.ops() if n.op == "GatherND"]
    assert g.inputs[0].type.dtype == "int32" and g.inputs[1].type.shape == (8, 2) and g.outputs[0].type.shape == (8,)
    assert [n.op for n in m.graph.ops()] == ["Cast", "Cast", "GatherND", "Cast", "Reshape", "Where"]
    rules = json.loads(rep.read_text())["target_rules"]
    assert [r["node"] for r in rules["refused_before"]] == ["expand_mask"] and rules["refused_after"] == []
    original = CASES["mask_gathernd"]()
    feeds = _feeds(original)
    np.testing.assert_array_equal(_cpu(onnx.load(str(path)), feeds)[0], _cpu(original, feeds)[0])


def test_htp_takes_the_mask_gathered_as_int32(htp, tmp_path):
    original = CASES["mask_gathernd"]()
    with pytest.raises(Exception, match="assigned to the default CPU EP"):
        htp.qnn_session(original.SerializeToString(), quiet=True)
    code, out, path, _ = _legalize(tmp_path, "mask_gathernd")
    assert code == 0, out
    feeds = _feeds(original)
    got = htp.qnn_session(str(path), quiet=True).run(None, feeds)[0]
    np.testing.assert_allclose(got, _cpu(original, feeds)[0], rtol=QNN_TOLERANCE[0], atol=QNN_TOLERANCE[1])


def test_an_rms_norm_squares_by_mul(tmp_path):
    code, out, path, _ = _legalize(tmp_path, "rms_norm")
    assert code == 0, out
    legal = onnx.load(str(path))
    assert [n.op_type for n in legal.graph.node] == ["Mul", "ReduceMean", "Add", "Sqrt", "Reciprocal", "Mul", "Mul"]
    assert list(legal.graph.node[0].input) == ["x", "x"]
    original = CASES["rms_norm"]()
    feeds = _feeds(original)
    np.testing.assert_array_equal(_cpu(legal, feeds)[0], _cpu(original, feeds)[0])


def test_htp_fails_the_fused_rms_norm_and_runs_the_rewritten_one(htp, tmp_path):
    original = CASES["rms_norm"]()
    with pytest.raises(Exception, match="QNN_COMMON_ERROR_MEM_ALLOC"):
        htp.qnn_session(original.SerializeToString(), quiet=True)
    code, out, path, _ = _legalize(tmp_path, "rms_norm")
    assert code == 0, out
    feeds = _feeds(original)
    got = htp.qnn_session(str(path), quiet=True).run(None, feeds)[0]
    np.testing.assert_allclose(got, _cpu(original, feeds)[0], rtol=QNN_TOLERANCE[0], atol=QNN_TOLERANCE[1])


@pytest.mark.parametrize("dtype,rank,refused", [
    (TensorProto.FLOAT, 5, False),  # float32 Add: ranks 1-5
    (TensorProto.INT64, 5, True),  # int64 Add: ranks 1-4 (rules/qnn_htp.toml's "Add:same@int64")
    (TensorProto.INT64, 4, False),
    (TensorProto.INT32, 5, False)])
def test_the_probed_table_judges_an_op_in_its_element_type(dtype, rank, refused):
    """HTP's verdict differs by type; an op is judged by its row in the type it computes in."""
    from legalizer.targets import target

    shape = [2, 3, 4, 2, 3][:rank]
    g = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"], name="add")], "g",
                          [helper.make_tensor_value_info(n, dtype, shape) for n in ("a", "b")],
                          [helper.make_tensor_value_info("y", dtype, shape)])
    m = import_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    add = m.graph.ops()[0]
    spec = target("qnn-htp")
    import tomllib

    from legalizer.oprules import table_text

    row = tomllib.loads(table_text("qnn_htp.toml"))["Add:same" + ("" if dtype == TensorProto.FLOAT else
                                                                  "@" + helper.tensor_dtype_to_np_dtype(dtype).name)]
    assert (rank not in row["takes"]) is refused
    assert spec.refusals(add) == ([row["refused"][str(rank)].replace("{node}", "add")] if refused else [])
    assert spec.refused_for_rank(add) is refused  # (and taken at rank 4: a fold helps it)


def test_an_op_refused_at_every_rank_is_not_one_a_fold_helps():
    """Erf: HTP takes it at no rank, so it is refused as an op, and no region is folded for it."""
    from legalizer.targets import target

    g = helper.make_graph([helper.make_node("Erf", ["x"], ["y"], name="erf")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4, 2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4, 2, 3])])
    m = import_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    erf = m.graph.ops()[0]
    assert target("qnn-htp").refusals(erf) and not target("qnn-htp").refused_for_rank(erf)
    legal = legalizer.legalize(m, "qnn-htp")
    assert [(n.op, tuple(n.outputs[0].type.shape)) for n in legal.graph.ops()] == [("Erf", (2, 3, 4, 2, 3))]


def _paddle_like(tmp_path):
    """As paddle2onnx writes a classifier's head: x [-1, 4, '?', '?'] pooled, then flattened
    by a Reshape to a shape computed from Shape through Cast, Slice and Concat, with the
    constants as Constant ops."""
    def const_op(name, values):
        return helper.make_node("Constant", [], [name], value=onnx.numpy_helper.from_array(np.array(values, np.int64)))

    nodes = [helper.make_node("GlobalAveragePool", ["x"], ["p"]),
             helper.make_node("Shape", ["p"], ["s"]), helper.make_node("Cast", ["s"], ["s32"], to=TensorProto.INT32),
             const_op("st", [0]), const_op("en", [1]), const_op("ax", [0]),
             helper.make_node("Slice", ["s32", "st", "en", "ax"], ["n32"]),
             helper.make_node("Cast", ["n32"], ["n"], to=TensorProto.INT64), const_op("rest", [-1]),
             helper.make_node("Concat", ["n", "rest"], ["shape"], axis=0),
             helper.make_node("Reshape", ["p", "shape"], ["flat"]), helper.make_node("Relu", ["flat"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 4, "?", "?"])
    g = helper.make_graph(nodes, "head", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, "?"])])
    src = tmp_path / "head.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), src)
    return src


def test_unnamed_and_minus_one_dims_are_bound_and_paddles_shape_arithmetic_folded(tmp_path):
    """-1 is a dynamic dim too, each '?' is a dim of its own (bound by --input-shape), and
    shape arithmetic on Constant ops folds: every shape static, nothing left off the HTP."""
    src, out, rep = _paddle_like(tmp_path), tmp_path / "head.qnn.onnx", tmp_path / "r.json"
    code, text, err = cli_in_process(src, "--target", "qnn-htp", "-o", out, "--report", rep,
                                     "--input-shape", "x:1x4x6x8")
    assert code == 0, text + err
    report = json.loads(rep.read_text())
    assert "shapes made static at x[0]=1, x[2]=6, x[3]=8: 3 input dims, 1 shape values folded" in report["warnings"]
    assert report["target_rules"]["refused_after"] == []
    legal = import_model(onnx.load(str(out)))
    assert [tuple(n.outputs[0].type.shape) for n in legal.graph.ops() if n.op in ("Reshape", "Relu")] == [(1, 4), (1, 4)]


def _gelu(tmp_path, fused=True):
    x = "x"
    nodes = [helper.make_node("Div", [x, "r2"], ["d"]), helper.make_node("Erf", ["d"], ["e"], name="erf"),
             helper.make_node("Add", ["e", "one"], ["a"]), helper.make_node("Mul", [x, "a"], ["m"]),
             helper.make_node("Mul", ["m", "half"], ["y"])] if fused else \
        [helper.make_node("Erf", [x], ["e"], name="erf"), helper.make_node("Relu", ["e"], ["y"])]
    inits = [onnx.numpy_helper.from_array(np.asarray(v, np.float32), n)
             for n, v in (("r2", np.sqrt(2.0)), ("one", 1.0), ("half", 0.5))] if fused else []
    g = helper.make_graph(nodes, "gelu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8, 16])], inits)
    src = tmp_path / f"gelu{int(fused)}.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), src)
    return src


@pytest.mark.parametrize("fused", [True, False])
def test_an_erf_is_judged_in_the_gelu_onnxruntime_fuses(tmp_path, fused):
    """The QNN EP has no Erf of its own but takes the Gelu onnxruntime fuses (probed as
    "Erf:gelu"): a transformer's Gelu is taken, an Erf alone is refused in the EP's words."""
    out, rep = tmp_path / "o.onnx", tmp_path / "r.json"
    code, text, err = cli_in_process(_gelu(tmp_path, fused), "--target", "qnn-htp", "-o", out, "--report", rep, "-q")
    refused = json.loads(rep.read_text())["target_rules"]["refused_after"]
    if fused:
        assert code == 0 and refused == [], text + err
    else:
        assert code == 1 and [r["node"] for r in refused] == ["erf"] and not out.exists()
        assert refused[0]["reasons"] == ["This session contains graph nodes that are assigned to the default CPU EP,"
                                         " but fallback to CPU EP has been explicitly disabled by the user."]


def test_htp_takes_the_gelu_whole_and_refuses_the_lone_erf(htp, tmp_path):
    feeds = {"x": RNG.standard_normal((2, 8, 16)).astype(np.float32)}
    got = htp.qnn_session(str(_gelu(tmp_path)), quiet=True).run(None, feeds)[0]  # whole, or it raises
    want = _cpu(onnx.load(str(_gelu(tmp_path))), feeds)[0]
    # (HTP's fused Gelu in fp16 is off by up to 1.4e-3 near 0: more than --provider qnn's atol)
    np.testing.assert_allclose(got, want, rtol=QNN_TOLERANCE[0], atol=2e-3)
    with pytest.raises(Exception, match="fallback to CPU EP has been explicitly disabled"):
        htp.qnn_session(str(_gelu(tmp_path, fused=False)), quiet=True)
