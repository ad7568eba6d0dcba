"""The tosa passes: each rewrite runs before and after on onnxruntime, the result
passes onnx.checker and has no violation under the tosa profile."""

import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
import numpy as np

import legalizer
from legalizer.numeric.ort import check
from legalizer.kinds.onnx.importer import import_model
from legalizer.passes import PassContext, PassManager
from legalizer.targets import target

TOSA_PIPELINE = target("tosa").pipeline()

F = TensorProto.FLOAT


def legalize_proto(model: onnx.ModelProto):
    m = import_model(model)
    ctx = PassContext()
    PassManager(TOSA_PIPELINE).run(m.graph, ctx)
    assert legalizer.verify(m.graph, "tosa").violations == []
    out = legalizer.to_onnx(m)
    onnx.checker.check_model(out, full_check=True)
    # every graph input and output keeps its name, dtype and shape
    assert list(out.graph.input) == list(model.graph.input)
    assert list(out.graph.output) == list(model.graph.output)
    res = check(model, out, provider="cpu")
    assert res.ok, res.to_json()
    compared = [b for b in res.bindings if not b.skipped]
    return m, out, ctx, compared


def vi(name, shape, t=F):
    return helper.make_tensor_value_info(name, t, shape)


@pytest.mark.parametrize("opset", [11, 17])
def test_activation_operand_gets_unsqueeze(opset, onnx_model):
    m = onnx_model([helper.make_node("Add", ["x", "b"], ["y"], name="add")],
                   [vi("x", ["N", 3, 4]), vi("b", [4])], [vi("y", ["N", 3, 4])], opset=opset)
    ir, out, ctx, compared = legalize_proto(m)
    assert ctx.stats["reshapes_inserted"] == 1 and ctx.stats["constants_folded"] == 0
    (unsq,) = [n for n in out.graph.node if n.op_type == "Unsqueeze"]
    assert unsq.input[0] == "b"
    add = [n for n in ir.graph.ops() if n.op == "Add"][0]
    assert add.inputs[1].type.shape == (1, 1, 4)
    assert {b["N"] for b in (c.dims for c in compared)} == {1, 3}


def test_constants_fold_and_old_ones_go(onnx_model):
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b"),
             numpy_helper.from_array(np.array(2.0, np.float32), "s")]
    m = onnx_model([helper.make_node("Add", ["x", "b"], ["t"], name="add"),
                    helper.make_node("Mul", ["t", "s"], ["y"], name="mul")],
                   [vi("x", ["N", 4])], [vi("y", ["N", 4])], inits)
    ir, out, ctx, _ = legalize_proto(m)
    assert ctx.stats["constants_folded"] == 2 and ctx.stats["reshapes_inserted"] == 0
    assert {t.name: list(t.dims) for t in out.graph.initializer} == {"b_r2": [1, 4], "s_r2": [1, 1]}
    assert [n.op_type for n in out.graph.node] == ["Add", "Mul"]


def test_shared_operand_expanded_once(onnx_model):
    m = onnx_model([helper.make_node("Add", ["x", "b"], ["t"], name="a1"),
                    helper.make_node("Sub", ["t", "b"], ["y"], name="a2")],
                   [vi("x", [2, 3]), vi("b", [3])], [vi("y", [2, 3])])
    _, out, ctx, _ = legalize_proto(m)
    assert ctx.stats["reshapes_inserted"] == 1
    assert [n.op_type for n in out.graph.node] == ["Unsqueeze", "Add", "Sub"]


def test_where_ternary_and_bool_condition(onnx_model):
    m = onnx_model([helper.make_node("Where", ["c", "x", "z"], ["y"], name="w")],
                   [vi("c", [4], TensorProto.BOOL), vi("x", [2, 1, 4]), vi("z", ["K", 1])], [vi("y", [2, "K", 4])])
    ir, out, ctx, compared = legalize_proto(m)
    assert ctx.stats["reshapes_inserted"] == 2
    w = [n for n in ir.graph.ops() if n.op == "Where"][0]
    assert [v.type.shape for v in w.inputs] == [(1, 1, 4), (2, 1, 4), (1, "K", 1)]
    assert len(compared) == 2


def test_prelu_slope_unidirectional(onnx_model):
    slope = numpy_helper.from_array(np.array([0.1, 0.2, 0.3], np.float32).reshape(3, 1, 1), "slope")
    m = onnx_model([helper.make_node("PRelu", ["x", "slope"], ["y"], name="prelu")],
                   [vi("x", ["N", 3, 5, 5])], [vi("y", ["N", 3, 5, 5])], [slope])
    ir, out, ctx, _ = legalize_proto(m)
    assert ctx.stats["constants_folded"] == 1
    assert [list(t.dims) for t in out.graph.initializer] == [[1, 3, 1, 1]]


