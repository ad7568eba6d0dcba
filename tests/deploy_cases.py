"""Small TFLite models of the kinds deployment backends refuse or compute wrongly, built
from their rules (LiteRT's GPU delegate: rank <= 4, no BROADCAST_TO/EXPAND_DIMS/SQUEEZE,
lower-rank operands aligned from the left - LiteRT #8980; Vela's legacy core: one operand
at the result's shape, batch 1, rank <= 4; BROADCAST_TO never on the NPU).

    CASES[name](dtype) -> (tflite bytes, {input name: shape})

``dtype`` is ``"float32"`` (the GPU) or ``"INT8"`` (Ethos-U: every tensor quantized at one
scale, so the rewrites' requantization is exact).
"""

from __future__ import annotations

from typing import Callable, Dict, List, Sequence, Tuple

import numpy as np
from tflite_build import build_tflite, op, tensor

SCALE = 0.05


class _Model:
    def __init__(self, dtype: str):
        self.dtype = dtype
        self.tensors: List[dict] = []
        self.ops: List[dict] = []
        self.inputs: List[int] = []

    def _q(self):
        return {"scale": SCALE, "zero_point": 0} if self.dtype == "INT8" else {}

    def t(self, name: str, shape: Sequence[int]) -> int:
        self.tensors.append(tensor(name, self.dtype, shape, **self._q()))
        return len(self.tensors) - 1

    def input(self, name: str, shape: Sequence[int]) -> int:
        i = self.t(name, shape)
        self.inputs.append(i)
        return i

    def const(self, name: str, shape: Sequence[int], seed: int = 0) -> int:
        rng = np.random.default_rng(seed)
        if self.dtype == "INT8":
            data = rng.integers(-20, 20, size=shape).astype(np.int8)
        else:
            data = rng.standard_normal(shape).astype(np.float32)
        self.tensors.append(tensor(name, self.dtype, shape, data=data, **self._q()))
        return len(self.tensors) - 1

    def ints(self, name: str, values) -> int:
        arr = np.asarray(values, np.int32)
        self.tensors.append(tensor(name, "int32", arr.shape, data=arr))
        return len(self.tensors) - 1

    def reshape(self, x: int, shape: Sequence[int], name: str) -> int:
        y = self.t(name, shape)
        self.ops.append(op("RESHAPE", [x, self.ints(name + "_shape", shape)], [y], "ReshapeOptions",
                           new_shape=list(shape)))
        return y

    def binary(self, kind: str, a: int, b: int, shape: Sequence[int], name: str) -> int:
        y = self.t(name, shape)
        table = {"ADD": "AddOptions", "MUL": "MulOptions", "SUB": "SubOptions"}[kind]
        self.ops.append(op(kind, [a, b], [y], table, fused_activation_function=0))
        return y

    def broadcast_to(self, x: int, shape: Sequence[int], name: str) -> int:
        y = self.t(name, shape)
        self.ops.append(op("BROADCAST_TO", [x, self.ints(name + "_shape", shape)], [y], version=2))
        return y

    def expand_dims(self, x: int, axis: int, shape: Sequence[int], name: str) -> int:
        y = self.t(name, shape)
        self.ops.append(op("EXPAND_DIMS", [x, self.ints(name + "_axis", axis)], [y], "ExpandDimsOptions"))
        return y

    def squeeze(self, x: int, dims: Sequence[int], shape: Sequence[int], name: str) -> int:
        y = self.t(name, shape)
        self.ops.append(op("SQUEEZE", [x], [y], "SqueezeOptions", squeeze_dims=list(dims)))
        return y

    def build(self, *outputs: int) -> Tuple[bytes, Dict[str, Tuple[int, ...]]]:
        data = build_tflite(self.tensors, self.ops, self.inputs, list(outputs))
        return data, {self.tensors[i]["name"]: tuple(self.tensors[i]["shape"]) for i in self.inputs}


