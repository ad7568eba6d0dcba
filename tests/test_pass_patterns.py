"""Rewrites written as rules (``legalizer.passes.patterns``): a pattern, a condition, a
replacement; one driver matches them. The deployment rewrites that are a pattern with a
condition (``square_as_mul``, ``gather_bool_as_int32``, the DEQUANTIZE and DENSIFY of a
constant) are rules; a new one is a record."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import legalizer
from legalizer.kinds.onnx.importer import import_model
from legalizer.passes import PASSES, PassContext, PassManager, dead_code_elimination
from legalizer.passes.patterns import Op, Rule, Var, match, register_rules

F = TensorProto.FLOAT


def _model(nodes, inputs, inits=()):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, F, [2, 3]) for n in inputs],
                          [helper.make_tensor_value_info("y", F, [2, 3])], list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _run(model, feeds):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def test_a_new_rule_is_a_record_and_the_model_computes_the_same(scratch):
    """Neg(Neg(x)) + b: the rule binds x two ops down and the Add reads it."""
    original = _model([helper.make_node("Neg", ["x"], ["n1"]), helper.make_node("Neg", ["n1"], ["n2"]),
                       helper.make_node("Add", ["n2", "b"], ["y"])], ["x", "b"])
    register_rules("double_negation", Rule(Op("Neg", (Op("Neg", (Var("x"),), name="inner"),)),
                                           lambda graph, m, ctx: m["x"], stat="negations_cancelled"))
    m = import_model(original)
    ctx = PassContext()
    PassManager(["double_negation", dead_code_elimination]).run(m.graph, ctx)
    assert ctx.stats["negations_cancelled"] == 1
    legal = legalizer.to_onnx(m)
    assert [(n.op_type, list(n.input)) for n in legal.graph.node] == [("Add", ["x", "b"])]
    rng = np.random.default_rng(0)
    feeds = {k: rng.standard_normal([2, 3]).astype(np.float32) for k in ("x", "b")}
    np.testing.assert_array_equal(_run(legal, feeds), _run(original, feeds))


def test_a_constant_pattern_takes_no_runtime_value_and_the_condition_decides():
    """square_as_mul: Pow(x, 2) is a Mul; Pow(x, 3) fails its condition; Pow(x, e) with e
    an input is no constant."""
    two, three = (numpy_helper.from_array(np.asarray(v, np.float32), n) for n, v in (("two", 2.0), ("three", 3.0)))
    (rule,) = PASSES["square_as_mul"].run.rules
    for exponent, inputs, matched in (("two", ["x"], True), ("three", ["x"], False), ("e", ["x", "e"], False)):
        original = _model([helper.make_node("Pow", ["x", exponent], ["y"])], inputs, [two, three])
        m = import_model(original)
        (pow_,) = m.graph.ops()
        found = match(rule, pow_, PassContext())
        assert (found is not None) == matched, exponent
        if matched:
            assert found["x"].name == "x" and float(found["exponent"]) == 2.0 and found["exponent_value"].name == "two"
        ctx = PassContext()
        PassManager(["square_as_mul", dead_code_elimination]).run(m.graph, ctx)
        legal = legalizer.to_onnx(m)
        assert [n.op_type for n in legal.graph.node] == (["Mul"] if matched else ["Pow"])
        assert ctx.stats["squares_as_mul"] == int(matched)
        feeds = {k: np.random.default_rng(1).standard_normal([2, 3]).astype(np.float32) for k in inputs}
        np.testing.assert_array_equal(_run(legal, feeds), _run(original, feeds))


def test_an_absent_operand_matches_nothing():
    """Clip(x, , max): a pattern naming the missing min does not match it."""
    top = numpy_helper.from_array(np.asarray(0.5, np.float32), "top")
    m = import_model(_model([helper.make_node("Clip", ["x", "", "top"], ["y"])], ["x"], [top]))
    (clip,) = m.graph.ops()
    assert clip.inputs[1] is None
    assert match(Rule(Op("Clip", (Var("x"), Var("low"))), lambda g, m, c: m["x"], "n"), clip, PassContext()) is None
    found = match(Rule(Op("Clip", (Var("x"),)), lambda g, m, c: m["x"], "n"), clip, PassContext())
    assert found is not None and found.root is clip and found.result.name == "y"


def test_the_deployment_patterns_are_rules():
    for name in ("square_as_mul", "gather_bool_as_int32", "reshape_constants_before_dequantize"):
        assert all(isinstance(r, Rule) for r in PASSES[name].run.rules), name
    assert PASSES["reshape_constants_before_dequantize"].frontends == ("tflite",)
    assert PASSES["gather_bool_as_int32"].run.rules[0].pattern == Op("GatherND", (Var("data"),))