@pytest.mark.parametrize("op,n", [("Sum", 3), ("Max", 4), ("Min", 3), ("Mean", 3)])
def test_variadic_split_into_binary_chain(op, n, onnx_model):
    shapes = [["N", 1, 4], [4], [3, 1], [1]][:n]
    m = onnx_model([helper.make_node(op, [f"x{i}" for i in range(n)], ["y"], name="v")],
                   [vi(f"x{i}", s) for i, s in enumerate(shapes)], [vi("y", ["N", 3, 4])])
    ir, out, ctx, compared = legalize_proto(m)
    ops = [n_.op_type for n_ in out.graph.node if n_.op_type != "Unsqueeze"]
    binary = {"Sum": "Add", "Mean": "Add"}.get(op, op)
    assert ops == [binary] * (n - 1) + (["Div"] if op == "Mean" else [])
    assert all(len(n_.input) == 2 for n_ in out.graph.node if n_.op_type != "Unsqueeze")
    assert out.graph.output[0].name == "y" and out.graph.node[-1].output[0] == "y"
    assert len(compared) == 2


def test_subgraph_nodes_legalized(onnx_model):
    then = helper.make_graph([helper.make_node("Add", ["x", "b"], ["t"], name="inner")], "then", [],
                             [vi("t", [2, 3])])
    other = helper.make_graph([helper.make_node("Sub", ["x", "b"], ["e"], name="inner_else")], "else", [],
                              [vi("e", [2, 3])])
    m = onnx_model([helper.make_node("If", ["c"], ["y"], name="if", then_branch=then, else_branch=other)],
                   [vi("c", [], TensorProto.BOOL), vi("x", [2, 3]), vi("b", [3])], [vi("y", [2, 3])])
    ir, out, ctx, _ = legalize_proto(m)
    assert ctx.stats["reshapes_inserted"] == 2
    branches = {a.name: [n.op_type for n in a.g.node] for a in out.graph.node[0].attribute}
    assert branches == {"then_branch": ["Unsqueeze", "Add"], "else_branch": ["Unsqueeze", "Sub"]}


def test_unranked_operand_rank_taken_from_result(onnx_model):
    # Mul(<*>, <5>) -> <2x3x5> (onnx.shape_inference leaves a computed-axes ReduceMean
    # unranked): the result's rank is the broadcast rank, so W becomes 1x1x5.
    w = numpy_helper.from_array(np.arange(5, dtype=np.float32), "w")
    axes = helper.make_node("Constant", [], ["axes"], value=numpy_helper.from_array(np.array([2], np.int64)))
    m = onnx_model([axes, helper.make_node("Identity", ["x"], ["xi"]),
                    helper.make_node("ReduceMean", ["xi", "axes"], ["r"], keepdims=1),
                    helper.make_node("Mul", ["r", "w"], ["y"], name="mul")],
                   [vi("x", [2, 3, 5])], [vi("y", [2, 3, 5])], [w], opset=18)
    ir = import_model(m)
    r = [n for n in ir.graph.ops() if n.op == "ReduceMean"][0].output
    r.type = r.type.with_shape(None)  # as onnx leaves it when the axes are computed
    ctx = PassContext()
    PassManager(TOSA_PIPELINE).run(ir.graph, ctx)
    mul = [n for n in ir.graph.ops() if n.op == "Mul"][0]
    assert mul.inputs[1].type.shape == (1, 1, 5)
    # Unknown ranks are not proofs (issue 16, item 5): the rank-agnostic rewrite gives r
    # the result's rank by a Reshape (1s put in front of Shape(r)), and that is proved.
    assert mul.inputs[0].type.shape == (None, None, None) and mul.inputs[0].producer.op == "Reshape"
    assert legalizer.verify(ir.graph, "tosa").violations == []
    out = legalizer.to_onnx(ir)
    assert check(m, out, provider="cpu").ok
    # As imported, the ReduceMean has its rank (shapes/ranks.py), and the legal form is proved.
    ir = import_model(m)
    PassManager(TOSA_PIPELINE).run(ir.graph, PassContext())
    assert legalizer.verify(ir.graph, "tosa").violations == []
    assert check(m, legalizer.to_onnx(ir), provider="cpu", profile="tosa").ok


