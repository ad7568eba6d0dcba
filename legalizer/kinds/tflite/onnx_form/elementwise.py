"""Elementwise ops without an ONNX twin (those with one come from the rules' table)."""

from __future__ import annotations

from onnx import TensorProto

from ....ir.dtypes import elem_type
from ....ir.graph import Value
from .emitter import FLOATS, Emitter, NoForm, option
from .registry import op


def _is_float(e: Emitter, v: Value) -> bool:
    return e.real_dtype(v) in FLOATS


@op("SQUARED_DIFFERENCE")
def _squared_difference(e, n):
    d = e.emit("Sub", e.reals(n))
    return [e.emit("Mul", [d, d])]


def int_floor_div(e: Emitter, a: str, b: str) -> str:
    # ONNX Div truncates integers; a - mod(a, b) (Python-style mod) divides exactly.
    return e.emit("Div", [e.emit("Sub", [a, e.emit("Mod", [a, b], fmod=0)]), b])


@op("FLOOR_DIV")
def _floor_div(e, n):
    a, b = e.reals(n)
    if _is_float(e, n.inputs[0]):
        return [e.emit("Floor", [e.emit("Div", [a, b])])]
    return [int_floor_div(e, a, b)]


@op("FLOOR_MOD")
def _floor_mod(e, n):
    a, b = e.reals(n)
    if not _is_float(e, n.inputs[0]):
        return [e.emit("Mod", [a, b], fmod=0)]
    # TFLite's float kernel: r = fmod(a, b), plus b where r is nonzero and its sign
    # differs from b's. Exact, unlike a - floor(a / b) * b.
    r = e.emit("Mod", [a, b], fmod=1)
    zero = e.scalar(0, e.real_dtype(n.inputs[0]))
    signs_differ = e.emit("Xor", [e.emit("Less", [r, zero]), e.emit("Less", [b, zero])])
    adjust = e.emit("And", [e.emit("Not", [e.emit("Equal", [r, zero])]), signs_differ])
    return [e.emit("Where", [adjust, e.emit("Add", [r, b]), r])]


@op("RIGHT_SHIFT")
def _right_shift(e, n):
    a, b = e.reals(n)
    dtype = n.inputs[0].type.dtype
    if dtype.startswith("uint"):
        return [e.emit("BitShift", [a, b], direction="RIGHT")]
    # Arithmetic shift = floor division by 2**b, in int64 so that 2**31 fits.
    a64 = e.emit("Cast", [a], to=TensorProto.INT64)
    p = e.emit("Pow", [e.scalar(2, "int64"), e.emit("Cast", [b], to=TensorProto.INT64)])
    return [e.emit("Cast", [int_floor_div(e, a64, p)], to=elem_type(dtype))]


# Ops that are one ONNX op of the operands, then another of its result.
_CHAINS = {"NOT_EQUAL": ("Equal", "Not"), "RSQRT": ("Sqrt", "Reciprocal")}


@op(*_CHAINS)
def _chain(e, n):
    inner, outer = _CHAINS[n.op_type]
    return [e.emit(outer, [e.emit(inner, e.reals(n))])]


@op("SQUARE")
def _square(e, n):
    x = e.real(n.inputs[0])
    return [e.emit("Mul", [x, x])]


_RELU_RANGES = {"RELU6": (0, 6), "RELU_N1_TO_1": (-1, 1), "RELU_0_TO_1": (0, 1)}


@op(*_RELU_RANGES)
def _clipping_relu(e, n):
    lo, hi = _RELU_RANGES[n.op_type]
    return [e.clip(e.real(n.inputs[0]), lo, hi, e.real_dtype(n.outputs[0]))]


@op("GELU")
def _gelu(e, n):
    if e.opset < 20:
        raise NoForm("needs opset 20")
    return [e.emit("Gelu", e.reals(n), approximate="tanh" if option(n, "approximate", False) else "none")]


@op("ADD_N")
def _add_n(e, n):
    return [e.emit("Sum", e.reals(n))]


@op("SELECT")
def _select(e, n):
    # SELECT (v1) takes a 1-D condition over the first dim of x: it does not broadcast.
    c, x, y = n.inputs
    cond = e.raw(c)
    if c.type.rank == 1 and x.type.rank and x.type.rank > 1:
        cond = e.emit("Reshape", [cond, e.ints([-1] + [1] * (x.type.rank - 1))])
    elif c.type.rank is None or x.type.rank is None:
        raise NoForm("unranked operands")
    return [e.emit("Where", [cond, e.real(x), e.real(y)])]

