"""TFLite IR -> ONNX: each op family built by hand as the TFLite importer builds it,
translated, run on onnxruntime and compared with a numpy model of TFLite's semantics."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest

from legalizer.numeric.ort_session import session
from legalizer.errors import CheckUnavailable
from legalizer.kinds.tflite.onnx_form import tflite_to_onnx
from legalizer.ir.constdata import ConstData
from legalizer.ir.dtypes import dtype_of_array
from legalizer.ir.graph import CONST, INPUT, OUTPUT, Graph, Node, Value
from legalizer.ir.types import Quantization, TensorType
from legalizer.model import Model

RNG = np.random.default_rng(7)
SAME, VALID = 0, 1


class TFLiteGraph:
    """A TFLite-dialect graph, built the way the importer builds one."""

    def __init__(self):
        self.g = Graph("main", opsets={"tflite": 3})
        self.g.frontend = "tflite"

    def input(self, name, dtype, shape, quant=None) -> Value:
        v = Value(name, TensorType(dtype, tuple(shape)), quant=quant)
        self.g.add_node(Node(INPUT, "$input", name=name, outputs=[v]))
        return v

    def const(self, name, array, quant=None) -> Value:
        array = np.asarray(array)
        v = Value(name, TensorType(dtype_of_array(array), array.shape), quant=quant)
        self.g.add_node(Node(CONST, "$const", name=name, outputs=[v], data=ConstData.from_array(array)))
        return v

    def op(self, op_type, inputs, dtype, shape, *, quant=None, outputs=1, name=None, domain="tflite", **attrs):
        shapes = shape if outputs > 1 else [shape]
        types = [TensorType(dtype, None if s is None else tuple(s)) for s in shapes]
        base = name or op_type.lower()
        n = self.g.add_op(op_type, list(inputs), types, domain=domain, attrs=attrs,
                          output_names=[f"{base}{i}" if outputs > 1 else base for i in range(outputs)])
        for v in n.outputs:
            v.quant = quant
        return n.outputs if outputs > 1 else n.output

    def output(self, *values) -> None:
        for v in values:
            self.g.add_node(Node(OUTPUT, "$output", name=v.name, inputs=[v]))

    def onnx(self, **kw) -> onnx.ModelProto:
        m = tflite_to_onnx(Model(self.g, "tflite", subgraphs=[self.g]), **kw)
        onnx.checker.check_model(m, full_check=True)
        return m

    def run(self, *feeds, **kw):
        m = self.onnx(**kw)
        names = [n.output.name for n in self.g.inputs]
        return session(m, ["CPUExecutionProvider"]).run(None, dict(zip(names, feeds)))


def one_op_outputs(op_type, operands, out_dtype, out_shapes, **attrs):
    """A graph of one op over graph inputs ((name, array) pairs) and constants (arrays);
    its outputs on onnxruntime."""
    t = TFLiteGraph()
    ins, feeds = [], []
    for k, x in enumerate(operands):
        if isinstance(x, tuple):
            ins.append(t.input(x[0], dtype_of_array(x[1]), x[1].shape))
            feeds.append(x[1])
        else:
            ins.append(t.const(f"c{k}", x))
    outs = t.op(op_type, ins, out_dtype, out_shapes if len(out_shapes) > 1 else out_shapes[0],
                outputs=len(out_shapes), **attrs)
    t.output(*(outs if len(out_shapes) > 1 else [outs]))
    return t.run(*feeds)


def one_op(op_type, operands, out_dtype, out_shape, **attrs):
    return one_op_outputs(op_type, operands, out_dtype, [out_shape], **attrs)[0]


def check(got, want, tol=1e-5):
    want = np.asarray(want)
    assert got.shape == want.shape
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    if want.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    else:
        np.testing.assert_array_equal(got, want)


# ---- binary ops: every one, both ranks orders --------------------------------------
def floats(shape):
    return RNG.normal(0, 3, shape).astype(np.float32)


def nonzero_floats(shape):
    return (RNG.uniform(0.5, 3, shape) * RNG.choice([-1, 1], shape)).astype(np.float32)


def small_ints(shape):
    return RNG.integers(-3, 4, shape).astype(np.float32)  # equal values occur


def ints(shape):
    return RNG.integers(-20, 20, shape).astype(np.int32)


def nonzero_ints(shape):
    return (RNG.integers(1, 6, shape) * RNG.choice([-1, 1], shape)).astype(np.int32)


def bools(shape):
    return RNG.random(shape) < 0.5


BINARY = [  # op, (a maker, b maker), reference, output dtype
    ("ADD", (floats, floats), np.add, "float"),
    ("SUB", (floats, floats), np.subtract, "float"),
    ("MUL", (floats, floats), np.multiply, "float"),
    ("DIV", (floats, nonzero_floats), np.divide, "float"),
    ("POW", (lambda s: RNG.uniform(0.5, 2, s).astype(np.float32), floats), np.power, "float"),
    ("MAXIMUM", (floats, floats), np.maximum, "float"),
    ("MINIMUM", (floats, floats), np.minimum, "float"),
    ("SQUARED_DIFFERENCE", (floats, floats), lambda a, b: (a - b) ** 2, "float"),
    ("FLOOR_DIV", (floats, nonzero_floats), lambda a, b: np.floor(a / b), "float"),
    ("FLOOR_DIV", (ints, nonzero_ints), np.floor_divide, "int32"),
    ("FLOOR_MOD", (floats, nonzero_floats), np.mod, "float"),
    ("FLOOR_MOD", (ints, nonzero_ints), np.mod, "int32"),
    ("LESS", (small_ints, small_ints), np.less, "bool"),
    ("LESS_EQUAL", (small_ints, small_ints), np.less_equal, "bool"),
    ("GREATER", (small_ints, small_ints), np.greater, "bool"),
    ("GREATER_EQUAL", (small_ints, small_ints), np.greater_equal, "bool"),
    ("EQUAL", (small_ints, small_ints), np.equal, "bool"),
    ("NOT_EQUAL", (small_ints, small_ints), np.not_equal, "bool"),
    ("LOGICAL_AND", (bools, bools), np.logical_and, "bool"),
    ("LOGICAL_OR", (bools, bools), np.logical_or, "bool"),
    ("BITWISE_XOR", (ints, ints), np.bitwise_xor, "int32"),
    ("RIGHT_SHIFT", (lambda s: RNG.integers(-2**31, 2**31 - 1, s).astype(np.int32),
                     lambda s: RNG.integers(0, 32, s).astype(np.int32)), np.right_shift, "int32"),
]


@pytest.mark.parametrize("swap", [False, True], ids=["rank3+rank2", "rank2+rank3"])
@pytest.mark.parametrize("op,makers,ref,out", BINARY, ids=[f"{c[0]}-{c[3]}" for c in BINARY])
def test_binary_rank_mismatched_broadcast(op, makers, ref, out, swap):
    sa, sb = ((3, 1), (2, 1, 4)) if swap else ((2, 1, 4), (3, 1))
    a, b = makers[0](sa), makers[1](sb)
    got = one_op(op, [("a", a), ("b", b)], out, (2, 3, 4))
    check(got, ref(a, b).astype(got.dtype if out != "float" else np.float32), tol=1e-5)


def test_floor_mod_and_div_signs_exact():
    a = np.array([7, -7, 7, -7, 6, -6, 0.5, -0.5], np.float32)
    b = np.array([2, 2, -2, -2, 3, 3, -2, 2], np.float32)
    check(one_op("FLOOR_MOD", [("a", a), ("b", b)], "float", (8,)), np.array([1, 1, -1, -1, 0, 0, -1.5, 1.5], np.float32))
    check(one_op("FLOOR_DIV", [("a", a.astype(np.int32)), ("b", b.astype(np.int32))], "int32", (8,)),
          np.array([3, -4, -4, 3, 2, -2, 0, 0], np.int32))


def test_select_v2_and_prelu_broadcast():
    c, x, y = bools((3, 1)), floats((2, 1, 4)), floats((4,))
    check(one_op("SELECT_V2", [("c", c), ("x", x), ("y", y)], "float", (2, 3, 4)), np.where(c, x, y))
    x, alpha = floats((2, 3, 4)), np.abs(floats((4,)))
    check(one_op("PRELU", [("x", x), alpha], "float", (2, 3, 4)), np.where(x >= 0, x, alpha * x))


@pytest.mark.parametrize("act,ref", [
    (0, lambda y: y), (1, lambda y: np.maximum(y, 0)), (2, lambda y: np.clip(y, -1, 1)),
    (3, lambda y: np.clip(y, 0, 6)), (4, np.tanh)], ids=["NONE", "RELU", "RELU_N1_TO_1", "RELU6", "TANH"])
def test_fused_activation(act, ref):
    a, b = floats((2, 3)) * 3, floats((3,))
    check(one_op("ADD", [("a", a), ("b", b)], "float", (2, 3), fused_activation_function=act), ref(a + b))


# ---- unary ops ----------------------------------------------------------------------
_erf = np.vectorize(math.erf, otypes=[np.float64])


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


UNARY = [  # op, input, reference, attrs
    ("RSQRT", "pos", lambda x: 1 / np.sqrt(x), {}),
    ("SQUARE", "any", np.square, {}),
    ("RELU6", "any", lambda x: np.clip(x, 0, 6), {}),
    ("RELU_N1_TO_1", "any", lambda x: np.clip(x, -1, 1), {}),
    ("RELU", "any", lambda x: np.maximum(x, 0), {}),
    ("ABS", "any", np.abs, {}),
    ("NEG", "any", np.negative, {}),
    ("EXP", "any", np.exp, {}),
    ("LOG", "pos", np.log, {}),
    ("SQRT", "pos", np.sqrt, {}),
    ("SIN", "any", np.sin, {}),
    ("COS", "any", np.cos, {}),
    ("TANH", "any", np.tanh, {}),
    ("LOGISTIC", "any", lambda x: 1 / (1 + np.exp(-x)), {}),
    ("ELU", "any", lambda x: np.where(x > 0, x, np.expm1(x)), {}),
    ("LEAKY_RELU", "any", lambda x: np.where(x >= 0, x, 0.2 * x), {"alpha": 0.2}),
    ("HARD_SWISH", "any", lambda x: x * np.clip(x + 3, 0, 6) / 6, {}),
    ("GELU", "any", lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))), {"approximate": False}),
    ("GELU", "any", _gelu_tanh, {"approximate": True}),
    ("FLOOR", "half", np.floor, {}),
    ("CEIL", "half", np.ceil, {}),
    ("ROUND", "half", np.round, {}),  # half to even, as TFLite
    ("SIGN", "half", np.sign, {}),
]
INPUTS = {
    "any": np.linspace(-4, 4, 12, dtype=np.float32).reshape(3, 4),
    "pos": np.linspace(0.25, 5, 12, dtype=np.float32).reshape(3, 4),
    "half": np.array([-2.5, -1.5, -0.5, 0, 0.5, 1.5, 2.5, 3.5, -0.7, 0.7, 1.2, -3.2], np.float32).reshape(3, 4),
}


@pytest.mark.parametrize("op,kind,ref,attrs", UNARY, ids=[f"{u[0]}{'-' + str(u[3]) if u[3] else ''}" for u in UNARY])
def test_unary(op, kind, ref, attrs):
    x = INPUTS[kind]
    check(one_op(op, [("x", x)], "float", x.shape, **attrs), ref(x.astype(np.float64)).astype(np.float32), tol=1e-5)


def test_logical_not_and_cast():
    b = bools((2, 3))
    check(one_op("LOGICAL_NOT", [("b", b)], "bool", (2, 3)), ~b)
    x = np.array([-1.7, -0.2, 0.0, 2.5, 3.9, 100.2], np.float32)
    check(one_op("CAST", [("x", x)], "int32", (6,), in_data_type=0, out_data_type=2), np.trunc(x).astype(np.int32))


# ---- shapes and data movement --------------------------------------------------------
def test_reshape_from_input_and_from_options():
    x = floats((2, 3, 4))
    check(one_op("RESHAPE", [("x", x), np.array([4, -1], np.int32)], "float", (4, 6)), x.reshape(4, 6))
    check(one_op("RESHAPE", [("x", x)], "float", (6, 4), new_shape=[6, 4]), x.reshape(6, 4))


def test_broadcast_to_expand_dims_squeeze_transpose():
    x = floats((3, 1))
    check(one_op("BROADCAST_TO", [("x", x), np.array([2, 3, 4], np.int32)], "float", (2, 3, 4)),
          np.broadcast_to(x, (2, 3, 4)))
    check(one_op("EXPAND_DIMS", [("x", x), np.array(-1, np.int32)], "float", (3, 1, 1)), x[:, :, None])
    y = floats((1, 3, 1, 2))
    check(one_op("SQUEEZE", [("y", y)], "float", (3, 2)), y.reshape(3, 2))
    check(one_op("SQUEEZE", [("y", y)], "float", (3, 1, 2), squeeze_dims=[0]), y.reshape(3, 1, 2))
    check(one_op("TRANSPOSE", [("y", y), np.array([3, 1, 0, 2], np.int32)], "float", (2, 3, 1, 1)),
          y.transpose(3, 1, 0, 2))


def test_concatenation_with_activation():
    a, b = floats((2, 3)), floats((2, 2))
    check(one_op("CONCATENATION", [("a", a), ("b", b)], "float", (2, 5), axis=-1, fused_activation_function=3),
          np.clip(np.concatenate([a, b], -1), 0, 6))


@pytest.mark.parametrize("keep", [False, True])
@pytest.mark.parametrize("op,ref", [("MEAN", np.mean), ("SUM", np.sum), ("REDUCE_MAX", np.max)])
def test_reducers(op, ref, keep):
    x = floats((2, 3, 4))
    want = ref(x, axis=(0, 2), keepdims=keep)
    check(one_op(op, [("x", x), np.array([0, -1], np.int32)], "float", want.shape, keep_dims=keep), want)


def test_empty_axes_reduce_nothing_and_zero_sized_reshape():
    x = floats((2, 3))
    check(one_op("SUM", [("x", x), np.zeros(0, np.int32)], "float", (2, 3)), x)
    check(one_op("RESHAPE", [("x", floats((2, 0))), np.array([0, 5], np.int32)], "float", (0, 5)),
          np.zeros((0, 5), np.float32))


def test_more_data_movement_ops():
    x = floats((2, 3, 4))
    a, b, c = one_op_outputs("UNPACK", [("x", x)], "float", [(2, 4)] * 3, axis=1, num=3)
    check(a, x[:, 0]), check(c, x[:, 2])
    check(one_op("PACK", [("x", x), ("y", x + 1)], "float", (2, 3, 2, 4), axis=2, values_count=2),
          np.stack([x, x + 1], 2))
    parts = one_op_outputs("SPLIT", [np.array(2, np.int32), ("x", x)], "float", [(2, 3, 2)] * 2, num_splits=2)
    check(parts[1], x[..., 2:])
    check(one_op("TILE", [("x", x), np.array([1, 2, 1], np.int32)], "float", (2, 6, 4)), np.tile(x, (1, 2, 1)))
    check(one_op("ARG_MAX", [("x", x), np.array([1], np.int32)], "int32", (2, 4), output_type=2),
          x.argmax(1).astype(np.int32))
    check(one_op("CUMSUM", [("x", x), np.array(2, np.int32)], "float", x.shape, exclusive=True, reverse=True),
          np.flip(np.cumsum(np.flip(x, 2), 2), 2) - x, tol=1e-5)
    check(one_op("ADD_N", [("x", x), ("y", 2 * x), ("z", 3 * x)], "float", x.shape), 6 * x, tol=1e-5)
    check(one_op("REDUCE_MIN", [("x", x), np.array([1], np.int32)], "float", (2, 4)), x.min(1))
    cond = np.array([True, False])
    check(one_op("SELECT", [("c", cond), ("x", x), ("y", -x)], "float", x.shape), np.where(cond[:, None, None], x, -x))



def test_scalar_constant_keeps_rank_zero():
    # Keras' Flatten as TFLiteConverter writes it: PACK of a dim sliced off SHAPE (a
    # scalar) and a scalar constant into the RESHAPE's target shape. The constant once
    # came out 1-D, and onnxruntime refused the Concat ("Input 1 has rank 2 != 1").
    t = TFLiteGraph()
    x = t.input("x", "float", (2, 1, 1, 5))
    dims = t.op("SHAPE", [x], "int32", (4,), out_type=2)
    batch = t.op("STRIDED_SLICE", [dims, t.const("b", np.array([0], np.int32)),
                                   t.const("e", np.array([1], np.int32)), t.const("s", np.array([1], np.int32))],
                 "int32", (), begin_mask=0, end_mask=0, ellipsis_mask=0, new_axis_mask=0, shrink_axis_mask=1)
    shape = t.op("PACK", [batch, t.const("five", np.array(5, np.int32))], "int32", (2,), axis=0, values_count=2)
    t.output(t.op("RESHAPE", [x, shape], "float", (2, 5)))
    inits = {i.name: i for i in t.onnx().graph.initializer}
    assert list(inits["five"].dims) == []
    x_in = floats((2, 1, 1, 5))
    check(t.run(x_in)[0], x_in.reshape(2, 5))

def test_normalizations():
    x = floats((3, 4))
    check(one_op("L2_NORMALIZATION", [("x", x)], "float", x.shape),
          (x / np.sqrt((x.astype(np.float64) ** 2).sum(-1, keepdims=True))).astype(np.float32), tol=1e-5)
    ls = x - x.max(-1, keepdims=True)
    check(one_op("LOG_SOFTMAX", [("x", x)], "float", x.shape), ls - np.log(np.exp(ls).sum(-1, keepdims=True)))


def test_softmax_beta():
    x = floats((2, 5))
    z = 0.5 * x
    want = np.exp(z - z.max(-1, keepdims=True))
    check(one_op("SOFTMAX", [("x", x)], "float", (2, 5), beta=0.5), want / want.sum(-1, keepdims=True))


def test_pad_and_padv2():
    x = floats((2, 3))
    pads = np.array([[1, 0], [2, 1]], np.int32)
    check(one_op("PAD", [("x", x), pads], "float", (3, 6)), np.pad(x, pads))
    check(one_op("PADV2", [("x", x), pads, np.array([7.5], np.float32)], "float", (3, 6)),
          np.pad(x, pads, constant_values=7.5))


def test_strided_slice_masks():
    x = floats((4, 5, 6))
    begin, end, strides = np.array([1, -1, 0], np.int32), np.array([3, 0, 5], np.int32), np.array([1, -2, 2], np.int32)
    # begin_mask on axis 0, end_mask on axis 1 (negative stride: through index 0)
    check(one_op("STRIDED_SLICE", [("x", x), begin, end, strides], "float", (3, 3, 3), begin_mask=1, end_mask=2),
          x[:3, -1::-2, 0:5:2])
    # shrink axis 0 at -1 (the last row), axis 2 at 2
    check(one_op("STRIDED_SLICE", [("x", x), np.array([-1, 0, 2], np.int32), np.array([0, 5, 3], np.int32),
                                   np.array([1, 1, 1], np.int32)], "float", (5,), shrink_axis_mask=5),
          x[-1, 0:5, 2])
    # masked bounds with negative strides run from the last element through the first
    check(one_op("STRIDED_SLICE", [("x", x), np.array([0, 1, 0], np.int32), np.array([0, 4, 0], np.int32),
                                   np.array([-1, 2, -2], np.int32)], "float", (4, 2, 3), begin_mask=5, end_mask=5),
          x[::-1, 1:4:2, ::-2])


def test_slice_with_size_minus_one_and_gather_and_shape():
    x = floats((4, 5))
    check(one_op("SLICE", [("x", x), np.array([1, 2], np.int32), np.array([2, -1], np.int32)], "float", (2, 3)),
          x[1:3, 2:])
    idx = np.array([[3, 0], [1, 1]], np.int32)
    check(one_op("GATHER", [("x", x), ("i", idx)], "float", (4, 2, 2), axis=1), np.take(x, idx, axis=1))
    check(one_op("SHAPE", [("x", x)], "int32", (2,), out_type=2), np.array([4, 5], np.int32))


# ---- matrix products ----------------------------------------------------------------
@pytest.mark.parametrize("adj_x,adj_y", [(False, False), (True, False), (False, True), (True, True)])
def test_batch_matmul_adjoints(adj_x, adj_y):
    a = floats((2, 4, 3) if adj_x else (2, 3, 4))
    b = floats((5, 4) if adj_y else (4, 5))  # batch dims broadcast
    ta = a.swapaxes(-1, -2) if adj_x else a
    tb = b.swapaxes(-1, -2) if adj_y else b
    check(one_op("BATCH_MATMUL", [("a", a), ("b", b)], "float", (2, 3, 5), adj_x=adj_x, adj_y=adj_y),
          ta @ tb, tol=1e-4)


@pytest.mark.parametrize("keep", [False, True])
def test_fully_connected(keep):
    x, w, b = floats((2, 3, 4)), floats((5, 4)), floats((5,))
    want = x @ w.T + b
    want = np.maximum(want if keep else want.reshape(6, 5), 0)
    check(one_op("FULLY_CONNECTED", [("x", x), w, b], "float", want.shape, keep_num_dims=keep,
                 fused_activation_function=1), want, tol=1e-4)


# ---- NHWC convolutions and pools ------------------------------------------------------
def _pads(size, k, s, d, padding):
    if padding == VALID:
        return 0, 0, (size - (k - 1) * d - 1) // s + 1
    out = -(-size // s)
    total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
    return total // 2, total - total // 2, out


def ref_windows(x, kh, kw, stride, dilation, padding, fill=0.0):
    """Every kernel tap of an NHWC input: (i, j, patch [N, OH, OW, C]), TF's padding."""
    (s_h, s_w), (d_h, d_w) = stride, dilation
    t, b_, oh = _pads(x.shape[1], kh, s_h, d_h, padding)
    l_, r, ow = _pads(x.shape[2], kw, s_w, d_w, padding)
    xp = np.pad(x, ((0, 0), (t, b_), (l_, r), (0, 0)), constant_values=fill)
    for i in range(kh):
        for j in range(kw):
            yield i, j, xp[:, i * d_h: i * d_h + s_h * (oh - 1) + 1: s_h, j * d_w: j * d_w + s_w * (ow - 1) + 1: s_w, :]