def gqa_repeat_kv(dtype):
    """Llama's repeat_kv: 2 KV heads repeated to 8 through a 5-D BROADCAST_TO."""
    m = _Model(dtype)
    q, k = m.input("q", [1, 8, 8, 16]), m.input("k", [1, 2, 8, 16])
    k5 = m.reshape(k, [1, 2, 1, 8, 16], "k5")
    kb = m.broadcast_to(k5, [1, 2, 4, 8, 16], "kb")
    kr = m.reshape(kb, [1, 8, 8, 16], "kr")
    return m.build(m.binary("MUL", q, kr, [1, 8, 8, 16], "y"))


def mask_5d(dtype):
    """Attention scores [b, kv, rep, q, k] plus a mask broadcast over heads: 5-D."""
    m = _Model(dtype)
    s, mask = m.input("s", [1, 8, 8, 8]), m.input("mask", [1, 8, 8])
    s5 = m.reshape(s, [1, 2, 4, 8, 8], "s5")
    m5 = m.reshape(mask, [1, 1, 1, 8, 8], "m5")
    y5 = m.binary("ADD", s5, m5, [1, 2, 4, 8, 8], "y5")
    return m.build(m.reshape(y5, [1, 8, 8, 8], "y"))


def mask_5d_broadcast_to(dtype):
    """The 5-D mask made explicit by a BROADCAST_TO (as converters of masked attention write it)."""
    m = _Model(dtype)
    s, mask = m.input("s", [1, 8, 8, 8]), m.input("mask", [1, 8, 8])
    s5 = m.reshape(s, [1, 2, 4, 8, 8], "s5")
    m5 = m.reshape(mask, [1, 1, 1, 8, 8], "m5")
    mb = m.broadcast_to(m5, [1, 2, 4, 8, 8], "mb")
    y5 = m.binary("ADD", s5, mb, [1, 2, 4, 8, 8], "y5")
    return m.build(m.reshape(y5, [1, 8, 8, 8], "y"))


def expand_dims_mul(dtype):
    m = _Model(dtype)
    x, g = m.input("x", [4, 8]), m.input("g", [2, 4, 8])
    x3 = m.expand_dims(x, 0, [1, 4, 8], "x3")
    return m.build(m.binary("MUL", x3, g, [2, 4, 8], "y"))


def squeeze_add(dtype):
    m = _Model(dtype)
    x = m.input("x", [1, 4, 8, 1])
    x2 = m.squeeze(x, [0, 3], [4, 8], "x2")
    return m.build(m.binary("ADD", x2, m.const("bias", [8]), [4, 8], "y"))


def mixed_rank_3_4(dtype):
    """LiteRT #8980: [4,8,8] + [1,1,8,8], both at run time."""
    m = _Model(dtype)
    a, b = m.input("a", [4, 8, 8]), m.input("b", [1, 1, 8, 8])
    return m.build(m.binary("ADD", a, b, [1, 4, 8, 8], "y"))


def mixed_rank_1_4(dtype):
    m = _Model(dtype)
    a, b = m.input("a", [8]), m.input("b", [1, 4, 8, 8])
    return m.build(m.binary("MUL", a, b, [1, 4, 8, 8], "y"))


def mixed_rank_2_4(dtype):
    m = _Model(dtype)
    a, b = m.input("a", [8, 8]), m.input("b", [1, 4, 8, 8])
    return m.build(m.binary("ADD", b, a, [1, 4, 8, 8], "y"))


def mixed_rank_2_3(dtype):
    m = _Model(dtype)
    a, b = m.input("a", [1, 8]), m.input("b", [4, 8, 8])
    return m.build(m.binary("SUB", a, b, [4, 8, 8], "y"))


def mixed_rank_3_4_two_sided(dtype):
    m = _Model(dtype)
    a, b = m.input("a", [4, 1, 8]), m.input("b", [1, 1, 8, 8])
    return m.build(m.binary("ADD", a, b, [1, 4, 8, 8], "y"))


