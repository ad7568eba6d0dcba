"""The TFLite sample models of models/tflite/, built without TensorFlow: each is an IR
graph of TFLite builtins written by legalize's own flatbuffer writer, which builds
the file with the ``tflite`` package's builder functions. Deterministic (fixed seeds).

- ``broadcast_<op>.tflite``: each broadcasting builtin with rank-mismatched operands,
  once against a graph input (a RESHAPE is needed) and once against a constant (folded);
- ``dynamic_broadcast.tflite``: dynamic dims (shape_signature -1);
- ``add_int8.tflite``, ``mul_int8.tflite``: int8-quantized broadcasts;
- ``mobilenet_like.tflite`` (and ``mobilenet_like_int8.tflite``): conv, depthwise conv,
  per-channel scale and bias as rank-1 broadcasts, mean, fully connected, softmax;
- ``transformer_like.tflite``: attention and layer norm with scalar and rank-1 operands;
- ``two_signatures.tflite``: two subgraphs, each a signature.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import numpy as np

from legalizer.ir.constdata import ConstData
from legalizer.ir.graph import CONST, INPUT, OUTPUT, Graph, Node, Value
from legalizer.ir.types import Quantization, TensorType
from legalizer.model import Model
from legalizer.kinds.tflite.schema import FbTable

RELU6, NONE = 3, 0
SAME, VALID = 0, 1


class Builder:
    """A TFLite-IR graph, built op by op."""

    def __init__(self, name: str, seed: int = 0):
        self.g = Graph(name, {"tflite": 3})
        self.g.frontend = "tflite"
        self.rng = np.random.default_rng(seed)
        self.n = 0

    def input(self, name: str, dtype: str, shape, quant: Optional[Quantization] = None) -> Value:
        v = Value(name, TensorType(dtype, tuple(shape)), quant=quant)
        self.g.add_node(Node(INPUT, "$input", name=name, outputs=[v]))
        return v

    def const(self, name: str, array: np.ndarray, quant: Optional[Quantization] = None) -> Value:
        array = np.asarray(array)
        v = Value(name, TensorType({np.dtype(np.float32): "float", np.dtype(np.int32): "int32",
                                    np.dtype(np.int8): "int8", np.dtype(np.bool_): "bool",
                                    np.dtype(np.int64): "int64"}[array.dtype], array.shape), quant=quant)
        self.g.add_node(Node(CONST, "$const", name=name, outputs=[v], data=ConstData.from_array(array)))
        return v

    def weights(self, name: str, shape, scale: float = 0.5) -> Value:
        return self.const(name, (self.rng.standard_normal(shape) * scale).astype(np.float32))

    def op(self, op: str, inputs: Sequence[Optional[Value]], shape, dtype: str = "float", name: str = "",
           quant: Optional[Quantization] = None, **attrs) -> Value:
        self.n += 1
        name = name or f"{op.lower()}_{self.n}"
        out = self.g.add_op(op, list(inputs), [TensorType(dtype, tuple(shape))], domain="tflite", attrs=attrs,
                            output_names=[name]).output
        out.quant = quant
        return out

    def output(self, v: Value) -> None:
        self.g.add_node(Node(OUTPUT, "$output", name=v.name, inputs=[v]))


def _model(*builders: Builder, signatures: Optional[List[FbTable]] = None) -> Model:
    graphs = [b.g for b in builders]
    from legalizer.kinds.tflite.importer import TFLiteSource

    fields = {"version": 3, "description": "legalize sample model"}
    if signatures:
        fields["signature_defs"] = signatures
    io = [(list(range(len(g.inputs))), []) for g in graphs]
    return Model(graphs[0], "tflite", TFLiteSource(FbTable("Model", fields), 0, io), subgraphs=graphs)


# op -> (input dtype, output dtype, how to make a safe second operand)
BINARY = {
    "ADD": ("float", "float"), "SUB": ("float", "float"), "MUL": ("float", "float"), "DIV": ("float", "float"),
    "POW": ("float", "float"), "MAXIMUM": ("float", "float"), "MINIMUM": ("float", "float"),
    "SQUARED_DIFFERENCE": ("float", "float"), "FLOOR_DIV": ("float", "float"), "FLOOR_MOD": ("float", "float"),
    "LESS": ("float", "bool"), "LESS_EQUAL": ("float", "bool"), "GREATER": ("float", "bool"),
    "GREATER_EQUAL": ("float", "bool"), "EQUAL": ("int32", "bool"), "NOT_EQUAL": ("int32", "bool"),
    "LOGICAL_AND": ("bool", "bool"), "LOGICAL_OR": ("bool", "bool"), "BITWISE_XOR": ("int32", "int32"),
    "RIGHT_SHIFT": ("int32", "int32"),
}
# Ops whose second operand must stay away from zero / be small.
_POSITIVE = {"DIV", "FLOOR_DIV", "FLOOR_MOD", "POW", "RIGHT_SHIFT"}
_OPTIONS = {"ADD": {"fused_activation_function": NONE}, "SUB": {"fused_activation_function": NONE},
            "MUL": {"fused_activation_function": NONE}, "DIV": {"fused_activation_function": NONE}}


def _const_operand(b: Builder, op: str, dtype: str, shape) -> np.ndarray:
    if dtype == "bool":
        return b.rng.integers(0, 2, shape).astype(np.bool_)
    if dtype == "int32":
        return b.rng.integers(1, 4, shape).astype(np.int32)
    if op == "POW":
        return b.rng.integers(1, 3, shape).astype(np.float32)  # integral exponents: no NaN on negative bases
    if op in _POSITIVE:
        return (b.rng.uniform(0.5, 2.0, shape)).astype(np.float32)
    return b.rng.standard_normal(shape).astype(np.float32)


def broadcast_model(op: str) -> Model:
    """out0 = OP(x[2,3,4,5], y[5]) and out1 = OP(x, c[3,1,5]) with c constant."""
    dtype, out_dtype = BINARY[op]
    b = Builder(f"broadcast_{op.lower()}", seed=sum(map(ord, op)))
    x = b.input("x", dtype, (2, 3, 4, 5))
    # y is an input: its positive range for DIV & co is the check's business, so give
    # those ops the input on the left and the constant on the right
    y = b.input("y", dtype, (5,))
    c = b.const("c", _const_operand(b, op, dtype, (3, 1, 5)))
    opts = _OPTIONS.get(op, {})
    if op in _POSITIVE:
        b.output(b.op(op, [x, b.const("c_vec", _const_operand(b, op, dtype, (5,)))], (2, 3, 4, 5), out_dtype,
                      name="out0", **opts))
        b.output(b.op("ADD" if dtype == "float" else "BITWISE_XOR", [x, y], (2, 3, 4, 5), dtype, name="out_y",
                      **_OPTIONS.get("ADD", {}) if dtype == "float" else {}))
    else:
        b.output(b.op(op, [x, y], (2, 3, 4, 5), out_dtype, name="out0", **opts))
    b.output(b.op(op, [x, c], (2, 3, 4, 5), out_dtype, name="out1", **opts))
    return _model(b)


def select_v2_model() -> Model:
    b = Builder("broadcast_select_v2", 7)
    cond = b.input("cond", "bool", (4, 1))
    x = b.input("x", "float", (2, 4, 5))
    y = b.const("y", b.rng.standard_normal((5,)).astype(np.float32))
    b.output(b.op("SELECT_V2", [cond, x, y], (2, 4, 5), name="out"))
    return _model(b)


def prelu_model() -> Model:
    b = Builder("broadcast_prelu", 8)
    x = b.input("x", "float", (1, 4, 4, 8))
    alpha = b.const("alpha", b.rng.uniform(0.05, 0.3, (8,)).astype(np.float32))
    b.output(b.op("PRELU", [x, alpha], (1, 4, 4, 8), name="out"))
    return _model(b)


def dynamic_broadcast_model() -> Model:
    """Dynamic batch and length: ADD(x[?,4,5], y[5]) and MUL(x, z[?,1,5]), and
    SUB(w[?,?,5], y[5]), whose RESHAPE of y is static but whose xla broadcast of y
    takes two dims from w at run time."""
    b = Builder("dynamic_broadcast", 9)
    x = b.input("x", "float", (None, 4, 5))
    y = b.input("y", "float", (5,))
    z = b.input("z", "float", (None, 1, 5))
    w = b.input("w", "float", (None, None, 5))
    s = b.op("ADD", [x, y], (None, 4, 5), name="sum", fused_activation_function=NONE)
    b.output(b.op("MUL", [s, z], (None, 4, 5), name="prod", fused_activation_function=NONE))
    b.output(b.op("SUB", [w, y], (None, None, 5), name="diff", fused_activation_function=NONE))
    return _model(b)


def _q(scale, zero_point=0, axis=0) -> Quantization:
    scale = tuple(float(s) for s in np.atleast_1d(scale))
    zp = tuple(int(z) for z in np.broadcast_to(np.atleast_1d(zero_point), (len(scale),)))
    return Quantization(scale, zp, axis)


def int8_model(op: str) -> Model:
    """An int8 ADD or MUL of a [1,4,4,8] input with an [8] constant (out0) and with an
    [8] input (out1). Each output is one requantization away from the inputs, so
    LiteRT's integer kernels and a float computation agree within one step."""
    b = Builder(f"{op.lower()}_int8", 11)
    qx, qc = _q(0.05, -3), _q(0.02, 2)
    qo = _q(0.1, 1) if op == "ADD" else _q(0.02, 1)
    x = b.input("x", "int8", (1, 4, 4, 8), qx)
    y = b.input("y", "int8", (8,), qx)
    c = b.const("c", b.rng.integers(-100, 100, (8,)).astype(np.int8), qc)
    b.output(b.op(op, [x, c], (1, 4, 4, 8), "int8", name="out0", quant=qo, fused_activation_function=NONE))
    b.output(b.op(op, [x, y], (1, 4, 4, 8), "int8", name="out1", quant=_q(0.1, 0) if op == "ADD" else _q(0.05, 0),
                  fused_activation_function=NONE))
    return _model(b)


