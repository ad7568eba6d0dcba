"""``--target litert-gpu`` on cases built from the GPU delegate's rules (tests/deploy_cases.py):
each is legalized and checked on LiteRT's CPU kernels (the pipeline's own check); the
delegate's rules (rules/backends.toml) refuse nothing afterwards; and, where LiteRT's GPU
accelerator runs here (WebGPU on Mesa's lavapipe), the original is refused with exactly
the delegate's reasons and the result compiles whole on the GPU and computes what LiteRT's
CPU kernels compute for the original."""

from __future__ import annotations

import json

import numpy as np
import pytest
from deploy_cases import AXIS_CASES, CASES, feeds
from needs import require
from tflite_build import build_tflite, op, tensor

from legalizer.kinds.tflite.importer import load_tflite
from legalizer.passes.deploy_forms import _folded_broadcast
from legalizer.pipeline import RunOptions, run

require("litert", module=True)

from legalizer.numeric import litert_gpu  # noqa: E402
from legalizer.numeric.litert import run_tflite  # noqa: E402

# What the GPU delegate says of each original (ai-edge-litert 2.3.0, WebGPU): {op type: reason}.
REFUSED_BEFORE = {
    "gqa_repeat_kv": {"BROADCAST_TO": "Operation is not supported.",
                      "RESHAPE": "Tensor dimensions must be less than 5. k5"},
    "mask_5d": {"ADD": "Tensor dimensions must be less than 5. s5",
                "RESHAPE": "Tensor dimensions must be less than 5. m5"},
    "mask_5d_broadcast_to": {"ADD": "Tensor dimensions must be less than 5. s5",
                             "BROADCAST_TO": "Operation is not supported.",
                             "RESHAPE": "Tensor dimensions must be less than 5. m5"},
    "expand_dims_mul": {"EXPAND_DIMS": "Operation is not supported."},
    "squeeze_add": {"SQUEEZE": "Operation is not supported."},
    "broadcast_to_add": {"BROADCAST_TO": "Operation is not supported."},
    "broadcast_to_output": {"BROADCAST_TO": "Operation is not supported."},
    "rank5_chain": {"ADD": "Tensor dimensions must be less than 5. x5",
                    "MUL": "Tensor dimensions must be less than 5. a5",
                    "RESHAPE": "Tensor dimensions must be less than 5. p5"},
    "rank5_broadcast_mul": {"MUL": "Tensor dimensions must be less than 5. x5",
                            "RESHAPE": "Tensor dimensions must be less than 5. g5"},
}

# The ops the rules table refuses in each original: (node, op, the first reason).
RANK = "Tensor dimensions must be less than 5."
NO_OP = "Operation is not supported."
RULES_BEFORE = {
    "gqa_repeat_kv": [("k5", "tflite.RESHAPE", RANK), ("kb", "tflite.BROADCAST_TO", NO_OP), ("kr", "tflite.RESHAPE", RANK)],
    "mask_5d": [("s5", "tflite.RESHAPE", RANK), ("m5", "tflite.RESHAPE", RANK), ("y5", "tflite.ADD", RANK),
                ("y", "tflite.RESHAPE", RANK)],
    "expand_dims_mul": [("x3", "tflite.EXPAND_DIMS", NO_OP)],
    "squeeze_add": [("x2", "tflite.SQUEEZE", NO_OP)],
    "broadcast_to_output": [("y", "tflite.BROADCAST_TO", NO_OP)],
    "mixed_rank_3_4": [],
}


def _legalize(tmp_path, name, target="litert-gpu"):
    data, shapes = CASES[name]("float32")
    src = tmp_path / f"{name}.tflite"
    src.write_bytes(data)
    out = tmp_path / f"{name}.legal.tflite"
    report = tmp_path / "report.json"
    res = run(src, RunOptions(target=target, output=out))
    assert res.exit_code == 0, res.report.to_json()
    res.report.write(report)
    return src, out, shapes, json.loads(report.read_text())


@pytest.mark.parametrize("name", sorted(CASES))
def test_legalized_for_the_gpu_checks_equal_and_leaves_nothing_refused(tmp_path, name):
    src, out, shapes, rep = _legalize(tmp_path, name)
    assert rep["check"]["ran"] and rep["check"]["ok"]
    assert rep["target_rules"]["target"] == "litert-gpu"
    assert rep["target_rules"]["profile"]["backend"] == "LiteRT GPU delegate"
    assert rep["target_rules"]["refused_after"] == []
    assert not [w for w in rep["warnings"] if "refuses it" in w]
    if name in RULES_BEFORE:
        assert [(r["node"], r["op"], r["reasons"][0]) for r in rep["target_rules"]["refused_before"]] == \
            RULES_BEFORE[name]
    # Every tensor of the result is at rank <= 4, and no op the delegate lacks is left.
    model = load_tflite(out)
    for node in model.graph.ops():
        assert node.op_type not in ("BROADCAST_TO", "EXPAND_DIMS", "SQUEEZE"), node
        for v in list(node.inputs) + list(node.outputs):
            assert v is None or len(v.type.shape) <= 4, (node, v)


