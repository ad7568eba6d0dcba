"""A negative ``dim_value`` declared on a graph input, output or value_info entry
(Paddle2ONNX and older exporters write -1 for a dynamic dim; onnxruntime runs these
models) is an anonymous dynamic dim, ``?``: one warning for each place, legalized and
checked like any ``?`` (the check binds ``x[0]``; ``--dim x[0]=N`` binds it too), and
the written model keeps the -1 where nothing rewrote it. Negative dims elsewhere (an
initializer's dims, a Reshape target) stay bad input (tests/test_fuzz.py)."""

from __future__ import annotations

import json
from typing import List

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import legalizer
from legalizer.numeric.ort import SMALL

F = TensorProto.FLOAT
B = np.array([1.5, -2.0, 3.0], np.float32)




def paddle_style_model() -> onnx.ModelProto:
    """r = relu(x); y = r * s + b, with x[-1, 4, 3], r declared [-1, 4, 3] (value_info),
    y declared [-1, 4, 3], s[4, 1] and b[3] constants: a broadcast for each target."""
    s = numpy_helper.from_array(np.array([[2.0], [0.5], [-1.0], [4.0]], np.float32), "s")
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"),
         helper.make_node("Mul", ["r", "s"], ["m"], name="mul"),
         helper.make_node("Add", ["m", "b"], ["y"], name="add")], "g",
        [helper.make_tensor_value_info("x", F, [-1, 4, 3])], [helper.make_tensor_value_info("y", F, [-1, 4, 3])],
        [s, numpy_helper.from_array(B, "b")], value_info=[helper.make_tensor_value_info("r", F, [-1, 4, 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


WARNINGS = ["legalize: warning: graph input 'x' dim 0 is -1: read as a dynamic dim",
            "legalize: warning: graph output 'y' dim 0 is -1: read as a dynamic dim",
            "legalize: warning: value 'r' dim 0 is -1: read as a dynamic dim"]


def _anonymous(m: onnx.ModelProto) -> onnx.ModelProto:
    """``m`` with its negative dims spelled as anonymous dims (no value, no name)."""
    for vi in list(m.graph.input) + list(m.graph.output) + list(m.graph.value_info):
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_value") and d.dim_value < 0:
                d.ClearField("dim_value")
    return m


def _dims(vi) -> List:
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in vi.type.tensor_type.shape.dim]


@pytest.mark.parametrize("target", ["tosa", "xla"])
def test_a_minus_one_dim_is_legalized_and_checked_as_a_dynamic_dim(target, tmp_path, legalize_in_process):
    src = tmp_path / "m.onnx"
    onnx.save_model(paddle_style_model(), str(src))
    out = tmp_path / "m.legal.onnx"
    report = tmp_path / "report.json"
    code, stdout, stderr = legalize_in_process(src, "-o", out, "--target", target, "--report", report)
    assert code == 0, (stdout, stderr)
    assert stderr.splitlines() == WARNINGS  # each place once, nothing else
    assert stdout.splitlines()[-1] == f"{src}: legalized for '{target}' -> {out}, outputs match on CPUExecutionProvider"
    rep = json.loads(report.read_text())
    assert [b["dims"] for b in rep["check"]["bindings"]] == [{"x[0]": SMALL}, {"x[0]": 1}]
    assert all(b["ok"] and not b.get("skipped") for b in rep["check"]["bindings"])
    # Legalized as the same model with '?' is (the pipeline verified it under the target).
    assert _anonymous(onnx.load_model(str(out))) == legalizer.legalize(_anonymous(paddle_style_model()), target)
    # The model's own spelling where nothing rewrote the declaration.
    written = onnx.load_model(str(out))
    assert _dims(written.graph.input[0]) == [-1, 4, 3]
    assert _dims(written.graph.output[0]) == [-1, 4, 3]
    assert [_dims(v) for v in written.graph.value_info if v.name == "r"] == [[-1, 4, 3]]
    # And it computes what the original does, for a batch the check did not try.
    import onnxruntime as ort

    x = np.random.default_rng(0).standard_normal((5, 4, 3)).astype(np.float32)
    run = lambda path: ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(run(out), run(src), rtol=0, atol=0)
    np.testing.assert_allclose(run(out), np.maximum(x, 0) * np.array([[2.0], [0.5], [-1.0], [4.0]], np.float32) + B,
                               rtol=1e-6)


def test_the_dim_option_binds_an_anonymous_minus_one_dim(tmp_path, legalize_in_process):
    src = tmp_path / "m.onnx"
    onnx.save_model(paddle_style_model(), str(src))
    report = tmp_path / "report.json"
    code, stdout, stderr = legalize_in_process(src, "-o", tmp_path / "out.onnx", "--dim", "x[0]=7", "--report", report,
                                               "-q")
    assert code == 0, (stdout, stderr)
    assert [b["dims"] for b in json.loads(report.read_text())["check"]["bindings"]] == [{"x[0]": 7}]


def test_the_library_reads_a_negative_dim_as_an_anonymous_dim():
    model = legalizer.load(paddle_style_model())
    assert model.graph.value("x").type.shape == (None, 4, 3)
    r = model.graph.value("r").type.shape  # shape inference names the anonymous dim it passes on
    assert r[1:] == (4, 3) and not isinstance(r[0], int)
    assert model.warnings == [w[len("legalize: warning: "):] for w in WARNINGS]
    legal = legalizer.legalize(paddle_style_model(), "tosa")
    assert _dims(legal.graph.input[0]) == [-1, 4, 3]


def test_any_negative_size_is_dynamic_and_verify_only_says_so(tmp_path, legalize_in_process):
    """-3 too (what the bad-input tests used to refuse): legal under 'mlir'."""
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="n0")], "g",
                          [helper.make_tensor_value_info("x", F, [2, -3])], [helper.make_tensor_value_info("y", F, [2, 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    src = tmp_path / "m.onnx"
    onnx.save_model(m, str(src))
    code, stdout, stderr = legalize_in_process(src, "--verify-only")
    assert code == 0, (stdout, stderr)
    assert stderr.splitlines() == ["legalize: warning: graph input 'x' dim 1 is -3: read as a dynamic dim"]
    assert stdout.splitlines()[-1] == f"{src}: legal under 'mlir'"


def test_negative_dims_in_many_places_are_named_up_to_ten_then_counted():
    from legalizer.kinds.onnx.importer import NEGATIVE_DIM_WARNINGS

    n = NEGATIVE_DIM_WARNINGS + 3
    nodes = [helper.make_node("Relu", [f"v{k}"], [f"v{k + 1}"], name=f"relu{k}") for k in range(n)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("v0", F, [2, 3])],
                          [helper.make_tensor_value_info(f"v{n}", F, [2, 3])],
                          value_info=[helper.make_tensor_value_info(f"v{k}", F, [-1, 3]) for k in range(1, n)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    model = legalizer.load(m)
    assert model.warnings == [f"value 'v{k}' dim 0 is -1: read as a dynamic dim"
                              for k in range(1, NEGATIVE_DIM_WARNINGS + 1)] + \
        ["2 more declared dims are negative: read as dynamic dims"]


def test_a_subgraph_declaration_is_named_with_its_graph():
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["t"], name="then_relu")], "then", [],
                               [helper.make_tensor_value_info("t", F, [-1, 3])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"], name="else_neg")], "else", [],
                               [helper.make_tensor_value_info("e", F, [2, 3])])
    g = helper.make_graph([helper.make_node("If", ["c"], ["y"], name="if", then_branch=then_g, else_branch=else_g)],
                          "g", [helper.make_tensor_value_info("x", F, [2, 3]),
                                helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                          [helper.make_tensor_value_info("y", F, [2, 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    assert legalizer.load(m).warnings == ["graph 'then': graph output 't' dim 0 is -1: read as a dynamic dim"]
