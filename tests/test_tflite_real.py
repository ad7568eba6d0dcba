"""What real TFLite models have and the samples did not (issue 14): resource variables
and other ops with effects, sparse and zero-element constants, custom ops that only
LiteRT's default delegate runs. Each model is built here, legalized, and run on LiteRT
before and after."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest

import legalizer
import tflite_build as tb
from legalizer.numeric.litert import LiteRTModel
from legalizer.numeric.ort import ATOL, RTOL, compare
from legalizer.numeric.ort_session import session
from legalizer.kinds.tflite.exporter import to_tflite
from legalizer.kinds.tflite.onnx_form import tflite_to_onnx
from legalizer.pipeline import RunOptions, run
from legalizer.kinds.tflite.schema import read, serialize
from helpers import assert_clean

needs_litert = pytest.mark.needs("litert")
RNG = np.random.default_rng(3)


def _legalized(tmp_path: Path, data: bytes, name: str, **options):
    src, out = tmp_path / f"{name}.tflite", tmp_path / f"{name}.legal.tflite"
    src.write_bytes(data)
    return src, out, run(src, RunOptions(output=out, **options))


def _ops(path: Path) -> list:
    """Each subgraph's ops, in file order (what LiteRT runs)."""
    return [[n.op_type for n in g.ops()] for g in legalizer.load(path).graphs]


def _litert(path: Path, feeds, kernels: str = "builtin") -> dict:
    return LiteRTModel(str(path), kernels=kernels).run(feeds)


def _compared(check: dict) -> Counter:
    """How many outputs each runtime compared, all of them matching."""
    outs = [o for b in check["bindings"] for o in b["outputs"]]
    assert all(o["ok"] for o in outs), outs
    return Counter(o["name"].rsplit(" ", 1)[1] for o in outs)


# ---- ops with effects ---------------------------------------------------------------------
@needs_litert
def test_variables_and_call_once_are_kept_in_their_order(tmp_path):
    """The init subgraph assigns the variable; main reads it, assigns x + it, reads it
    again. Nothing uses ASSIGN_VARIABLE's or CALL_ONCE's results (they have none), and the
    second read depends on the assignment only through the variable: none of them is dead
    code, and the RESHAPE of x inserted before the ADD does not let the read run early."""
    src, out, res = _legalized(tmp_path, tb.stateful_model(), "stateful")
    assert res.exit_code == 0, res.report.to_json()
    assert _ops(src) == [["CALL_ONCE", "VAR_HANDLE", "READ_VARIABLE", "ADD", "ASSIGN_VARIABLE", "READ_VARIABLE", "MUL"],
                         ["VAR_HANDLE", "ASSIGN_VARIABLE"]]
    assert _ops(out) == [["CALL_ONCE", "VAR_HANDLE", "READ_VARIABLE", "RESHAPE", "ADD", "ASSIGN_VARIABLE",
                          "READ_VARIABLE", "MUL"], ["VAR_HANDLE", "ASSIGN_VARIABLE"]]
    x = np.array([1, -2, 0.5], np.float32)
    want = (np.arange(6, dtype=np.float32).reshape(2, 3) / 4 + x) * np.array([1.5, -2, 0.5], np.float32)
    np.testing.assert_array_equal(_litert(src, {"x": x})["y"], want)
    np.testing.assert_array_equal(_litert(out, {"x": x})["y"], want)
    check = res.report.check
    assert check["ok"] and _compared(check) == {"(LiteRT)": 1}
    assert check["error"] == ("output 'y' of subgraph 'main' not compared on onnxruntime: no ONNX form for TFLite"
                              " ops: VAR_HANDLE (ONNX has no state), READ_VARIABLE (ONNX has no state)")


def test_dead_code_keeps_ops_with_effects(tmp_path):
    """Unused results: a pure ADD goes, a custom op (effects unknown) and a WHILE (a
    subgraph call) stay."""
    body = {"name": "body", "inputs": [0], "outputs": [0], "tensors": [tb.tensor("i", "int32", [])], "operators": []}
    cond = {"name": "cond", "inputs": [0], "outputs": [1],
            "tensors": [tb.tensor("i", "int32", []), tb.tensor("f", "bool", [], data=np.array(False))],
            "operators": []}
    data = tb.build_tflite(
        [tb.tensor("x", "float32", [2, 3]), tb.tensor("c", "float32", [3], data=np.ones(3, np.float32)),
         tb.tensor("unused", "float32", [2, 3]), tb.tensor("frob", "float32", [2, 3]), tb.tensor("y", "float32", [2, 3]),
         tb.tensor("n", "int32", []), tb.tensor("n_out", "int32", [])],
        [tb.op("ADD", [0, 1], [2], "AddOptions"), tb.op("CUSTOM", [0], [3], custom_code="MyFrob"),
         tb.op("WHILE", [5], [6], "WhileOptions", cond_subgraph_index=2, body_subgraph_index=1),
         tb.op("MUL", [0, 1], [4], "MulOptions")],
        [0, 5], [4], subgraphs=[body, cond])
    src, out, res = _legalized(tmp_path, data, "dead", check=False)
    assert res.exit_code == 0
    assert _ops(src)[0] == ["ADD", "MyFrob", "WHILE", "MUL"]
    assert _ops(out)[0] == ["MyFrob", "WHILE", "MUL"]


