"""Adding a runtime is its Runner subclass and one entry in the runtimes' table
(tests/toy_runtime.py: onnxruntime under another name, --provider toy): the check, the
command line's --provider and localization then run models on it, through the table."""

import json
import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from legalizer.numeric import child, runtimes
from legalizer.numeric.localize import localize_onnx
from legalizer.numeric.ort import check
from legalizer.numeric.settings import CheckSettings
from helpers import cli_in_process
from toy_runtime import PROVIDER, TOY

HERE = Path(__file__).resolve().parent
X = np.array([[0.5, -2.0, 3.0, 7.25]], np.float32)


def _chain(scale: float) -> onnx.ModelProto:
    """y = (x + 1) * scale + 1, x float[1, 4], through named values v0 and v1."""
    consts = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("one", 1.0), ("k", scale))]
    nodes = [helper.make_node("Add", ["x", "one"], ["v0"], name="add0"),
             helper.make_node("Mul", ["v0", "k"], ["v1"], name="mul"),
             helper.make_node("Add", ["v1", "one"], ["y"], name="add1")]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], consts)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.fixture
def toy(monkeypatch):
    """The toy runtime registered; the child started anew where it can import it."""
    monkeypatch.setattr(runtimes, "RUNTIMES", list(runtimes.RUNTIMES))
    runtimes.register(TOY)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p))
    child.stop_all()
    yield TOY
    child.stop_all()


def test_the_check_runs_on_the_registered_runtime(toy):
    assert runtimes.runner_for("onnx", PROVIDER) is toy and PROVIDER in runtimes.provider_choices()
    same = check(_chain(2.0), _chain(2.0), provider=PROVIDER, inputs={"x": X})
    assert same.ok and same.provider == "ToyExecutionProvider"
    assert [o.ok for b in same.bindings for o in b.outputs] == [True]
    off = check(_chain(2.0), _chain(3.0), provider=PROVIDER, inputs={"x": X})
    assert not off.ok and off.provider == "ToyExecutionProvider"
    (out,) = off.bindings[0].outputs
    assert out.name == "y" and not out.ok
    assert out.max_abs_err == pytest.approx(float(np.max(np.abs(X + 1))))  # (x+1)*3 against (x+1)*2


def test_localization_runs_on_the_registered_runtime(toy):
    loc = localize_onnx(_chain(3.0), _chain(2.0), {"x": X}, CheckSettings(PROVIDER, rtol=1e-4, atol=1e-5))
    assert loc.runtimes == "toy-ort vs toy-ort"
    assert [d.value for d in loc.divergence] == ["v1", "y"] and loc.culprit.op == "Mul"
    assert loc.culprit.max_abs_err == pytest.approx(float(np.max(np.abs(X + 1))))
    cand, ref, pairs = loc.values
    np.testing.assert_allclose(cand["v1"], (X + 1) * 3)
    np.testing.assert_allclose(ref["v1"], (X + 1) * 2)


def test_the_command_line_checks_on_the_registered_provider(toy, tmp_path):
    src = tmp_path / "chain.onnx"
    onnx.save(_chain(2.0), src)
    code, out, err = cli_in_process(str(src), "--provider", PROVIDER, "--report", str(tmp_path / "r.json"))
    assert code == 0, err
    assert out.splitlines()[-1].endswith("outputs match on ToyExecutionProvider")
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["check"]["ok"] and report["check"]["provider"] == "ToyExecutionProvider"


def test_a_provider_no_runtime_serves_is_refused(tmp_path):
    src = tmp_path / "chain.onnx"
    onnx.save(_chain(2.0), src)
    code, out, err = cli_in_process(str(src), "--provider", PROVIDER)
    assert code == 2 and err.strip().endswith("--provider must be auto, cpu, cuda or qnn, not 'toy'")


def test_a_runner_gives_values_unloaded_then_runs_loaded(toy):
    """One runner serves localization and the check: asked for values first (its model
    not loaded for them), then loaded and run, it gives the same numbers."""
    runner = runtimes.runner_for("onnx", PROVIDER).runner(_chain(2.0), PROVIDER)
    try:
        assert runner.all_names() == ["v0", "v1", "y"]
        got = runner.values({"x": X}, ["v1"])
        np.testing.assert_allclose(got["v1"], (X + 1) * 2)
        assert runner.runs == 1 and not runner.is_active
        runner.activate()
        assert runner.provider == "ToyExecutionProvider"
        np.testing.assert_allclose(runner.infer({"x": X})["y"], (X + 1) * 2 + 1)
    finally:
        runner.close()