def test_mixed_rank_operands_get_an_explicit_reshape(tmp_path):
    """LiteRT #8980: the classic delegate aligns [4,8,8] from the left onto BHWC; the
    legal form reshapes it to [1,4,8,8] itself."""
    _, out, _, _ = _legalize(tmp_path, "mixed_rank_3_4")
    add, = [n for n in load_tflite(out).graph.ops() if n.op_type == "ADD"]
    assert [tuple(v.type.shape) for v in add.inputs] == [(1, 4, 8, 8), (1, 1, 8, 8)]
    assert add.inputs[0].producer.op_type == "RESHAPE"


def test_gqa_repeat_kv_needs_no_copy(tmp_path):
    """The repeat folds into the MUL's own broadcast: no TILE, no BROADCAST_TO."""
    _, out, _, _ = _legalize(tmp_path, "gqa_repeat_kv")
    ops = sorted(n.op_type for n in load_tflite(out).graph.ops())
    assert ops == ["MUL", "RESHAPE", "RESHAPE", "RESHAPE"]


def test_folded_broadcast_merges_dims_that_broadcast_alike():
    # repeat_kv: [1,2,1,8,16] -> [1,2,4,8,16] is a 3-D tile [2,1,128] x [1,4,1].
    assert _folded_broadcast([1, 2, 1, 8, 16], [1, 2, 4, 8, 16]) == ([2, 1, 128], [1, 4, 1], [2, 4, 128])
    assert _folded_broadcast([4, 1, 8], [2, 4, 8, 8]) == ([1, 4, 1, 8], [2, 1, 8, 1], [2, 4, 8, 8])
    assert _folded_broadcast([1], [3, 5]) == ([1], [15], [15])


def test_an_op_still_refused_is_named_in_the_output_and_the_report(tmp_path):
    """A dynamic batch read through SHAPE: the delegate has no SHAPE, and nothing binds
    the batch, so SHAPE stays; the run says so with the delegate's words."""
    data = build_tflite(
        tensors=[tensor("x", "float32", [1, 4, 8], shape_signature=[-1, 4, 8]), tensor("s", "int32", [3]),
                 tensor("r", "float32", [1, 4, 8], shape_signature=[-1, 4, 8]),
                 tensor("y", "float32", [1, 4, 8], shape_signature=[-1, 4, 8])],
        operators=[op("SHAPE", [0], [1], "ShapeOptions", out_type=2), op("RESHAPE", [0, 1], [2], "ReshapeOptions"),
                   op("ADD", [2, 0], [3], "AddOptions", fused_activation_function=0)],
        inputs=[0], outputs=[3])
    src = tmp_path / "dyn.tflite"
    src.write_bytes(data)
    res = run(src, RunOptions(target="litert-gpu", output=tmp_path / "dyn.legal.tflite"))
    assert res.exit_code == 1 and not (tmp_path / "dyn.legal.tflite").exists()  # not all on the GPU
    res = run(src, RunOptions(target="litert-gpu", output=tmp_path / "dyn.legal.tflite", allow_fallback=True))
    assert res.exit_code == 0
    rules = res.report.to_json()["target_rules"]
    assert [(r["node"], r["op"], r["reasons"]) for r in rules["refused_after"]] == [
        ("s", "tflite.SHAPE", ["Operation is not supported."]),
        ("r", "tflite.RESHAPE", ["Expected 1 runtime input tensor(s), but node has 2 runtime input(s)."])]
    assert "node 's' (tflite.SHAPE): LiteRT GPU delegate refuses it: Operation is not supported." in res.report.warnings
    ok, _ = litert_gpu.gpu_available()
    if ok:  # the delegate itself says the same of the written model
        assert litert_gpu.gpu_compile(str(tmp_path / "dyn.legal.tflite")).refused == {
            "RESHAPE": "Expected 1 runtime input tensor(s), but node has 2 runtime input(s).",
            "SHAPE": "Operation is not supported."}


@pytest.fixture(scope="module")
def gpu():
    require("litert-gpu")


# Compiled whole by the GPU before, and computed wrongly there (constants below rank 4).
WRONG_BEFORE = ("const_matrix_mul", "const_rows_add")