# ---- sparse and zero-element constants --------------------------------------------------
@needs_litert
def test_sparse_constants_are_read_as_litert_reads_them(tmp_path):
    """Pruned weights: the legalized file stores them as the original did (sparse, the
    same bytes); their dense value, where it is needed (the ONNX form of the check),
    is LiteRT's."""
    data = tb.sparse_model()
    src, out, res = _legalized(tmp_path, data, "sparse")
    assert res.exit_code == 0, res.report.to_json()
    assert _compared(res.report.check) == {"(LiteRT)": 2, "(onnxruntime)": 2}
    m = legalizer.load(src)
    assert to_tflite(m) == data
    np.testing.assert_array_equal(m.graph.value("w").producer.data.array, tb.SPARSE_W)
    np.testing.assert_array_equal(m.graph.value("v").producer.data.array, tb.SPARSE_V)
    back = legalizer.load(out)
    for name in ("w", "v"):
        old, new = m.graph.value(name), back.graph.value(name)
        assert new.info.get("sparsity") is not None
        assert new.producer.data.stored.tobytes() == old.producer.data.stored.tobytes()
    assert _ops(out) == [["FULLY_CONNECTED", "DENSIFY", "RESHAPE", "ADD"]]
    feeds = {"x": RNG.normal(size=(2, 4)).astype(np.float32), "x2": RNG.normal(size=8).astype(np.float32)}
    before, after = _litert(src, feeds), _litert(out, feeds)
    np.testing.assert_allclose(before["y"], feeds["x"] @ tb.SPARSE_W.T + tb.SPARSE_B, rtol=1e-6)
    np.testing.assert_array_equal(before["z"], tb.SPARSE_V + feeds["x2"])
    for k in before:
        np.testing.assert_array_equal(after[k], before[k])


def _w_level(t, key: str, values) -> None:
    """Set w's CSR segments or indices."""
    w = t.get("subgraphs")[0].get("tensors")[1]
    w.get("sparsity").get("dim_metadata")[1].get(key).fields["values"] = np.array(values, np.int32)


def _cut_w_buffer(t) -> None:
    b = t.get("buffers")[t.get("subgraphs")[0].get("tensors")[1].get("buffer")]
    b.fields["data"] = b.fields["data"][:8]


W_BAD = "sparse constant tensor 'w' of shape [3, 4]: "
BAD_SPARSITY = {
    "segments past the indices": (lambda t: _w_level(t, "array_segments", [0, 2, 2, 7]),
                                  W_BAD + "level 1: its 4 segments are not an increasing run from 0, one more than"
                                  " the 3 entries of the level before, into its 4 indices"),
    "too few segments": (lambda t: _w_level(t, "array_segments", [0, 2, 2]),
                         W_BAD + "level 1: its 3 segments are not an increasing run from 0, one more than the 3"
                         " entries of the level before, into its 4 indices"),
    "index out of the dim": (lambda t: _w_level(t, "array_indices", [1, 3, 0, 9]),
                             W_BAD + "level 1 has an index outside its dim of 4"),
    "values missing": (_cut_w_buffer, "sparse constant tensor 'w': its sparsity places 4 values, which need 16"
                                      " bytes, its buffer has 8"),
}


@pytest.mark.parametrize("case", BAD_SPARSITY)
def test_bad_sparsity_is_one_line_and_exit_2(case, tmp_path, legalize):
    mutate, expect = BAD_SPARSITY[case]
    t = read(__import__("tflite").Model.GetRootAs(tb.sparse_model(), 0), "Model")
    mutate(t)
    src = tmp_path / "bad.tflite"
    src.write_bytes(serialize(t))
    p = legalize(src, "--verify-only")
    assert_clean(p)
    assert p.returncode == 2 and p.stderr.splitlines() == [f"legalize: error: {src}: {expect}"], p.stderr