def ref_conv(x, w_ohwi, bias, stride, dilation, padding):
    """Grouped NHWC conv: filter [O, KH, KW, C / groups]."""
    o, kh, kw, per_group = w_ohwi.shape
    groups = x.shape[3] // per_group
    out = None
    for i, j, patch in ref_windows(x.astype(np.float64), kh, kw, stride, dilation, padding):
        parts = [patch[..., g * per_group:(g + 1) * per_group] @ w_ohwi[g * o // groups:(g + 1) * o // groups, i, j, :].T
                 for g in range(groups)]
        term = np.concatenate(parts, -1)
        out = term if out is None else out + term
    return out + bias


def ref_depthwise(x, w, bias, stride, dilation, padding):
    # [1, KH, KW, C*mult] is a conv of C groups, output channel c*mult + m on input c.
    return ref_conv(x, w[0].transpose(2, 0, 1)[..., None], bias, stride, dilation, padding)


CONV_CASES = [(SAME, (2, 2), (1, 1)), (VALID, (2, 2), (1, 1)), (SAME, (1, 1), (2, 2)), (VALID, (1, 2), (1, 1))]
CONV_IDS = ["SAME-s2", "VALID-s2", "SAME-dil2", "VALID-s1x2"]


def conv_options(padding, stride, dilation, act=0):
    return dict(padding=padding, stride_h=stride[0], stride_w=stride[1], dilation_h_factor=dilation[0],
                dilation_w_factor=dilation[1], fused_activation_function=act)


@pytest.mark.parametrize("padding,stride,dilation", CONV_CASES, ids=CONV_IDS)
def test_conv2d_nhwc(padding, stride, dilation):
    x, w, b = floats((2, 7, 8, 3)), floats((4, 3, 2, 3)), floats((4,))
    want = ref_conv(x, w, b, stride, dilation, padding).astype(np.float32)
    check(one_op("CONV_2D", [("x", x), w, b], "float", want.shape, **conv_options(padding, stride, dilation)),
          want, tol=1e-4)


def test_grouped_conv2d():
    x, w, b = floats((1, 5, 5, 4)), floats((6, 3, 3, 2)), floats((6,))
    want = ref_conv(x, w, b, (1, 1), (1, 1), SAME).astype(np.float32)
    check(one_op("CONV_2D", [("x", x), w, b], "float", want.shape, **conv_options(SAME, (1, 1), (1, 1))),
          want, tol=1e-4)


@pytest.mark.parametrize("padding,stride,dilation", CONV_CASES, ids=CONV_IDS)
def test_depthwise_conv2d_nhwc(padding, stride, dilation):
    x, w, b = floats((2, 7, 8, 3)), floats((1, 3, 2, 6)), floats((6,))
    want = np.clip(ref_depthwise(x, w, b, stride, dilation, padding), 0, 6).astype(np.float32)
    check(one_op("DEPTHWISE_CONV_2D", [("x", x), w, b], "float", want.shape, depth_multiplier=2,
                 **conv_options(padding, stride, dilation, act=3)), want, tol=1e-4)


@pytest.mark.parametrize("padding", [SAME, VALID], ids=["SAME", "VALID"])
@pytest.mark.parametrize("op", ["AVERAGE_POOL_2D", "MAX_POOL_2D"])
def test_pool_nhwc(op, padding):
    x = floats((2, 7, 8, 3))
    taps = np.stack([p for _, _, p in ref_windows(x, 3, 3, (2, 2), (1, 1), padding, fill=np.nan)])
    # TFLite's SAME average counts only the cells inside the input
    want = (np.nanmean if op == "AVERAGE_POOL_2D" else np.nanmax)(taps, axis=0)
    check(one_op(op, [("x", x)], "float", want.shape, padding=padding, stride_h=2, stride_w=2, filter_height=3,
                 filter_width=3, fused_activation_function=0), want, tol=1e-5)


# ---- quantized graphs -----------------------------------------------------------------
def q(scale, zp, axis=0):
    return Quantization(tuple(np.atleast_1d(scale).astype(float)), tuple(np.atleast_1d(zp).astype(int)), axis)


def dequant(a, qp):
    shape = [1] * a.ndim
    if len(qp.scale) > 1:
        shape[qp.quantized_dimension] = -1
    return (a.astype(np.float64) - np.reshape(qp.zero_point, shape)) * np.reshape(qp.scale, shape)


def quantize(y, qp, dtype=np.int8):
    info = np.iinfo(dtype)
    return np.clip(np.round(y / qp.scale[0]) + qp.zero_point[0], info.min, info.max).astype(dtype)


def assert_within_one_step(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.abs(got.astype(np.int32) - want.astype(np.int32)).max() <= 1


def test_quantized_int8_add_broadcast():
    qa, qb, qo = q(0.05, 3), q(0.1, -2), q(0.12, 1)
    t = TFLiteGraph()
    a, b = t.input("a", "int8", (2, 3, 4), qa), t.input("b", "int8", (4,), qb)
    t.output(t.op("ADD", [a, b], "int8", (2, 3, 4), quant=qo, fused_activation_function=1))
    xa = RNG.integers(-128, 128, (2, 3, 4)).astype(np.int8)
    xb = RNG.integers(-128, 128, (4,)).astype(np.int8)
    got = t.run(xa, xb)[0]
    want = quantize(np.maximum(dequant(xa, qa) + dequant(xb, qb), 0), qo)
    assert_within_one_step(got, want)
    assert np.unique(got).size > 8  # not all clipped: the comparison means something


@pytest.mark.parametrize("bias_quant", [False, True], ids=["bias-scale-implied", "bias-own-scale"])
def test_quantized_int8_conv_per_axis_weights(bias_quant):
    qx, qo = q(0.02, -5), q(0.15, 2)
    w_scales = np.array([0.01, 0.02, 0.005, 0.015])
    qw = q(w_scales, np.zeros(4), axis=0)
    x = RNG.integers(-128, 128, (1, 6, 6, 3)).astype(np.int8)
    w = RNG.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8)
    bias = RNG.integers(-2000, 2000, (4,)).astype(np.int32)
    bias_scale = 0.02 * w_scales
    t = TFLiteGraph()
    xv = t.input("x", "int8", x.shape, qx)
    wv = t.const("w", w, qw)
    bv = t.const("b", bias, q(bias_scale, np.zeros(4)) if bias_quant else None)
    t.output(t.op("CONV_2D", [xv, wv, bv], "int8", (1, 3, 3, 4), quant=qo, **conv_options(SAME, (2, 2), (1, 1))))
    got = t.run(x)[0]
    real = ref_conv(dequant(x, qx), dequant(w, qw), bias * bias_scale, (2, 2), (1, 1), SAME)
    want = quantize(real, qo)
    assert_within_one_step(got, want)
    assert np.mean(np.abs(want) == 127) < 0.1  # hardly saturated: the comparison means something


def test_int16_quantization_selects_opset_21():
    qa = q(0.001, 0)
    t = TFLiteGraph()
    x = t.input("x", "float", (5,))
    t.output(t.op("QUANTIZE", [x], "int16", (5,), quant=qa))
    assert t.onnx().opset_import[0].version == 21
    xs = np.array([-20, -1.2345, 0, 0.5, 3], np.float32)
    assert_within_one_step(t.run(xs)[0], quantize(xs, qa, np.int16))


def test_quantize_dequantize_and_requantize():
    qa, qb = q(0.1, 0), q(0.05, -10)
    t = TFLiteGraph()
    x = t.input("x", "float", (8,))
    a = t.op("QUANTIZE", [x], "int8", (8,), quant=qa)
    b = t.op("QUANTIZE", [a], "int8", (8,), quant=qb)  # int8 -> int8 requantization
    t.output(a, b, t.op("DEQUANTIZE", [b], "float", (8,)))
    xs = np.linspace(-3, 3, 8, dtype=np.float32)
    ga, gb, gd = t.run(xs)
    assert_within_one_step(ga, quantize(xs, qa))
    assert_within_one_step(gb, quantize(dequant(ga, qa), qb))
    check(gd, dequant(gb, qb).astype(np.float32))


def test_float16_weights_dequantize_to_float():
    w = floats((3, 4)).astype(np.float16)
    t = TFLiteGraph()
    x = t.input("x", "float", (3, 4))
    t.output(t.op("ADD", [x, t.op("DEQUANTIZE", [t.const("w16", w)], "float", (3, 4))], "float", (3, 4)))
    xs = floats((3, 4))
    check(t.run(xs)[0], xs + w.astype(np.float32))


def test_hybrid_fully_connected_int8_weights():
    # float activations, per-channel int8 weights (dynamic range quantization)
    qw = q([0.02, 0.01, 0.03], [0, 0, 0], axis=0)
    w = RNG.integers(-127, 128, (3, 4)).astype(np.int8)
    t = TFLiteGraph()
    x = t.input("x", "float", (2, 4))
    t.output(t.op("FULLY_CONNECTED", [x, t.const("w", w, qw), None], "float", (2, 3)))
    xs = floats((2, 4))
    check(t.run(xs)[0], (xs @ dequant(w, qw).T).astype(np.float32), tol=1e-4)


# ---- dynamic shapes ---------------------------------------------------------------------
def test_dynamic_batch_runs_at_two_sizes():
    t = TFLiteGraph()
    x = t.input("x", "float", (None, 4))
    w, c = floats((5, 4)), floats((4,))
    y = t.op("ADD", [x, t.const("c", c)], "float", (None, 4))
    z = t.op("FULLY_CONNECTED", [y, t.const("w", w)], "float", (None, 5))
    t.output(z, t.op("SHAPE", [x], "int32", (2,)))
    m = t.onnx()
    dims = m.graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in dims] == ["x_d0", 4]
    assert [o.name for o in m.graph.output] == ["fully_connected", "shape"]
    for batch in (1, 3):
        xs = floats((batch, 4))
        gz, gs = t.run(xs)
        check(gz, ((xs + c) @ w.T).astype(np.float32), tol=1e-4)
        check(gs, np.array([batch, 4], np.int32))


