"""TOSA MLIR out and in: ``emit_tosa`` of legalized ONNX models, parsed and verified by
IREE's MLIR, compiled for llvm-cpu and run on IREE's runtime against onnxruntime; and
``load_mlir`` reading TOSA text (pretty, generic, bytecode) back for the ``tosa`` profile."""

from __future__ import annotations

import functools
import time
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import legalizer
from legalizer.numeric import iree_run as iree_run_module
from legalizer.numeric.ort import synthesize
from legalizer.emit_formats import bound_dims
from legalizer.exporters.tosa import emit_tosa
from legalizer.pipeline import is_output
from legalizer.kinds.mlir.importer import MlirAttr, OpSource, load_mlir, parse_mlir
from legalizer.ir.graph import CONST, INPUT, OP, OUTPUT
from legalizer.oprules import parse_rules
from needs import require

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted(p for p in (ROOT / "models").glob("*.onnx") if p.stem != "incompatible_add" and not is_output(p))
LIGHT = sorted((Path(onnx.__file__).parent / "backend/test/data/light").glob("*.onnx"))
# sizes for the sample models' symbolic dims (dynamic_broadcast keeps its own dynamic dims)
DIMS = {"batch": 2, "height": 8, "width": 8, "seq": 5}
RTOL, ATOL = 1e-4, 1e-5


# ---- helpers -------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def tosa_rules() -> dict:
    rules = parse_rules((ROOT / "rules/tosa.toml").read_text(), "rules/tosa.toml", "tosa")
    return {k: r for k, r in rules.items() if r.broadcasting}


def tosa_violations(graph) -> list:
    """Violations under the ``tosa`` profile. tosa.mul's third operand is its shift (rules:
    ``operands = [0, 1]``); until the verifier honours that key, its rank is not counted."""
    rules = tosa_rules()
    found = legalizer.verify(graph, "tosa", rules=rules).violations
    if not hasattr(rules["tosa.mul"], "operands"):
        found = [d for d in found if not (d.op == "tosa.mul" and len(d.operand_shapes) == 3
                                          and d.operand_shapes[2] == (1,))]
    return found


def emitted(path: Path, dims=None) -> str:
    model = legalizer.load(path)
    legalizer.legalize(model, "tosa")
    with bound_dims(model, dims):
        return emit_tosa(model)


def iree_parse(text: str):
    require("iree")
    return iree_run_module.parse(text)


def iree_run(text: str, inputs: list) -> list:
    require("iree")
    return iree_run_module.run(text, inputs)


def feeds_for(model: onnx.ModelProto, dims: dict, seed: int = 0) -> dict:
    """The check's synthesized inputs; dims not in ``dims`` are 3."""
    return synthesize(model, dims, {}, seed)


def compare_with_ort(model: onnx.ModelProto, text: str, feeds: dict) -> None:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)
    got = iree_run(text, list(feeds.values()))
    assert len(got) == len(want)
    for out, g, w in zip(sess.get_outputs(), got, want):
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL, err_msg=out.name)


def randomized(path: Path, seed: int = 0) -> onnx.ModelProto:
    """A light model whose ConstantOfShape weights (all 0.02) become random initializers,
    so that the comparison sees real numbers."""
    rng = np.random.default_rng(seed)
    m = onnx.load(path)
    shapes = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    nodes, inits = [], []
    for n in m.graph.node:
        if n.op_type == "ConstantOfShape" and n.input[0] in shapes:
            shape = tuple(int(d) for d in shapes[n.input[0]])
            a = rng.uniform(0.5, 1.5, shape) if len(shape) == 1 else \
                rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))
            inits.append(numpy_helper.from_array(a.astype(np.float32), n.output[0]))
        else:
            nodes.append(n)
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    m.graph.initializer.extend(inits)
    m.ir_version = max(m.ir_version, 4)  # initializers need not be inputs
    return m


# ---- emit: sample and light models -----------------------------------------------------------

@pytest.mark.needs("iree")
@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_sample_model_runs_on_iree_as_on_onnxruntime(path):
    dims = None if path.stem == "dynamic_broadcast" else DIMS
    text = emitted(path, dims)
    assert tosa_violations(parse_mlir(text).graph) == []
    iree_parse(text)
    proto = onnx.load(path)
    if path.stem == "dynamic_broadcast":
        # the RFC's cases: a dynamic dim that is 1 at run time broadcasts
        rng = np.random.default_rng(1)
        shapes = {"a": (2, 1), "b": (1, 4), "c": (1, 2), "d": (2, 1), "e": (5, 3), "f": (1, 1)}
        feeds = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    else:
        feeds = feeds_for(proto, DIMS)
    compare_with_ort(proto, text, feeds)


@pytest.mark.needs("iree")
@pytest.mark.parametrize("path", LIGHT, ids=lambda p: p.stem.replace("light_", ""))
def test_light_model_emits_valid_tosa(path):
    text = emitted(path)
    assert text.count("func.func @main(") == 1
    graph = parse_mlir(text).graph
    assert tosa_violations(graph) == []
    assert sum(1 for n in graph.nodes() if n.kind == OP and n.domain == "tosa") > 0
    iree_parse(text)


def test_light_squeezenet_with_random_weights_runs_as_on_onnxruntime(tmp_path):
    proto = randomized(next(p for p in LIGHT if p.stem == "light_squeezenet"))
    path = tmp_path / "squeezenet.onnx"
    onnx.save(proto, path)
    compare_with_ort(proto, emitted(path), feeds_for(proto, {}))