@needs_litert
def test_zero_element_constants_with_an_empty_buffer(tmp_path):
    """The shape [] of a reshape to a scalar and an empty [2,0] operand: constants with
    no bytes, as LiteRT reads them."""
    data = tb.empty_constant_model()
    src, out, res = _legalized(tmp_path, data, "empty")
    assert res.exit_code == 0, res.report.to_json()
    assert _compared(res.report.check) == {"(LiteRT)": 2, "(onnxruntime)": 2}
    m = legalizer.load(src)
    assert m.graph.value("shape").producer.data.array.shape == (0,)
    assert m.graph.value("e").producer.data.array.shape == (2, 0)
    assert to_tflite(m) == data
    feeds = {"x": np.array([[2.5]], np.float32), "x2": RNG.normal(size=(2, 3)).astype(np.float32)}
    before, after = _litert(src, feeds), _litert(out, feeds)
    np.testing.assert_array_equal(before["y"], [3.5, 4.5, 5.5])
    np.testing.assert_array_equal(before["z"], feeds["x2"])
    for k in before:
        np.testing.assert_array_equal(after[k], before[k])


# ---- custom ops only LiteRT's default delegate runs --------------------------------------
def _deconv(x: np.ndarray) -> np.ndarray:
    """Convolution2DTransposeBias, VALID, stride 2, kernel 2: each input pixel writes a
    2x2 patch of the output."""
    y = np.zeros((1, 6, 6, 3), np.float32) + tb.DECONV_B
    for i in range(3):
        for j in range(3):
            for a in range(2):
                for c in range(2):
                    y[0, 2 * i + a, 2 * j + c] += tb.DECONV_W[:, a, c, :] @ x[0, i, j]
    return y


@needs_litert
def test_custom_op_of_the_default_delegate_runs_on_the_default_resolver(tmp_path):
    src, out, res = _legalized(tmp_path, tb.deconv_model(), "deconv")
    assert res.exit_code == 0, res.report.to_json()
    check = res.report.check
    assert check["provider"] == ("LiteRT default resolver (XNNPACK), for custom ops Convolution2DTransposeBias"
                                 " + onnxruntime CPUExecutionProvider")
    assert _compared(check) == {"(LiteRT)": 1, "(onnxruntime)": 1} and "error" not in check
    x = RNG.normal(size=(1, 3, 3, 2)).astype(np.float32)
    want = _deconv(x) + np.array([1, -1, 0.5], np.float32)
    for path in (src, out):
        np.testing.assert_allclose(_litert(path, {"x": x}, kernels="default")["y"], want, rtol=1e-5, atol=1e-5)
    with pytest.raises(Exception, match="unresolved custom op: Convolution2DTransposeBias"):
        _litert(src, {"x": x})  # the builtin kernels cannot


# ---- the ONNX form against LiteRT ------------------------------------------------------
def _both(data: bytes, feeds, tmp_path: Path, name: str = "m", kernels: str = "builtin"):
    """LiteRT's outputs of the model and onnxruntime's of its ONNX form."""
    src = tmp_path / f"{name}.tflite"
    src.write_bytes(data)
    form = tflite_to_onnx(legalizer.load(src))
    onnx.checker.check_model(form, full_check=True)
    sess = session(form, ["CPUExecutionProvider"], basic=True)
    return _litert(src, feeds, kernels), dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


@needs_litert
@pytest.mark.parametrize("padding, size, kernel, stride", [
    (1, (3, 4), (2, 2), (2, 2)), (1, (3, 5), (3, 3), (2, 2)), (1, (5, 4), (4, 3), (2, 3)), (2, (3, 4), (3, 2), (2, 2)),
    (1, (4, 4), (3, 3), (1, 1))], ids=["SAME-k2s2", "SAME-k3s2", "SAME-k4x3s2x3", "VALID-k3x2s2", "SAME-k3s1"])
def test_mediapipe_transpose_conv_bias_matches_litert(padding, size, kernel, stride, tmp_path):
    """MediaPipe's Convolution2DTransposeBias (options: a TfLiteTransposeConvParams, SAME
    1, VALID 2) has the ONNX form of a ConvTranspose with MediaPipe's padding (k - (in -
    1) % stride - 1, the odd cell at the end): equal to XNNPACK's kernel to rounding."""
    rng = np.random.default_rng(size[1] * 10 + kernel[0])
    out = [s * (i - 1) + k - (max(0, k - (i - 1) % s - 1) if padding == 1 else 0)
           for i, k, s in zip(size, kernel, stride)]
    options = np.array([padding, stride[1], stride[0]], "<i4").tobytes()
    data = tb.build_tflite(
        [tb.tensor("x", "float32", [1, *size, 3]),
         tb.tensor("w", "float32", [2, *kernel, 3], data=rng.normal(size=(2, *kernel, 3)).astype(np.float32)),
         tb.tensor("b", "float32", [2], data=rng.normal(size=2).astype(np.float32)),
         tb.tensor("y", "float32", [1, *out, 2])],
        [tb.op("CUSTOM", [0, 1, 2], [3], custom_code="Convolution2DTransposeBias", custom_options=options)], [0], [3])
    want, got = _both(data, {"x": rng.normal(size=(1, *size, 3)).astype(np.float32)}, tmp_path, kernels="default")
    assert want["y"].shape == got["y"].shape == (1, *out, 2)
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5, atol=1e-5)