def test_dynamic_spatial_conv_same_stride_2():
    t = TFLiteGraph()
    x = t.input("x", "float", (1, None, None, 3))
    w, b = floats((4, 3, 3, 3)), floats((4,))
    t.output(t.op("CONV_2D", [x, t.const("w", w), t.const("b", b)], "float", (1, None, None, 4),
                  **conv_options(SAME, (2, 2), (1, 1))))
    for size in ((5, 6), (8, 7)):
        xs = floats((1, *size, 3))
        check(t.run(xs)[0], ref_conv(xs, w, b, (2, 2), (1, 1), SAME).astype(np.float32), tol=1e-4)


def test_boundary_names_and_nhwc_shapes_are_tflite_ones():
    t = TFLiteGraph()
    x = t.input("image", "float", (1, 8, 8, 3))
    y = t.op("MAX_POOL_2D", [x], "float", (1, 4, 4, 3), padding=VALID, stride_h=2, stride_w=2,
             filter_height=2, filter_width=2, name="pooled")
    t.output(y, x)  # an input given back out as well
    m = t.onnx()
    assert [i.name for i in m.graph.input] == ["image"]
    assert [o.name for o in m.graph.output] == ["pooled", "image"]
    assert [d.dim_value for d in m.graph.output[0].type.tensor_type.shape.dim] == [1, 4, 4, 3]