def test_constant_op_operands_fold_like_initializers(onnx_model):
    # TorchScript exports scalars as Constant ops: they fold at compile time too, and
    # the Constant nodes they came from go.
    c = helper.make_node("Constant", [], ["half"], value_float=0.5)
    t = helper.make_node("Constant", [], ["bias"], value=numpy_helper.from_array(np.arange(4, dtype=np.float32)))
    m = onnx_model([c, t, helper.make_node("Mul", ["x", "half"], ["h"], name="mul"),
                    helper.make_node("Add", ["bias", "h"], ["y"], name="add")],
                   [vi("x", [2, 3, 4])], [vi("y", [2, 3, 4])])
    _, out, ctx, _ = legalize_proto(m)
    assert ctx.stats["constants_folded"] == 2 and ctx.stats["reshapes_inserted"] == 0
    assert [n.op_type for n in out.graph.node] == ["Mul", "Add"]
    assert {t.name: list(t.dims) for t in out.graph.initializer} == {"half_r3": [1, 1, 1], "bias_r3": [1, 1, 4]}


def test_xla_raises_the_opset_only_when_it_broadcasts(onnx_model):
    # An opset-8 model whose Add needs no broadcast stays at opset 8 under xla; one that
    # broadcasts is raised to 9 (Expand, Where) and keeps its declared interface.
    same = onnx_model([helper.make_node("Add", ["x", "x"], ["y"], name="add")], [vi("x", [2, 3])], [vi("y", [2, 3])],
                      opset=8)
    m = import_model(same)
    legalizer.legalize(m, "xla")
    assert legalizer.to_onnx(m).opset_import[0].version == 8
    bcast = onnx_model([helper.make_node("Add", ["x", "b"], ["y"], name="add")], [vi("x", ["N", 3]), vi("b", [3])],
                       [vi("y", ["N", 3])], opset=8)
    m = import_model(bcast)
    res = legalizer.legalize(m, "xla").legalized
    out = legalizer.to_onnx(m)
    assert out.opset_import[0].version == 9 and any("opset raised from 8 to 9" in w for w in res.warnings)
    assert list(out.graph.input) == list(bcast.graph.input) and list(out.graph.output) == list(bcast.graph.output)
    assert check(bcast, out, provider="cpu").ok


def test_debug_mode_names_the_pass_that_broke_the_graph(monkeypatch, onnx_model):
    import dataclasses

    from legalizer import targets

    def bad_pass(graph, ctx):
        """Makes the Add's operands incompatible."""
        add = [n for n in graph.ops() if n.op == "Add"][0]
        add.inputs[1].type = add.inputs[1].type.with_shape((7,))
        return True

    monkeypatch.setitem(targets.TARGETS, "tosa", dataclasses.replace(targets.TARGETS["tosa"], passes=(bad_pass,)))
    m = import_model(onnx_model([helper.make_node("Add", ["x", "b"], ["y"], name="add")],
                                [vi("x", [2, 3]), vi("b", [3])], [vi("y", [2, 3])]))
    with pytest.raises(AssertionError, match=r"^after pass 'bad_pass': contract 'legal' broken: error: node 'add':"
                                             r" 'Add' op operands don't have broadcast-compatible shapes: .* \(1 now, 0 before\)$"):
        legalizer.legalize(m, "tosa", debug=True)


@pytest.mark.parametrize("target", ["tosa", "xla"])
def test_split_variadic_output_used_inside_a_subgraph(target, onnx_model):
    then = helper.make_graph([helper.make_node("Neg", ["s"], ["t"])], "then", [], [vi("t", [2, 3])])
    other = helper.make_graph([helper.make_node("Abs", ["s"], ["e"])], "else", [], [vi("e", [2, 3])])
    m = onnx_model([helper.make_node("Sum", ["a", "b", "c"], ["s"], name="sum"),
                    helper.make_node("If", ["cond"], ["y"], name="if", then_branch=then, else_branch=other)],
                   [vi("cond", [], TensorProto.BOOL), vi("a", [2, 3]), vi("b", [3]), vi("c", [2, 1])],
                   [vi("y", [2, 3])])
    ir = import_model(m)
    legalizer.legalize(ir, target)
    assert legalizer.verify(ir.graph, target).violations == []
    out = legalizer.to_onnx(ir)
    onnx.checker.check_model(out, full_check=True)
    assert check(m, out, provider="cpu").ok


def test_ai_onnx_domain_is_the_default_domain(onnx_model):
    # A node whose domain is spelled "ai.onnx" reads the default opset (17), not opset 1:
    # PRelu keeps numpy's rule (slope on the last axis), not PRelu-6's per-channel one.
    slope = numpy_helper.from_array(np.array([0.1, 0.2, 0.3], np.float32), "slope")
    m = onnx_model([helper.make_node("PRelu", ["x", "slope"], ["y"], name="prelu", domain="ai.onnx")],
                   [vi("x", [2, 3, 3])], [vi("y", [2, 3, 3])], [slope])
    ir = import_model(m)
    legalizer.legalize(ir, "tosa")
    prelu = [n for n in ir.graph.ops() if n.op == "PRelu"][0]
    assert prelu.inputs[1].type.shape == (1, 1, 3)
    assert check(m, legalizer.to_onnx(ir), provider="cpu").ok