def _grab_bag() -> onnx.ModelProto:
    """One model over many of the lowerings, with random weights."""
    rng = np.random.default_rng(7)
    inits = []

    def const(name, shape, positive=False, dtype=np.float32):
        a = rng.uniform(0.5, 1.5, shape) if positive else rng.standard_normal(shape) * 0.5
        inits.append(numpy_helper.from_array(np.asarray(a, dtype), name))
        return name

    def ints(name, values):
        inits.append(numpy_helper.from_array(np.asarray(values, np.int64), name))
        return name

    def scalar(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value, np.float32), name))
        return name

    N = helper.make_node
    nodes = [
        N("Conv", ["x", const("wg", (6, 2, 3, 3)), const("bg", (6,))], ["conv_group"], group=2, pads=[1, 1, 1, 1],
          strides=[2, 2]),
        N("Conv", ["x", const("wd", (8, 1, 3, 3))], ["conv_depthwise"], group=4),
        N("Conv", ["x1d", const("w1", (5, 4, 3))], ["conv_1d"], strides=[2], pads=[1, 1]),
        N("Conv", ["x", const("ws", (3, 4, 3, 3))], ["conv_same"], auto_pad="SAME_UPPER", strides=[2, 2]),
        N("AveragePool", ["x"], ["avg_pool"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
          count_include_pad=1, ceil_mode=1),
        N("AveragePool", ["x"], ["avg_pool_ex"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        N("MaxPool", ["x"], ["max_pool"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
        N("LRN", ["x"], ["lrn"], size=3, alpha=1e-2, beta=0.75, bias=2.0),
        N("GlobalMaxPool", ["x"], ["gmp"]),
        N("GlobalAveragePool", ["x"], ["gap"]),
        N("BatchNormalization", ["x", const("bns", (4,), True), const("bnb", (4,)), const("bnm", (4,)),
                                 const("bnv", (4,), True)], ["bn"]),
        N("PRelu", ["x", const("slope", (4, 1, 1))], ["prelu"]),
        N("Flatten", ["x"], ["flat"], axis=2),
        N("Squeeze", ["gmp", ints("sq_axes", [2, 3])], ["squeezed"]),
        N("LayerNormalization", ["v", const("lns", (5,)), const("lnb", (5,))], ["ln"], epsilon=1e-5),
        N("Softmax", ["v"], ["softmax_axis1"], axis=1),
        N("LogSoftmax", ["v"], ["log_softmax"]),
        N("MatMul", ["v", const("wm", (5, 4))], ["matmul"]),
        N("MatMul", ["v", const("wb", (1, 5, 2))], ["matmul_b1"]),
        N("Transpose", ["v"], ["vt"], perm=[0, 2, 1]),
        N("MatMul", ["v", "vt"], ["matmul_batch"]),
        N("Gemm", ["s", const("wgm", (4, 5)), const("cg", (4,))], ["gemm"], transB=1, alpha=0.5, beta=2.0),
        N("Transpose", ["s"], ["st"]),
        N("Gemm", ["st", const("wga", (5, 4))], ["gemm_ta"], transA=1),
        N("Mul", ["v", scalar("three", 3.0)], ["v3"]),
        N("Cast", ["v3"], ["v3i"], to=TensorProto.INT32),
        N("Cast", ["v3i"], ["cast_trunc"], to=TensorProto.FLOAT),
        N("Slice", ["v", ints("sl_s", [0, 1]), ints("sl_e", [2, -1]), ints("sl_a", [1, 2])], ["sliced"]),
        N("Gather", ["v", ints("g_idx", [2, 0])], ["gathered"], axis=1),
        N("Gather", ["v", ints("g_one", 1)], ["gathered_scalar"], axis=2),
        N("Pad", ["v", ints("pads", [0, 1, 0, 0, 0, 2]), scalar("pad_value", 0.5)], ["padded"]),
        N("Less", ["v", scalar("zero", 0.0)], ["neg_mask"]),
        N("Neg", ["v"], ["negated"]),
        N("Where", ["neg_mask", "v", "negated"], ["where"]),
        N("Abs", ["v"], ["abs"]),
        N("Add", ["abs", scalar("one", 1.0)], ["abs1"]),
        N("Div", ["v", "abs1"], ["div"]),
        N("Pow", ["v", scalar("two", 2.0)], ["square"]),
        N("Pow", ["abs1", scalar("p07", 0.7)], ["pow"]),
        N("Sqrt", ["abs"], ["sqrt"]),
        N("Log", ["abs1"], ["log"]),
        N("Reciprocal", ["abs1"], ["recip"]),
        N("LeakyRelu", ["v"], ["leaky"], alpha=0.1),
        N("Clip", ["v", scalar("lo", -0.5), scalar("hi", 0.5)], ["clip"]),
        N("HardSwish", ["v"], ["hswish"]),
        N("HardSigmoid", ["v"], ["hsigmoid"]),
        N("Elu", ["v"], ["elu"]),
        N("Softplus", ["v"], ["softplus"]),
        N("Gelu", ["v"], ["gelu"]),
        N("Gelu", ["v"], ["gelu_tanh"], approximate="tanh"),
        N("Erf", ["v"], ["erf"]),
        N("Sigmoid", ["v"], ["sigmoid"]),
        N("Tanh", ["v"], ["tanh"]),
        N("Exp", ["v"], ["exp"]),
        N("Floor", ["v3"], ["floor"]),
        N("Ceil", ["v3"], ["ceil"]),
        N("Max", ["v", "negated"], ["max"]),
        N("Min", ["v", "negated", "sigmoid"], ["min3"]),
        N("Mean", ["v", "negated", "exp"], ["mean3"]),
        N("Sum", ["v", const("row", (5,)), "exp"], ["sum3"]),
        N("Equal", ["floor", "ceil"], ["eq"]),
        N("Not", ["eq"], ["neq"]),
        N("And", ["neq", "neg_mask"], ["both"]),
        N("Cast", ["both"], ["bool_out"], to=TensorProto.FLOAT),
        N("ReduceMax", ["v", ints("ax1", [1])], ["rmax"]),
        N("ReduceMean", ["v", ints("ax02", [0, 2])], ["rmean"], keepdims=0),
        N("ReduceSum", ["v", ints("axm1", [-1])], ["rsum"]),
        N("Split", ["v", ints("split", [2, 3])], ["split0", "split1"], axis=2),
        N("Tile", ["v", ints("reps", [1, 2, 1])], ["tiled"]),
        N("Slice", ["s", ints("e_s", [0]), ints("e_e", [1]), ints("e_a", [1])], ["s_col"]),
        N("Expand", ["s_col", ints("e_shape", [2, 3, 4])], ["expanded"]),
        N("Concat", ["matmul", "matmul_batch"], ["concat"], axis=-1),
        N("Unsqueeze", ["s", ints("unsq", [0])], ["unsqueezed"]),
        N("Reshape", ["v", ints("shape", [0, -1])], ["reshaped"]),
    ]
    outputs = [o for n in nodes for o in n.output
               if o not in ("v3", "v3i", "vt", "st", "neg_mask", "abs", "eq", "neq", "both", "s_col")]
    graph = helper.make_graph(
        nodes, "grab_bag",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 6, 6]),
         helper.make_tensor_value_info("x1d", TensorProto.FLOAT, [2, 4, 9]),
         helper.make_tensor_value_info("v", TensorProto.FLOAT, [2, 3, 5]),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, [3, 5])],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 9
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def emitted_legal(proto: onnx.ModelProto, tmp_path: Path) -> str:
    """The TOSA of ``proto`` (saved under tmp_path), parsed back and legal under tosa."""
    path = tmp_path / f"{proto.graph.name}.onnx"
    onnx.save(proto, path)
    text = emitted(path)
    assert tosa_violations(parse_mlir(text).graph) == []
    return text


@pytest.mark.needs("iree")
def test_lowerings_run_on_iree_as_on_onnxruntime(tmp_path):
    proto = _grab_bag()
    text = emitted_legal(proto, tmp_path)
    iree_parse(text)
    compare_with_ort(proto, text, feeds_for(proto, {}, seed=3))


def _quant_and_mod_model() -> onnx.ModelProto:
    """Integer Div and Mod, float Mod (both fmods), per-tensor and per-axis Q/DQ."""
    inits = [numpy_helper.from_array(np.asarray(v, dt), n) for n, v, dt in [
        ("s", 0.05, np.float32), ("zp", -3, np.int8), ("sa", [0.02, 0.1, 0.0625], np.float32),
        ("zpa", [0, 5, -7], np.int8), ("s32", [0.5, 0.25, 2.0], np.float32), ("zp32", [0, 0, 0], np.int32)]]
    N = helper.make_node
    nodes = [N("Div", ["ia", "ib"], ["idiv"]), N("Mod", ["ia", "ib"], ["imod"]),
             N("Mod", ["fa", "fb"], ["fmod1"], fmod=1),
             N("QuantizeLinear", ["q", "s", "zp"], ["q_t"]), N("DequantizeLinear", ["q_t", "s", "zp"], ["dq_t"]),
             N("QuantizeLinear", ["q", "sa", "zpa"], ["q_a"], axis=1),
             N("DequantizeLinear", ["q_a", "sa", "zpa"], ["dq_a"], axis=1),
             N("DequantizeLinear", ["acc", "s32", "zp32"], ["dq_32"], axis=1)]
    ins = [("ia", TensorProto.INT32, [4, 6]), ("ib", TensorProto.INT32, [4, 6]), ("fa", TensorProto.FLOAT, [4, 6]),
           ("fb", TensorProto.FLOAT, [1, 6]), ("q", TensorProto.FLOAT, [2, 3, 8]), ("acc", TensorProto.INT32, [2, 3, 4])]
    graph = helper.make_graph(nodes, "quant_mod", [helper.make_tensor_value_info(*i) for i in ins],
                              [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None)
                               for o in ("idiv", "imod", "fmod1", "q_t", "dq_t", "q_a", "dq_a", "dq_32")],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


@pytest.mark.needs("iree")
def test_quantize_dequantize_div_and_mod_run_on_iree_as_on_onnxruntime(tmp_path):
    proto = _quant_and_mod_model()
    text = emitted_legal(proto, tmp_path)
    rng = np.random.default_rng(5)
    ib = rng.integers(1, 9, (4, 6)) * rng.choice([-1, 1], (4, 6))
    # (k + 0.5) * scale, ties or within an ulp of one; the rest is random, some out of range
    q = rng.standard_normal((2, 3, 8)) * 3
    q[0, :, :] = (np.arange(-4, 4) + 0.5) * np.asarray([0.05, 0.05, 0.05])[:, None]
    q[1, :, :] = (np.arange(-4, 4) + 0.5) * np.asarray([0.02, 0.1, 0.0625])[:, None]
    feeds = {"ia": rng.integers(-50, 50, (4, 6)).astype(np.int32), "ib": ib.astype(np.int32),
             "fa": (rng.standard_normal((4, 6)) * 5).astype(np.float32),
             "fb": np.asarray([[1.5, -1.5, 0.7, -2.25, 3.0, -0.4]], np.float32),
             "q": q.astype(np.float32), "acc": rng.integers(-1000, 1000, (2, 3, 4)).astype(np.int32)}
    compare_with_ort(proto, text, feeds)
    # float Mod with fmod=0 (onnxruntime refuses it): Python's % on the same operands
    proto = helper.make_model(helper.make_graph(
        [helper.make_node("Mod", ["fa", "fb"], ["m"])], "fmod0",
        [helper.make_tensor_value_info("fa", TensorProto.FLOAT, [4, 6]),
         helper.make_tensor_value_info("fb", TensorProto.FLOAT, [1, 6])],
        [helper.make_tensor_value_info("m", TensorProto.FLOAT, [4, 6])]),
        opset_imports=[helper.make_opsetid("", 19)])
    onnx.save(proto, tmp_path / "fmod0.onnx")
    (got,) = iree_run(emitted(tmp_path / "fmod0.onnx"), [feeds["fa"], feeds["fb"]])
    np.testing.assert_allclose(got, np.mod(feeds["fa"], feeds["fb"]), rtol=RTOL, atol=ATOL)


def test_pow_of_negative_bases_runs_on_iree_as_on_onnxruntime(tmp_path):
    """tosa.pow is undefined below 0; ONNX's Pow is C's pow: (-2)^3 = -8, (-2)^2 = 4,
    (-2)^0.5 = NaN. A run-time exponent and a constant one of several values."""
    N = helper.make_node
    c = numpy_helper.from_array(np.asarray([[1.0, 2.0, 3.0, 0.0, -1.0, -2.0]], np.float32), "c")
    graph = helper.make_graph(
        [N("Pow", ["x", "y"], ["run_time"]), N("Pow", ["x", "c"], ["constant"])], "pow",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, [4, 6]) for o in ("run_time", "constant")], [c])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    path = tmp_path / "pow.onnx"
    onnx.save(proto, path)
    x = np.asarray([[-2.0, -1.5, 3.0, -0.5, 2.0, -3.0]] * 4, np.float32) * np.asarray([[1], [-1], [2], [0.5]], np.float32)
    y = np.asarray([[3.0, 2.0, 0.5, -1.0, 2.5, -3.0]], np.float32)
    got = iree_run(emitted(path), [x, y])
    with np.errstate(invalid="ignore"):
        want = [np.power(x, y), np.power(x, numpy_helper.to_array(c))]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL, equal_nan=True)
    assert np.isnan(got[0]).any() and (got[0] < 0).any()  # both cases are exercised
    compare_with_ort(proto, emitted(path), {"x": x, "y": y})