# ---- what has no ONNX form --------------------------------------------------------------
def test_untranslatable_ops_are_all_named():
    t = TFLiteGraph()
    x = t.input("x", "float", (2, 3))
    c = t.op("MyOp", [x], "float", (2, 3), domain="tflite.custom")
    w = t.op("WHILE", [c], "float", (2, 3), cond_subgraph_index=1, body_subgraph_index=2)
    s = t.op("STRIDED_SLICE", [w, t.const("b", np.zeros(2, np.int32)), t.const("e", np.ones(2, np.int32)),
                               t.const("s", np.ones(2, np.int32))], "float", (1, 1), ellipsis_mask=1)
    t.output(t.op("ADD", [s, x], "float", (2, 3)), t.op("MyOp", [x], "float", (2, 3), domain="tflite.custom"))
    with pytest.raises(CheckUnavailable) as err:
        t.onnx()
    assert str(err.value) == ("no ONNX form for TFLite ops: CUSTOM.MyOp, WHILE (cond subgraph 1 is not in the"
                              " model), STRIDED_SLICE (ellipsis_mask)")


def test_gelu_needs_opset_20_and_opset_floor():
    t = TFLiteGraph()
    x = t.input("x", "float", (3,))
    t.output(t.op("GELU", [x], "float", (3,)))
    with pytest.raises(CheckUnavailable, match=r"GELU \(needs opset 20\)"):
        t.onnx(opset=19)
    with pytest.raises(ValueError, match="opset 18"):
        t.onnx(opset=17)


def test_not_a_tflite_graph():
    g = Graph("g")
    with pytest.raises(ValueError, match="not a TFLite graph"):
        tflite_to_onnx(g)
