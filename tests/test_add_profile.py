"""Adding a deployment target with a profile of its own is one record (issue 23, item 2;
docs/profiles-and-targets.md): a target whose backend takes rank <= 4, as LiteRT's GPU
delegate does, registered here at run time with nothing else changed. The verifier
reports its rank limit in its own words, the existing passes fold a rank-5 chain within
it (checked on onnxruntime), and the command line's choices, help and errors name it."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from helpers import cli_in_process, op_model, save
from legalizer.targets import TARGETS, Target, register_target, target
from legalizer.verifier import PROFILE_RECORDS, PROFILES, Profile, register_profile

# The new code of the demonstration: these two records, nothing more.
RANK4 = Profile("rank4", "also every operand at rank <= 4, as LiteRT's GPU delegate", equal_ranks=True,
                unknown_ranks=False, max_rank=4,
                messages={"rank-limit": "{value} has rank {rank}; the GPU delegate takes rank <= {limit}"})
GPU4 = Target("gpu4", RANK4, target("tosa").passes, "a GPU that takes rank <= 4")


@pytest.fixture
def gpu4():
    register_target(GPU4)  # and its profile
    yield GPU4
    del TARGETS["gpu4"], PROFILE_RECORDS["rank4"]


def rank5_chain(path):
    """x (2x3x4) seen at rank 5, scaled there, and read back at rank 2."""
    shape5 = numpy_helper.from_array(np.array([1, 2, 3, 4, 1]), "shape5")
    shape2 = numpy_helper.from_array(np.array([6, 4]), "shape2")
    scale = numpy_helper.from_array(np.linspace(0.5, 2.0, 8, dtype=np.float32).reshape(1, 2, 1, 4, 1), "scale")
    nodes = [helper.make_node("Reshape", ["x", "shape5"], ["x5"], name="to5"),
             helper.make_node("Mul", ["x5", "scale"], ["m"], name="mul"),
             helper.make_node("Reshape", ["m", "shape2"], ["y"], name="to2")]
    graph = helper.make_graph(nodes, "rank5", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6, 4])], [shape5, shape2, scale])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_a_registered_target_brings_its_profile_and_codes(gpu4):
    assert PROFILE_RECORDS["rank4"] is RANK4 and "rank4" in PROFILES and TARGETS["gpu4"] is GPU4
    assert RANK4.codes[-3:] == ("operand-rank-mismatch", "unranked-operand", "rank-limit")
    assert RANK4.broadcasting == "size-1" and GPU4.rank_limit() == 4  # the profile's limit, which rank folding keeps
    register_target(GPU4)  # the same record again: nothing changes
    with pytest.raises(ValueError, match="profile 'rank4' is already registered, as another record"):
        register_profile(Profile("rank4", "another"))
    with pytest.raises(ValueError, match="target 'tosa' is already registered, as another record"):
        register_target(Target("tosa", "mlir", ()))


def test_every_code_a_profile_reports_has_its_wording(gpu4):
    from legalizer.verifier.diagnostics import MESSAGES

    codes = {c for p in PROFILE_RECORDS.values() for c in p.codes}
    assert codes | {"tosa-level"} == set(MESSAGES)  # (tosa-level: the emitted TOSA's level check, not a profile's)
    assert PROFILE_RECORDS["mlir"].codes == ("incompatible-operands", "result-rank-mismatch", "result-incompatible",
                                             "not-unidirectional", "shape-mismatch", "legacy-axis")
    assert PROFILE_RECORDS["strict"].codes[-1] == "result-dynamic-to-static"
    assert PROFILE_RECORDS["xla"].codes[-2:] == ("implicit-broadcast", "unranked-operand")


def test_the_profile_reports_a_rank_5_operand_in_its_words(gpu4, tmp_path):
    model = rank5_chain(tmp_path / "rank5.onnx")
    code, out, err = cli_in_process(model, "--verify-only", "--profile", "rank4", "--report", tmp_path / "r.json")
    assert code == 1 and err == "", err
    assert ("error: node 'mul': 'Mul' op operand #0 has rank 5; the GPU delegate takes rank <= 4:"
            " ('1x2x3x4x1', '1x2x1x4x1') -> '1x2x3x4x1'") in out.splitlines()
    assert out.splitlines()[-1] == f"{model}: 1 violation under 'rank4'"
    rep = json.loads((tmp_path / "r.json").read_text())
    assert [(v["code"], v["node"], v["stage"]) for v in rep["violations"]] == [("rank-limit", "mul", "input")]
    # under the profiles without a limit, the chain is legal
    assert cli_in_process(model, "--verify-only", "--profile", "tosa", "-q")[0] == 0


def test_the_target_folds_the_chain_within_its_rank(gpu4, tmp_path):
    model = rank5_chain(tmp_path / "rank5.onnx")
    out_path = tmp_path / "rank5.legal.onnx"
    code, out, err = cli_in_process(model, out_path, "--target", "gpu4", "-q", "--report", tmp_path / "r.json")
    assert code == 0, out + err
    assert out.splitlines()[-1] == f"{model}: legalized for 'gpu4' -> {out_path}, outputs match on CPUExecutionProvider"
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["target"] == "gpu4" and rep["violations"] == [] and rep["check"]["ok"] is True
    legal = onnx.shape_inference.infer_shapes(onnx.load(str(out_path)))
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in [*legal.graph.input, *legal.graph.value_info, *legal.graph.output]}
    shapes.update({t.name: list(t.dims) for t in legal.graph.initializer})
    assert max(len(s) for s in shapes.values()) <= 4, shapes
    # the Mul runs at the rank its broadcasting needs, on x itself: 1x2x3x4x1 * 1x2x1x4x1 -> 2x3x4 * 2x1x4
    mul = next(n for n in legal.graph.node if n.op_type == "Mul")
    assert [shapes[v] for v in [*mul.input, *mul.output]] == [[2, 3, 4], [2, 1, 4], [2, 3, 4]]
    import onnxruntime as ort

    x = np.random.default_rng(0).standard_normal([2, 3, 4]).astype(np.float32)
    before = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    after = ort.InferenceSession(str(out_path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(before, after)


def test_broadcasting_over_the_limit_that_cannot_fold_is_copied_within_it(gpu4, tmp_path):
    # 2x3x4x5x6 + 2x1x4x1x6: no two adjacent dims are alike in both operands, so no merge of
    # dims serves both; the broadcast operand is copied to the result's shape, at a rank the
    # target takes, and the Add folds with nothing left to broadcast
    model = save(op_model("Add", ["2x3x4x5x6xf32", "2x1x4x1x6xf32"], "2x3x4x5x6xf32"), tmp_path / "alt.onnx")
    out_path = tmp_path / "alt.legal.onnx"
    code, out, err = cli_in_process(model, out_path, "--target", "gpu4", "-q")
    assert code == 0 and err == "", out + err
    assert out.splitlines()[-1] == f"{model}: legalized for 'gpu4' -> {out_path}, outputs match on CPUExecutionProvider"
    legal = onnx.shape_inference.infer_shapes(onnx.load(str(out_path)))
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in [*legal.graph.value_info, *legal.graph.output]}
    shapes.update({t.name: list(t.dims) for t in legal.graph.initializer})
    interface = {v.name for v in [*legal.graph.input, *legal.graph.output]}  # rank 5, as the model's
    inner = {k: v for k, v in shapes.items() if k not in interface}
    assert max(len(s) for s in inner.values()) <= 4, inner
    add = next(n for n in legal.graph.node if n.op_type == "Add")
    assert shapes[add.input[0]] == shapes[add.input[1]] == shapes[add.output[0]]
    import onnxruntime as ort

    rng = np.random.default_rng(0)
    feeds = {"x0": rng.standard_normal([2, 3, 4, 5, 6]).astype(np.float32),
             "x1": rng.standard_normal([2, 1, 4, 1, 6]).astype(np.float32)}
    feeds = {i.name: feeds[f"x{k}"] for k, i in enumerate(legal.graph.input)}
    before = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    after = ort.InferenceSession(str(out_path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_array_equal(before, after)


def test_the_command_line_offers_them(gpu4, tmp_path):
    code, out, err = cli_in_process("--help")
    text = " ".join(out.split())
    assert code == 0 and err == ""
    assert "--target tosa|xla|litert-gpu|ethos-u|ethos-u55|qnn-htp|coreml|gpu4 " in text
    assert ("Legal form: tosa (equal ranks, size-1 broadcasts), xla (every broadcast explicit: Unsqueeze + Expand),"
            " coreml (Apple Core ML: rank <= 5), gpu4 (a GPU that takes rank <= 4), or a deployment backend's:") in text
    assert "--profile mlir|strict|tosa|xla|rank4 " in text
    assert "or rank4 (also every operand at rank <= 4, as LiteRT's GPU delegate)." in text
    model = rank5_chain(tmp_path / "rank5.onnx")
    code, _, err = cli_in_process(model, "--target", "gpu5")
    assert code == 2 and err == ("legalize: error: --target must be one of tosa, xla, litert-gpu, ethos-u, ethos-u55,"
                                 " qnn-htp, coreml, gpu4, not 'gpu5'\n")
    code, _, err = cli_in_process(model, "--target", "gpu4", "--tosa-level", "8k")
    assert code == 2 and err == "legalize: error: --tosa-level applies to --target tosa, not --target gpu4\n"


def test_unregistered_it_is_gone(tmp_path):
    """(The fixture's undoing: the other tests see the shipped tables.)"""
    assert "gpu4" not in TARGETS and "rank4" not in PROFILES
    code, out, _ = cli_in_process("--help")
    assert "gpu4" not in out and "rank4" not in out


def test_a_registered_deployment_target_gets_the_targets_verdict(tmp_path):
    """A target with an accelerator of its own (qnn-htp's and coreml's kind: no backend
    rules, its refusals its own fields) gets the deployment verdict from the table: an op
    it refuses after legalizing fails the run (exit 1, nothing written), unless
    --allow-fallback accepts it on the CPU."""
    npu = Target("npu-relu", "tosa", target("tosa").passes, "an NPU without Relu", accelerator="the NPU",
                 refuses={"Relu": "Relu is not supported"})
    register_target(npu)
    try:
        src = save(op_model("Relu", ["4x3xf32"], "4x3xf32"), tmp_path / "relu.onnx")
        out = tmp_path / "o.onnx"
        code, text, err = cli_in_process(src, "--target", "npu-relu", "-o", out, "-q")
        assert (code, out.exists()) == (1, False), text + err
        assert text.strip() == (f"{src}: 1 op of the legalized model stays off the NPU, on the CPU (npu-relu: Relu is"
                                " not supported); nothing written (--allow-fallback accepts a partial placement)")
        code, text, err = cli_in_process(src, "--target", "npu-relu", "-o", out, "-q", "--allow-fallback")
        assert code == 0 and out.exists(), text + err
        assert text.strip().endswith("; 1 op of the legalized model stays off the NPU, on the CPU (npu-relu: Relu is"
                                     " not supported) (--allow-fallback)")
    finally:
        del TARGETS["npu-relu"]


def test_no_target_makes_a_model_worse_for_itself(tmp_path):
    """Add(x: 4x3, y: 3) is legal as it is for an NPU that runs no Unsqueeze; the tosa
    passes' legal form unsqueezes y to 1x3, an op that NPU refuses. More ops refused after
    than before is never written, --allow-fallback or not: the input is the better model."""
    npu = Target("npu-nounsqueeze", "tosa", target("tosa").passes, "an NPU without Unsqueeze", accelerator="the NPU",
                 refuses={"Unsqueeze": "Unsqueeze is not supported"})
    register_target(npu)
    try:
        src = save(op_model("Add", ["4x3xf32", "3xf32"], "4x3xf32"), tmp_path / "add.onnx")
        out, rep = tmp_path / "o.onnx", tmp_path / "r.json"
        for extra in ([], ["--allow-fallback"]):
            code, text, err = cli_in_process(src, "--target", "npu-nounsqueeze", "-o", out, "-q", "--report", rep, *extra)
            assert (code, out.exists()) == (1, False), text + err
            assert text.strip() == (f"{src}: the legalized model is worse for 'npu-nounsqueeze' than the input: target"
                                    " 'npu-nounsqueeze' refuses 1 of its ops, 0 of the input's; nothing written")
            rules = json.loads(rep.read_text())["target_rules"]
            assert (rules["refused_before"], [r["op"] for r in rules["refused_after"]]) == ([], ["Unsqueeze"])
    finally:
        del TARGETS["npu-nounsqueeze"]