# ---- emit: the text's form and its errors ------------------------------------------------------

def test_emitted_text_spells_current_tosa():
    text = emitted(ROOT / "models/small_cnn.torchscript.onnx", DIMS)
    lines = text.splitlines()
    head = next(line for line in lines if "func.func" in line)
    assert head.strip().startswith("func.func @main(%arg0: tensor<2x3x8x8xf32>) -> tensor<2x")
    mul = next(line for line in lines if " tosa.mul " in line)
    assert mul.count("%") == 4 and "tensor<1xi8>) ->" in mul  # the shift operand
    assert any('"tosa.const"() <{values = dense<0> : tensor<1xi8>}> : () -> tensor<1xi8>' in line for line in lines)
    assert any('"tosa.conv2d"(' in line and "acc_type = f32" in line for line in lines)
    assert any('"tosa.const_shape"() <{values = dense<' in line and "!tosa.shape<" in line for line in lines)
    assert lines[-2].strip() == "}" and lines[-1] == "}"


def test_dynamic_dims_stay_dynamic_where_tosa_allows():
    text = emitted(ROOT / "models/mlp_bias.onnx")  # x: N x 16
    assert "func.func @main(%arg0: tensor<?x16xf32>)" in text
    assert "dense<[1, -1, 16]> : tensor<3xindex>" in text  # the reshape around tosa.matmul
    with pytest.raises(legalizer.BadInput, match="needs static shapes"):
        emitted(ROOT / "models/small_cnn.dynamo.onnx")  # a convolution over height x width