def broadcast_to_add(dtype):
    m = _Model(dtype)
    a, b = m.input("a", [1, 4, 1, 8]), m.input("b", [1, 4, 8, 8])
    ab = m.broadcast_to(a, [1, 4, 8, 8], "ab")
    return m.build(m.binary("ADD", ab, b, [1, 4, 8, 8], "y"))


def broadcast_to_output(dtype):
    """A BROADCAST_TO no consumer can absorb (it is the output): a TILE."""
    m = _Model(dtype)
    a = m.input("a", [1, 4, 1, 8])
    return m.build(m.broadcast_to(a, [2, 4, 8, 8], "y"))


def rank5_chain(dtype):
    """ADD then MUL at rank 5 between reshapes."""
    m = _Model(dtype)
    x, z = m.input("x", [1, 8, 8, 8]), m.input("z", [1, 8, 8, 8])
    x5, z5 = m.reshape(x, [1, 2, 4, 8, 8], "x5"), m.reshape(z, [1, 2, 4, 8, 8], "z5")
    a5 = m.binary("ADD", x5, z5, [1, 2, 4, 8, 8], "a5")
    p5 = m.binary("MUL", a5, x5, [1, 2, 4, 8, 8], "p5")
    return m.build(m.reshape(p5, [1, 8, 8, 8], "y"))


def rank5_broadcast_mul(dtype):
    """A per-group scale broadcast over a 5-D tensor."""
    m = _Model(dtype)
    x, g = m.input("x", [2, 4, 8, 8]), m.input("g", [2, 1, 8])
    x5 = m.reshape(x, [1, 2, 4, 8, 8], "x5")
    g5 = m.reshape(g, [1, 2, 1, 1, 8], "g5")
    y5 = m.binary("MUL", x5, g5, [1, 2, 4, 8, 8], "y5")
    return m.build(m.reshape(y5, [2, 4, 8, 8], "y"))


def two_sided_broadcast(dtype):
    m = _Model(dtype)
    a, b = m.input("a", [1, 4, 1, 8]), m.input("b", [1, 1, 8, 8])
    return m.build(m.binary("ADD", a, b, [1, 4, 8, 8], "y"))


def two_sided_broadcast_const(dtype):
    m = _Model(dtype)
    a = m.input("a", [1, 4, 1, 8])
    return m.build(m.binary("MUL", a, m.const("c", [1, 1, 8, 8]), [1, 4, 8, 8], "y"))


def batch2_add(dtype):
    m = _Model(dtype)
    a, b = m.input("a", [2, 4, 8, 8]), m.input("b", [2, 4, 8, 8])
    return m.build(m.binary("ADD", a, b, [2, 4, 8, 8], "y"))


def const_matrix_mul(dtype):
    """A rank-2 constant with more than one row: LiteRT 2.3.0's GPU accelerator computes
    it wrongly below rank 4, without a word."""
    m = _Model(dtype)
    x = m.input("x", [2, 8])
    return m.build(m.binary("MUL", x, m.const("w", [2, 8], seed=3), [2, 8], "y"))


def const_rows_add(dtype):
    m = _Model(dtype)
    x = m.input("x", [3, 4, 8])
    return m.build(m.binary("ADD", x, m.const("c", [3, 1, 8], seed=4), [3, 4, 8], "y"))


def gqa_strided_slice(dtype):
    """GQA's query groups as TF converts them: a rank-5 view sliced along one axis
    (STRIDED_SLICE), then a broadcast over the other half."""
    m = _Model(dtype)
    q = m.input("q", [1, 8, 8, 16])
    q5 = m.reshape(q, [1, 2, 4, 8, 16], "q5")
    y = m.t("half", [1, 2, 2, 8, 16])
    m.ops.append(op("STRIDED_SLICE", [q5, m.ints("b", [0, 0, 0, 0, 0]), m.ints("e", [1, 2, 2, 8, 16]),
                                      m.ints("s", [1, 1, 1, 1, 1])], [y], "StridedSliceOptions", begin_mask=0,
                    end_mask=0))
    return m.build(m.reshape(y, [1, 4, 8, 16], "y"))


