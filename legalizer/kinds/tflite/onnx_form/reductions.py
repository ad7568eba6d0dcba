"""Reductions (over axes given as an operand), arg max/min, cumulative sums, and the
normalizations over the last axis."""

from __future__ import annotations

from onnx import TensorProto

from ....ir.graph import Node
from .emitter import Emitter, const_ints, option
from .registry import op

_REDUCERS = {"MEAN": "ReduceMean", "SUM": "ReduceSum", "REDUCE_MAX": "ReduceMax",
             "REDUCE_MIN": "ReduceMin", "REDUCE_PROD": "ReduceProd"}
# onnxruntime reduces no booleans: as 0/1 integers, any is the max and all the min.
_BOOL_REDUCERS = {"REDUCE_ANY": "ReduceMax", "REDUCE_ALL": "ReduceMin"}
_ARG = {"ARG_MAX": "ArgMax", "ARG_MIN": "ArgMin"}


def _flag(n: Node, key: str) -> int:
    return int(bool(option(n, key, False)))


def _reduced(e: Emitter, n: Node, onnx_op: str, x: str) -> str:
    # An empty axes list reduces nothing in TFLite (TF's semantics), everything in ONNX.
    return e.emit(onnx_op, [x, e.index(n.inputs[1])], keepdims=_flag(n, "keep_dims"), noop_with_empty_axes=1)


@op(*_REDUCERS)
def _reduce(e, n):
    return [_reduced(e, n, _REDUCERS[n.op_type], e.real(n.inputs[0]))]


@op(*_BOOL_REDUCERS, raw=True)
def _reduce_bool(e, n):
    x = e.emit("Cast", [e.raw(n.inputs[0])], to=TensorProto.INT32)
    return [e.emit("Cast", [_reduced(e, n, _BOOL_REDUCERS[n.op_type], x)], to=TensorProto.BOOL)]


@op(*_ARG)
def _arg(e, n):
    axis = const_ints(n.inputs[1], "axis")[0]
    y = e.emit(_ARG[n.op_type], [e.real(n.inputs[0])], axis=axis, keepdims=0)
    return [e.cast(y, "int64", n.outputs[0].type.dtype)]


@op("CUMSUM")
def _cumsum(e, n):
    axis = e.emit("Reshape", [e.raw(n.inputs[1]), e.ints([])])
    return [e.emit("CumSum", [e.real(n.inputs[0]), axis], exclusive=_flag(n, "exclusive"),
                   reverse=_flag(n, "reverse"))]


@op("SOFTMAX", "LOG_SOFTMAX")
def _softmax(e, n):
    x = e.real(n.inputs[0])
    beta = float(option(n, "beta", 1.0)) if n.op_type == "SOFTMAX" else 1.0
    if beta != 1.0:
        x = e.emit("Mul", [x, e.scalar(beta, e.real_dtype(n.inputs[0]))])
    return [e.emit("Softmax" if n.op_type == "SOFTMAX" else "LogSoftmax", [x], axis=-1)]


@op("L2_NORMALIZATION")
def _l2_normalization(e, n):
    # TFLite divides by max(||x||, 1e-6) over the last axis.
    x = e.real(n.inputs[0])
    norm = e.emit("ReduceL2", [x, e.ints([-1])], keepdims=1)
    return [e.emit("Div", [x, e.emit("Max", [norm, e.scalar(1e-6, e.real_dtype(n.inputs[0]))])])]
