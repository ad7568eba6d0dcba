"""Rank folding (passes.fold_ranks): each folded model runs before and after on
onnxruntime with the same outputs, the folded ops have the exact shapes asserted here,
and the verifier proves the result under the target's profile."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import legalizer
from legalizer.numeric.ort import check
from legalizer.kinds.onnx.importer import import_model
from legalizer.ir.graph import OP
from legalizer.passes import PassContext, PassManager, dead_code_elimination, fold_ranks
from legalizer.targets import target

F = TensorProto.FLOAT
RNG = np.random.default_rng(0)


def vi(name, shape, t=F):
    return helper.make_tensor_value_info(name, t, shape)


def const(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def fold(proto, max_rank=6, pipeline=None, profile="mlir", dims=None):
    """Fold (and with ``pipeline`` legalize) ``proto``; verify, run both on onnxruntime."""
    m = import_model(proto)
    ctx = PassContext(max_rank=max_rank)
    PassManager(pipeline or [fold_ranks, dead_code_elimination]).run(m.graph, ctx)
    assert legalizer.verify(m.graph, profile).violations == []
    out = legalizer.to_onnx(m)
    onnx.checker.check_model(out, full_check=True)
    assert list(out.graph.input) == list(proto.graph.input)
    assert list(out.graph.output) == list(proto.graph.output)
    res = check(proto, out, provider="cpu", dims=dims or {})
    assert res.ok, res.to_json()
    assert [b for b in res.bindings if not b.skipped]
    return m, out, ctx


def ops(m, op):
    return [n for n in m.graph.ops() if n.op == op]


def max_rank(m):
    return max(len(v.type.shape) for n in m.graph.nodes() if n.kind == OP for v in n.outputs
               if v.type.shape is not None)


def reshape_chain(shape7, inner, outer_shape, opset=17):
    """x:outer_shape -> Reshape(shape7) -> inner ops -> Reshape(outer_shape) -> y."""
    nodes = [helper.make_node("Reshape", ["x", "s7"], ["h0"], name="to7")] + inner + \
        [helper.make_node("Reshape", [inner[-1].output[0], "s_out"], ["y"], name="back")]
    inits = [const("s7", np.asarray(shape7, np.int64)), const("s_out", np.asarray(outer_shape, np.int64))]
    return nodes, inits


def test_rank7_chain_folds_to_one_dim_and_reshapes_go(onnx_model):
    shape7 = [2, 3, 1, 4, 5, 1, 6]
    nodes, inits = reshape_chain(shape7, [
        helper.make_node("Add", ["h0", "c"], ["h1"], name="add"),
        helper.make_node("Relu", ["h1"], ["h2"], name="relu"),
        helper.make_node("Mul", ["h2", "k"], ["h3"], name="mul"),
    ], [720])
    inits += [const("c", RNG.standard_normal(shape7).astype(np.float32)), const("k", np.float32(0.5))]
    m, out, ctx = fold(onnx_model(nodes, [vi("x", [720])], [vi("y", [720])], inits))
    assert ops(m, "Add")[0].outputs[0].type.shape == (720,)
    assert ops(m, "Add")[0].inputs[1].type.shape == (720,)  # the constant, reshaped at compile time
    assert ops(m, "Mul")[0].inputs[1].type.shape == (1,)
    assert ops(m, "Relu")[0].outputs[0].type.shape == (720,)
    # Both reshapes were absorbed: the region reads x itself, the last Reshape reads the fold.
    assert ops(m, "Add")[0].inputs[0].name == "x"
    assert max_rank(m) == 1
    assert ctx.stats["regions_folded"] == 1 and ctx.stats["ranks_folded"] == 6


def test_rank5_chain_with_a_broadcast_keeps_the_broadcast_dims_apart(onnx_model):
    # [2,3,4,5,6] + [1,1,4,5,6] * [2,3,1,1,1]: dims 0-1 and 2-4 merge: rank 2.
    shape5 = [2, 3, 4, 5, 6]
    nodes, inits = reshape_chain(shape5, [
        helper.make_node("Add", ["h0", "b"], ["h1"], name="add"),
        helper.make_node("Sigmoid", ["h1"], ["h2"], name="sig"),
        helper.make_node("Mul", ["h2", "g"], ["h3"], name="mul"),
    ], [6, 120])
    inits += [const("b", RNG.standard_normal([4, 5, 6]).astype(np.float32))]
    m, out, ctx = fold(onnx_model(nodes, [vi("x", [6, 120]), vi("g", [2, 3, 1, 1, 1])], [vi("y", [6, 120])], inits),
                       max_rank=4)
    add, mul = ops(m, "Add")[0], ops(m, "Mul")[0]
    assert add.outputs[0].type.shape == (6, 120)
    assert add.inputs[1].type.shape == (1, 120)
    assert mul.inputs[1].type.shape == (6, 1)  # the graph input, through one Reshape
    assert add.inputs[0].name == "x"
    assert max_rank(m) == 2


def test_broadcasting_rank5_mul_of_two_runtime_operands(onnx_model):
    # Both operands broadcast: a:[4,1,3,5,1] * b:[1,2,3,5,7] -> [4,2,3,5,7]; dims 2-3 merge.
    a, b = [4, 1, 3, 5, 1], [1, 2, 3, 5, 7]
    proto = onnx_model([helper.make_node("Mul", ["a", "b"], ["y"], name="mul")],
                       [vi("a", a), vi("b", b)], [vi("y", [4, 2, 3, 5, 7])])
    m, out, ctx = fold(proto, max_rank=4)
    mul = ops(m, "Mul")[0]
    assert mul.outputs[0].type.shape == (4, 2, 15, 7)
    assert mul.inputs[0].type.shape == (4, 1, 15, 1) and mul.inputs[1].type.shape == (1, 2, 15, 7)
    # the graph output keeps its name and rank-5 shape, through a reshape back
    (back,) = [n for n in out.graph.node if n.output[0] == "y"]
    assert back.op_type == "Reshape"


def test_under_the_limit_nothing_changes_and_zero_folds_everything(onnx_model):
    proto = onnx_model([helper.make_node("Mul", ["a", "b"], ["y"], name="mul")],
                       [vi("a", [2, 3, 4]), vi("b", [2, 3, 4])], [vi("y", [2, 3, 4])])
    m = import_model(proto)
    assert not fold_ranks(m.graph, PassContext(max_rank=3))
    assert not fold_ranks(m.graph, PassContext())  # no limit: nothing to do
    m, out, ctx = fold(proto, max_rank=0)
    assert ops(m, "Mul")[0].outputs[0].type.shape == (24,)


def test_symbolic_dims_merge_where_provably_equal(onnx_model):
    # x:[N,3,4,5,6] + c:[4,5,6]: c is 1 at dims 0-1 and full at 2-4, x full everywhere:
    # groups N*3 | 4*5*6 (N is the same size in every value: it merges).
    proto = onnx_model([helper.make_node("Add", ["x", "c"], ["h"], name="add"),
                        helper.make_node("Tanh", ["h"], ["y"], name="tanh")],
                       [vi("x", ["N", 3, 4, 5, 6])], [vi("y", ["N", 3, 4, 5, 6])],
                       [const("c", RNG.standard_normal([4, 5, 6]).astype(np.float32))])
    m, out, ctx = fold(proto, max_rank=4, dims={"N": 2})
    add = ops(m, "Add")[0]
    assert add.outputs[0].type.shape == ("N*3", 120)
    assert add.inputs[1].type.shape == (1, 120)
    assert ops(m, "Tanh")[0].outputs[0].type.shape == ("N*3", 120)


def test_symbolic_dims_multiply_into_a_symbol(onnx_model):
    proto = onnx_model([helper.make_node("Add", ["x", "z"], ["y"], name="add")],
                       [vi("x", ["N", 2, 2, 2, 2]), vi("z", ["N", 2, 2, 2, 2])], [vi("y", ["N", 2, 2, 2, 2])])
    m, out, ctx = fold(proto, max_rank=4, dims={"N": 3})
    assert ops(m, "Add")[0].outputs[0].type.shape == ("N*16",)


def test_a_dynamic_dim_that_may_be_one_is_never_merged(onnx_model):
    # a:[?,3,4,5,6] + b:[7,3,4,5,6]: '?' may be 1 (broadcast) or 7: dim 0 stays alone.
    proto = onnx_model([helper.make_node("Add", ["a", "b"], ["y"], name="add")],
                       [vi("a", ["M", 3, 4, 5, 6]), vi("b", [7, 3, 4, 5, 6])], [vi("y", [7, 3, 4, 5, 6])])
    for size in (1, 7):
        m, out, ctx = fold(proto, max_rank=4, dims={"M": size})
        add = ops(m, "Add")[0]
        assert add.inputs[0].type.shape == ("M", 360) and add.outputs[0].type.shape == (7, 360)


def test_two_unknown_dims_in_one_reshape_leave_the_region_alone(onnx_model):
    proto = onnx_model([helper.make_node("Add", ["a", "b"], ["y"], name="add")],
                       [vi("a", ["M", 3, "K", 5, 6]), vi("b", [1, 3, 1, 5, 6])], [vi("y", ["M", 3, "K", 5, 6])])
    m = import_model(proto)
    assert not fold_ranks(m.graph, PassContext(max_rank=4))
    assert ops(m, "Add")[0].outputs[0].type.shape == ("M", 3, "K", 5, 6)


@pytest.mark.parametrize("profile", ["tosa", "xla"])
def test_targets_pipelines_fold_and_then_legalize(profile, onnx_model):
    pipeline = target(profile).pipeline()
    shape7 = [2, 1, 3, 2, 2, 1, 5]
    nodes, inits = reshape_chain(shape7, [
        helper.make_node("Add", ["h0", "c"], ["h1"], name="add"),
        helper.make_node("Sub", ["h1", "d"], ["h2"], name="sub"),
    ], [12, 10])
    inits += [const("c", RNG.standard_normal([2, 2, 1, 5]).astype(np.float32))]
    proto = onnx_model(nodes, [vi("x", [12, 10]), vi("d", [5])], [vi("y", [12, 10])], inits)
    m, out, ctx = fold(proto, pipeline=pipeline, profile=profile)
    assert max_rank(m) <= 6
    # dims 2x3 (c and d are 1 there) | 2x2 (d is 1) | 5; the 1s go
    assert ops(m, "Add")[0].outputs[0].type.shape == (6, 4, 5)


def test_a_result_used_outside_the_region_is_reshaped_back(onnx_model):
    # h (rank 5) feeds the region and a ReduceSum: the ReduceSum reads the unfolded value.
    proto = onnx_model([helper.make_node("Add", ["a", "b"], ["h"], name="add"),
                        helper.make_node("ReduceSum", ["h", "axes"], ["r"], keepdims=0, name="sum"),
                        helper.make_node("Neg", ["h"], ["y"], name="neg")],
                       [vi("a", [2, 3, 4, 5, 6]), vi("b", [2, 3, 4, 5, 6])],
                       [vi("y", [2, 3, 4, 5, 6]), vi("r", [3, 4, 5, 6])],
                       [const("axes", np.asarray([0], np.int64))])
    m, out, ctx = fold(proto, max_rank=4)
    (red,) = ops(m, "ReduceSum")
    assert red.inputs[0].type.shape == (2, 3, 4, 5, 6) and red.inputs[0].producer.op == "Reshape"
    assert ops(m, "Neg")[0].outputs[0].type.shape == (720,)


@pytest.mark.needs("litert")
def test_a_tflite_rank5_chain_folds_and_litert_agrees(tmp_path):
    import tflite_build as tb
    from legalizer.numeric.tflite import check_tflite
    from legalizer.kinds.tflite.exporter import to_tflite

    c = RNG.standard_normal([4, 5, 6]).astype(np.float32)
    g = RNG.standard_normal([2, 3, 1, 1, 1]).astype(np.float32)
    data = tb.build_tflite(
        tensors=[tb.tensor("x", "float32", [2, 3, 4, 5, 6]), tb.tensor("c", "float32", [4, 5, 6], data=c),
                 tb.tensor("h1", "float32", [2, 3, 4, 5, 6]), tb.tensor("h2", "float32", [2, 3, 4, 5, 6]),
                 tb.tensor("g", "float32", [2, 3, 1, 1, 1], data=g), tb.tensor("y", "float32", [2, 3, 4, 5, 6])],
        operators=[tb.op("ADD", [0, 1], [2], "AddOptions", fused_activation_function=0),
                   tb.op("RELU", [2], [3]),
                   tb.op("MUL", [3, 4], [5], "MulOptions", fused_activation_function=0)],
        inputs=[0], outputs=[5])
    original = tmp_path / "r5.tflite"
    original.write_bytes(data)
    m = legalizer.load(original)
    PassManager([fold_ranks, dead_code_elimination]).run(m.graph, PassContext(max_rank=4))
    assert legalizer.verify(m.graph, "tosa").violations == []
    add, mul = [n for n in m.graph.ops() if n.op == "tflite.ADD"][0], [n for n in m.graph.ops() if n.op == "tflite.MUL"][0]
    assert add.outputs[0].type.shape == (6, 120) and add.inputs[1].type.shape == (1, 120)
    assert mul.inputs[1].type.shape == (6, 1)
    assert max_rank(m) == 5  # the graph output keeps its shape, through a RESHAPE back
    (back,) = [n for n in m.graph.ops() if n.op == "tflite.RESHAPE" and n.outputs[0].type.shape == (2, 3, 4, 5, 6)]
    legal = tmp_path / "r5.legal.tflite"
    legal.write_bytes(to_tflite(m))
    res = check_tflite(original, legal, m, provider="cpu")
    assert res.ran and res.ok, res.to_json()


def test_the_api_folds_within_the_tosa_level_and_none_keeps_the_ranks(onnx_model):
    shape7 = [2, 3, 1, 4, 5, 1, 6]
    nodes, inits = reshape_chain(shape7, [helper.make_node("Add", ["h0", "c"], ["h1"], name="add")], [720])
    inits += [const("c", RNG.standard_normal(shape7).astype(np.float32))]
    proto = onnx_model(nodes, [vi("x", [720])], [vi("y", [720])], inits)
    ranks = lambda p: {len(v.type.tensor_type.shape.dim) for v in onnx.shape_inference.infer_shapes(p).graph.value_info}  # noqa: E731
    assert max(ranks(legalizer.legalize(proto, "tosa"))) <= 6
    assert max(ranks(legalizer.legalize(proto, "tosa", level="none"))) == 7
    with pytest.raises(legalizer.LegalizeError, match="unknown level '4k' of target 'tosa'"):
        legalizer.legalize(proto, "tosa", level="4k")
