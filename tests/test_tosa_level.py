"""--tosa-level (default 8k: MAX_RANK 6): rank folding keeps the emitted TOSA within the
level, tosa-opt's level validation accepts it, and a graph input or output over the level
exits 1 naming the tensor, the limit and the level, with nothing written."""

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from legalizer.numeric.tosa_validate import validate
from legalizer.exporters.tosa_level import LEVELS, level_violations

F = TensorProto.FLOAT
RNG = np.random.default_rng(1)


def _save(path, nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return path


def rank7_inside(tmp_path):
    """x:[720] -> Reshape to rank 7 -> Add (rank-7 constant) -> Relu -> Mul by x's
    rank-7 view -> Reshape to [24, 30]."""
    s7 = [2, 3, 1, 4, 5, 1, 6]
    return _save(tmp_path / "r7.onnx", [
        helper.make_node("Reshape", ["x", "s7"], ["h0"], name="to7"),
        helper.make_node("Add", ["h0", "c"], ["h1"], name="add"),
        helper.make_node("Relu", ["h1"], ["h2"], name="relu"),
        helper.make_node("Mul", ["h2", "h0"], ["h3"], name="mul"),
        helper.make_node("Reshape", ["h3", "so"], ["y"], name="back")],
        [helper.make_tensor_value_info("x", F, [720])], [helper.make_tensor_value_info("y", F, [24, 30])],
        [numpy_helper.from_array(np.asarray(s7, np.int64), "s7"),
         numpy_helper.from_array(np.asarray([24, 30], np.int64), "so"),
         numpy_helper.from_array(RNG.standard_normal([4, 5, 1, 6]).astype(np.float32), "c")])


def rank7_input(tmp_path):
    shape = [1, 2, 1, 2, 1, 2, 3]
    return _save(tmp_path / "in7.onnx", [helper.make_node("Add", ["x", "c"], ["y"], name="add")],
                 [helper.make_tensor_value_info("x", F, shape)], [helper.make_tensor_value_info("y", F, shape)],
                 [numpy_helper.from_array(RNG.standard_normal([3]).astype(np.float32), "c")])


def test_a_rank7_reshape_inside_is_folded_and_the_check_passes(tmp_path, legalize_in_process):
    path = rank7_inside(tmp_path)
    code, out, err = legalize_in_process(path, "--emit", "onnx", "--emit", "tosa", "--report", tmp_path / "r.json",
                                         "-q")
    assert code == 0, out + err
    text = (tmp_path / "r7.legal.tosa.mlir").read_text()
    assert level_violations(text, LEVELS["8k"]) == []
    ranks = {len(t.split("x")) - 1 for t in __import__("re").findall(r"tensor<([^>]*)>", text)}
    assert max(ranks) <= 6
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["check"]["ok"] is True
    rules = rep["target_rules"]
    assert rules["profile"] == {"max_rank": 6, "broadcasting": "size-1", "refuses": {}, "static_shapes": False,
                                "level": "8k"}
    assert [r["node"] for r in rules["refused_before"]] == ["to7", "add", "relu", "mul", "back"]
    assert rules["refused_before"][1]["reasons"] == ["'h0' has rank 7 > 6 (MAX_RANK of TOSA level 8K)"]
    assert rules["refused_after"] == []


@pytest.mark.needs("tosa-opt")
def test_tosa_opt_accepts_the_folded_module_at_level_8k(tmp_path, legalize_in_process):
    path = rank7_inside(tmp_path)
    assert legalize_in_process(path, "--emit", "tosa", "-q", "--no-check")[0] == 0
    ok, error = validate((tmp_path / "r7.legal.tosa.mlir").read_text())
    assert ok, error


@pytest.mark.needs("tosa-opt")
def test_level_none_keeps_rank7_and_tosa_opt_then_refuses_it_at_8k(tmp_path, legalize_in_process):
    path = rank7_inside(tmp_path)
    code, out, err = legalize_in_process(path, "--emit", "tosa", "--tosa-level", "none", "-q")
    assert code == 0, out + err
    text = (tmp_path / "r7.legal.tosa.mlir").read_text()
    assert "tensor<2x3x1x4x5x1x6xf32>" in text
    ok, error = validate(text)
    assert not ok and "failed level check: result rank(shape) <= MAX_RANK" in error
    assert [v.limit for v in level_violations(text, LEVELS["8k"])][:1] == ["MAX_RANK"]


def test_a_graph_input_over_the_level_exits_1_naming_it(tmp_path, legalize_in_process):
    path = rank7_input(tmp_path)
    code, out, err = legalize_in_process(path, "--emit", "onnx", "--emit", "tosa", "--report", tmp_path / "r.json")
    assert code == 1
    assert ("error: in the output, node 'x': 'func.func' op failed level check: graph input 'x'"
            " (1x2x1x2x1x2x3xf32) has rank 7, over MAX_RANK = 6 of TOSA level 8K") in out
    assert ("'return' op failed level check: graph output 'y' (1x2x1x2x1x2x3xf32) has rank 7, over MAX_RANK = 6"
            " of TOSA level 8K") in out
    assert "the TOSA module is over its level: 2 tensors over the limits" in out
    assert out.count("failed level check") == 2  # each tensor once, not again as the reshapes' operands
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in7.onnx", "r.json"]  # nothing written
    rep = json.loads((tmp_path / "r.json").read_text())
    assert {v["code"] for v in rep["violations"]} == {"tosa-level"}
    assert {v["stage"] for v in rep["violations"]} == {"output"}


def test_level_none_writes_the_rank7_module(tmp_path, legalize_in_process):
    path = rank7_input(tmp_path)
    code, out, err = legalize_in_process(path, "--emit", "tosa", "--tosa-level", "none", "-q")
    assert code == 0, out + err
    assert "tensor<1x2x1x2x1x2x3xf32>" in (tmp_path / "in7.legal.tosa.mlir").read_text()


def test_the_onnx_form_alone_is_not_level_checked(tmp_path, legalize_in_process):
    # The level is TOSA's: an ONNX output of the tosa form is written (its inside folded).
    path = rank7_input(tmp_path)
    code, out, err = legalize_in_process(path, "-q")
    assert code == 0, out + err


@pytest.mark.parametrize("args,message", [
    (("--tosa-level", "16k"), "unknown level '16k' of target 'tosa'; expected one of 8k, none"),
    (("--tosa-level", "8k", "--target", "xla"), "--tosa-level applies to --target tosa, not --target xla"),
])
def test_bad_levels_are_usage_errors(tmp_path, args, message, legalize_in_process):
    path = rank7_input(tmp_path)
    code, out, err = legalize_in_process(path, *args)
    assert code == 2
    assert message in err


SIZE_MODULE = """module {
  func.func @main(%arg0: tensor<65536x32768xf32>) -> tensor<65536x32768xf32> {
    %0 = tosa.abs %arg0 : (tensor<65536x32768xf32>) -> tensor<65536x32768xf32>
    return %0 : tensor<65536x32768xf32>
  }
}
"""


def test_size_over_max_log2_size_is_named():
    found = [(v.op, v.tensor, v.limit, v.detail) for v in level_violations(SIZE_MODULE, LEVELS["8k"])]
    assert found == [("func.func", "%arg0", "MAX_LOG2_SIZE", "8589934592 bytes"),
                     ("return", "%0", "MAX_LOG2_SIZE", "8589934592 bytes")]  # %0 is the graph output
    assert level_violations(SIZE_MODULE, LEVELS["none"]) == []
    small = SIZE_MODULE.replace("65536x32768", "16384x32768")  # 2**31 bytes: one over
    assert {v.limit for v in level_violations(small, LEVELS["8k"])} == {"MAX_LOG2_SIZE"}
    assert level_violations(SIZE_MODULE.replace("65536x32768", "16384x32767"), LEVELS["8k"]) == []


@pytest.mark.needs("tosa-opt")
def test_tosa_opt_agrees_on_the_size_limit():
    ok, error = validate(SIZE_MODULE)
    assert not ok and "tensor size (in bytes) <= (1 << MAX_LOG2_SIZE - 1)" in error
    ok, error = validate(SIZE_MODULE.replace("65536x32768", "16384x32767"))
    assert ok, error


def _concat_module(n: int) -> str:
    args = ", ".join(f"%arg{i}: tensor<1x2xf32>" for i in range(n))
    ops = ", ".join(f"%arg{i}" for i in range(n))
    types = ", ".join("tensor<1x2xf32>" for _ in range(n))
    return (f"module {{\n  func.func @main({args}) -> tensor<{n}x2xf32> {{\n"
            f"    %cat = \"tosa.concat\"({ops}) <{{axis = 0 : i32}}> : ({types}) -> tensor<{n}x2xf32>\n"
            f"    return %cat : tensor<{n}x2xf32>\n  }}\n}}\n")


def test_a_concat_of_more_than_64_tensors_is_named():
    found = [(v.op, v.tensor, v.limit, v.detail) for v in level_violations(_concat_module(65), LEVELS["8k"])]
    assert found == [("tosa.concat", "%cat", "MAX_TENSOR_LIST_SIZE", "a list of 65 tensors")]
    assert level_violations(_concat_module(64), LEVELS["8k"]) == []


@pytest.mark.needs("tosa-opt")
def test_tosa_opt_agrees_on_the_tensor_list_limit():
    ok, error = validate(_concat_module(65))
    assert not ok and "MAX_TENSOR_LIST_SIZE (64), got 65" in error
    ok, error = validate(_concat_module(64))
    assert ok, error


def test_an_onnx_concat_of_65_tensors_is_not_written_as_tosa(tmp_path, legalize_in_process):
    path = _save(tmp_path / "cat.onnx", [helper.make_node("Concat", ["x"] * 65, ["y"], axis=0, name="cat")],
                 [helper.make_tensor_value_info("x", F, [1, 2])], [helper.make_tensor_value_info("y", F, [65, 2])])
    code, out, err = legalize_in_process(path, "--emit", "onnx", "--emit", "tosa", "-q")
    assert code == 1
    assert ("'tosa.concat' op failed level check: 'tosa.concat' value 'y' has a list of 65 tensors, over"
            " MAX_TENSOR_LIST_SIZE = 64 of TOSA level 8K") in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cat.onnx"]
    assert legalize_in_process(path, "--emit", "tosa", "--tosa-level", "none", "-q")[0] == 0


RANK7_USES = """module {
  func.func @main(%arg0: tensor<720xf32>) -> tensor<720xf32> {
    %s = tosa.const_shape {values = dense<[2, 3, 1, 4, 5, 1, 6]> : tensor<7xindex>} : () -> !tosa.shape<7>
    %h = tosa.reshape %arg0, %s : (tensor<720xf32>, !tosa.shape<7>) -> tensor<2x3x1x4x5x1x6xf32>
    %a = tosa.abs %h : (tensor<2x3x1x4x5x1x6xf32>) -> tensor<2x3x1x4x5x1x6xf32>
    %b = tosa.add %h, %a : (tensor<2x3x1x4x5x1x6xf32>, tensor<2x3x1x4x5x1x6xf32>) -> tensor<2x3x1x4x5x1x6xf32>
    %t = tosa.const_shape {values = dense<[720]> : tensor<1xindex>} : () -> !tosa.shape<1>
    %y = tosa.reshape %b, %t : (tensor<2x3x1x4x5x1x6xf32>, !tosa.shape<1>) -> tensor<720xf32>
    return %y : tensor<720xf32>
  }
}
"""


def test_each_tensor_over_the_level_is_named_once_where_it_is_defined():
    # %h is used by two ops, %a and %b by one more each: three tensors, three violations.
    found = [(v.op, v.tensor, v.detail, v.line) for v in level_violations(RANK7_USES, LEVELS["8k"])]
    assert found == [("tosa.reshape", "%h", "rank 7", 4), ("tosa.abs", "%a", "rank 7", 5),
                     ("tosa.add", "%b", "rank 7", 6)]
    # a returned result is named as the graph output, once
    returned = RANK7_USES.replace("-> tensor<720xf32> {", "-> tensor<2x3x1x4x5x1x6xf32> {").replace(
        "return %y : tensor<720xf32>", "return %b : tensor<2x3x1x4x5x1x6xf32>")
    found = [(v.op, v.tensor) for v in level_violations(returned, LEVELS["8k"])]
    assert found == [("tosa.reshape", "%h"), ("tosa.abs", "%a"), ("return", "%b")]