@pytest.mark.parametrize("name", WRONG_BEFORE)
def test_constants_below_rank_4_are_wrong_on_the_gpu_until_made_rank_4(gpu, tmp_path, name):
    src, out, shapes, _ = _legalize(tmp_path, name)
    inputs = feeds(shapes, "float32")
    reference = run_tflite(str(src), inputs)
    before = litert_gpu.gpu_compile(str(src), inputs)
    assert before.ok
    assert float(np.abs(before.outputs["y"] - reference["y"]).max()) > 0.1
    const, = [v for n in load_tflite(out).graph.ops() if n.op_type in ("ADD", "MUL")
              for v in n.inputs if v.producer.kind == "const"]
    assert len(const.type.shape) == 4  # (the legal form's GPU result is compared in the test below)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_gpu_takes_the_whole_legal_graph_and_matches_the_cpu(gpu, tmp_path, name):
    src, out, shapes, _ = _legalize(tmp_path, name)
    before = litert_gpu.gpu_compile(str(src))
    assert before.refused == REFUSED_BEFORE.get(name, {})
    assert before.ok == (name not in REFUSED_BEFORE)
    inputs = feeds(shapes, "float32")
    after = litert_gpu.gpu_compile(str(out), inputs)
    assert after.ok, after.message
    reference = run_tflite(str(src), inputs)  # LiteRT's CPU kernels, on the original
    assert set(after.outputs) == set(reference)
    for key, want in reference.items():
        np.testing.assert_allclose(after.outputs[key], want, rtol=1e-5, atol=1e-5)


def _dynamic(tmp_path, **options):
    from deploy_cases import dynamic_batch_reshape  # noqa: PLC0415
    data, _ = dynamic_batch_reshape("float32")
    src = tmp_path / "dyn_batch.tflite"
    src.write_bytes(data)
    out = tmp_path / "dyn_batch.legal.tflite"
    res = run(src, RunOptions(target="litert-gpu", output=out, **options))
    assert res.exit_code == 0, res.report.to_json()
    return src, out, res.report.to_json()


@pytest.mark.parametrize("options, batch", [({"static": True}, 1), ({"dims": {"x[0]": 3}}, 3)])
def test_static_shapes_fold_the_shape_arithmetic(tmp_path, options, batch):
    """--static (batch 1), or a bound dim: every shape static, SHAPE -> STRIDED_SLICE ->
    PACK folded into the RESHAPE's constant shape, nothing left that the delegate refuses."""
    _, out, rep = _dynamic(tmp_path, **options)
    assert rep["check"]["ok"]
    assert [r["op"] for r in rep["target_rules"]["refused_before"]] == ["tflite.SHAPE", "tflite.RESHAPE"]
    assert rep["target_rules"]["refused_after"] == []
    assert f"shapes made static at x[0]={batch}: 3 tensor shapes, 1 shape values folded" in rep["warnings"]
    graph = load_tflite(out).graph
    assert sorted(n.op_type for n in graph.ops()) == ["ADD", "RESHAPE"]
    assert [tuple(n.output.type.shape) for n in graph.inputs] == [(batch, 4, 8)]
    assert [tuple(n.inputs[0].type.shape) for n in graph.outputs] == [(batch, 32)]


def test_static_is_for_tflite(tmp_path):
    from legalizer.errors import UsageError  # noqa: PLC0415
    import onnx  # noqa: PLC0415
    from onnx import TensorProto, helper  # noqa: PLC0415
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    with pytest.raises(UsageError, match=r"--static makes a TFLite model's shapes static; .*m\.onnx is onnx"):
        run(path, RunOptions(target="litert-gpu", output=tmp_path / "m.legal.onnx", static=True))


def test_the_gpu_takes_the_statically_shaped_model(gpu, tmp_path):
    src, out, _ = _dynamic(tmp_path, static=True)
    before = litert_gpu.gpu_compile(str(src))
    assert before.refused == {litert_gpu.DYNAMIC_KEY: "Attempting to use a delegate that only supports static-sized"
                                                      " tensors with a graph that has dynamic-sized tensors"}
    x = np.random.default_rng(1).standard_normal((1, 4, 8)).astype(np.float32)
    after = litert_gpu.gpu_compile(str(out), {"x": x})
    assert after.ok, after.message
    np.testing.assert_allclose(after.outputs["y"], run_tflite(str(src), {"x": x})["y"], rtol=1e-5, atol=1e-5)


