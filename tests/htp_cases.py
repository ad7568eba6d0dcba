"""Small ONNX models of the kinds Qualcomm's HTP refuses (rank > 5): each a graph whose
interface is rank <= 5 and whose inside goes to rank 6 or 7, as real exports do (Swin's
window partition, attention's head splits, broadcasts of a low-rank operand against a
high-rank view).

    CASES[name]() -> ModelProto (opset 17, float32, static shapes)
"""

from __future__ import annotations

from typing import Callable, Dict

import numpy as np
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, F, s) for n, s in inputs],
                          [helper.make_tensor_value_info(n, F, s) for n, s in outputs], list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _ints(name, values):
    return numpy_helper.from_array(np.asarray(values, np.int64), name)


def _floats(name, shape, seed=0):
    return numpy_helper.from_array(np.random.default_rng(seed).standard_normal(shape).astype(np.float32), name)


def window_partition():
    """Swin's: [B,H,W,C] -> [B,H/w,w,W/w,w,C] -> Transpose(0,1,3,2,4,5) -> + bias -> windows."""
    nodes = [helper.make_node("Reshape", ["x", "s6"], ["v6"], name="to6"),
             helper.make_node("Transpose", ["v6"], ["t6"], perm=[0, 1, 3, 2, 4, 5], name="windows"),
             helper.make_node("Add", ["t6", "bias"], ["a6"], name="bias_add"),
             helper.make_node("Reshape", ["a6", "s3"], ["y"], name="back")]
    return _model(nodes, [("x", [2, 8, 8, 4])], [("y", [8, 16, 4])],
                  [_ints("s6", [2, 2, 4, 2, 4, 4]), _floats("bias", [4, 4, 4]), _ints("s3", [8, 16, 4])])


def transpose_chain():
    """Two rank-6 transposes in a row, with no dims the first keeps together but one pair."""
    nodes = [helper.make_node("Reshape", ["x", "s6"], ["v6"], name="to6"),
             helper.make_node("Transpose", ["v6"], ["t1"], perm=[5, 3, 1, 4, 2, 0], name="t1"),
             helper.make_node("Transpose", ["t1"], ["t2"], perm=[1, 0, 3, 2, 5, 4], name="t2"),
             helper.make_node("Relu", ["t2"], ["r"], name="relu"),
             helper.make_node("Reshape", ["r", "s2"], ["y"], name="back")]
    return _model(nodes, [("x", [2, 3, 4, 5])], [("y", [30, 4])],
                  [_ints("s6", [2, 1, 3, 2, 2, 5]), _ints("s2", [30, 4])])


def two_sided_broadcast():
    """[2,1,3,1,4,1] + [1,5,1,2,1,3]: every dim broadcast by one side or the other."""
    nodes = [helper.make_node("Reshape", ["a", "sa"], ["a6"], name="a_to6"),
             helper.make_node("Reshape", ["b", "sb"], ["b6"], name="b_to6"),
             helper.make_node("Add", ["a6", "b6"], ["s6"], name="add"),
             helper.make_node("Reshape", ["s6", "s_out"], ["y"], name="back")]
    return _model(nodes, [("a", [2, 3, 4]), ("b", [5, 2, 3])], [("y", [10, 6, 12])],
                  [_ints("sa", [2, 1, 3, 1, 4, 1]), _ints("sb", [1, 5, 1, 2, 1, 3]), _ints("s_out", [10, 6, 12])])


def expand_chain():
    """A rank-7 Expand, then elementwise ops at rank 7."""
    nodes = [helper.make_node("Reshape", ["x", "s7"], ["v7"], name="to7"),
             helper.make_node("Expand", ["v7", "e7"], ["x7"], name="expand"),
             helper.make_node("Mul", ["x7", "k"], ["m7"], name="mul"),
             helper.make_node("Sigmoid", ["m7"], ["g7"], name="sig"),
             helper.make_node("Reshape", ["g7", "s_out"], ["y"], name="back")]
    return _model(nodes, [("x", [2, 3, 4])], [("y", [2, 6, 4, 5])],
                  [_ints("s7", [2, 1, 3, 1, 4, 1, 1]), _ints("e7", [2, 2, 3, 1, 4, 5, 1]),
                   _floats("k", [1, 2, 1, 1, 4, 5, 1]), _ints("s_out", [2, 6, 4, 5])])


def low_rank_operand():
    """A rank-3 operand against a rank-6 view: attention's per-head bias."""
    nodes = [helper.make_node("Reshape", ["x", "s6"], ["v6"], name="to6"),
             helper.make_node("Mul", ["v6", "scale"], ["m6"], name="mul"),
             helper.make_node("Add", ["m6", "bias"], ["a6"], name="add"),
             helper.make_node("Reshape", ["a6", "s_out"], ["y"], name="back")]
    return _model(nodes, [("x", [2, 3, 4, 20])], [("y", [2, 3, 4, 20])],
                  [_ints("s6", [2, 3, 2, 2, 4, 5]), _floats("scale", [2, 1, 1]), _floats("bias", [2, 4, 5], 1),
                   _ints("s_out", [2, 3, 4, 20])])


def rank6_input():
    """A rank-6 graph input: no legal form keeps the interface."""
    nodes = [helper.make_node("Add", ["x", "c"], ["y"], name="add")]
    return _model(nodes, [("x", [1, 2, 3, 2, 3, 2])], [("y", [1, 2, 3, 2, 3, 2])], [_floats("c", [2])])


def rank4_already():
    """What HTP takes as it is: rank <= 5 throughout."""
    nodes = [helper.make_node("Add", ["x", "c"], ["a"], name="add"),
             helper.make_node("Softmax", ["a"], ["y"], axis=-1, name="softmax")]
    return _model(nodes, [("x", [1, 4, 8, 8])], [("y", [1, 4, 8, 8])], [_floats("c", [8])])