def softmax_mask_5d(dtype):
    """Attention probabilities of a 5-D masked score: SOFTMAX at rank 5."""
    m = _Model(dtype)
    s, mask = m.input("s", [1, 8, 8, 8]), m.input("mask", [1, 8, 8])
    s5 = m.reshape(s, [1, 2, 4, 8, 8], "s5")
    m5 = m.reshape(mask, [1, 1, 1, 8, 8], "m5")
    y5 = m.binary("ADD", s5, m5, [1, 2, 4, 8, 8], "y5")
    p5 = m.t("p5", [1, 2, 4, 8, 8])
    m.ops.append(op("SOFTMAX", [y5], [p5], "SoftmaxOptions", beta=1.0))
    return m.build(m.reshape(p5, [1, 8, 8, 8], "y"))


# LiteRT's GPU only (the axis ops Vela's tests do not take)
AXIS_CASES: Dict[str, Callable] = {f.__name__: f for f in (gqa_strided_slice, softmax_mask_5d)}

CASES: Dict[str, Callable] = {f.__name__: f for f in (
    gqa_repeat_kv, mask_5d, mask_5d_broadcast_to, expand_dims_mul, squeeze_add, mixed_rank_3_4, mixed_rank_1_4,
    mixed_rank_2_4, mixed_rank_2_3, mixed_rank_3_4_two_sided, broadcast_to_add, broadcast_to_output, rank5_chain,
    rank5_broadcast_mul, two_sided_broadcast, two_sided_broadcast_const, batch2_add, const_matrix_mul, const_rows_add)}


def feeds(shapes: Dict[str, Tuple[int, ...]], dtype: str, seed: int = 0) -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    if dtype == "INT8":
        return {n: rng.integers(-40, 40, size=s).astype(np.int8) for n, s in shapes.items()}
    return {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}


def dynamic_batch_reshape(dtype):
    """A Keras export's dynamic batch: SHAPE -> STRIDED_SLICE -> PACK gives a RESHAPE its
    runtime shape ([b, 4, 8] -> [b, 32]), then a bias ADD."""
    m = _Model(dtype)
    q = m._q()
    m.tensors.append(tensor("x", dtype, [1, 4, 8], shape_signature=[-1, 4, 8], **q))
    m.inputs.append(0)
    shape = m.ints("shape", [0, 0, 0])
    m.tensors[shape] = tensor("shape", "int32", [3])
    batch = len(m.tensors)
    m.tensors.append(tensor("batch", "int32", []))
    new_shape = len(m.tensors)
    m.tensors.append(tensor("new_shape", "int32", [2]))
    r = len(m.tensors)
    m.tensors.append(tensor("r", dtype, [1, 32], shape_signature=[-1, 32], **q))
    y = len(m.tensors)
    m.tensors.append(tensor("y", dtype, [1, 32], shape_signature=[-1, 32], **q))
    m.ops += [op("SHAPE", [0], [shape], "ShapeOptions", out_type=2),
              op("STRIDED_SLICE", [shape, m.ints("begin", [0]), m.ints("end", [1]), m.ints("stride", [1])], [batch],
                 "StridedSliceOptions", shrink_axis_mask=1),
              op("PACK", [batch, m.ints("c32", 32)], [new_shape], "PackOptions", values_count=2, axis=0),
              op("RESHAPE", [0, new_shape], [r], "ReshapeOptions"),
              op("ADD", [r, m.const("bias", [32])], [y], "AddOptions", fused_activation_function=0)]
    data = build_tflite(m.tensors, m.ops, m.inputs, [y])
    return data, {"x": (-1, 4, 8)}