def mobilenet_like(int8: bool = False) -> Model:
    """Conv 3x3/2 -> depthwise 3x3 -> conv 1x1, then a per-channel scale and bias as
    rank-1 operands (MUL and ADD of [1,8,8,16] with [16]), a residual ADD, mean,
    fully connected and softmax."""
    b = Builder("mobilenet_like_int8" if int8 else "mobilenet_like", 12)
    x = b.input("image", "float", (1, 16, 16, 3))
    h = b.op("CONV_2D", [x, b.weights("conv1_w", (8, 3, 3, 3)), b.weights("conv1_b", (8,), 0.1)], (1, 8, 8, 8),
             padding=SAME, stride_w=2, stride_h=2, dilation_w_factor=1, dilation_h_factor=1,
             fused_activation_function=RELU6)
    h = b.op("DEPTHWISE_CONV_2D", [h, b.weights("dw_w", (1, 3, 3, 8)), b.weights("dw_b", (8,), 0.1)], (1, 8, 8, 8),
             padding=SAME, stride_w=1, stride_h=1, depth_multiplier=1, dilation_w_factor=1, dilation_h_factor=1,
             fused_activation_function=RELU6)
    h = b.op("CONV_2D", [h, b.weights("pw_w", (16, 1, 1, 8)), b.weights("pw_b", (16,), 0.1)], (1, 8, 8, 16),
             padding=VALID, stride_w=1, stride_h=1, dilation_w_factor=1, dilation_h_factor=1,
             fused_activation_function=NONE)
    if int8:
        q = _q(0.05, 0)
        hq = b.op("QUANTIZE", [h], (1, 8, 8, 16), "int8", name="h_q", quant=q)
        scale = b.const("bn_scale_q", b.rng.integers(20, 100, (16,)).astype(np.int8), _q(0.02, 0))
        hq = b.op("MUL", [hq, scale], (1, 8, 8, 16), "int8", name="scaled_q", quant=_q(0.05, 0),
                  fused_activation_function=NONE)
        shift = b.const("bn_shift_q", b.rng.integers(-50, 50, (16,)).astype(np.int8), _q(0.01, 0))
        hq = b.op("ADD", [hq, shift], (1, 8, 8, 16), "int8", name="shifted_q", quant=_q(0.05, 0),
                  fused_activation_function=NONE)
        h = b.op("DEQUANTIZE", [hq], (1, 8, 8, 16), name="shifted")
    else:
        h = b.op("MUL", [h, b.const("bn_scale", b.rng.uniform(0.5, 1.5, (16,)).astype(np.float32))], (1, 8, 8, 16),
                 name="scaled", fused_activation_function=NONE)
        h = b.op("ADD", [h, b.weights("bn_shift", (16,), 0.1)], (1, 8, 8, 16), name="shifted",
                 fused_activation_function=RELU6)
    axes = b.const("mean_axes", np.array([1, 2], np.int32))
    h = b.op("MEAN", [h, axes], (1, 16), keep_dims=False)
    h = b.op("FULLY_CONNECTED", [h, b.weights("fc_w", (10, 16)), b.weights("fc_b", (10,), 0.1)], (1, 10),
             fused_activation_function=NONE, weights_format=0, keep_num_dims=False)
    b.output(b.op("SOFTMAX", [h], (1, 10), name="probs", beta=1.0))
    return _model(b)