def matmul_weights_rank5():
    """A rank-5 activation by a constant matrix: the QNN EP's FullyConnected, which takes rank <= 4."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="fc")]
    return _model(nodes, [("x", [1, 2, 3, 4, 8])], [("y", [1, 2, 3, 4, 6])], [_floats("w", [8, 6])])


def matmul_rank6():
    """Attention scores of a rank-6 view: two activations, batch dims alike."""
    nodes = [helper.make_node("Reshape", ["q", "s6"], ["q6"], name="q_to6"),
             helper.make_node("Reshape", ["k", "s6t"], ["k6"], name="k_to6"),
             helper.make_node("MatMul", ["q6", "k6"], ["a6"], name="scores"),
             helper.make_node("Reshape", ["a6", "s_out"], ["y"], name="back")]
    return _model(nodes, [("q", [2, 6, 4, 8]), ("k", [2, 6, 8, 4])], [("y", [2, 6, 4, 4])],
                  [_ints("s6", [2, 2, 3, 1, 4, 8]), _ints("s6t", [2, 2, 3, 1, 8, 4]), _ints("s_out", [2, 6, 4, 4])])



def rms_norm():
    """Llama's RMS norm, as torch.export writes it (onnxruntime-qnn fuses it, and the fused
    graph fails to finalize)."""
    nodes = [helper.make_node("Pow", ["x", "two"], ["p"], name="square"),
             helper.make_node("ReduceMean", ["p"], ["m"], axes=[-1], keepdims=1, name="mean"),
             helper.make_node("Add", ["m", "eps"], ["a"], name="add_eps"), helper.make_node("Sqrt", ["a"], ["s"], name="sqrt"),
             helper.make_node("Reciprocal", ["s"], ["r"], name="rsqrt"), helper.make_node("Mul", ["x", "r"], ["n"], name="norm"),
             helper.make_node("Mul", ["w", "n"], ["y"], name="scale")]
    return _model(nodes, [("x", [1, 8, 32])], [("y", [1, 8, 32])],
                  [numpy_helper.from_array(np.float32(2), "two"), numpy_helper.from_array(np.float32(1e-6), "eps"),
                   _floats("w", [32])])


def axis_ops_rank6():
    """A masked softmax, a slice, a mean and a concatenation of a rank-6 view (GQA's heads
    split in groups: [batch, kv heads, group, seq, seq] and one more)."""
    nodes = [helper.make_node("Reshape", ["x", "s6"], ["v6"], name="to6"),
             helper.make_node("Add", ["v6", "mask"], ["m6"], name="masked"),
             helper.make_node("Softmax", ["m6"], ["p6"], axis=-1, name="softmax"),
             helper.make_node("Slice", ["p6", "st", "en", "ax"], ["h6"], name="half"),
             helper.make_node("ReduceMean", ["h6"], ["r6"], axes=[4], keepdims=1, name="mean"),
             helper.make_node("Concat", ["h6", "r6"], ["c6"], axis=4, name="cat"),
             helper.make_node("Reshape", ["c6", "s_out"], ["y"], name="back")]
    return _model(nodes, [("x", [2, 6, 8, 8])], [("y", [2, 6, 5, 8])],
                  [_ints("s6", [2, 1, 2, 3, 8, 8]), _floats("mask", [1, 1, 1, 1, 8, 8]), _ints("st", [0]),
                   _ints("en", [4]), _ints("ax", [4]), _ints("s_out", [2, 6, 5, 8])])


def tanh_rank5():
    """A rank-5 Tanh and Max, which HTP refuses at rank 5 (it takes Add there)."""
    nodes = [helper.make_node("Tanh", ["x"], ["t"], name="tanh"),
             helper.make_node("Max", ["t", "floor"], ["y"], name="max")]
    return _model(nodes, [("x", [2, 3, 4, 5, 6])], [("y", [2, 3, 4, 5, 6])], [_floats("floor", [1, 1, 1, 1, 6])])


def mask_gathernd():
    """BERT's attention mask as torch.export writes ``mask[:, None, None, :]``: a GatherND of
    the boolean mask with rank-5 indices (HTP takes neither bool data nor those indices)."""
    idx = np.stack([np.zeros(8, np.int64), np.arange(8)], -1).reshape(1, 1, 1, 8, 2)
    nodes = [helper.make_node("Cast", ["mask"], ["m"], to=TensorProto.BOOL, name="to_bool"),
             helper.make_node("GatherND", ["m", "idx"], ["m4"], name="expand_mask"),
             helper.make_node("Where", ["m4", "x", "neg"], ["y"], name="masked")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("mask", TensorProto.INT64, [1, 8]),
                                       helper.make_tensor_value_info("x", F, [1, 4, 8, 8])],
                          [helper.make_tensor_value_info("y", F, [1, 4, 8, 8])],
                          [numpy_helper.from_array(idx, "idx"), numpy_helper.from_array(np.float32(-1e4), "neg")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


KINDS: Dict[str, Callable] = {f.__name__: f for f in (window_partition, transpose_chain, two_sided_broadcast,
                                                      expand_chain, low_rank_operand, axis_ops_rank6)}
# at rank <= 5, but with ops HTP refuses there
MATMULS: Dict[str, Callable] = {f.__name__: f for f in (matmul_weights_rank5, matmul_rank6, tanh_rank5)}
CASES: Dict[str, Callable] = {**KINDS, **MATMULS, "rank4_already": rank4_already, "mask_gathernd": mask_gathernd,
                              "rms_norm": rms_norm}