def _steps(a: np.ndarray, b: np.ndarray) -> int:
    assert a.dtype == b.dtype and a.shape == b.shape
    return int(np.abs(a.astype(np.int64) - b.astype(np.int64)).max())


RESIZE_SIZES = [((4, 5), (7, 3)), ((3, 3), (6, 6)), ((5, 7), (2, 3)), ((2, 3), (3, 1)), ((6, 4), (4, 9)), ((1, 5), (3, 10))]


@needs_litert
@pytest.mark.parametrize("dtype", ["float32", "int8"])
@pytest.mark.parametrize("align, half", [(False, False), (True, False), (False, True)],
                         ids=["asymmetric", "align_corners", "half_pixel_centers"])
@pytest.mark.parametrize("op", ["RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR"])
def test_resize_matches_litert(op, align, half, dtype, tmp_path):
    """TFLite's coordinate rules as ONNX Resize modes, upsampling and downsampling:
    nearest neighbours exactly, bilinear floats to rounding, int8 within one step."""
    table = "ResizeBilinearOptions" if op == "RESIZE_BILINEAR" else "ResizeNearestNeighborOptions"
    q = {"scale": 0.05, "zero_point": 3} if dtype == "int8" else {}
    for (h, w), (oh, ow) in RESIZE_SIZES:
        data = tb.build_tflite(
            [tb.tensor("x", dtype, [1, h, w, 2], **q), tb.tensor("size", "int32", [2], data=np.array([oh, ow], np.int32)),
             tb.tensor("y", dtype, [1, oh, ow, 2], **q)],
            [tb.op(op, [0, 1], [2], table, align_corners=align, half_pixel_centers=half)], [0], [2])
        x = RNG.normal(size=(1, h, w, 2)).astype(np.float32) if dtype == "float32" else \
            RNG.integers(-128, 128, (1, h, w, 2)).astype(np.int8)
        want, got = _both(data, {"x": x}, tmp_path)
        if dtype == "int8":
            assert _steps(got["y"], want["y"]) <= (1 if op == "RESIZE_BILINEAR" else 0), ((h, w), (oh, ow))
        elif op == "RESIZE_NEAREST_NEIGHBOR":
            np.testing.assert_array_equal(got["y"], want["y"])
        else:
            np.testing.assert_allclose(got["y"], want["y"], rtol=1e-6, atol=1e-6)


def _while_model() -> bytes:
    """(i, x) = WHILE(i0, x0): while i < 5: i += 1 (a scalar), x *= k[3] (x is [2,3]:
    rank-mismatched in the body)."""
    cond = {"name": "cond", "inputs": [0, 1], "outputs": [3],
            "tensors": [tb.tensor("i", "int32", []), tb.tensor("x", "float32", [2, 3]),
                        tb.tensor("n", "int32", [], data=np.array(5, np.int32)), tb.tensor("c", "bool", [])],
            "operators": [tb.op("LESS", [0, 2], [3])]}
    body = {"name": "body", "inputs": [0, 1], "outputs": [3, 5],
            "tensors": [tb.tensor("i", "int32", []), tb.tensor("x", "float32", [2, 3]),
                        tb.tensor("one", "int32", [], data=np.array(1, np.int32)), tb.tensor("i1", "int32", []),
                        tb.tensor("k", "float32", [3], data=np.array([1.5, 0.5, -1], np.float32)),
                        tb.tensor("x1", "float32", [2, 3])],
            "operators": [tb.op("ADD", [0, 2], [3], "AddOptions"), tb.op("MUL", [1, 4], [5], "MulOptions")]}
    return tb.build_tflite(
        [tb.tensor("i0", "int32", []), tb.tensor("x0", "float32", [2, 3]), tb.tensor("i_out", "int32", []),
         tb.tensor("x_out", "float32", [2, 3])],
        [tb.op("WHILE", [0, 1], [2, 3], "WhileOptions", cond_subgraph_index=1, body_subgraph_index=2)],
        [0, 1], [2, 3], subgraphs=[cond, body])


@needs_litert
def test_while_with_a_scalar_loop_variable(tmp_path):
    """A WHILE is an ONNX Loop whose condition is the cond subgraph, run before the
    loop and after each body; a scalar loop variable stays a scalar (its constant 1
    came out [1] before)."""
    feeds = {"i0": np.array(1, np.int32), "x0": np.arange(6, dtype=np.float32).reshape(2, 3)}
    want, got = _both(_while_model(), feeds, tmp_path)
    assert got["i_out"].shape == want["i_out"].shape == () and got["i_out"] == want["i_out"] == 5
    np.testing.assert_array_equal(got["x_out"], feeds["x0"] * np.array([1.5, 0.5, -1], np.float32) ** 4)
    np.testing.assert_array_equal(want["x_out"], got["x_out"])
    src, out, res = _legalized(tmp_path, _while_model(), "while")
    assert res.exit_code == 0 and res.report.stats["constants_folded"] == 1
    # main, cond and body, each on both runtimes
    assert _compared(res.report.check) == {"(LiteRT)": 5, "(onnxruntime)": 5} and "error" not in res.report.check