def test_unsupported_ops_are_all_named_on_one_line():
    nodes = [helper.make_node("TopK", ["x", "k"], ["vals", "idx"], name="topk"),
             helper.make_node("Relu", ["vals"], ["r"], name="relu"),
             helper.make_node("NonZero", ["x"], ["nz"], name="nonzero"),
             helper.make_node("Shape", ["y"], ["shape"], name="shape_of_dynamic"),
             helper.make_node("Reshape", ["x", "shape"], ["reshaped"], name="reshape"),
             helper.make_node("Hardmax", ["x"], ["mod"], name="hardmax")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6]),
                     helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 6])],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in ("r", "idx", "nz", "reshaped", "mod")],
        [numpy_helper.from_array(np.asarray([2], np.int64), "k")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    from legalizer.kinds.onnx.importer import import_model

    model = import_model(proto, None)
    with pytest.raises(legalizer.BadInput) as e:
        emit_tosa(model)
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith("cannot emit TOSA for 4 ops: ")
    for name in ("'topk' (TopK: no TOSA lowering)", "'nonzero' (NonZero: no TOSA lowering)",
                 "'shape_of_dynamic' (Shape: a shape computed at run time needs static shapes",
                 "'hardmax' (Hardmax: no TOSA lowering)"):
        assert name in msg
    # ops that are fine on their own are not blamed for their operands
    assert "relu" not in msg and "reshape'" not in msg


# ---- import: TOSA text -------------------------------------------------------------------------

RANK_MISMATCH = """
func.func @main(%a: tensor<1x8x8x16xf32>, %b: tensor<16xf32>) -> tensor<1x8x8x16xf32> {
  %0 = tosa.add %a, %b : (tensor<1x8x8x16xf32>, tensor<16xf32>) -> tensor<1x8x8x16xf32>
  return %0 : tensor<1x8x8x16xf32>
}
"""


@pytest.mark.needs("iree")
def test_rank_mismatch_is_the_exact_violation():
    graph = parse_mlir(RANK_MISMATCH).graph
    (d,) = tosa_violations(graph)
    assert (d.code, d.node, d.op) == ("operand-rank-mismatch", "%0", "tosa.add")
    assert d.message == "operands don't have matching ranks: ('1x8x8x16', '16') -> '1x8x8x16'"
    assert d.operand_shapes == [(1, 8, 8, 16), (16,)] and d.result_shape == (1, 8, 8, 16)
    assert str(d) == ("error: node '%0': 'tosa.add' op operands don't have matching ranks:"
                      " ('1x8x8x16', '16') -> '1x8x8x16'")
    assert legalizer.verify(graph, "mlir", rules=tosa_rules()).violations == []  # MLIR's own rule allows it
    node = graph.value("0").producer
    assert node.proto == OpSource(3, 8, None)
    require("iree")
    from iree.compiler import ir
    with pytest.raises(ir.MLIRError, match=r"3:8: 'tosa.add' op operands don't have matching ranks"):
        ir.Module.parse(RANK_MISMATCH, ir.Context())  # MLIR's own verifier, in the same words


TF_OPT_STYLE = """// a converter's output, older spellings
#loc1 = loc("model.py":3:4)
!t = tensor<1x4xf32>
module attributes {tfl.description = "TOCO", tf.versions = {producer = 1 : i32}} {
  func.func @main(%arg0: tensor<?x4xf32> {tf_saved_model.index_path = ["x"]} loc(#loc1),
                  %arg1: tensor<1x4x!quant.uniform<i8:f32, 5.000000e-01:-3>>) -> (tensor<?x4xf32>, !t)
      attributes {tf.entry_function = {inputs = "x", outputs = "y"}} {
    %0 = "tosa.const"() {value = dense<[[1.0, 2.0, 3.0, 4.0]]> : tensor<1x4xf32>} : () -> tensor<1x4xf32> loc(#loc1)
    %cst = "tosa.const"() {value = dense<"0x0000803F0000004000004040000080C0"> : tensor<1x4xf32>} : () -> !t
    %1 = "tosa.add"(%arg0, %0) : (tensor<?x4xf32>, tensor<1x4xf32>) -> tensor<?x4xf32> loc(fused["a", "b"])
    %2 = tosa.reduce_sum %1 {axis = 1 : i32} : (tensor<?x4xf32>) -> tensor<?x1xf32>
    %3:2 = "foo.split"(%2) {sizes = array<i64: 1, 1>, mode = #foo.mode<fast>} : (tensor<?x1xf32>) -> (tensor<?x1xf32>, tensor<?x1xf32>)
    %4 = tosa.mul %1, %3#1, %s : (tensor<?x4xf32>, tensor<?x1xf32>, tensor<1xi8>) -> tensor<?x4xf32>
    %s = "tosa.const"() <{values = dense<0> : tensor<1xi8>}> : () -> tensor<1xi8>
    func.return %4, %cst : tensor<?x4xf32>, !t
  }
}
"""


@pytest.mark.needs("iree", "tosa-opt")  # the TOSA syntax of producers IREE does not take
def test_parses_generic_pretty_aliases_locations_and_multi_results():
    bad = TF_OPT_STYLE  # %s is used before it is defined
    with pytest.raises(legalizer.BadInput, match=r"^<string>:13:29: use of undefined value '%s'$"):
        parse_mlir(bad)
    text = TF_OPT_STYLE.replace("    %s = \"tosa.const\"() <{values = dense<0> : tensor<1xi8>}> : () -> tensor<1xi8>\n",
                                "").replace("%3#1, %s :", "%3#1, %sh :").replace(
        "    %4 =", '    %sh = "tosa.const"() <{values = dense<0> : tensor<1xi8>}> : () -> tensor<1xi8>\n    %4 =')
    model = parse_mlir(text)
    g = model.graph
    assert model.format == "mlir" and g.name == "main" and g.frontend == "tosa"
    assert model.proto.module_attrs["tfl.description"] == "TOCO"
    assert [(n.outputs[0].name, n.outputs[0].type.dtype, n.outputs[0].type.shape) for n in g.inputs] == [
        ("arg0", "float", (None, 4)), ("arg1", "int8", (1, 4))]
    assert g.inputs[1].outputs[0].quant.scale == (0.5,) and g.inputs[1].outputs[0].quant.zero_point == (-3,)
    assert [n.inputs[0].name for n in g.outputs] == ["4", "cst"]
    np.testing.assert_array_equal(g.value("0").producer.data.array, [[1, 2, 3, 4]])
    np.testing.assert_array_equal(g.value("cst").producer.data.array, [[1, 2, 3, -4]])
    assert g.value("cst").type == legalizer.TensorType("float", (1, 4))  # through the !t alias
    ops = {n.op: n for n in g.nodes() if n.kind == OP}
    assert sorted(ops) == ["foo.split", "tosa.add", "tosa.mul", "tosa.reduce_sum"]
    assert ops["tosa.reduce_sum"].attrs == {"axis": 1}
    split = ops["foo.split"]
    assert split.attrs == {"sizes": [1, 1], "mode": MlirAttr("#foo.mode<fast>")}
    assert [v.name for v in split.outputs] == ["3#0", "3#1"]
    assert [v.name for v in ops["tosa.mul"].inputs] == ["1", "3#1", "sh"]
    assert ops["tosa.add"].proto.loc == 'loc(fused["a", "b"])'
    assert model.warnings == [
        "op 'foo.split' is from dialect 'foo', which legalize does not know; kept as an opaque node"]
    assert tosa_violations(g) == []
    # two dynamic dims that must broadcast at run time: a constraint, not a violation
    assert legalizer.verify(g, "tosa", rules=tosa_rules()).constraints.to_json() == [
        {"text": "1[0] == 3#1[0] or 1[0] == 1 or 3#1[0] == 1", "nodes": ["%4"]}]


LLVM_STYLE = """// RUN: mlir-opt %s | FileCheck %s
// -----
func.func @test_fft2d(%arg0: tensor<1x4x8xf32>, %arg1: tensor<1x4x8xf32>) -> (tensor<1x4x8xf32>, tensor<1x4x8xf32>) {
  %0, %1 = tosa.fft2d %arg0, %arg1 {inverse = false} : (tensor<1x4x8xf32>, tensor<1x4x8xf32>) -> (tensor<1x4x8xf32>, tensor<1x4x8xf32>)
  return %0, %1 : tensor<1x4x8xf32>, tensor<1x4x8xf32>
}
// -----
func.func @test_misc(%arg0: tensor<13x21x3xf32>, %arg1: tensor<*xf32>, %arg2: tensor<f32>,
    %arg3: tensor<1x4x4x4x!quant.any<i8<-8:7>>>, %arg4: tensor<?x3x!quant.uniform<u8:f32, 0.0235:-128>>) -> tensor<39x21x6xf32> {
%azp0 = "tosa.const" () { values = dense<0.0> : tensor<1xf32> } : () -> tensor<1xf32>
  %cst = tosa.const_shape { values = dense<[3, 1, 2]> : tensor<3xindex> } : () -> !tosa.shape<3>
  %0 = tosa.tile %arg0, %cst: (tensor<13x21x3xf32>, !tosa.shape<3>) -> tensor<39x21x6xf32>
  %1 = tosa.clamp %0 {min_val = 0.0 : f32, max_val = 1.0: f32, nan_mode = #tosa.nan_mode<IGNORE>} : (tensor<39x21x6xf32>) -> tensor<39x21x6xf32>
  %2 = tosa.maximum %1, %0 {} : (tensor<39x21x6xf32>, tensor<39x21x6xf32>)  -> tensor<39x21x6xf32>
  %3 = tosa.reshape_block_scaled %arg0, %cst {block_size = #tosa.block_size<BLOCK_SIZE_1> : i32} : (tensor<13x21x3xf32>, !tosa.shape<3>) -> tensor<*xf32>
  %4 = tosa.rescale %2, %azp0 {rounding_mode = DOUBLE_ROUND, scale32 = true} : (tensor<39x21x6xf32>, tensor<1xf32>) -> tensor<39x21x6xf32>
  %5:2 = "tosa.custom"(%arg1, %arg2) {operator_name = "x", domain_name = "y", implementation_attrs = ""} : (tensor<*xf32>, tensor<f32>) -> (tensor<*xf32>, tensor<f32>)
  return %4 : tensor<39x21x6xf32>
}
// -----
func.func @main(%arg0: tensor<13x21x1xf32>, %arg1: tensor<13x21x3xf32>) -> tensor<13x21x3xf32> {
  %0 = tosa.sub %arg0, %arg1 : (tensor<13x21x1xf32>, tensor<13x21x3xf32>) -> tensor<13x21x3xf32>
  return %0 : tensor<13x21x3xf32>
}
"""


@pytest.mark.needs("iree", "tosa-opt")  # the TOSA syntax of producers IREE does not take
def test_parses_llvm_test_style_files_with_several_functions():
    model = parse_mlir(LLVM_STYLE)
    assert [g.name for g in model.graphs] == ["main", "test_fft2d", "test_misc"]
    fft = model.graphs[1]
    op = next(n for n in fft.nodes() if n.op == "tosa.fft2d")
    assert [v.name for v in op.outputs] == ["0", "1"] and op.attrs == {"inverse": False}
    misc = model.graphs[2]
    types = [n.outputs[0].type for n in misc.inputs]
    assert types == [legalizer.TensorType("float", (13, 21, 3)), legalizer.TensorType("float", None),
                     legalizer.TensorType("float", ()), legalizer.TensorType("int8", (1, 4, 4, 4)),
                     legalizer.TensorType("uint8", (None, 3))]
    assert misc.inputs[4].outputs[0].quant.zero_point == (-128,)
    ops = {n.op: n for n in misc.nodes() if n.kind == OP}
    assert ops["tosa.clamp"].attrs == {"min_val": 0.0, "max_val": 1.0, "nan_mode": MlirAttr("#tosa.nan_mode<IGNORE>")}
    # MLIR's TOSA parser reads the bare DOUBLE_ROUND as the enum attribute
    assert ops["tosa.rescale"].attrs["rounding_mode"] == MlirAttr("#tosa.rounding_mode<DOUBLE_ROUND>")
    assert ops["tosa.reshape_block_scaled"].attrs == {"block_size": MlirAttr("#tosa.block_size<BLOCK_SIZE_1>")}
    assert [v.name for v in ops["tosa.custom"].outputs] == ["5#0", "5#1"]
    assert misc.value("cst").info == "!tosa.shape<3>" and misc.value("cst").producer.kind == CONST
    assert model.warnings == []
    assert tosa_violations(model.graph) == []


@pytest.mark.needs("iree")
def test_tosa_syntax_iree_does_not_take_needs_tosa_opt(monkeypatch):
    from legalizer.kinds.mlir import tool as mlir_tool

    monkeypatch.setattr(mlir_tool, "find_tosa_opt", lambda: None)
    with pytest.raises(legalizer.BadInput) as e:  # IREE's own word, where tosa-opt is not there, and the extra
        parse_mlir(LLVM_STYLE, "llvm.mlir")
    assert str(e.value) == ("llvm.mlir:4:36: custom op 'tosa.fft2d' expected 'inverse' (a TOSA syntax IREE's parser"
                            " does not take; tosa-opt reads it: install the mlir extra: pip install 'legalizer[mlir]')")


@pytest.mark.needs("iree")
def test_a_quantized_type_legalize_cannot_read_is_bad_input():
    text = "func.func @main(%a: tensor<2x!quant.uniform<i8:f32, x:y>>) {\n  return\n}\n"
    with pytest.raises(legalizer.BadInput) as e:
        parse_mlir(text, "q.mlir")
    assert str(e.value) == "q.mlir:1:17: '!quant.uniform<i8:f32, x:y>' is not a quantized type legalize reads"


def test_iree_pretty_and_generic_forms_read_the_same():
    require("iree")
    from iree.compiler import ir
    text = emitted(ROOT / "models/transformer_block.torchscript.onnx")
    module = ir.Module.parse(text, ir.Context())
    shapes = []
    for generic in (False, True):
        printed = module.operation.get_asm(print_generic_op_form=generic, enable_debug_info=generic)
        g = parse_mlir(printed).graph
        shapes.append(Counter((n.op, n.outputs[0].type.shape if n.outputs else None, len(n.inputs))
                              for n in g.nodes()))
    ours = parse_mlir(text).graph
    assert shapes[0] == shapes[1] == Counter((n.op, n.outputs[0].type.shape if n.outputs else None, len(n.inputs))
                                             for n in ours.nodes())
    pretty = module.operation.get_asm()
    assert "tosa.clamp" in pretty or "tosa.reduce_sum" in pretty
    assert any(n.attrs.get("axis") == 2 for n in parse_mlir(pretty).graph.nodes() if n.op == "tosa.reduce_sum")


@pytest.mark.needs("iree")
def test_regions_become_subgraphs():
    text = """
func.func @main(%c: tensor<i1>, %x: tensor<2xf32>) -> tensor<2xf32> {
  %0 = "tosa.cond_if"(%c, %x) ({
  ^bb0(%a: tensor<2xf32>):
    %1 = "tosa.add"(%a, %x) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
    "tosa.yield"(%1) : (tensor<2xf32>) -> ()
  }, {
  ^bb0(%b: tensor<2xf32>):
    "tosa.yield"(%b) : (tensor<2xf32>) -> ()
  }) : (tensor<i1>, tensor<2xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}
"""
    g = parse_mlir(text).graph
    cond = next(n for n in g.nodes() if n.op == "tosa.cond_if")
    then, other = cond.attrs["region0"], cond.attrs["region1"]
    assert [n.op for n in then.nodes()] == ["$input", "tosa.add", "$output"]
    add = next(n for n in then.nodes() if n.op == "tosa.add")
    assert add.inputs[1] is g.value("x")  # a value of the function, used inside
    assert [n.kind for n in other.nodes()] == [INPUT, OUTPUT]


# MLIR's parser's words and positions
@pytest.mark.parametrize("text, where", [
    ("func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {\n  %0 = tosa.add %a, %a : (tensor<2xf32>, tensor<2xf32>) -> \n}",
     "2:59: expected non-function type"),
    ("func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {\n  %0 = \"tosa.abs\"(%a : (tensor<2xf32>) -> tensor<2xf32>\n}",
     "2:21: expected ')' to end operand list"),
    ("func.func @main(%a: tensor<2xf32>) {\n  %0 = \"tosa.abs\"(%a) : (tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>)\n}",
     "2:3: operation defines 2 results but was provided 1 to bind"),
    ("func.func @main(%a: tensor<2xf32>) {\n  %0 = \"tosa.const\"() <{values = dense<\"0x00\"> : tensor<2xf32>}> : () -> tensor<2xf32>\n}",
     "2:34: elements hex data size is invalid for provided type: 'tensor<2xf32>'"),
    ("func.func @main(%a: tensor<2xf32>) {\n  %0 = tosa.abs %a : (tensor<2xf32>) -> tensor<2xf32>\n  %0 = tosa.abs %a : (tensor<2xf32>) -> tensor<2xf32>\n}",
     "3:3: redefinition of SSA value '%0'"),
    ("func.func @main(%a: tensor<2xf32>) {\n  %0 = \"tosa.abs\"(%a) : (tensor<2xf32>) -> tensor<2xf32> ~\n}",
     "2:58: unexpected character"),
    ("module {\n  func.func @main(%a: tensor<2xf32>) {\n    return\n  }\n", "4:4: expected operation name in quotes"),
])
@pytest.mark.needs("iree")
def test_bad_text_is_one_line_with_line_and_column(text, where):
    with pytest.raises(legalizer.BadInput) as e:
        parse_mlir(text, "bad.mlir")
    assert str(e.value) == f"bad.mlir:{where}"


@pytest.mark.needs("iree")
def test_load_mlir_reads_files_and_bytecode(tmp_path, monkeypatch):
    path = tmp_path / "add.mlir"
    path.write_text(RANK_MISMATCH)
    model = load_mlir(path)
    assert model.source == path and model.proto.form == "text"
    assert [d.code for d in tosa_violations(model.graph)] == ["operand-rank-mismatch"]
    require("iree")
    from iree.compiler import ir
    legal = RANK_MISMATCH.replace("tensor<16xf32>", "tensor<1x1x1x16xf32>")
    module = ir.Module.parse(legal, ir.Context())
    bc = tmp_path / "add.mlirbc"
    with open(bc, "wb") as f:
        module.operation.write_bytecode(f)
    model = load_mlir(bc)
    assert model.proto.form == "bytecode"
    add = next(n for n in model.graph.nodes() if n.op == "tosa.add")
    assert [v.type.shape for v in add.inputs] == [(1, 8, 8, 16), (1, 1, 1, 16)]
    assert add.proto.loc is not None  # printed with its location
    assert tosa_violations(model.graph) == []
    import sys

    monkeypatch.setitem(sys.modules, "iree.compiler", None)  # as if not installed
    with pytest.raises(legalizer.BadInput) as e:
        load_mlir(bc)
    assert str(e.value) == f"{bc}: reading MLIR bytecode needs MLIR's parser (the mlir extra: pip install 'legalizer[mlir]')"


@pytest.mark.needs("iree")
def test_constants_are_constant_nodes_and_splats_cost_nothing():
    text = """
func.func @main() -> tensor<4096x4096xf32> {
  %0 = "tosa.const"() <{values = dense<2.0e-02> : tensor<4096x4096xf32>}> : () -> tensor<4096x4096xf32>
  %1 = arith.constant dense<[true, false]> : tensor<2xi1>
  return %0 : tensor<4096x4096xf32>
}
"""
    g = parse_mlir(text).graph
    big = g.value("0").producer
    assert big.kind == CONST and big.data.array.shape == (4096, 4096) and big.data.array.strides == (0, 0)
    assert g.value("1").producer.data.array.tolist() == [True, False]
    assert g.value("1").type == legalizer.TensorType("bool", (2,))


@pytest.mark.needs("iree")
@pytest.mark.parametrize("head", ["#loc = loc(unknown)\n", "!t = tensor<3xf32>\n", "// converted\n", "", "\n\n"])
@pytest.mark.parametrize("generic", [False, True], ids=["custom-form", "generic-form"])
def test_mlir_text_is_recognized_by_its_opening(tmp_path, head, generic):
    # What tools print first varies (location aliases, type aliases, the generic form);
    # each is MLIR, not "a text file, not an ONNX model".
    from legalizer.importers.reader import sniff

    func = ('"func.func"() <{function_type = (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>, sym_name = "main"}> ({\n'
            '^bb0(%a: tensor<2x3xf32>, %b: tensor<3xf32>):\n'
            '  %0 = "tosa.add"(%a, %b) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>\n'
            '  "func.return"(%0) : (tensor<2x3xf32>) -> ()\n}) : () -> ()\n') if generic else (
            'func.func @main(%a: tensor<2x3xf32>, %b: tensor<3xf32>) -> tensor<2x3xf32> {\n'
            '  %0 = tosa.add %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>\n'
            '  return %0 : tensor<2x3xf32>\n}\n')
    path = tmp_path / "conv.txt"  # by content, not by extension
    path.write_text(head + func)
    assert sniff(path) == "mlir"
    assert [d.code for d in tosa_violations(load_mlir(path).graph)] == ["operand-rank-mismatch"]


@pytest.mark.needs("iree")
def test_strings_that_are_not_utf8_are_kept_as_mlir_writes_them(tmp_path):
    """tosa-converter-for-tflite keeps a TFLite model's metadata buffers as strings of
    any bytes (``tfl.metadata``); reading them as text died with nanobind's "conversion
    error" on 9 of 14 MediaPipe modules. Text and bytecode alike, they are kept escaped."""
    from iree.compiler import ir

    text = ('module attributes {tfl.metadata = {TFLITE_METADATA = "\\1C\\00\\FFM001"}, tfl.description = "ok \\C3\\A9"} {\n'
            "  func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {\n"
            '    %0 = "tosa.abs"(%a) {x.blob = "\\FE\\01"} : (tensor<2xf32>) -> tensor<2xf32>\n'
            "    return %0 : tensor<2xf32>\n  }\n}\n")
    path = tmp_path / "meta.mlirbc"
    with open(path, "wb") as f:
        ir.Module.parse(text, ir.Context()).operation.write_bytecode(f)
    for model in (parse_mlir(text, "meta.mlir"), load_mlir(path)):
        assert model.proto.module_attrs == {"tfl.metadata": MlirAttr('{TFLITE_METADATA = "\\1C\\00\\FFM001"}'),
                                            "tfl.description": "ok \u00e9"}
        op = next(n for n in model.graph.nodes() if n.kind == OP)
        assert op.op == "tosa.abs" and op.attrs == {"x.blob": MlirAttr('"\\FE\\01"')}


# -- aliases that expand without end (issue 24, item 5) ----------------------------------

def _doubling(levels: int) -> str:
    lines = [f"#a{i} = [#a{i + 1}, #a{i + 1}]" for i in range(levels)] + [f"#a{levels} = 1 : i32"]
    return "\n".join(lines) + ("\nfunc.func @main(%x: tensor<2xf32>) -> tensor<2xf32> attributes {big = #a0} {\n"
                               "  return %x : tensor<2xf32>\n}\n")


def test_an_alias_bomb_is_refused_from_its_text():
    from legalizer.kinds.mlir.bounds import check_aliases

    text = _doubling(40)  # about 900 bytes, 2^40 leaves once expanded
    with pytest.raises(legalizer.BadInput) as e:
        check_aliases(text, "m.mlir")
    assert str(e.value).startswith("m.mlir: alias #a23 expands to 1,703,931 bytes of text, more than the limit of"
                                   " 1,048,576")
    check_aliases(_doubling(12), "m.mlir")  # 4,096 leaves: a module as any other
    # a module that uses a modest alias many times is bounded by its total
    many = "#big = [" + ", ".join(["1 : i32"] * 10_000) + "]\n" + "".join(
        f"func.func @f{i}() attributes {{x = #big}} {{\n  return\n}}\n" for i in range(1_000))
    with pytest.raises(legalizer.BadInput, match=r"^m.mlir: its aliases expand it to [\d,]+ bytes of text"):
        check_aliases(many, "m.mlir")


@pytest.mark.needs("mlir")
def test_an_alias_bomb_is_one_line_and_exit_2(tmp_path, legalize_in_process):
    path = tmp_path / "bomb.mlir"
    path.write_text(_doubling(40))
    code, out, err = legalize_in_process(path, "--verify-only")
    assert code == 2 and err.splitlines() == [
        f"legalize: error: {path}: alias #a23 expands to 1,703,931 bytes of text, more than the limit of 1,048,576"
        " (64 times the file, or 1 MiB); legalize reads no such module"], err


def _doubling_up(levels: int) -> str:
    """As MLIR reads aliases: each defined before it is used (``_doubling`` is refused
    by MLIR's parser too), the last one used."""
    lines = ["#a0 = 1 : i32"] + [f"#a{i + 1} = [#a{i}, #a{i}]" for i in range(levels)]
    return "\n".join(lines) + (f"\nfunc.func @main(%x: tensor<2xf32>) -> tensor<2xf32> attributes {{big = #a{levels}}}"
                               " {\n  return %x : tensor<2xf32>\n}\n")


def test_twenty_doubling_levels_are_refused_in_under_a_second():
    """Bounded by the expanded size, not the depth: 20 levels (493 bytes, 2^20 leaves,
    9.4 MB of text once expanded) went through, and took 200 MB and seconds to walk."""
    from legalizer.kinds.mlir.bounds import check_aliases

    text = _doubling_up(20)
    assert len(text) == 493
    start = time.monotonic()
    with pytest.raises(legalizer.BadInput) as e:
        check_aliases(text, "m.mlir")
    assert time.monotonic() - start < 1.0
    assert str(e.value) == ("m.mlir: alias #a17 expands to 1,703,931 bytes of text, more than the limit of 1,048,576"
                            " (64 times the file, or 1 MiB); legalize reads no such module")
    check_aliases(_doubling_up(10), "m.mlir")  # 1,024 leaves: a module as any other


@pytest.mark.needs("mlir")
def test_twenty_doubling_levels_are_one_line_and_exit_2(tmp_path, legalize_in_process):
    path = tmp_path / "bomb.mlir"
    path.write_text(_doubling_up(20))
    code, out, err = legalize_in_process(path, "--verify-only")
    assert code == 2 and err.splitlines() == [
        f"legalize: error: {path}: alias #a17 expands to 1,703,931 bytes of text, more than the limit of 1,048,576"
        " (64 times the file, or 1 MiB); legalize reads no such module"], err
