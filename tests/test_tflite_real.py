"""What real TFLite models have and the samples did not (issue 14): resource variables
and other ops with effects, sparse and zero-element constants, custom ops that only
LiteRT's default delegate runs. Each model is built here, legalized, and run on LiteRT
before and after."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import legalizer
import tflite_build as tb
from legalizer.check.litert import LiteRTModel, litert_available
from legalizer.exporters.tflite import to_tflite
from legalizer.ir.graph import OP
from legalizer.pipeline import RunOptions, run
from legalizer.tflite_schema import read, serialize
from test_cli import assert_clean, legalize

needs_litert = pytest.mark.skipif(not litert_available(), reason="needs ai-edge-litert (pip install -e '.[litert]')")
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
def test_bad_sparsity_is_one_line_and_exit_2(case, tmp_path):
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
    assert check["provider"] == "LiteRT default resolver (XNNPACK), for custom ops Convolution2DTransposeBias"
    assert _compared(check) == {"(LiteRT)": 1}
    assert check["error"] == ("output 'y' of subgraph 'main' not compared on onnxruntime: no ONNX form for TFLite"
                              " ops: CUSTOM.Convolution2DTransposeBias")
    x = RNG.normal(size=(1, 3, 3, 2)).astype(np.float32)
    want = _deconv(x) + np.array([1, -1, 0.5], np.float32)
    for path in (src, out):
        np.testing.assert_allclose(_litert(path, {"x": x}, kernels="default")["y"], want, rtol=1e-5, atol=1e-5)
    with pytest.raises(Exception, match="unresolved custom op: Convolution2DTransposeBias"):
        _litert(src, {"x": x})  # the builtin kernels cannot