def test_pruned_weights_are_densified_at_compile_time(tmp_path):
    """DENSIFY of a sparse constant (MediaPipe's pose and full-range face detectors): the
    dense constant, as LiteRT's kernel makes it; the check compares on LiteRT."""
    import tflite_build as tb  # noqa: PLC0415
    src = tmp_path / "sparse.tflite"
    src.write_bytes(tb.sparse_model())
    out = tmp_path / "sparse.legal.tflite"
    res = run(src, RunOptions(target="litert-gpu", output=out))
    rep = res.report.to_json()
    assert res.exit_code == 0 and rep["check"]["ok"], rep
    assert [r["op"] for r in rep["target_rules"]["refused_before"]] == ["tflite.DENSIFY"]  # (w: FC reads it sparse)
    assert rep["target_rules"]["refused_after"] == []
    graph = load_tflite(out).graph
    assert "DENSIFY" not in {n.op_type for n in graph.ops()}
    np.testing.assert_array_equal(
        [n for n in graph.ops() if n.op_type == "FULLY_CONNECTED"][0].inputs[1].producer.data.array, tb.SPARSE_W)
    ok, _ = litert_gpu.gpu_available()
    if ok:
        assert litert_gpu.gpu_compile(str(src)).refused == {"DENSIFY": "Operation is not supported."}
        feeds = {"x": np.ones((2, 4), np.float32), "x2": np.arange(8, dtype=np.float32)}
        after = litert_gpu.gpu_compile(str(out), feeds)
        assert after.ok, after.message
        for key, want in run_tflite(str(src), feeds).items():
            np.testing.assert_allclose(after.outputs[key], want, rtol=1e-5, atol=1e-5)


def _two_dynamic(tmp_path):
    """z = x + y, both [batch, 4] with their own dynamic batch: a runtime constraint
    (x[0] and y[0] broadcast) until --static makes both 1."""
    t = [tensor("x", "float32", [1, 4], shape_signature=[-1, 4]), tensor("y", "float32", [1, 4], shape_signature=[-1, 4]),
         tensor("z", "float32", [1, 4], shape_signature=[-1, 4])]
    src = tmp_path / "two.tflite"
    src.write_bytes(build_tflite(t, [op("ADD", [0, 1], [2], "AddOptions", fused_activation_function=0)], [0, 1], [2]))
    return src


@pytest.mark.parametrize("static, constraints", [(False, ["x[0] == y[0] or x[0] == 1 or y[0] == 1"]), (True, [])])
def test_static_drops_the_constraints_on_the_dims_it_made_static(tmp_path, static, constraints):
    src = _two_dynamic(tmp_path)
    res = run(src, RunOptions(target="litert-gpu", output=tmp_path / "two.legal.tflite", static=static))
    assert res.exit_code == 0, res.report.to_json()
    rep = res.report.to_json()
    assert [c["text"] for c in rep["constraints"]] == constraints
    assert rep["check"]["ok"]


# Ops along axes at rank 5 (tests/deploy_cases.py's AXIS_CASES): what the delegate says of each original.
AXIS_REFUSED_BEFORE = {
    "gqa_strided_slice": {"RESHAPE": "Tensor dimensions must be less than 5. half",
                          "STRIDED_SLICE": "Output shape mismatch"},
    "softmax_mask_5d": {"ADD": "Tensor dimensions must be less than 5. s5",
                        "RESHAPE": "Tensor dimensions must be less than 5. m5",
                        "SOFTMAX": "Tensor dimensions must be less than 5. y5"},
}
AXIS_SHAPES = {"gqa_strided_slice": {"STRIDED_SLICE": [(2, 2, 128)]}, "softmax_mask_5d": {"SOFTMAX": [(64, 8)]}}


def _legalize_axis(tmp_path, name):
    data, shapes = AXIS_CASES[name]("float32")
    src, out = tmp_path / f"{name}.tflite", tmp_path / f"{name}.legal.tflite"
    src.write_bytes(data)
    res = run(src, RunOptions(target="litert-gpu", output=out))
    assert res.exit_code == 0, res.report.to_json()
    return src, out, shapes, res.report


@pytest.mark.parametrize("name", sorted(AXIS_CASES))
def test_ops_along_an_axis_fold_to_the_gpus_rank(tmp_path, name):
    src, out, shapes, report = _legalize_axis(tmp_path, name)
    assert report.target_rules["refused_before"] and report.target_rules["refused_after"] == []
    got = {}
    for node in load_tflite(out).graph.ops():
        got.setdefault(node.op_type, []).append(tuple(node.outputs[0].type.shape))
        assert all(v is None or len(v.type.shape) <= 4 for v in list(node.inputs) + list(node.outputs)), node
    for op_type, shapes_ in AXIS_SHAPES[name].items():
        assert got[op_type] == shapes_


@pytest.mark.parametrize("name", sorted(AXIS_CASES))
def test_the_gpu_takes_the_folded_axis_ops_whole_and_matches_the_cpu(gpu, tmp_path, name):
    src, out, shapes, _ = _legalize_axis(tmp_path, name)
    before = litert_gpu.gpu_compile(str(src))
    assert not before.ok and before.refused == AXIS_REFUSED_BEFORE[name]
    inputs = feeds(shapes, "float32")
    after = litert_gpu.gpu_compile(str(out), inputs)
    assert after.ok, after.message
    reference = run_tflite(str(src), inputs)
    for key, want in reference.items():
        np.testing.assert_allclose(after.outputs[key], want, rtol=1e-5, atol=1e-5)
