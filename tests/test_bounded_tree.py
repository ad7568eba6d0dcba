"""The whole tree is bounded (issue 30, item 6): an output larger than a chunk stays in
the child that ran it and is compared a chunk at a time (``child.Held``,
``compare._compare_in_chunks``), so ``legalize`` itself holds a few chunks, not the
outputs, and not float64 copies of them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T, helper

from legalizer.numeric import child, compare as cmp
from legalizer.numeric.compare import Comparator
from legalizer.numeric.ort_session import OrtRunner
from legalizer.numeric.results import CheckResult

from helpers import cli_command, cli_env

ROOT = Path(__file__).resolve().parents[1]


def _cases():
    rng = np.random.default_rng(7)
    e = rng.standard_normal(10_001).astype(np.float32)
    near = e + rng.standard_normal(e.size).astype(np.float32) * 1e-6
    with_nan = e.copy()
    with_nan[[3, 5000]] = np.nan
    inf = e.copy()
    inf[[7, 9000]] = np.inf
    ints = rng.integers(-100, 100, 10_001).astype(np.int32)
    off = ints.copy()
    off[[1, 6000, 10_000]] += np.array([1, 3, -2], np.int32)
    return [("near", e, near, False), ("same", e, e.copy(), False), ("nan", with_nan, with_nan.copy(), False),
            ("nan off", with_nan, e, False), ("inf", inf, inf.copy(), False), ("ints", ints, off, False),
            ("steps", ints.astype(np.int8), off.astype(np.int8), True), ("bools", ints > 0, off > 0, False),
            ("shape", e, e[:-1], False), ("dtype", e, e.astype(np.float64), False),
            ("2d", e[:10_000].reshape(100, 100), near[:10_000].reshape(100, 100), False)]


@pytest.mark.parametrize("name,expected,got,quantized", _cases(), ids=[c[0] for c in _cases()])
def test_a_comparison_in_chunks_gives_the_whole_ones_result(monkeypatch, name, expected, got, quantized):
    whole = cmp.compare(name, expected, got, 1e-5, 1e-6, quantized=quantized)
    monkeypatch.setattr(cmp, "CHUNK", 1000)
    chunked = cmp.compare(name, expected, got, 1e-5, 1e-6, quantized=quantized)
    assert (chunked.ok, chunked.detail) == (whole.ok, whole.detail)
    assert chunked.max_abs_err == whole.max_abs_err or (np.isnan(chunked.max_abs_err) and np.isnan(whole.max_abs_err))
    assert chunked.max_rel_err == whole.max_rel_err or (np.isnan(chunked.max_rel_err) and np.isnan(whole.max_rel_err))
    a, b = dict(whole.stats or {}), dict(chunked.stats or {})
    for k in ("p50_abs_err", "p90_abs_err", "p99_abs_err"):  # from every 11th element in chunks
        if k in a:
            assert b.pop(k) == pytest.approx(a.pop(k), rel=0.2, abs=1e-6)
    for k in ("mean_abs_err", "mean_rel_err"):
        if k in a:
            assert b.pop(k) == pytest.approx(a.pop(k), rel=1e-12)
    assert b == a


def _expand(n: int, scale: float = 1.0) -> onnx.ModelProto:
    g = helper.make_graph([helper.make_node("Expand", ["x", "s"], ["e"]), helper.make_node("Mul", ["e", "k"], ["y"]),
                           helper.make_node("Identity", ["x"], ["small"])], "big",
                          [helper.make_tensor_value_info("x", T.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [n]),
                           helper.make_tensor_value_info("small", T.FLOAT, [1])],
                          [helper.make_tensor("s", T.INT64, [1], [n]), helper.make_tensor("k", T.FLOAT, [1], [scale])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_outputs_above_a_chunk_stay_in_the_child(monkeypatch):
    monkeypatch.setattr(child, "CHUNK_BYTES", 4096)
    monkeypatch.setattr(cmp, "CHUNK", 500)
    ref = child.ChildRunner(OrtRunner, _expand(5000).SerializeToString(), ["CPUExecutionProvider"], model="ref")
    new = child.ChildRunner(OrtRunner, _expand(5000, 1.5).SerializeToString(), ["CPUExecutionProvider"], model="new")
    with ref, new:
        feed = {"x": np.array([2.0], np.float32)}
        held = ref.infer_held(feed)
        assert list(held) == ["y", "small"]
        assert isinstance(held["y"], child.Held) and isinstance(held["small"], np.ndarray)
        assert (held["y"].shape, held["y"].dtype, held["y"].size) == ((5000,), np.dtype(np.float32), 5000)
        np.testing.assert_array_equal(np.asarray(held["y"]), np.full(5000, 2.0, np.float32))
        result = CheckResult(True, "cpu")
        Comparator(ref, new, result, 1e-5, 1e-6).binding({}, feed)
        [binding] = result.bindings
        y, small = binding.outputs
        assert (y.name, y.ok, y.max_abs_err, y.stats["mismatched"], y.stats["total"]) == ("y", False, 1.0, 5000, 5000)
        assert small.ok
        # valid until its runner runs again: then an earlier output is refused, not mixed up
        stale = held["y"]
        ref.infer_held(feed)
        with pytest.raises(child.ChildError, match="no output 'y' of that run is kept"):
            stale.piece(0, 10)


def _tree_peak(argv) -> dict:
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "tree_peak.py"), "--json", "--", *argv],
                       capture_output=True, text=True, env=cli_env(), timeout=1200)
    return json.loads(p.stderr.strip().splitlines()[-1])


def test_a_256_mib_output_is_compared_with_the_tree_under_1_5_gb(tmp_path):
    """A 96-byte model whose output is 256 MiB (one Expand): the tree held 4.7 GB
    before (float64 copies of both outputs, and their errors, in the parent)."""
    model = tmp_path / "big.onnx"
    g = helper.make_graph([helper.make_node("Expand", ["x", "s"], ["y"])], "big",
                          [helper.make_tensor_value_info("x", T.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [1 << 26])],
                          [helper.make_tensor("s", T.INT64, [1], [1 << 26])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), model)
    run = _tree_peak(cli_command(model, tmp_path / "o.onnx", "-q"))
    assert run["rc"] == 0, run
    assert run["peak_rss_mb"] < 1500, run


def test_outputs_held_in_the_child_count_against_run_memory():
    """--run-memory bounds what the child holds in all: with the reference's 96 MiB
    output held there, the candidate's run may add what is left of 160 MiB, not 160 MiB
    more (it fitted before, and the child held twice the limit); the fault names the
    limit."""
    n = 24 << 20  # 96 MiB of float32
    feed = {"x": np.array([2.0], np.float32)}
    g = helper.make_graph([helper.make_node("Expand", ["x", "s"], ["y"])], "big",
                          [helper.make_tensor_value_info("x", T.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [n])], [helper.make_tensor("s", T.INT64, [1], [n])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()
    ref = child.ChildRunner(OrtRunner, model, ["CPUExecutionProvider"], model="ref")
    new = child.ChildRunner(OrtRunner, model, ["CPUExecutionProvider"], model="new")
    try:
        with ref, new:  # loaded under the default limit, then run under 160 MiB
            with child.limited(memory=160 << 20):
                assert isinstance(ref.infer_held(feed)["y"], child.Held)
                with pytest.raises(child.RunFault, match=r"^new on onnxruntime: it ran out of its memory"
                                                         r" \(0\.156 GiB, --run-memory\)$"):
                    new.infer_held(feed)
    finally:
        child.stop_all()
    try:
        with new:  # alone, the same run fits
            with child.limited(memory=160 << 20):
                assert new.infer_held(feed)["y"].nbytes == 4 * n
    finally:
        child.stop_all()
