"""ONNX input with a TFLite backend's target (--target litert-gpu/ethos-u/ethos-u55): the
backend's rules judge each ONNX op as the TFLite op the rules table says it converts to
(rules/tflite.toml's ``onnx``: Expand as BROADCAST_TO, Unsqueeze as EXPAND_DIMS, Add as
ADD, ...), before and after; rank folding applies as for TFLite, the TFLite-only forms
(BROADCAST_TO into its consumer, EXPAND_DIMS as RESHAPE) do not, and what stays refused
is named with the backend's reason. The written model computes what the original does."""

import json
import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import legalizer
from legalizer.verifier.backend_rules import converts_to
from tests.helpers import cli_in_process

F = TensorProto.FLOAT
RNG = np.random.default_rng(11)


def _save(path, nodes, inputs, outputs, inits):
    g = helper.make_graph(nodes, "g", inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return path


def gqa(tmp_path, quantized=False):
    """GQA's repeat_kv as PyTorch exports it (k [1,2,8,4] -> Unsqueeze -> Expand to 3
    copies -> Reshape [1,6,8,4]), times q, then a rank-5 bias add between reshapes.
    ``quantized``: k comes in through an int8 QuantizeLinear/DequantizeLinear pair (a
    QDQ model, as an integer-only target takes)."""
    ints = lambda name, v: numpy_helper.from_array(np.asarray(v, np.int64), name)  # noqa: E731
    qdq = [helper.make_node("QuantizeLinear", ["kf", "qs", "qz"], ["kq"], name="quant"),
           helper.make_node("DequantizeLinear", ["kq", "qs", "qz"], ["k"], name="dequant")] if quantized else []
    return _save(tmp_path / "gqa.onnx", qdq + [
        helper.make_node("Unsqueeze", ["k", "ax2"], ["k5"], name="unsq"),
        helper.make_node("Expand", ["k5", "rep"], ["kx"], name="repeat_kv"),
        helper.make_node("Reshape", ["kx", "s4"], ["k4"], name="merge"),
        helper.make_node("Mul", ["q", "k4"], ["m"], name="mul"),
        helper.make_node("Reshape", ["m", "s5"], ["m5"], name="to5"),
        helper.make_node("Add", ["m5", "b5"], ["a5"], name="add5"),
        helper.make_node("Reshape", ["a5", "s4"], ["y"], name="back")],
        [helper.make_tensor_value_info("q", F, [1, 6, 8, 4]),
         helper.make_tensor_value_info("kf" if quantized else "k", F, [1, 2, 8, 4])],
        [helper.make_tensor_value_info("y", F, [1, 6, 8, 4])],
        [ints("ax2", [2]), ints("rep", [1, 2, 3, 8, 4]), ints("s4", [1, 6, 8, 4]), ints("s5", [1, 2, 3, 8, 4]),
         numpy_helper.from_array(RNG.standard_normal([1, 1, 3, 1, 4]).astype(np.float32), "b5")]
        + ([numpy_helper.from_array(np.float32(0.05), "qs"), numpy_helper.from_array(np.int8(0), "qz")]
           if quantized else []))


def rank6_chain(tmp_path, quantized=False):
    """x [96] -> Reshape to rank 6 -> Add (a rank-6 constant broadcast along two dims)
    -> Relu -> Reshape [4, 24]: every op over the delegates' rank 4, all foldable
    (``quantized``: x through an int8 QDQ pair first, as ``gqa``)."""
    qdq = [helper.make_node("QuantizeLinear", ["xf", "qs", "qz"], ["xq"], name="quant"),
           helper.make_node("DequantizeLinear", ["xq", "qs", "qz"], ["x"], name="dequant")] if quantized else []
    return _save(tmp_path / "r6.onnx", qdq + [
        helper.make_node("Reshape", ["x", "s6"], ["h"], name="to6"),
        helper.make_node("Add", ["h", "c"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["r"], name="relu"),
        helper.make_node("Reshape", ["r", "so"], ["y"], name="back")],
        [helper.make_tensor_value_info("xf" if quantized else "x", F, [96])],
        [helper.make_tensor_value_info("y", F, [4, 24])],
        [numpy_helper.from_array(np.asarray([2, 1, 3, 2, 4, 2], np.int64), "s6"),
         numpy_helper.from_array(np.asarray([4, 24], np.int64), "so"),
         numpy_helper.from_array(RNG.standard_normal([1, 1, 3, 1, 4, 2]).astype(np.float32), "c")]
        + ([numpy_helper.from_array(np.float32(0.05), "qs"), numpy_helper.from_array(np.int8(0), "qz")]
           if quantized else []))


def _run(path, target, tmp_path):
    """The run with a partial placement accepted (the ops left refused stay on the CPU)."""
    out, rep = tmp_path / f"{target}.onnx", tmp_path / f"{target}.json"
    code, text, err = cli_in_process(path, "--target", target, "-o", out, "--report", rep, "--allow-fallback")
    assert code == 0, text + err
    feeds = {i.name: RNG.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
             for i in onnx.load(str(path)).graph.input}
    run = lambda p: ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]).run(None, feeds)  # noqa: E731
    for got, want in zip(run(out), run(path)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    rules = json.loads(rep.read_text())["target_rules"]
    listed = lambda k: [(r["node"], r["op"], r.get("as"), r["reasons"]) for r in rules[k]]  # noqa: E731
    return listed("refused_before"), listed("refused_after"), text + err


def test_the_rules_table_maps_onnx_ops_to_the_tflite_ops_they_convert_to():
    mapped = converts_to()
    assert {k: mapped[k] for k in ("Expand", "Unsqueeze", "Squeeze", "Reshape", "Shape", "Tile", "Add", "Relu")} == {
        "Expand": "BROADCAST_TO", "Unsqueeze": "EXPAND_DIMS", "Squeeze": "SQUEEZE", "Reshape": "RESHAPE",
        "Shape": "SHAPE", "Tile": "TILE", "Add": "ADD", "Relu": "RELU"}


RANK = "Tensor dimensions must be less than 5."
UNSUPPORTED = "Operation is not supported."


def test_litert_gpu_names_what_the_delegate_refuses_in_an_onnx_model(tmp_path):
    before, after, out = _run(gqa(tmp_path), "litert-gpu", tmp_path)
    assert before == [("unsq", "Unsqueeze", "EXPAND_DIMS", [UNSUPPORTED, RANK]),
                      ("repeat_kv", "Expand", "BROADCAST_TO", [UNSUPPORTED, RANK]),
                      ("merge", "Reshape", "RESHAPE", [RANK]), ("to5", "Reshape", "RESHAPE", [RANK]),
                      ("add5", "Add", "ADD", [RANK]), ("back", "Reshape", "RESHAPE", [RANK])]
    # the rank-5 add between reshapes folds to rank 4, and so does repeat_kv's Expand (a
    # broadcast to a constant shape joins the region); the Expand stays (ONNX has no
    # TFLite-only forms) and is named with the delegate's reason
    assert after == [("repeat_kv", "Expand", "BROADCAST_TO", [UNSUPPORTED])]
    assert f"warning: node 'repeat_kv' (Expand, as BROADCAST_TO): LiteRT GPU delegate refuses it: {UNSUPPORTED}" in out
    assert re.search(r"│ off the GPU +│ +6 │ +1 │", out), out  # the table says so too
    assert ("outputs match on CPUExecutionProvider; 1 op of the legalized model stays off the GPU, on the CPU (LiteRT GPU"
            f" delegate: {UNSUPPORTED}) (--allow-fallback)") in out


def test_a_target_that_still_refuses_ops_fails_the_run_unless_a_partial_placement_is_accepted(tmp_path):
    """The target's verdict is the target's: ops it refuses after legalizing make the run
    exit 1, nothing written, with how many stay off its device and why in its words."""
    src, out, rep = gqa(tmp_path), tmp_path / "g.onnx", tmp_path / "g.json"
    code, text, err = cli_in_process(src, "--target", "litert-gpu", "-o", out, "--report", rep, "-q")
    assert code == 1, text + err
    assert (f"{src}: 1 op of the legalized model stays off the GPU, on the CPU (LiteRT GPU delegate: {UNSUPPORTED});"
            " nothing written (--allow-fallback accepts a partial placement)") in text
    assert not out.exists()
    rules = json.loads(rep.read_text())["target_rules"]
    assert (rules["device"], rules["allow_fallback"]) == ("the GPU", False)
    assert [r["node"] for r in rules["refused_after"]] == ["repeat_kv"]
    # the library says the same, and its error carries the run's Result
    with pytest.raises(legalizer.NotLegal, match="1 op of the legalized model stays off the GPU") as e:
        legalizer.legalize(src, "litert-gpu", output=out)
    assert [r["node"] for r in e.value.result.refused] == ["repeat_kv"]
    assert e.value.result.exit_code == 1 and not out.exists()
    done = legalizer.legalize(src, "litert-gpu", output=out, allow_fallback=True)
    assert done.output == out and out.exists() and done.on_cpu == ["repeat_kv"]
    assert done.check.state == "ran" and done.check.ok is True


def test_a_float_model_for_an_integer_only_target_is_refused_up_front(tmp_path):
    src = gqa(tmp_path)
    code, text, err = cli_in_process(src, "--target", "ethos-u", "-o", tmp_path / "o.onnx")
    assert code == 2 and text == ""
    assert err.strip() == (f"legalize: error: {src}: --target ethos-u: Vela (Ethos-U85) places int8/uint8/int16 ops on"
                           " the NPU, and this model computes in float (unsupported DataType Float32): quantize it"
                           " first (full-integer quantization)")
    assert not (tmp_path / "o.onnx").exists()


def test_allow_fallback_is_refused_where_nothing_is_placed(tmp_path):
    code, _, err = cli_in_process(gqa(tmp_path), "--allow-fallback", "-o", tmp_path / "o.onnx")
    assert code == 2
    assert err.strip() == ("legalize: error: --allow-fallback accepts a deployment target's partial placement:"
                           " --target tosa places no op on an accelerator (targets that do: litert-gpu, ethos-u,"
                           " ethos-u55, qnn-htp)")


U55_RANK = "Input(s) and Output tensors must not be greater than 4D"
U55_BATCH = "IFM Tensor batch size must be 1"


@pytest.mark.parametrize("target,reason,left", [
    ("litert-gpu", RANK, []),
    # the legacy core's batch of 1: the TFLite pipeline folds the batch (fold_for_npu),
    # which works on TFLite ops only; on ONNX the folded add keeps a batch of 2
    ("ethos-u55", U55_RANK, [("add", "Add", "ADD", [U55_BATCH]), ("relu", "Relu", "RELU", [U55_BATCH])])])
def test_a_rank6_chain_folds_to_what_the_backend_takes(tmp_path, target, reason, left):
    before, after, _ = _run(rank6_chain(tmp_path, quantized=target.startswith("ethos-u")), target, tmp_path)
    assert [(n, a, r) for n, _, a, r in before] == [("to6", "RESHAPE", [reason]), ("add", "ADD", [reason]),
                                                    ("relu", "RELU", [reason]), ("back", "RESHAPE", [reason])]
    assert after == left
    ranks = {len(v.type.tensor_type.shape.dim) for v in onnx.shape_inference.infer_shapes(
        onnx.load(str(tmp_path / f"{target}.onnx"))).graph.value_info}
    assert max(ranks) <= 4


def test_ethos_u_takes_all_but_the_broadcast_to(tmp_path):
    before, after, _ = _run(gqa(tmp_path, quantized=True), "ethos-u", tmp_path)
    assert before == after == [("repeat_kv", "Expand", "BROADCAST_TO", ["Unsupported opType"])]