@needs_litert
def test_if_runs_the_branch_its_condition_picks(tmp_path):
    """IF(c, x): then x * k[3], else x + 1 (a scalar): an ONNX If whose branches read x
    from the outer scope."""
    then = {"name": "then", "inputs": [0], "outputs": [2],
            "tensors": [tb.tensor("x", "float32", [2, 3]), tb.tensor("k", "float32", [3], data=np.array([2, 3, 4], np.float32)),
                        tb.tensor("y", "float32", [2, 3])],
            "operators": [tb.op("MUL", [0, 1], [2], "MulOptions")]}
    other = {"name": "else", "inputs": [0], "outputs": [2],
             "tensors": [tb.tensor("x", "float32", [2, 3]), tb.tensor("one", "float32", [], data=np.array(1, np.float32)),
                         tb.tensor("y", "float32", [2, 3])],
             "operators": [tb.op("ADD", [0, 1], [2], "AddOptions")]}
    data = tb.build_tflite(
        [tb.tensor("c", "bool", []), tb.tensor("x", "float32", [2, 3]), tb.tensor("y", "float32", [2, 3])],
        [tb.op("IF", [0, 1], [2], "IfOptions", then_subgraph_index=1, else_subgraph_index=2)],
        [0, 1], [2], subgraphs=[then, other])
    x = RNG.normal(size=(2, 3)).astype(np.float32)
    for c, expect in ((True, x * np.array([2, 3, 4], np.float32)), (False, x + 1)):
        want, got = _both(data, {"c": np.array(c), "x": x}, tmp_path)
        np.testing.assert_array_equal(want["y"], expect)
        np.testing.assert_array_equal(got["y"], expect)


@needs_litert
@pytest.mark.parametrize("activation", [0, 1, 3])
@pytest.mark.parametrize("per_channel", [False, True])
def test_int8_fully_connected_and_batch_matmul_are_litert_exact(per_channel, activation, tmp_path):
    """LiteRT requantizes int8 sums with a fixed-point multiplier (FULLY_CONNECTED
    rounding as ruy, BATCH_MATMUL as gemmlowp): the ONNX form does the same integer
    arithmetic, so every element is equal, not just within a step."""
    rng = np.random.default_rng(per_channel * 10 + activation)
    n, k, m = 24, 40, 32
    ws = rng.uniform(0.002, 0.02, m if per_channel else 1).astype(np.float32)
    data = tb.build_tflite(
        [tb.tensor("x", "int8", [2, n, k], scale=0.04, zero_point=-7),
         tb.tensor("w", "int8", [m, k], data=rng.integers(-127, 128, (m, k)).astype(np.int8), scale=list(ws),
                   zero_point=[0] * len(ws)),
         tb.tensor("b", "int32", [m], data=rng.integers(-3000, 3000, m).astype(np.int32), scale=list(0.04 * ws),
                   zero_point=[0] * len(ws)),
         tb.tensor("h", "int8", [2, n, m], scale=0.3, zero_point=5),
         tb.tensor("z", "int8", [2, m, n], scale=0.05, zero_point=-3),
         tb.tensor("y", "int8", [2, n, n], scale=1.7, zero_point=2)],
        [tb.op("FULLY_CONNECTED", [0, 1, 2], [3], "FullyConnectedOptions", keep_num_dims=True,
               fused_activation_function=activation),
         tb.op("BATCH_MATMUL", [3, 4], [5], "BatchMatMulOptions")], [0, 4], [3, 5])
    for seed in range(3):
        r = np.random.default_rng(seed)
        feeds = {"x": r.integers(-128, 128, (2, n, k)).astype(np.int8), "z": r.integers(-128, 128, (2, m, n)).astype(np.int8)}
        want, got = _both(data, feeds, tmp_path)
        assert _steps(got["h"], want["h"]) == 0 and _steps(got["y"], want["y"]) == 0