def transformer_like() -> Model:
    """One attention block on [1,8,16]: q/k/v projections, scores scaled by a rank-0
    constant and masked by an [8,8] one, softmax, residual, layer norm written out
    (MEAN, SQUARED_DIFFERENCE, RSQRT, gamma and beta of shape [16]) and a GELU MLP."""
    b = Builder("transformer_like", 13)
    d, s = 16, 8
    x = b.input("tokens", "float", (1, s, d))

    def fc(v, name, n_out, act=NONE):
        return b.op("FULLY_CONNECTED", [v, b.weights(f"{name}_w", (n_out, v.type.shape[-1]), 0.3),
                                        b.weights(f"{name}_b", (n_out,), 0.1)], (1, s, n_out), name=name,
                    fused_activation_function=act, weights_format=0, keep_num_dims=True)

    q, k, v = fc(x, "q", d), fc(x, "k", d), fc(x, "v", d)
    scores = b.op("BATCH_MATMUL", [q, k], (1, s, s), name="scores", adj_x=False, adj_y=True)
    scores = b.op("MUL", [scores, b.const("scale", np.array(1 / np.sqrt(d), np.float32))], (1, s, s),
                  name="scaled", fused_activation_function=NONE)
    mask = np.triu(np.full((s, s), -1e4, np.float32), 1)
    scores = b.op("ADD", [scores, b.const("mask", mask)], (1, s, s), name="masked", fused_activation_function=NONE)
    attn = b.op("SOFTMAX", [scores], (1, s, s), name="attn", beta=1.0)
    ctx = b.op("BATCH_MATMUL", [attn, v], (1, s, d), name="context", adj_x=False, adj_y=False)
    h = b.op("ADD", [x, fc(ctx, "o", d)], (1, s, d), name="residual", fused_activation_function=NONE)
    last = b.const("last_axis", np.array([-1], np.int32))
    mu = b.op("MEAN", [h, last], (1, s, 1), name="mu", keep_dims=True)
    var = b.op("MEAN", [b.op("SQUARED_DIFFERENCE", [h, mu], (1, s, d), name="sqdiff"), last], (1, s, 1),
               name="var", keep_dims=True)
    inv = b.op("RSQRT", [b.op("ADD", [var, b.const("eps", np.array(1e-5, np.float32))], (1, s, 1), name="var_eps",
                              fused_activation_function=NONE)], (1, s, 1), name="inv_std")
    norm = b.op("MUL", [b.op("SUB", [h, mu], (1, s, d), name="centered", fused_activation_function=NONE), inv],
                (1, s, d), name="normed", fused_activation_function=NONE)
    norm = b.op("MUL", [norm, b.const("gamma", b.rng.uniform(0.5, 1.5, (d,)).astype(np.float32))], (1, s, d),
                name="scaled_norm", fused_activation_function=NONE)
    norm = b.op("ADD", [norm, b.weights("beta", (d,), 0.1)], (1, s, d), name="ln_out", fused_activation_function=NONE)
    mlp = b.op("GELU", [fc(norm, "up", 2 * d)], (1, s, 2 * d), name="gelu", approximate=False)
    b.output(b.op("ADD", [norm, fc(mlp, "down", d)], (1, s, d), name="block_out", fused_activation_function=NONE))
    return _model(b)


