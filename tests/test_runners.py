"""legalizer.numeric.runner / compare: one runner interface over onnxruntime, LiteRT,
IREE, XLA and PyTorch, and the one comparison loop over dim bindings."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import tflite_build as tb
from needs import require

from legalizer.numeric.compare import Comparator, Pairing, unless_compared
from legalizer.numeric.inputs import InputSpec, make_feeds, small_then_one
from legalizer.numeric.ort import OrtRunner
from legalizer.numeric.results import CheckResult, OutputResult
from legalizer.numeric.runner import Runner, positional

# z = x + y, x: [N, 3], y: [1, 3], on each runtime
TOSA = """func.func @main(%x: tensor<?x3xf32>, %y: tensor<1x3xf32>) -> tensor<?x3xf32> {
  %0 = tosa.add %x, %y : (tensor<?x3xf32>, tensor<1x3xf32>) -> tensor<?x3xf32>
  return %0 : tensor<?x3xf32>
}"""
STABLEHLO = """func.func @main(%x: tensor<?x3xf32>, %y: tensor<1x3xf32>) -> tensor<?x3xf32> {
  %0 = "stablehlo.get_dimension_size"(%x) {dimension = 0 : i64} : (tensor<?x3xf32>) -> tensor<i32>
  %1 = stablehlo.reshape %0 : (tensor<i32>) -> tensor<1xi32>
  %2 = stablehlo.constant dense<3> : tensor<1xi32>
  %3 = stablehlo.concatenate %1, %2, dim = 0 : (tensor<1xi32>, tensor<1xi32>) -> tensor<2xi32>
  %4 = stablehlo.dynamic_broadcast_in_dim %y, %3, dims = [0, 1] : (tensor<1x3xf32>, tensor<2xi32>) -> tensor<?x3xf32>
  %5 = stablehlo.add %x, %4 : tensor<?x3xf32>
  return %5 : tensor<?x3xf32>
}"""


def _onnx_add() -> onnx.ModelProto:
    graph = helper.make_graph([helper.make_node("Add", ["x", "y"], ["z"])], "add",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3]),
                               helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [None, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _compare_with_onnxruntime(candidate: Runner) -> CheckResult:
    reference = OrtRunner(_onnx_add(), ["CPUExecutionProvider"]).activate()
    specs = reference.input_specs()
    assert specs == [InputSpec("x", TensorProto.FLOAT, ("x[0]", 3)), InputSpec("y", TensorProto.FLOAT, (1, 3))]
    result = CheckResult(True, f"{candidate.name} vs onnxruntime")
    with candidate:
        comparator = Comparator(reference, candidate, result, 1e-5, 1e-6, pairing=Pairing(by_position=True))
        for b in small_then_one(["x[0]"], {}):
            comparator.binding(b, make_feeds(specs, b, {}))
    return result


def test_onnxruntime_runner_declares_and_infers():
    with OrtRunner(_onnx_add(), ["CPUExecutionProvider"]) as runner:
        x, y = np.ones((2, 3), np.float32), np.arange(3, dtype=np.float32)[None]
        np.testing.assert_array_equal(runner.infer({"x": x, "y": y})["z"], x + y)
        assert runner.provider == "CPUExecutionProvider"
    assert not runner.is_active


def test_a_runner_is_activated_before_it_infers():
    with pytest.raises(RuntimeError, match="activate"):
        OrtRunner(_onnx_add(), ["CPUExecutionProvider"]).infer({})


@pytest.mark.parametrize("runtime", ["iree", "xla"])
def test_mlir_runners_agree_with_onnxruntime_per_binding(runtime):
    if runtime == "iree":
        require("iree")
        from legalizer.numeric.iree_run import IreeRunner as Mlir
        text = TOSA
    else:
        require("jax")
        from legalizer.numeric.xla_run import XlaRunner as Mlir
        text = STABLEHLO
    runner = Mlir(text)
    assert [(s.name, s.shape) for s in runner.input_specs()] == [("x", ("x[0]", 3)), ("y", (1, 3))]
    result = _compare_with_onnxruntime(runner)
    assert result.ok and [b.dims for b in result.bindings] == [{"x[0]": 3}, {"x[0]": 1}]
    assert [o.name for b in result.bindings for o in b.outputs] == ["z", "z"]


def test_litert_runner_declares_and_infers():
    require("litert")
    from legalizer.numeric.litert import LiteRTRunner

    with LiteRTRunner(tb.add_const_model()) as runner:
        assert [(s.name, s.shape) for s in runner.input_specs()] == [("x", (1, 2, 3))]
        x = np.ones((1, 2, 3), np.float32)
        np.testing.assert_array_equal(runner.infer({"x": x})["y"], x + np.array([1, 2, 3], np.float32))


class _Fixed(Runner):
    """Outputs given ahead; raises ``error`` instead when it has one."""

    name = "fixed"

    def __init__(self, outputs, error=None):
        super().__init__()
        self.outputs, self.error = outputs, error

    def input_specs(self):
        return []

    def infer_impl(self, feed):
        if self.error is not None:
            raise self.error
        return self.outputs


def _one(reference, candidate, **kw) -> CheckResult:
    result = CheckResult(True, "test")
    Comparator(reference.activate(), candidate.activate(), result, 1e-4, 1e-5, **kw).binding({}, {})
    return result


def test_pairing_by_name_and_by_position():
    a, b = np.zeros(2, np.float32), np.ones(2, np.float32)
    by_name = _one(_Fixed({"p": a, "q": b}), _Fixed({"q": b}))
    assert [(o.name, o.ok, o.detail) for o in by_name.bindings[0].outputs] == [
        ("p", False, "missing from the legalized model's outputs"), ("q", True, "")]
    counted = _one(_Fixed(positional([a, b])), _Fixed(positional([a])), pairing=Pairing(
        by_position=True, count_mismatch=lambda want, have: [OutputResult("*", False, detail=f"{want} != {have}")]))
    assert [(o.name, o.detail) for o in counted.bindings[0].outputs] == [("*", "2 != 1")]


def test_reference_refusal_skips_and_candidate_failure_fails_each_output():
    skipped = _one(_Fixed({}, ValueError("no such size\nmore")), _Fixed({}))
    assert skipped.bindings[0].skipped == "original fails: no such size"
    assert unless_compared(skipped, "why: ").error == "why: original fails: no such size" and not skipped.ran
    failed = _one(_Fixed({"p": np.zeros(1)}), _Fixed({}, RuntimeError("boom")))
    assert [(o.name, o.ok, o.detail) for o in failed.bindings[0].outputs] == [("p", False, "boom")]
    with pytest.raises(RuntimeError):
        _one(_Fixed({"p": np.zeros(1)}), _Fixed({}, RuntimeError("boom")), candidate_errors=())