@needs_litert
@pytest.mark.parametrize("seed", range(8))
def test_int8_attention_within_one_step(seed, tmp_path):
    """FULLY_CONNECTED q/k/v, BATCH_MATMUL, SOFTMAX, BATCH_MATMUL, FULLY_CONNECTED in
    int8: a step off in the scores became 3 after the softmax (seed 2) while the form
    requantized in float."""
    data = tb.attention_int8_model(seed=seed)
    x = np.random.default_rng(seed + 100).integers(-128, 128, (1, 8, 16)).astype(np.int8)
    want, got = _both(data, {"x": x}, tmp_path)
    assert _steps(got["out"], want["out"]) <= 1
    src, out, res = _legalized(tmp_path, data, "attention")
    assert res.exit_code == 0, res.report.to_json()
    assert _compared(res.report.check) == {"(LiteRT)": 1, "(onnxruntime)": 1}


@needs_litert
def test_float_error_of_other_kernels_is_measured_against_the_output_scale(tmp_path):
    """An unchanged deep float net: onnxruntime's convolutions sum in another order than
    LiteRT's: a logit of -0.9 among logits up to 1,198 is 1.2e-3 off, 12 times what the
    tolerances allow relative to itself; the largest error, 3.8e-3, is 3e-6 of the
    output's scale. LiteRT runs the same kernels on the unchanged graph: equal."""
    data = tb.deep_cnn_model()
    x = np.random.default_rng(0).normal(size=(1, 32, 32, 3)).astype(np.float32)
    src, out, res = _legalized(tmp_path, data, "deep", inputs={"x": x})
    assert res.exit_code == 0, res.report.to_json()
    assert res.report.stats["nodes_in"] == res.report.stats["nodes_out"]
    assert _compared(res.report.check) == {"(LiteRT)": 1, "(onnxruntime)": 1}
    assert res.report.check["bindings"][0]["outputs"][0]["max_abs_err"] == 0.0  # LiteRT, same kernels
    want, got = _both(data, {"x": x}, tmp_path)
    err = np.abs(got["logits"] - want["logits"])
    assert not compare("logits", want["logits"], got["logits"], RTOL, ATOL).ok  # element by element
    assert err.max() <= 0.1 * (ATOL + RTOL * np.abs(want["logits"]).max())


@needs_litert
def test_outputs_without_an_onnx_form_are_named_the_others_compared(tmp_path):
    """y reads a resource variable (no ONNX form); z does not: z is compared on both
    runtimes, y on LiteRT, and the check says why."""
    init = {"name": "init", "inputs": [], "outputs": [],
            "tensors": [tb.tensor("h0", "RESOURCE", []), tb.tensor("c0", "float32", [3], data=np.ones(3, np.float32))],
            "operators": [tb.op("VAR_HANDLE", [], [0], "VarHandleOptions", shared_name="v"),
                          tb.op("ASSIGN_VARIABLE", [0, 1], [], "AssignVariableOptions")]}
    data = tb.build_tflite(
        [tb.tensor("x", "float32", [2, 3]), tb.tensor("h", "RESOURCE", []), tb.tensor("v", "float32", [3]),
         tb.tensor("y", "float32", [2, 3]), tb.tensor("z", "float32", [2, 3])],
        [tb.op("CALL_ONCE", [], [], "CallOnceOptions", init_subgraph_index=1),
         tb.op("VAR_HANDLE", [], [1], "VarHandleOptions", shared_name="v"),
         tb.op("READ_VARIABLE", [1], [2], "ReadVariableOptions"), tb.op("ADD", [0, 2], [3], "AddOptions"),
         tb.op("MUL", [0, 0], [4], "MulOptions")], [0], [3, 4], subgraphs=[init])
    src, out, res = _legalized(tmp_path, data, "partial")
    assert res.exit_code == 0, res.report.to_json()
    check = res.report.check
    assert [o["name"] for b in check["bindings"] for o in b["outputs"]] == [
        "main/y (LiteRT)", "main/z (LiteRT)", "main/z (onnxruntime)"]
    assert check["error"] == ("output 'y' of subgraph 'main' not compared on onnxruntime: no ONNX form for TFLite"
                              " ops: VAR_HANDLE (ONNX has no state), READ_VARIABLE (ONNX has no state)")
    assert res.report.warnings == [f"the numeric check ran in part: {check['error']}"]


# ---- more ops with an ONNX form, each against LiteRT -----------------------------------
def _data(dtype: str, shape, rng) -> np.ndarray:
    if dtype == "int8":
        return rng.integers(-128, 128, shape).astype(np.int8)
    return rng.normal(size=shape).astype(np.float32)


Q8 = {"scale": 0.05, "zero_point": 3}