def two_signatures() -> Model:
    """Two subgraphs, each a signature ("scale" and "shift"), both with broadcasts."""
    a = Builder("scale", 14)
    x = a.input("x", "float", (2, 3, 4))
    a.output(a.op("MUL", [x, a.const("factor", np.array([1.0, 2.0, 3.0, 4.0], np.float32))], (2, 3, 4),
                  name="scaled", fused_activation_function=NONE))
    b = Builder("shift", 15)
    y = b.input("y", "float", (3, 4))
    z = b.input("z", "float", (4,))
    b.output(b.op("SUB", [y, z], (3, 4), name="shifted", fused_activation_function=NONE))

    def sig(key, k, ins, outs):
        return FbTable("SignatureDef", {
            "signature_key": key, "subgraph_index": k,
            "inputs": [FbTable("TensorMap", {"name": n, "tensor_index": i}) for n, i in ins],
            "outputs": [FbTable("TensorMap", {"name": n, "tensor_index": i}) for n, i in outs]})

    model = _model(a, b, signatures=[sig("scale", 0, [("x", 0)], [("scaled", 0)]),
                                     sig("shift", 1, [("y", 0), ("z", 1)], [("shifted", 0)])])
    # the signatures name tensors by index; give the writer the subgraphs' io indices
    model.proto.io = [([0], [0]), ([0, 1], [0])]
    return model


def tflite_models() -> Dict[str, callable]:
    out = {f"broadcast_{op.lower()}.tflite": (lambda op=op: broadcast_model(op)) for op in BINARY}
    out.update({
        "broadcast_select_v2.tflite": select_v2_model,
        "broadcast_prelu.tflite": prelu_model,
        "dynamic_broadcast.tflite": dynamic_broadcast_model,
        "add_int8.tflite": lambda: int8_model("ADD"),
        "mul_int8.tflite": lambda: int8_model("MUL"),
        "mobilenet_like.tflite": mobilenet_like,
        "mobilenet_like_int8.tflite": lambda: mobilenet_like(int8=True),
        "transformer_like.tflite": transformer_like,
        "two_signatures.tflite": two_signatures,
    })
    return out
