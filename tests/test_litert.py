"""legalizer.numeric.litert: .tflite models built in the test (tests/tflite_build.py) run on
LiteRT and agree with numpy; dynamic dims resize; signatures and subgraphs; one-line errors."""

import re
import sys

import numpy as np
import pytest

import tflite
import tflite_build as tb
from needs import require

from legalizer.numeric import litert
from legalizer.numeric.ort import CheckUnavailable


@pytest.fixture
def lrt():
    require("litert")
    return litert


def _rand(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("kernels", ["builtin", "reference"])
def test_add_with_constant_matches_numpy(lrt, kernels):
    x = _rand((1, 2, 3))
    out = lrt.run_tflite(tb.add_const_model(), {"x": x}, kernels=kernels)
    assert list(out) == ["y"]
    np.testing.assert_array_equal(out["y"], x + np.array([1, 2, 3], np.float32))


def test_runs_from_a_path(lrt, tmp_path):
    path = tmp_path / "add.tflite"
    path.write_bytes(tb.add_const_model())
    x = _rand((1, 2, 3), 1)
    np.testing.assert_array_equal(lrt.run_tflite(path, {"x": x})["y"], x + np.array([1, 2, 3], np.float32))
    np.testing.assert_array_equal(lrt.run_tflite(str(path), {"x": x})["y"], x + np.array([1, 2, 3], np.float32))


def test_dynamic_dim_resizes_to_each_size(lrt):
    model = lrt.LiteRTModel(tb.add_dynamic_model())
    b = _rand((3,), 9)
    for n in (4, 1, 2):  # grow, shrink to 1, grow again on one interpreter
        x = _rand((n, 2, 3), n)
        y = model.run({"x": x, "b": b})["y"]
        assert y.shape == (n, 2, 3)
        np.testing.assert_array_equal(y, x + b)


def test_input_specs(lrt):
    specs = lrt.input_specs(tb.add_dynamic_model())
    assert [(s.name, s.dtype, s.shape_signature, s.quantization) for s in specs] == [
        ("x", np.dtype(np.float32), [-1, 2, 3], (0.0, 0)),
        ("b", np.dtype(np.float32), [3], (0.0, 0)),
    ]
    (q,) = lrt.input_specs(tb.add_int8_model())
    assert q.dtype == np.int8 and q.shape_signature == [1, 2, 3] and q.quantization == (0.5, -1)


def test_int8_add_matches_dequantized_numpy(lrt):
    x = np.array([[[-128, -3, 0], [5, 60, 127]]], np.int8)
    out = lrt.run_tflite(tb.add_int8_model(), {"x": x})["y"]
    real = 0.5 * (x.astype(np.float64) + 1) + 0.25 * (np.array([4, -8, 12]) - 2)
    expected = np.clip(np.round(real / 0.5) - 1, -128, 127)
    assert out.dtype == np.int8
    assert np.max(np.abs(out.astype(np.int64) - expected)) <= 1


def _two_subgraph_model(signatures=True):
    """Subgraph 0: y = a + b; subgraph 1: z = p * q (rank-mismatched, dynamic p)."""
    f = "float32"
    sigs = [{"key": "add_fn", "subgraph": 0, "inputs": {"lhs": 0, "rhs": 1}, "outputs": {"sum": 2}},
            {"key": "mul_fn", "subgraph": 1, "inputs": {"p_in": 0, "q_in": 1}, "outputs": {"prod": 2}}]
    return tb.build_tflite(
        [tb.tensor("a", f, [2, 3]), tb.tensor("b", f, [2, 3]), tb.tensor("y", f, [2, 3])],
        [tb.op("ADD", [0, 1], [2], "AddOptions")], [0, 1], [2],
        subgraphs=[{"name": "mul", "inputs": [0, 1], "outputs": [2],
                    "tensors": [tb.tensor("p", f, [1, 3], shape_signature=[-1, 3]), tb.tensor("q", f, [3]),
                                tb.tensor("z", f, [1, 3], shape_signature=[-1, 3])],
                    "operators": [tb.op("MUL", [0, 1], [2], "MulOptions")]}],
        signatures=sigs if signatures else None)


@pytest.mark.parametrize("signatures", [True, False])
def test_subgraph_by_index_and_signature(lrt, signatures):
    data = _two_subgraph_model(signatures)
    model = lrt.LiteRTModel(data)
    a, b = _rand((2, 3), 1), _rand((2, 3), 2)
    np.testing.assert_array_equal(model.run({"a": a, "b": b})["y"], a + b)
    p, q = _rand((4, 3), 3), _rand((3,), 4)
    choices = [1, "mul_fn"] if signatures else [1]
    for which in choices:
        out = model.run({"p": p, "q": q}, subgraph=which)
        assert list(out) == ["z"]  # keyed by tensor name, signature or not
        np.testing.assert_array_equal(out["z"], p * q)
        assert [s.shape_signature for s in model.input_specs(which)] == [[-1, 3], [3]]
    if signatures:
        assert model.signatures == ["add_fn", "mul_fn"]
        # a signature's own input names are accepted too
        np.testing.assert_array_equal(model.run({"p_in": p, "q_in": q}, subgraph="mul_fn")["z"], p * q)
        with pytest.raises(litert.LiteRTError, match="no signature 'nope'"):
            model.run({}, subgraph="nope")
    with pytest.raises(litert.LiteRTError, match="no subgraph 5"):
        model.run({}, subgraph=5)


def test_errors_are_one_line(lrt):
    model = lrt.LiteRTModel(tb.add_dynamic_model())
    b = np.zeros(3, np.float32)
    cases = [
        ({"x": np.zeros((2, 3, 3), np.float32), "b": b}, "resize", "shape signature [-1, 2, 3]"),
        ({"x": np.zeros((2, 2, 3)), "b": b}, "set", "is float32, got float64"),
        ({"x": np.zeros((2, 2, 3), np.float32)}, "set", "no value given for input 'b'"),
        ({"x": np.zeros((2, 2, 3), np.float32), "b": b, "c": b}, "set", "unknown input"),
    ]
    for feeds, stage, words in cases:
        with pytest.raises(litert.LiteRTError, match=re.escape(words)) as info:
            model.run(feeds)
        assert info.value.stage == stage and "\n" not in str(info.value)

    # Both dims dynamic: sizes 2 and 3 do not broadcast; LiteRT says so at prepare time.
    f = "float32"
    dyn = tb.build_tflite([tb.tensor("a", f, [1], shape_signature=[-1]), tb.tensor("b", f, [1], shape_signature=[-1]),
                           tb.tensor("y", f, [1], shape_signature=[-1])],
                          [tb.op("ADD", [0, 1], [2], "AddOptions")], [0, 1], [2])
    with pytest.raises(litert.LiteRTError, match="not broadcastable") as info:
        lrt.run_tflite(dyn, {"a": np.zeros(2, np.float32), "b": np.zeros(3, np.float32)})
    assert info.value.stage == "allocate" and "\n" not in str(info.value)
    # ... and a dynamic dim that is 1 at run time broadcasts.
    out = lrt.run_tflite(dyn, {"a": np.ones(1, np.float32), "b": np.arange(3, dtype=np.float32)})
    np.testing.assert_array_equal(out["y"], [1, 2, 3])

    with pytest.raises(litert.LiteRTError) as info:
        lrt.run_tflite(b"not a model" * 8, {})
    assert info.value.stage == "load" and "\n" not in str(info.value)
    with pytest.raises(litert.LiteRTError, match="no such file"):
        lrt.run_tflite("/nonexistent/model.tflite", {})

    custom = tb.build_tflite([tb.tensor("a", f, [1]), tb.tensor("y", f, [1])],
                             [tb.op("CUSTOM", [0], [1], custom_code="MyOp")], [0], [1])
    with pytest.raises(litert.LiteRTError, match="MyOp"):
        lrt.run_tflite(custom, {"a": np.zeros(1, np.float32)})


def test_unavailable_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ai_edge_litert", None)  # import fails
    assert litert.litert_available() is False
    with pytest.raises(CheckUnavailable, match=r"pip install 'legalizer\[litert\]'"):
        litert.run_tflite(tb.add_const_model(), {})


def test_builder_writes_options_and_quantization():
    """tests/tflite_build.py: a vector option, per-axis quantization, opcodes >127."""
    f = "float32"
    data = tb.build_tflite(
        [tb.tensor("x", f, [6]), tb.tensor("s", "int32", [2], data=np.array([2, 3], np.int32)),
         tb.tensor("y", f, [2, 3]), tb.tensor("w", "int8", [2, 3], data=np.ones((2, 3), np.int8),
                                               scale=[0.5, 0.25], zero_point=0, quantized_dimension=0),
         tb.tensor("z", f, [2, 3])],
        [tb.op("RESHAPE", [0, 1], [2], "ReshapeOptions", new_shape=[2, 3]),
         tb.op("STABLEHLO_ADD", [2, 2], [4])], [0], [4])
    m = tflite.Model.GetRootAs(data, 0)
    assert tflite.Model.ModelBufferHasIdentifier(data, 0)
    assert m.Buffers(0).DataLength() == 0
    sg = m.Subgraphs(0)
    opts = tflite.ReshapeOptions()
    table = sg.Operators(0).BuiltinOptions()
    opts.Init(table.Bytes, table.Pos)
    assert sg.Operators(0).BuiltinOptionsType() == tflite.BuiltinOptions.ReshapeOptions
    assert opts.NewShapeAsNumpy().tolist() == [2, 3]
    q = sg.Tensors(3).Quantization()
    assert q.ScaleAsNumpy().tolist() == [0.5, 0.25] and q.ZeroPointAsNumpy().tolist() == [0, 0]
    code = m.OperatorCodes(sg.Operators(1).OpcodeIndex())
    assert code.BuiltinCode() == tflite.BuiltinOperator.STABLEHLO_ADD
    assert code.DeprecatedBuiltinCode() == tflite.BuiltinOperator.PLACEHOLDER_FOR_GREATER_OP_CODES
    assert np.frombuffer(m.Buffers(sg.Tensors(1).Buffer()).DataAsNumpy().tobytes(), np.int32).tolist() == [2, 3]