# op -> (operands: (name, shape) for an input, an array for a constant; outputs'
# shapes; options table; options). Every operand and result named by position; int8
# runs quantize each float operand and result with Q8, as the converter writes
# data-movement ops (one scale in and out).
MOVEMENT = {
    "DEPTH_TO_SPACE": ([("x", (2, 3, 4, 12))], [(2, 6, 8, 3)], "DepthToSpaceOptions", {"block_size": 2}),
    "SPACE_TO_DEPTH": ([("x", (1, 6, 9, 2))], [(1, 2, 3, 18)], "SpaceToDepthOptions", {"block_size": 3}),
    "SPLIT_V": ([("x", (2, 7, 3)), np.array([2, -1, 1], np.int32), np.array(-2, np.int32)],
                [(2, 2, 3), (2, 4, 3), (2, 1, 3)], "SplitVOptions", {"num_splits": 3}),
    "REVERSE_V2": ([("x", (2, 3, 4)), np.array([1, 2], np.int32)], [(2, 3, 4)], "ReverseV2Options", {}),
    "MIRROR_PAD-REFLECT": ([("x", (2, 4, 3)), np.array([[1, 0], [2, 3], [0, 2]], np.int32)], [(3, 9, 5)],
                           "MirrorPadOptions", {"mode": 0}),
    "MIRROR_PAD-SYMMETRIC": ([("x", (2, 4, 3)), np.array([[1, 0], [3, 4], [0, 2]], np.int32)], [(3, 11, 5)],
                             "MirrorPadOptions", {"mode": 1}),
    "GATHER_ND": ([("x", (3, 4, 2)), np.array([[[2, 1], [0, 3]], [[1, 0], [2, 2]]], np.int32)], [(2, 2, 2)],
                  "GatherNdOptions", {}),
    "TOPK_V2": ([("x", (3, 10)), np.array(4, np.int32)], [(3, 4), ("int32", (3, 4))], "TopKV2Options", {}),
    "SPACE_TO_BATCH_ND": ([("x", (2, 5, 4, 3)), np.array([2, 3], np.int32), np.array([[1, 0], [1, 1]], np.int32)],
                          [(12, 3, 2, 3)], "SpaceToBatchNDOptions", {}),
    "BATCH_TO_SPACE_ND": ([("x", (12, 3, 2, 3)), np.array([2, 3], np.int32), np.array([[1, 0], [1, 1]], np.int32)],
                          [(2, 5, 4, 3)], "BatchToSpaceNDOptions", {}),
    "FILL": ([np.array([2, 3], np.int32), ("v", ())], [(2, 3)], "FillOptions", {}),
}


def _one_op_model(op: str, dtype: str, operands, outputs, table: str, options: dict) -> bytes:
    q = Q8 if dtype == "int8" else {}
    tensors, ins, inputs = [], [], []
    for k, o in enumerate(operands):
        if isinstance(o, tuple):
            inputs.append(len(tensors))
            tensors.append(tb.tensor(o[0], dtype, o[1], **q))
        else:
            tensors.append(tb.tensor(f"c{k}", o.dtype, o.shape, data=o))
        ins.append(len(tensors) - 1)
    outs = []
    for k, shape in enumerate(outputs):
        out_dtype, shape = shape if isinstance(shape[0], str) else (dtype, shape)
        outs.append(len(tensors))
        tensors.append(tb.tensor(f"y{k}", out_dtype, shape, **(q if out_dtype == dtype else {})))
    return tb.build_tflite(tensors, [tb.op(op.split("-")[0], ins, outs, table, **options)], inputs, outs)


@needs_litert
@pytest.mark.parametrize("dtype", ["float32", "int8"])
@pytest.mark.parametrize("op", MOVEMENT)
def test_data_movement_ops_match_litert(op, dtype, tmp_path):
    """Ops that move data without computing: the ONNX form gives LiteRT's results
    exactly, float and int8 (DEPTH_TO_SPACE: MediaPipe's pose and full-range face
    detectors; SYMMETRIC MIRROR_PAD has no ONNX mode: concatenated reversed slices)."""
    operands, outputs, table, options = MOVEMENT[op]
    data = _one_op_model(op, dtype, operands, outputs, table, options)
    rng = np.random.default_rng(len(op))
    feeds = {o[0]: _data(dtype, o[1], rng) for o in operands if isinstance(o, tuple)}
    want, got = _both(data, feeds, tmp_path)
    assert sorted(got) == sorted(want) == [f"y{k}" for k in range(len(outputs))]
    for name in want:
        assert got[name].shape == want[name].shape and got[name].dtype == want[name].dtype
        np.testing.assert_array_equal(got[name], want[name])


# op -> (operands, output dtype and shape, options table, options); float or typed as given.
COMPUTING = {
    "RELU_0_TO_1": ([("x", "float32", (3, 4))], ("float32", (3, 4)), None, {}),
    "ZEROS_LIKE": ([("x", "int32", (2, 3))], ("int32", (2, 3)), "ZerosLikeOptions", {}),
    "RANGE": ([("start", "int32", ()), np.array(17, np.int32), np.array(3, np.int32)], ("int32", (6,)),
              "RangeOptions", {}),
    "REDUCE_ANY": ([("b", "bool", (3, 4, 2)), np.array([0, 2], np.int32)], ("bool", (4,)), "ReducerOptions",
                   {"keep_dims": False}),
    "REDUCE_ALL": ([("b", "bool", (3, 4, 2)), np.array([1], np.int32)], ("bool", (3, 1, 2)), "ReducerOptions",
                   {"keep_dims": True}),
}


@needs_litert
@pytest.mark.parametrize("op", COMPUTING)
def test_small_computing_ops_match_litert(op, tmp_path):
    operands, (out_dtype, out_shape), table, options = COMPUTING[op]
    tensors, inputs = [], []
    for k, o in enumerate(operands):
        if isinstance(o, tuple):
            inputs.append(len(tensors))
            tensors.append(tb.tensor(o[0], o[1], o[2]))
        else:
            tensors.append(tb.tensor(f"c{k}", o.dtype, o.shape, data=o))
    tensors.append(tb.tensor("y", out_dtype, out_shape))
    data = tb.build_tflite(tensors, [tb.op(op, range(len(operands)), [len(operands)], table, **options)], inputs,
                           [len(operands)])
    rng = np.random.default_rng(1)
    feeds = {"x": (rng.normal(size=(3, 4)) * 2).astype(np.float32) if op == "RELU_0_TO_1" else
             rng.integers(-5, 5, (2, 3)).astype(np.int32), "start": np.array(-1, np.int32),
             "b": rng.random((3, 4, 2)) < (0.1 if op == "REDUCE_ANY" else 0.8)}
    feeds = {k: v for k, v in feeds.items() if k in {o[0] for o in operands if isinstance(o, tuple)}}
    want, got = _both(data, feeds, tmp_path)
    assert got["y"].dtype == want["y"].dtype and got["y"].shape == want["y"].shape == out_shape
    np.testing.assert_array_equal(got["y"], want["y"])
    if op == "ZEROS_LIKE":
        assert not want["y"].any()
    else:  # neither all true nor all one value: the comparison means something
        assert len(np.unique(want["y"])) > 1


@needs_litert
@pytest.mark.parametrize("dtype", ["float32", "int8"])
@pytest.mark.parametrize("padding, stride, size, out", [
    (0, (2, 2), (3, 4), (6, 8)), (1, (2, 2), (3, 4), (7, 9)), (0, (1, 1), (5, 5), (5, 5)),
    (0, (2, 3), (3, 3), (5, 8)), (1, (3, 2), (2, 3), (8, 8))],
    ids=["SAME-s2", "VALID-s2", "SAME-s1", "SAME-s2x3-odd", "VALID-s3x2"])
def test_transpose_conv_matches_litert(padding, stride, size, out, dtype, tmp_path):
    """TRANSPOSE_CONV as ConvTranspose with the padding of the conv that maps the output
    back to the input (the odd cell at the end), the output size TFLite is given; float
    to rounding, int8 (per-channel weights, int32 bias) within one step."""
    rng = np.random.default_rng(stride[0] * 10 + size[0])
    w = rng.normal(size=(4, 3, 3, 2)).astype(np.float32)  # [O, KH, KW, I]
    b = rng.normal(size=4).astype(np.float32)
    if dtype == "int8":
        ws = np.abs(w).reshape(4, -1).max(1) / 127
        x_q, w_q = {"scale": 0.05, "zero_point": 3}, {"scale": list(ws), "zero_point": [0] * 4}
        tensors = [tb.tensor("w", "int8", w.shape, data=np.round(w / ws[:, None, None, None]).astype(np.int8), **w_q),
                   tb.tensor("x", "int8", [1, *size, 2], **x_q),
                   tb.tensor("b", "int32", [4], data=np.round(b / (0.05 * ws)).astype(np.int32),
                             scale=list(0.05 * ws), zero_point=[0] * 4),
                   tb.tensor("y", "int8", [1, *out, 4], scale=0.08, zero_point=-2)]
    else:
        tensors = [tb.tensor("w", "float32", w.shape, data=w), tb.tensor("x", "float32", [1, *size, 2]),
                   tb.tensor("b", "float32", [4], data=b), tb.tensor("y", "float32", [1, *out, 4])]
    tensors.append(tb.tensor("shape", "int32", [4], data=np.array([1, *out, 4], np.int32)))
    data = tb.build_tflite(tensors, [tb.op("TRANSPOSE_CONV", [4, 0, 1, 2], [3], "TransposeConvOptions", padding=padding,
                                           stride_h=stride[0], stride_w=stride[1])], [1], [3])
    want, got = _both(data, {"x": _data(dtype, (1, *size, 2), rng)}, tmp_path)
    if dtype == "int8":
        assert _steps(got["y"], want["y"]) <= 1 and np.unique(want["y"]).size > 20
    else:
        np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5, atol=1e-5)
