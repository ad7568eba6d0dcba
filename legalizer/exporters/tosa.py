"""ONNX-frontend IR -> TOSA MLIR text: ``emit_tosa(model)``.

The model is expected in the ``tosa`` target's legal form (``legalize(model, "tosa")``):
every elementwise operand already has its result's rank, so an elementwise ONNX op is
one TOSA op whose operands broadcast only through size-1 dims, as TOSA allows. The other
ops are lowered by small functions registered per ONNX op type (``@lowers``), each
emitting TOSA ops through one ``_Emitter``; a missing lowering is a named error.

Conventions of the text:

- One ``func.func @main`` in a ``module``: arguments in graph-input order (an initializer
  that ONNX IR < 4 also lists as an input is a constant, not an argument), results in
  graph-output order. An op result that is an ONNX value is named after it (sanitized).
- Ops without attributes in their pretty form (``tosa.add %a, %b : (...) -> ...``), ops
  with attributes and ``tosa.const``/``tosa.const_shape`` in the generic form
  (``"tosa.const"() <{values = dense<...> : tensor<...>}> : () -> tensor<...>``), which
  every TOSA parser reads whatever its version's pretty syntax is.
- Dynamic (``?``) and symbolic dims stay dynamic where TOSA allows it; a reshape may have
  one dynamic dim (``-1``); convolutions, pools, slices and means need the dims they
  compute with to be static. ``dims=`` binds symbolic dims to sizes first (the model's
  ONNX form is re-imported with them, so shape inference makes everything it can static).
- Values computed from constants only (``Constant``, ``ConstantOfShape`` - kept as a
  splat, never materialized -, ``Shape`` of a static value, and small subgraphs of those)
  are folded at emission time with onnx's reference evaluator; constants are emitted
  where they are first used, once.

If any op cannot be emitted, ``BadInput`` names every such op on one line and no module
is produced.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
from onnx import helper

from ..errors import BadInput
from . import registrar
from ..ir.constdata import attribute_array
from ..ir.dtypes import numpy_dtype
from ..ir.graph import OP, Graph, Node, Value
from ..model import Model
from ..passes.rewrite import constant_array

# IR dtype name -> MLIR element type. Others (strings, unsigned, complex) have no TOSA form.
ELEMENT_TYPES = {"float": "f32", "float16": "f16", "bfloat16": "bf16", "double": "f64", "bool": "i1",
                 "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64"}
FLOATS = ("float", "float16", "bfloat16", "double")
# The largest finite value of each float type: Relu's clamp bound.
FLOAT_MAX = {"float": "3.40282347E+38", "float16": "6.550400e+04", "bfloat16": "3.38953139E+38",
             "double": "1.7976931348623157E+308"}
INT_RANGE = {"int8": (-2 ** 7, 2 ** 7 - 1), "int16": (-2 ** 15, 2 ** 15 - 1), "int32": (-2 ** 31, 2 ** 31 - 1),
             "int64": (-2 ** 63, 2 ** 63 - 1)}
# Constant arrays up to this many elements are written as literals, larger ones in hex.
LITERAL_LIMIT = 16
# Folding evaluates ops on constants with onnx's reference evaluator up to this output size.
FOLD_LIMIT = 1 << 16


class Unsupported(Exception):
    """One op that cannot be emitted; the message says why."""


class _Poisoned(Exception):
    """An operand comes from an op that could not be emitted (and is reported already)."""


@dataclass(frozen=True)
class T:
    """An emitted tensor: its SSA name, IR dtype and shape (dims: int, or a symbol / None
    for a dynamic dim)."""

    ssa: str
    dtype: str
    shape: Tuple

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def type(self) -> str:
        return tensor_type(self.dtype, self.shape)


def tensor_type(dtype: str, shape: Sequence) -> str:
    elem = ELEMENT_TYPES.get(dtype)
    if elem is None:
        raise Unsupported(f"element type '{dtype}' has no TOSA form")
    dims = "".join(f"{d if isinstance(d, int) else '?'}x" for d in shape)
    return f"tensor<{dims}{elem}>"


def _static(shape: Sequence) -> bool:
    return all(isinstance(d, int) for d in shape)


def _shape_text(shape: Sequence) -> str:
    return "x".join(str(d) if isinstance(d, int) else "?" for d in shape)


def _sanitize(name: str) -> str:
    """An MLIR SSA suffix-id from an ONNX value name."""
    out = "".join(c if (c.isascii() and c.isalnum()) or c in "_$.-" else "_" for c in name) or "v"
    if out[0].isdigit() and not out.isdigit():
        out = "v" + out
    return out


# ---- constant literals -----------------------------------------------------------------

def _float_literal(x: float, dtype: str) -> Optional[str]:
    if not math.isfinite(float(x)):
        return None
    np_type = np.float64 if dtype == "double" else np.float32
    text = np.format_float_scientific(np_type(x), unique=True, exp_digits=2)
    return text.replace(".e", ".0e")


def _literal(x, dtype: str) -> Optional[str]:
    if dtype == "bool":
        return "true" if x else "false"
    if dtype in FLOATS:
        return _float_literal(x, dtype)
    return str(int(x))


def _nested(values, dtype: str) -> Optional[str]:
    if isinstance(values, list):
        parts = [_nested(v, dtype) for v in values]
        return None if None in parts else "[" + ", ".join(parts) + "]"
    return _literal(values, dtype)


def _hex(array: np.ndarray, dtype: str) -> str:
    data = np.ascontiguousarray(array, dtype=numpy_dtype(dtype))
    if data.dtype.byteorder == ">":
        data = data.byteswap()
    return '"0x' + data.tobytes().hex().upper() + '"'


def _is_splat(array: np.ndarray) -> bool:
    if array.size <= 1:
        return True
    if all(s == 0 for s in array.strides):
        return True
    flat = array.reshape(-1)
    return bool(np.all(flat == flat[0]))


def dense_literal(array: np.ndarray, dtype: str) -> str:
    """The body of ``dense<...>`` for ``array`` as ``dtype``: a splat, a literal list, or hex."""
    array = np.asarray(array)
    if array.size == 0:
        return "[]" if array.ndim == 1 else _nested(np.zeros(array.shape).tolist(), "int32")
    if _is_splat(array):
        first = array.reshape(-1)[0]
        lit = _literal(first, dtype)
        return lit if lit is not None else _hex(np.asarray([first]), dtype)
    if array.size <= LITERAL_LIMIT or dtype == "bool":
        lit = _nested(np.asarray(array, numpy_dtype(dtype)).tolist(), dtype)
        if lit is not None:
            return lit
    return _hex(array, dtype)


def _attr_text(attrs: Mapping[str, str]) -> str:
    return "<{" + ", ".join(f"{k} = {v}" for k, v in attrs.items()) + "}>"


def _i64_array(values: Sequence[int]) -> str:
    return "array<i64: " + ", ".join(str(int(v)) for v in values) + ">"


def _i32_array(values: Sequence[int]) -> str:
    return "array<i32: " + ", ".join(str(int(v)) for v in values) + ">"


# ---- the emitter -----------------------------------------------------------------------

class _Emitter:
    """Emits one function's body: SSA names, constants (emitted once, where first used),
    folding, and the TOSA building blocks the lowerings share."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.lines: List[str] = []
        self.used_names: set = set()
        self.env: Dict[int, T] = {}  # id(Value) -> emitted tensor
        self.consts: Dict[int, np.ndarray] = {}  # id(Value) -> compile-time value
        self.shared: Dict[tuple, T] = {}  # small constants shared by all users
        self.uses: Dict[int, int] = {}
        for n in graph.nodes():
            for v in n.inputs:
                if v is not None:
                    self.uses[id(v)] = self.uses.get(id(v), 0) + 1
        self.node: Optional[Node] = None
        self.poisoned: set = set()  # id(Value) of outputs of ops that failed
        self._counter = 0

    # -- names and lines -------------------------------------------------------------
    def fresh(self, base: Optional[str] = None) -> str:
        if base is not None:
            name = _sanitize(base)
            cand, k = name, 1
            while cand in self.used_names:
                cand, k = f"{name}_{k}", k + 1
        else:
            while str(self._counter) in self.used_names:
                self._counter += 1
            cand = str(self._counter)
            self._counter += 1
        self.used_names.add(cand)
        return "%" + cand

    def op(self, name: str, operands: Sequence[T], dtype: str, shape: Sequence,
           attrs: Optional[Mapping[str, str]] = None, result: Optional[str] = None) -> T:
        """Emit one single-result op; the pretty form without attributes, else generic."""
        out = T(self.fresh(result), dtype, tuple(shape))
        sig = f"({', '.join(o.type for o in operands)}) -> {out.type}"
        args = ", ".join(o.ssa for o in operands)
        if attrs:
            self.lines.append(f'{out.ssa} = "{name}"({args}) {_attr_text(attrs)} : {sig}')
        else:
            self.lines.append(f"{out.ssa} = {name} {args} : {sig}")
        return out

    # -- the node being lowered ----------------------------------------------------------
    def result_name(self, i: int = 0) -> Optional[str]:
        outs = self.node.outputs
        return outs[i].name if i < len(outs) and outs[i].name else None

    def out_type(self, i: int = 0) -> Tuple[str, Tuple]:
        """(dtype, shape) of the node's ``i``-th output: it must be ranked and typed."""
        v = self.node.outputs[i]
        if v.type.dtype is None or v.type.shape is None:
            raise Unsupported(f"output '{v.name}' has an unknown {'type' if v.type.dtype is None else 'rank'}")
        if v.type.dtype not in ELEMENT_TYPES:
            raise Unsupported(f"element type '{v.type.dtype}' of '{v.name}' has no TOSA form")
        return v.type.dtype, tuple(v.type.shape)

    def used(self, i: int) -> bool:
        outs = self.node.outputs
        return i < len(outs) and self.uses.get(id(outs[i]), 0) > 0

    def const_of(self, value: Optional[Value]) -> Optional[np.ndarray]:
        if value is None:
            return None
        return self.consts.get(id(value))

    def const_input(self, i: int) -> Optional[np.ndarray]:
        ins = self.node.inputs
        return self.const_of(ins[i]) if i < len(ins) else None

    def has_input(self, i: int) -> bool:
        ins = self.node.inputs
        return i < len(ins) and ins[i] is not None and ins[i].name != ""

    def input(self, i: int) -> T:
        """The node's ``i``-th operand as an emitted tensor (a constant is emitted now)."""
        ins = self.node.inputs
        if not self.has_input(i):
            raise Unsupported(f"operand #{i} is missing")
        return self.value(ins[i])

    def value(self, v: Value) -> T:
        t = self.env.get(id(v))
        if t is not None:
            return t
        if id(v) in self.poisoned:
            raise _Poisoned(v.name)
        array = self.consts.get(id(v))
        if array is None:
            raise Unsupported(f"value '{v.name}' is not available")
        dtype = v.type.dtype or _dtype_of(array)
        t = self.const(array, dtype, name=v.name)
        self.env[id(v)] = t
        return t

    # -- constants -----------------------------------------------------------------------
    def const(self, array, dtype: str, name: Optional[str] = None) -> T:
        array = np.asarray(array)
        ty = tensor_type(dtype, array.shape)
        out = T(self.fresh(name), dtype, tuple(array.shape))
        self.lines.append(f'{out.ssa} = "tosa.const"() <{{values = dense<{dense_literal(array, dtype)}> : {ty}}}>'
                          f" : () -> {ty}")
        return out

    def shared_const(self, value, dtype: str, shape: Sequence[int]) -> T:
        """A small splat constant, one per (value, dtype, shape) in the function."""
        key = (repr(value), dtype, tuple(shape))
        t = self.shared.get(key)
        if t is None:
            t = self.const(np.full(tuple(shape), value, dtype=numpy_dtype(dtype)), dtype)
            self.shared[key] = t
        return t

    def scalar(self, value, dtype: str, rank: int) -> T:
        """A splat ``tensor<1x...x1xT>`` of ``rank`` dims, for elementwise use."""
        return self.shared_const(value, dtype, (1,) * rank)

    def zp(self, dtype: str) -> T:
        return self.shared_const(0, dtype, (1,))

    def shape_value(self, values: Sequence[int]) -> str:
        key = ("shape", tuple(int(v) for v in values))
        t = self.shared.get(key)
        if t is None:
            t = T(self.fresh(), "int64", (len(values),))
            body = "[" + ", ".join(str(int(v)) for v in values) + "]"
            n = len(values)
            self.lines.append(f'{t.ssa} = "tosa.const_shape"() <{{values = dense<{body}> : tensor<{n}xindex>}}>'
                              f" : () -> !tosa.shape<{n}>")
            self.shared[key] = t
        return t.ssa

    # -- building blocks -------------------------------------------------------------------
    def unary(self, name: str, x: T, result: Optional[str] = None, dtype: Optional[str] = None) -> T:
        return self.op(name, [x], dtype or x.dtype, x.shape, result=result)

    def binary(self, name: str, a: T, b: T, dtype: Optional[str] = None, result: Optional[str] = None) -> T:
        """An elementwise binary op: operands of lower rank (which ``legalize`` never
        leaves) get 1s prepended; the result is their broadcast."""
        rank = max(a.rank, b.rank)
        a, b = self.expand_rank(a, rank), self.expand_rank(b, rank)
        shape = _broadcast(a.shape, b.shape)
        if name == "tosa.mul":
            shift = self.shared_const(0, "int8", (1,))
            out = T(self.fresh(result), dtype or a.dtype, shape)
            self.lines.append(f"{out.ssa} = tosa.mul {a.ssa}, {b.ssa}, {shift.ssa} : "
                              f"({a.type}, {b.type}, {shift.type}) -> {out.type}")
            return out
        return self.op(name, [a, b], dtype or a.dtype, shape, result=result)

    def select(self, c: T, a: T, b: T, result: Optional[str] = None) -> T:
        rank = max(c.rank, a.rank, b.rank)
        c, a, b = (self.expand_rank(t, rank) for t in (c, a, b))
        shape = _broadcast(_broadcast(c.shape, a.shape), b.shape)
        return self.op("tosa.select", [c, a, b], a.dtype, shape, result=result)

    def expand_rank(self, t: T, rank: int) -> T:
        if t.rank >= rank:
            return t
        return self.reshape(t, (1,) * (rank - t.rank) + tuple(t.shape))

    def reshape(self, t: T, shape: Sequence, result: Optional[str] = None) -> T:
        shape = tuple(shape)
        if shape == tuple(t.shape) and result is None:
            return t
        dynamic = [i for i, d in enumerate(shape) if not isinstance(d, int)]
        if len(dynamic) > 1:
            raise Unsupported(f"reshape {_shape_text(t.shape)} -> {_shape_text(shape)} needs static shapes"
                              " (TOSA's reshape takes one dynamic dim)")
        target = [-1 if not isinstance(d, int) else d for d in shape]
        out = T(self.fresh(result), t.dtype, shape)
        sv = self.shape_value(target)
        self.lines.append(f"{out.ssa} = tosa.reshape {t.ssa}, {sv} : ({t.type}, !tosa.shape<{len(shape)}>)"
                          f" -> {out.type}")
        return out

    def transpose(self, t: T, perm: Sequence[int], result: Optional[str] = None) -> T:
        perm = [int(p) for p in perm]
        if perm == list(range(t.rank)) and result is None:
            return t
        shape = tuple(t.shape[p] for p in perm)
        return self.op("tosa.transpose", [t], t.dtype, shape, {"perms": _i32_array(perm)}, result=result)

    def slice(self, t: T, start: Sequence[int], size: Sequence, result: Optional[str] = None) -> T:
        if list(start) == [0] * t.rank and tuple(size) == tuple(t.shape) and result is None:
            return t
        size_vals = [d if isinstance(d, int) else -1 for d in size]
        out = T(self.fresh(result), t.dtype, tuple(size))
        st, sz = self.shape_value(list(start)), self.shape_value(size_vals)
        n = t.rank
        self.lines.append(f"{out.ssa} = tosa.slice {t.ssa}, {st}, {sz} : ({t.type}, !tosa.shape<{n}>, "
                          f"!tosa.shape<{n}>) -> {out.type}")
        return out

    def concat(self, parts: Sequence[T], axis: int, result: Optional[str] = None) -> T:
        if len(parts) == 1 and result is None:
            return parts[0]
        shape = list(parts[0].shape)
        dims = [p.shape[axis] for p in parts]
        shape[axis] = sum(dims) if all(isinstance(d, int) for d in dims) else None
        return self.op("tosa.concat", parts, parts[0].dtype, shape, {"axis": f"{axis} : i32"}, result=result)

    def reduce(self, name: str, t: T, axes: Sequence[int]) -> T:
        for a in sorted(set(axes)):
            shape = list(t.shape)
            shape[a] = 1
            t = self.op(name, [t], t.dtype, shape, {"axis": f"{a} : i32"})
        return t

    def cast(self, t: T, dtype: str, result: Optional[str] = None) -> T:
        if t.dtype == dtype and result is None:
            return t
        if t.dtype in FLOATS and dtype not in FLOATS and dtype != "bool":
            # ONNX truncates toward zero; tosa.cast rounds to nearest: truncate first.
            zero = self.scalar(0.0, t.dtype, t.rank)
            neg = self.binary("tosa.greater", zero, t, dtype="bool")
            t = self.select(neg, self.unary("tosa.ceil", t), self.unary("tosa.floor", t))
        return self.op("tosa.cast", [t], dtype, t.shape, result=result)

    def clamp(self, t: T, lo, hi, result: Optional[str] = None) -> T:
        return self.op("tosa.clamp", [t], t.dtype, t.shape,
                       {"min_val": _bound(lo, t.dtype, low=True), "max_val": _bound(hi, t.dtype, low=False)},
                       result=result)

    def mul_scalar(self, t: T, value: float, result: Optional[str] = None) -> T:
        return self.binary("tosa.mul", t, self.scalar(value, t.dtype, t.rank), result=result)


def _bound(v, dtype: str, low: bool) -> str:
    elem = ELEMENT_TYPES[dtype]
    if dtype in FLOATS:
        if v is None or not math.isfinite(float(v)):
            big = FLOAT_MAX[dtype]
            return f"{'-' if low else ''}{big} : {elem}"
        return f"{_float_literal(v, dtype)} : {elem}"
    lo, hi = INT_RANGE.get(dtype, (0, 1))
    v = (lo if low else hi) if v is None else max(lo, min(hi, int(v)))
    return f"{v} : {elem}"


def _broadcast(a: Sequence, b: Sequence) -> Tuple:
    out = []
    for x, y in zip(a, b):
        if x == 1:
            out.append(y)
        elif y == 1 or x == y:
            out.append(x)
        elif isinstance(x, int):
            out.append(x)
        elif isinstance(y, int):
            out.append(y)
        else:
            out.append(None)
    return tuple(out)


def _dtype_of(array: np.ndarray) -> str:
    from ..ir.dtypes import dtype_of_array

    return dtype_of_array(array)


# ---- lowerings -------------------------------------------------------------------------

Lowering = Callable[[_Emitter], List[Optional[T]]]
_LOWER: Dict[str, Lowering] = {}


lowers = registrar(_LOWER)


def supported_ops() -> List[str]:
    return sorted(_LOWER)


def _attr(node: Node, name: str, default=None):
    a = node.attrs.get(name)
    if a is None:
        return default
    v = helper.get_attribute_value(a)
    return v.decode() if isinstance(v, bytes) else v


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def _ints(array: Optional[np.ndarray]) -> Optional[List[int]]:
    return None if array is None else [int(x) for x in np.asarray(array).reshape(-1)]


def _need_const(e: _Emitter, i: int, what: str) -> np.ndarray:
    c = e.const_input(i)
    if c is None:
        raise Unsupported(f"{what} (operand #{i}) must be a constant")
    return c


# Elementwise ops, one TOSA op each.
_BINARY = {"Add": "tosa.add", "Sub": "tosa.sub", "Mul": "tosa.mul", "Max": "tosa.maximum",
           "Min": "tosa.minimum", "Equal": "tosa.equal", "Greater": "tosa.greater",
           "GreaterOrEqual": "tosa.greater_equal", "And": "tosa.logical_and", "Or": "tosa.logical_or",
           "Xor": "tosa.logical_xor", "BitwiseAnd": "tosa.bitwise_and", "BitwiseOr": "tosa.bitwise_or",
           "BitwiseXor": "tosa.bitwise_xor", "Sum": "tosa.add"}
_SWAPPED = {"Less": "tosa.greater", "LessOrEqual": "tosa.greater_equal"}
_UNARY = {"Exp": "tosa.exp", "Log": "tosa.log", "Tanh": "tosa.tanh", "Sigmoid": "tosa.sigmoid",
          "Abs": "tosa.abs", "Reciprocal": "tosa.reciprocal", "Floor": "tosa.floor", "Ceil": "tosa.ceil",
          "Erf": "tosa.erf", "Sin": "tosa.sin", "Cos": "tosa.cos", "Not": "tosa.logical_not",
          "BitwiseNot": "tosa.bitwise_not"}


@lowers(*_BINARY)
def _binary(e: _Emitter) -> List[T]:
    operands = [e.input(i) for i in range(len(e.node.inputs)) if e.has_input(i)]
    dtype, _ = e.out_type()
    name = _BINARY[e.node.op_type]
    if len(operands) == 1:  # a one-operand Sum/Max/Min
        return [_identity(e, operands[0])]
    if len(operands) != 2:
        raise Unsupported(f"{len(operands)} operands (legalize splits variadic ops into binary ones)")
    return [e.binary(name, operands[0], operands[1], dtype=dtype, result=e.result_name())]


def _identity(e: _Emitter, t: T) -> T:
    """A value passed through unchanged: its users use ``t`` itself, no op is emitted."""
    return t


@lowers(*_SWAPPED)
def _swapped(e: _Emitter) -> List[T]:
    return [e.binary(_SWAPPED[e.node.op_type], e.input(1), e.input(0), dtype="bool", result=e.result_name())]


@lowers(*_UNARY)
def _unary(e: _Emitter) -> List[T]:
    dtype, _ = e.out_type()
    return [e.unary(_UNARY[e.node.op_type], e.input(0), result=e.result_name(), dtype=dtype)]


@lowers("Neg")
def _neg(e: _Emitter) -> List[T]:
    x = e.input(0)
    zp = e.zp(x.dtype)
    return [e.op("tosa.negate", [x, zp, zp], x.dtype, x.shape, result=e.result_name())]


@lowers("Div")
def _div(e: _Emitter) -> List[T]:
    a, b = e.input(0), e.input(1)
    if a.dtype in FLOATS:  # TOSA has no float division: a * (1 / b)
        return [e.binary("tosa.mul", a, e.unary("tosa.reciprocal", b), result=e.result_name())]
    if a.dtype not in _INTDIV:
        raise Unsupported(f"integer division of {a.dtype} (tosa.intdiv takes int32)")
    # tosa.intdiv truncates toward zero, as ONNX's integer Div does
    return [e.binary("tosa.intdiv", a, b, result=e.result_name())]


# tosa.intdiv's element types: i32 in the TOSA spec; IREE also compiles i64 (ONNX's index type).
_INTDIV = ("int32", "int64")


@lowers("Mod")
def _mod(e: _Emitter) -> List[T]:
    """fmod=0: the remainder takes the divisor's sign (Python's %); fmod=1: the
    dividend's (C's fmod). Floats: a - floor(a/b)*b, or a - trunc(a/b)*b; integers:
    a - intdiv(a, b)*b (truncated, C's), then corrected by b where the signs differ."""
    a, b = e.input(0), e.input(1)
    fmod = int(_attr(e.node, "fmod", 0))
    rank = max(a.rank, b.rank)
    a, b = e.expand_rank(a, rank), e.expand_rank(b, rank)
    if a.dtype in FLOATS:
        q = e.binary("tosa.mul", a, e.unary("tosa.reciprocal", b))
        if fmod:  # trunc(q) = sign(q) * floor(|q|)
            neg = e.binary("tosa.greater", e.scalar(0.0, a.dtype, rank), q, dtype="bool")
            zp = e.zp(a.dtype)
            mag = e.unary("tosa.floor", e.unary("tosa.abs", q))
            q = e.select(neg, e.op("tosa.negate", [mag, zp, zp], mag.dtype, mag.shape), mag)
        else:
            q = e.unary("tosa.floor", q)
        r = e.binary("tosa.sub", a, e.binary("tosa.mul", q, b), result=e.result_name() if fmod else None)
        if fmod:
            return [r]
        zero = e.scalar(0.0, a.dtype, rank)
    elif a.dtype in _INTDIV:
        r = e.binary("tosa.sub", a, e.binary("tosa.mul", e.binary("tosa.intdiv", a, b), b),
                     result=e.result_name() if fmod else None)
        if fmod:
            return [r]
        zero = e.scalar(0, a.dtype, rank)
    else:
        raise Unsupported(f"Mod of {a.dtype} (floats, int32 and int64 have a TOSA form)")
    # fmod=0: where r != 0 and sign(r) != sign(b), r + b (a float r rounded to |b| becomes 0)
    r_neg = e.binary("tosa.greater", zero, r, dtype="bool")
    b_neg = e.binary("tosa.greater", zero, b, dtype="bool")
    r_nonzero = e.unary("tosa.logical_not", e.binary("tosa.equal", r, zero, dtype="bool"))
    fix = e.binary("tosa.logical_and", e.binary("tosa.logical_xor", r_neg, b_neg), r_nonzero)
    floats = a.dtype in FLOATS
    out = e.select(fix, e.binary("tosa.add", r, b), r, result=None if floats else e.result_name())
    if floats:  # r + b rounded to b: the remainder is 0
        out = e.select(e.binary("tosa.equal", out, b, dtype="bool"), zero, out, result=e.result_name())
    return [out]


def _quant_param(e: _Emitter, i: int, x: T, dtype: str, what: str, default=0) -> Optional[np.ndarray]:
    """A constant scale / zero point as an array broadcastable against ``x``: a scalar,
    or a 1-D per-axis vector reshaped to ``x``'s rank along ``axis``."""
    if not e.has_input(i):
        return None if default is None else np.full((1,) * x.rank, default)
    c = e.const_input(i)
    if c is None:
        raise Unsupported(f"a run-time {what} (operand #{i} must be a constant)")
    c = np.asarray(c)
    if _attr(e.node, "block_size", 0):
        raise Unsupported("blocked quantization (block_size) has no TOSA lowering")
    if c.size == 1:
        return c.reshape((1,) * x.rank)
    if c.ndim != 1:
        raise Unsupported(f"a {what} of rank {c.ndim}")
    axis = _axis(_attr(e.node, "axis", 1), x.rank)
    shape = [1] * x.rank
    shape[axis] = c.shape[0]
    return c.reshape(shape)


@lowers("DequantizeLinear")
def _dequantize(e: _Emitter) -> List[T]:
    """(cast(x to float) - zero_point) * scale."""
    x = e.input(0)
    dtype, _ = e.out_type()
    if x.dtype not in ("int8", "int16", "int32"):
        raise Unsupported(f"dequantizing {x.dtype} (int8, int16 and int32 have a TOSA form)")
    scale = _quant_param(e, 1, x, dtype, "scale", default=None)
    zp = _quant_param(e, 2, x, dtype, "zero point")
    y = e.op("tosa.cast", [x], dtype, x.shape)
    if np.any(zp != 0):
        y = e.binary("tosa.sub", y, e.const(zp.astype(numpy_dtype(dtype)), dtype))
    return [e.binary("tosa.mul", y, e.const(scale.astype(numpy_dtype(dtype)), dtype), result=e.result_name())]


@lowers("QuantizeLinear")
def _quantize(e: _Emitter) -> List[T]:
    """clamp(round(x * (1/scale)) + zero_point, qmin, qmax), cast: tosa.cast from float to
    int32 rounds half to even (and saturates), as ONNX's QuantizeLinear's rounding does.
    ONNX divides by the scale; x * (1/scale) may land an ulp off an exact tie (x = k.5 *
    scale), so a product within an ulp of a half-integer is taken as that tie."""
    x = e.input(0)
    dtype, _ = e.out_type()
    if x.dtype not in FLOATS:
        raise Unsupported(f"quantizing {x.dtype} (a float input is needed)")
    if dtype not in ("int8", "int16"):
        raise Unsupported(f"quantizing to {dtype} (int8 and int16 have a TOSA form)")
    scale = _quant_param(e, 1, x, x.dtype, "scale", default=None)
    zp = _quant_param(e, 2, x, x.dtype, "zero point")
    inv = (1.0 / scale.astype(np.float64)).astype(numpy_dtype(x.dtype))
    q = e.binary("tosa.mul", x, e.const(inv, x.dtype))
    half = e.binary("tosa.add", e.unary("tosa.floor", q), e.scalar(0.5, x.dtype, x.rank))
    ulp = e.mul_scalar(e.unary("tosa.abs", half), 2.0 ** -23 if x.dtype == "float" else 2.0 ** -10)
    tie = e.binary("tosa.greater_equal", ulp, e.unary("tosa.abs", e.binary("tosa.sub", q, half)), dtype="bool")
    n = e.op("tosa.cast", [e.select(tie, half, q)], "int32", q.shape)  # rounds half to even
    if np.any(zp != 0):
        n = e.binary("tosa.add", n, e.const(zp.astype(np.int32), "int32"))
    lo, hi = INT_RANGE[dtype]  # tosa.clamp takes no i32 (profiles): maximum / minimum
    n = e.binary("tosa.minimum", e.binary("tosa.maximum", n, e.scalar(lo, "int32", n.rank)),
                 e.scalar(hi, "int32", n.rank))
    return [e.op("tosa.cast", [n], dtype, n.shape, result=e.result_name())]


@lowers("Pow")
def _pow(e: _Emitter) -> List[T]:
    x = e.input(0)
    if x.dtype not in FLOATS:
        raise Unsupported("integer Pow (tosa.pow takes floats)")
    exponent = e.const_input(1)
    if exponent is not None and exponent.size == 1:
        p = float(np.asarray(exponent).reshape(-1)[0])
        # small integer exponents as products: exact, and defined for negative bases
        if p in (1.0, 2.0, 3.0, 4.0):
            acc = x
            for _ in range(int(p) - 1):
                acc = e.binary("tosa.mul", acc, x)
            return [acc]
        if p == -1.0:
            return [e.unary("tosa.reciprocal", x, result=e.result_name())]
        if p == 0.5:
            return [e.binary("tosa.pow", x, e.scalar(0.5, x.dtype, x.rank), result=e.result_name())]
    y = e.input(1)
    if y.dtype != x.dtype:
        y = e.cast(y, x.dtype)
    return [_signed_pow(e, x, y)]


def _signed_pow(e: _Emitter, x: T, y: T) -> T:
    """tosa.pow is undefined for x < 0; ONNX's Pow (C's pow) is defined there for integral
    y: |x|^y, negated for odd y; NaN for the rest. So: pow(|x|, y), then select."""
    rank = max(x.rank, y.rank)
    x, y = e.expand_rank(x, rank), e.expand_rank(y, rank)
    p = e.binary("tosa.pow", e.unary("tosa.abs", x), y)
    whole = e.unary("tosa.floor", y)
    integral = e.binary("tosa.equal", y, whole, dtype="bool")
    half = e.unary("tosa.floor", e.mul_scalar(whole, 0.5))
    odd = e.unary("tosa.logical_not", e.binary("tosa.equal", e.mul_scalar(half, 2.0), whole, dtype="bool"))
    zp = e.zp(x.dtype)
    negated = e.op("tosa.negate", [p, zp, zp], p.dtype, p.shape)
    of_negative = e.select(integral, e.select(odd, negated, p), e.scalar(float("nan"), x.dtype, rank))
    negative = e.binary("tosa.greater", e.scalar(0.0, x.dtype, rank), x, dtype="bool")
    return e.select(negative, of_negative, p, result=e.result_name())


@lowers("Sqrt")
def _sqrt(e: _Emitter) -> List[T]:
    x = e.input(0)
    return [e.binary("tosa.pow", x, e.scalar(0.5, x.dtype, x.rank), result=e.result_name())]


@lowers("Where")
def _where(e: _Emitter) -> List[T]:
    return [e.select(e.input(0), e.input(1), e.input(2), result=e.result_name())]


@lowers("Mean")
def _mean(e: _Emitter) -> List[T]:
    operands = [e.input(i) for i in range(len(e.node.inputs)) if e.has_input(i)]
    acc = operands[0]
    for t in operands[1:]:
        acc = e.binary("tosa.add", acc, t)
    if len(operands) == 1:
        return [acc]
    return [e.mul_scalar(acc, 1.0 / len(operands), result=e.result_name())]


@lowers("Relu")
def _relu(e: _Emitter) -> List[T]:
    x = e.input(0)
    return [e.clamp(x, 0, None, result=e.result_name())]


@lowers("Clip")
def _clip(e: _Emitter) -> List[T]:
    x = e.input(0)
    if e.graph.opset_of(e.node) < 11:
        return [e.clamp(x, _attr(e.node, "min"), _attr(e.node, "max"), result=e.result_name())]
    bounds = []
    for i in (1, 2):
        if not e.has_input(i):
            bounds.append(None)
            continue
        c = e.const_input(i)
        bounds.append(float(np.asarray(c).reshape(-1)[0]) if c is not None else e.input(i))
    if all(not isinstance(b, T) for b in bounds):
        return [e.clamp(x, bounds[0], bounds[1], result=e.result_name())]
    lo, hi = bounds  # run-time bounds: maximum / minimum with the scalars
    if lo is not None:
        x = e.binary("tosa.maximum", x, lo if isinstance(lo, T) else e.scalar(lo, x.dtype, x.rank))
    if hi is not None:
        x = e.binary("tosa.minimum", x, hi if isinstance(hi, T) else e.scalar(hi, x.dtype, x.rank))
    return [x]


@lowers("LeakyRelu")
def _leaky_relu(e: _Emitter) -> List[T]:
    x = e.input(0)
    alpha = _attr(e.node, "alpha", 0.01)
    ge = e.binary("tosa.greater_equal", x, e.scalar(0.0, x.dtype, x.rank), dtype="bool")
    return [e.select(ge, x, e.mul_scalar(x, alpha), result=e.result_name())]


@lowers("PRelu")
def _prelu(e: _Emitter) -> List[T]:
    x, slope = e.input(0), e.input(1)
    ge = e.binary("tosa.greater_equal", x, e.scalar(0.0, x.dtype, x.rank), dtype="bool")
    return [e.select(ge, x, e.binary("tosa.mul", x, slope), result=e.result_name())]


@lowers("HardSigmoid", "HardSwish")
def _hard_sigmoid(e: _Emitter) -> List[T]:
    x = e.input(0)
    swish = e.node.op_type == "HardSwish"
    alpha = 1.0 / 6.0 if swish else _attr(e.node, "alpha", 0.2)
    beta = 0.5 if swish else _attr(e.node, "beta", 0.5)
    y = e.binary("tosa.add", e.mul_scalar(x, alpha), e.scalar(beta, x.dtype, x.rank))
    y = e.clamp(y, 0.0, 1.0, result=None if swish else e.result_name())
    return [e.binary("tosa.mul", x, y, result=e.result_name()) if swish else y]


@lowers("Softplus")
def _softplus(e: _Emitter) -> List[T]:
    x = e.input(0)
    one = e.scalar(1.0, x.dtype, x.rank)
    return [e.unary("tosa.log", e.binary("tosa.add", e.unary("tosa.exp", x), one), result=e.result_name())]


@lowers("Elu")
def _elu(e: _Emitter) -> List[T]:
    x = e.input(0)
    alpha = _attr(e.node, "alpha", 1.0)
    neg = e.mul_scalar(e.binary("tosa.sub", e.unary("tosa.exp", x), e.scalar(1.0, x.dtype, x.rank)), alpha)
    gt = e.binary("tosa.greater", x, e.scalar(0.0, x.dtype, x.rank), dtype="bool")
    return [e.select(gt, x, neg, result=e.result_name())]


@lowers("Gelu")
def _gelu(e: _Emitter) -> List[T]:
    x = e.input(0)
    if _attr(e.node, "approximate", "none") == "tanh":
        cube = e.binary("tosa.mul", e.binary("tosa.mul", x, x), x)
        inner = e.binary("tosa.add", x, e.mul_scalar(cube, 0.044715))
        t = e.unary("tosa.tanh", e.mul_scalar(inner, math.sqrt(2.0 / math.pi)))
    else:
        t = e.unary("tosa.erf", e.mul_scalar(x, 1.0 / math.sqrt(2.0)))
    half = e.mul_scalar(x, 0.5)
    return [e.binary("tosa.mul", half, e.binary("tosa.add", t, e.scalar(1.0, x.dtype, x.rank)),
                     result=e.result_name())]


@lowers("Shape", "Size", "ConstantOfShape")
def _shape_of_dynamic(e: _Emitter) -> List[T]:
    """Reached only when folding could not: the shape is not known at compile time."""
    raise Unsupported("a shape computed at run time needs static shapes (bind the dims with dims=)")


@lowers("Identity")
def _identity_op(e: _Emitter) -> List[T]:
    return [_identity(e, e.input(0))]


@lowers("Dropout")
def _dropout(e: _Emitter) -> List[Optional[T]]:
    if e.used(1):
        raise Unsupported("its mask output is used")
    return [_identity(e, e.input(0)), None]


@lowers("Cast")
def _cast(e: _Emitter) -> List[T]:
    dtype, _ = e.out_type()
    return [e.cast(e.input(0), dtype, result=e.result_name())]


# -- shape ops ---------------------------------------------------------------------------

@lowers("Reshape", "Unsqueeze", "Squeeze", "Flatten")
def _reshape(e: _Emitter) -> List[T]:
    _, shape = e.out_type()
    return [e.reshape(e.input(0), shape, result=e.result_name())]


@lowers("Transpose")
def _transpose(e: _Emitter) -> List[T]:
    x = e.input(0)
    perm = _attr(e.node, "perm") or list(reversed(range(x.rank)))
    return [e.transpose(x, perm, result=e.result_name())]


@lowers("Concat")
def _concat(e: _Emitter) -> List[T]:
    parts = [e.input(i) for i in range(len(e.node.inputs)) if e.has_input(i)]
    axis = _axis(_attr(e.node, "axis", 0), parts[0].rank)
    parts = [p for p in parts if p.shape[axis] != 0] or parts[:1]
    return [e.concat(parts, axis, result=e.result_name())]


def _slice_bounds(start: int, end: int, dim: int) -> Tuple[int, int]:
    """ONNX Slice's clamping of one axis with step 1: (start, size)."""
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    start = max(0, min(dim, start))
    end = max(0, min(dim, end))
    return start, max(0, end - start)


@lowers("Slice")
def _slice(e: _Emitter) -> List[T]:
    x = e.input(0)
    if e.graph.opset_of(e.node) < 10:
        starts, ends = _attr(e.node, "starts"), _attr(e.node, "ends")
        axes, steps = _attr(e.node, "axes"), None
    else:
        starts = _ints(_need_const(e, 1, "starts"))
        ends = _ints(_need_const(e, 2, "ends"))
        axes = _ints(_need_const(e, 3, "axes")) if e.has_input(3) else None
        steps = _ints(_need_const(e, 4, "steps")) if e.has_input(4) else None
    axes = [_axis(a, x.rank) for a in (axes or range(len(starts)))]
    if steps and any(s != 1 for s in steps):
        raise Unsupported("steps other than 1")
    start, size = [0] * x.rank, list(x.shape)
    for a, s, t in zip(axes, starts, ends):
        dim = x.shape[a]
        if not isinstance(dim, int):
            raise Unsupported(f"slicing dynamic dim {a} of {_shape_text(x.shape)} needs static shapes")
        start[a], size[a] = _slice_bounds(s, t, dim)
    return [e.slice(x, start, size, result=e.result_name())]


@lowers("Split")
def _split(e: _Emitter) -> List[T]:
    x = e.input(0)
    axis = _axis(_attr(e.node, "axis", 0), x.rank)
    outs, offset = [], 0
    for i in range(len(e.node.outputs)):
        _, shape = e.out_type(i)
        size = shape[axis]
        if not isinstance(size, int):
            raise Unsupported(f"split of dynamic dim {axis} needs static shapes")
        sizes = list(x.shape)
        sizes[axis] = size
        start = [0] * x.rank
        start[axis] = offset
        outs.append(e.slice(x, start, sizes, result=e.result_name(i)))
        offset += size
    return outs


@lowers("Gather")
def _gather(e: _Emitter) -> List[T]:
    x = e.input(0)
    indices = e.const_input(1)
    if indices is None:
        raise Unsupported("indices must be a constant (no tosa.gather lowering)")
    axis = _axis(_attr(e.node, "axis", 0), x.rank)
    dim = x.shape[axis]
    if not isinstance(dim, int):
        raise Unsupported(f"gathering along dynamic dim {axis} needs static shapes")
    idx = [int(i) + dim if int(i) < 0 else int(i) for i in np.asarray(indices).reshape(-1)]
    parts = []
    for i in idx:  # runs of consecutive indices become one slice each
        if parts and parts[-1][0] + parts[-1][1] == i:
            parts[-1][1] += 1
        else:
            parts.append([i, 1])
    pieces = []
    for s, n in parts:
        start, size = [0] * x.rank, list(x.shape)
        start[axis], size[axis] = s, n
        pieces.append(e.slice(x, start, size))
    _, shape = e.out_type()
    return [e.reshape(e.concat(pieces, axis), shape, result=e.result_name())]


@lowers("Expand")
def _expand(e: _Emitter) -> List[T]:
    x = e.input(0)
    _, shape = e.out_type()
    x = e.expand_rank(x, len(shape))
    if not _static(shape) or not _static(x.shape):
        raise Unsupported("Expand needs static shapes")
    multiples = [o if d == 1 else 1 for d, o in zip(x.shape, shape)]
    if multiples == [1] * len(shape):
        return [x]
    return [_tile(e, x, multiples, shape)]


def _tile(e: _Emitter, x: T, multiples: Sequence[int], shape: Sequence) -> T:
    out = T(e.fresh(e.result_name()), x.dtype, tuple(shape))
    m = e.shape_value(multiples)
    e.lines.append(f"{out.ssa} = tosa.tile {x.ssa}, {m} : ({x.type}, !tosa.shape<{x.rank}>) -> {out.type}")
    return out


@lowers("Tile")
def _tile_op(e: _Emitter) -> List[T]:
    x = e.input(0)
    repeats = _ints(_need_const(e, 1, "repeats"))
    _, shape = e.out_type()
    return [_tile(e, x, repeats, shape)]


@lowers("Pad")
def _pad(e: _Emitter) -> List[T]:
    x = e.input(0)
    mode = _attr(e.node, "mode", "constant")
    if mode != "constant":
        raise Unsupported(f"mode '{mode}' (only constant padding)")
    if e.graph.opset_of(e.node) < 11:
        pads, value = _attr(e.node, "pads"), _attr(e.node, "value", 0.0)
    else:
        pads = _ints(_need_const(e, 1, "pads"))
        value = float(np.asarray(e.const_input(2)).reshape(-1)[0]) if e.has_input(2) and e.const_input(2) is not None \
            else 0.0
        if e.has_input(2) and e.const_input(2) is None:
            raise Unsupported("the pad value must be a constant")
        if e.has_input(3):
            raise Unsupported("the axes operand")
    if any(p < 0 for p in pads):
        raise Unsupported("negative pads")
    n = x.rank
    _, shape = e.out_type()
    return [_tosa_pad(e, x, [(pads[i], pads[i + n]) for i in range(n)], value, shape, e.result_name())]


def _tosa_pad(e: _Emitter, x: T, pads: Sequence[Tuple[int, int]], value: float, shape=None,
              result: Optional[str] = None) -> T:
    if all(b == 0 and a == 0 for b, a in pads) and result is None:
        return x
    if shape is None:
        shape = tuple(d + b + a if isinstance(d, int) else None for d, (b, a) in zip(x.shape, pads))
    flat = [v for pair in pads for v in pair]
    out = T(e.fresh(result), x.dtype, tuple(shape))
    pv = e.shape_value(flat)
    pc = e.shared_const(value, x.dtype, (1,))
    e.lines.append(f"{out.ssa} = tosa.pad {x.ssa}, {pv}, {pc.ssa} : ({x.type}, !tosa.shape<{2 * x.rank}>, "
                   f"{pc.type}) -> {out.type}")
    return out


# -- reductions and normalizations -------------------------------------------------------

def _reduce_axes(e: _Emitter, rank: int, attr_until: int) -> Optional[List[int]]:
    """The axes of a Reduce* op (an attribute before opset ``attr_until``, else operand 1);
    None for 'all axes'; [] for none (noop_with_empty_axes)."""
    if e.graph.opset_of(e.node) < attr_until:
        axes = _attr(e.node, "axes")
    else:
        axes = _ints(_need_const(e, 1, "axes")) if e.has_input(1) else None
    if not axes:
        return [] if _attr(e.node, "noop_with_empty_axes", 0) else list(range(rank))
    return sorted(_axis(a, rank) for a in axes)


_REDUCE = {"ReduceSum": ("tosa.reduce_sum", 13), "ReduceMax": ("tosa.reduce_max", 18),
           "ReduceMin": ("tosa.reduce_min", 18), "ReduceProd": ("tosa.reduce_product", 18),
           "ReduceMean": ("tosa.reduce_sum", 18)}


@lowers(*_REDUCE)
def _reduce(e: _Emitter) -> List[T]:
    x = e.input(0)
    name, since = _REDUCE[e.node.op_type]
    axes = _reduce_axes(e, x.rank, since)
    y = e.reduce(name, x, axes)
    if e.node.op_type == "ReduceMean" and axes:
        count = [x.shape[a] for a in axes]
        if not _static(count):
            raise Unsupported("the mean over a dynamic dim needs static shapes")
        y = e.mul_scalar(y, 1.0 / float(np.prod(count)))
    _, shape = e.out_type()
    return [e.reshape(y, shape, result=e.result_name())]


@lowers("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(e: _Emitter) -> List[T]:
    x = e.input(0)
    axes = list(range(2, x.rank))
    if e.node.op_type == "GlobalMaxPool":
        return [e.reduce("tosa.reduce_max", x, axes)]
    count = [x.shape[a] for a in axes]
    if not _static(count):
        raise Unsupported("the mean over a dynamic dim needs static shapes")
    return [e.mul_scalar(e.reduce("tosa.reduce_sum", x, axes), 1.0 / float(np.prod(count)), result=e.result_name())]


def _softmax_last(e: _Emitter, x: T, log: bool, result: Optional[str]) -> T:
    axis = x.rank - 1
    shifted = e.binary("tosa.sub", x, e.reduce("tosa.reduce_max", x, [axis]))
    exp = e.unary("tosa.exp", shifted)
    total = e.reduce("tosa.reduce_sum", exp, [axis])
    if log:
        return e.binary("tosa.sub", shifted, e.unary("tosa.log", total), result=result)
    return e.binary("tosa.mul", exp, e.unary("tosa.reciprocal", total), result=result)


@lowers("Softmax", "LogSoftmax")
def _softmax(e: _Emitter) -> List[T]:
    x = e.input(0)
    log = e.node.op_type == "LogSoftmax"
    legacy = e.graph.opset_of(e.node) < 13
    axis = _axis(_attr(e.node, "axis", 1 if legacy else -1), x.rank)
    if legacy and axis != x.rank - 1:
        # opsets < 13 coerce to 2-D at axis: softmax over all of the trailing dims
        inner = x.shape[axis:]
        if not _static(inner):
            raise Unsupported("the coerced 2-D softmax over dynamic dims needs static shapes")
        flat = e.reshape(x, tuple(x.shape[:axis]) + (int(np.prod(inner)),))
        y = _softmax_last(e, flat, log, None)
        return [e.reshape(y, x.shape, result=e.result_name())]
    if axis != x.rank - 1:
        perm = [i for i in range(x.rank) if i != axis] + [axis]
        inv = list(np.argsort(perm))
        y = _softmax_last(e, e.transpose(x, perm), log, None)
        return [e.transpose(y, inv, result=e.result_name())]
    return [_softmax_last(e, x, log, e.result_name())]


def _channel_param(e: _Emitter, i: int, rank: int) -> T:
    """A per-channel parameter (size C) reshaped to 1xCx1...x1."""
    t = e.input(i)
    return e.reshape(t, (1, t.shape[0]) + (1,) * (rank - 2))


@lowers("BatchNormalization")
def _batch_norm(e: _Emitter) -> List[Optional[T]]:
    if any(e.used(i) for i in range(1, len(e.node.outputs))):
        raise Unsupported("training-mode outputs (running mean/var) are used")
    if _attr(e.node, "training_mode", 0):
        raise Unsupported("training mode")
    x = e.input(0)
    eps = float(_attr(e.node, "epsilon", 1e-5))
    params = [e.const_input(i) for i in range(1, 5)]
    shape = (1, x.shape[1]) + (1,) * (x.rank - 2)
    if all(p is not None for p in params):  # constants: y = x * a + b, folded now
        scale, bias, mean, var = (np.asarray(p, np.float64) for p in params)
        a = scale / np.sqrt(var + eps)
        b = bias - mean * a
        nd = numpy_dtype(x.dtype)
        ta = e.const(np.broadcast_to(a.astype(nd), (x.shape[1],)).reshape(shape) if _is_splat(a)
                     else a.astype(nd).reshape(shape), x.dtype)
        tb = e.const(np.broadcast_to(b.astype(nd), (x.shape[1],)).reshape(shape) if _is_splat(b)
                     else b.astype(nd).reshape(shape), x.dtype)
        return [e.binary("tosa.add", e.binary("tosa.mul", x, ta), tb, result=e.result_name())] + \
            [None] * (len(e.node.outputs) - 1)
    scale, bias, mean, var = (_channel_param(e, i, x.rank) for i in range(1, 5))
    inv = e.unary("tosa.rsqrt", e.binary("tosa.add", var, e.scalar(eps, x.dtype, x.rank)))
    y = e.binary("tosa.mul", e.binary("tosa.sub", x, mean), e.binary("tosa.mul", scale, inv))
    return [e.binary("tosa.add", y, bias, result=e.result_name())] + [None] * (len(e.node.outputs) - 1)


@lowers("LayerNormalization")
def _layer_norm(e: _Emitter) -> List[Optional[T]]:
    if any(e.used(i) for i in range(1, len(e.node.outputs))):
        raise Unsupported("its Mean / InvStdDev outputs are used")
    x = e.input(0)
    axis = _axis(_attr(e.node, "axis", -1), x.rank)
    eps = float(_attr(e.node, "epsilon", 1e-5))
    axes = list(range(axis, x.rank))
    count = [x.shape[a] for a in axes]
    if not _static(count):
        raise Unsupported("normalizing over dynamic dims needs static shapes")
    inv_n = 1.0 / float(np.prod(count))
    mean = e.mul_scalar(e.reduce("tosa.reduce_sum", x, axes), inv_n)
    centered = e.binary("tosa.sub", x, mean)
    var = e.mul_scalar(e.reduce("tosa.reduce_sum", e.binary("tosa.mul", centered, centered), axes), inv_n)
    inv = e.unary("tosa.rsqrt", e.binary("tosa.add", var, e.scalar(eps, x.dtype, x.rank)))
    y = e.binary("tosa.mul", centered, inv)
    has_bias = e.has_input(2)
    y = e.binary("tosa.mul", y, e.expand_rank(e.input(1), x.rank), result=None if has_bias else e.result_name())
    if has_bias:
        y = e.binary("tosa.add", y, e.expand_rank(e.input(2), x.rank), result=e.result_name())
    return [y] + [None] * (len(e.node.outputs) - 1)


@lowers("LRN")
def _lrn(e: _Emitter) -> List[T]:
    """x / (bias + alpha / size * sum of x^2 over a window of channels) ^ beta; the
    window sum is a 1x1 convolution with a band matrix."""
    x = e.input(0)
    if x.rank != 4 or not isinstance(x.shape[1], int):
        raise Unsupported("LRN needs a 4-D input with a static channel dim")
    size = int(_attr(e.node, "size"))
    alpha, beta, bias = (float(_attr(e.node, k, d)) for k, d in (("alpha", 1e-4), ("beta", 0.75), ("bias", 1.0)))
    c = x.shape[1]
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    band = np.zeros((c, 1, 1, c), numpy_dtype(x.dtype))
    for o in range(c):
        band[o, 0, 0, max(0, o - lo):min(c, o + hi + 1)] = 1
    sq = e.transpose(e.binary("tosa.mul", x, x), [0, 2, 3, 1])
    w = e.const(band, x.dtype)
    zero_bias = e.shared_const(0.0, x.dtype, (c,))
    zp = e.zp(x.dtype)
    sums = e.op("tosa.conv2d", [sq, w, zero_bias, zp, zp], x.dtype, sq.shape,
                {"pad": _i64_array([0, 0, 0, 0]), "stride": _i64_array([1, 1]), "dilation": _i64_array([1, 1]),
                 "acc_type": _acc_type(x.dtype)})
    sums = e.transpose(sums, [0, 3, 1, 2])
    base = e.binary("tosa.add", e.mul_scalar(sums, alpha / size), e.scalar(bias, x.dtype, 4))
    denom = e.binary("tosa.pow", base, e.scalar(beta, x.dtype, 4))
    return [e.binary("tosa.mul", x, e.unary("tosa.reciprocal", denom), result=e.result_name())]


# -- matrix products ---------------------------------------------------------------------

def _acc_type(dtype: str) -> str:
    if dtype in ("float", "float16", "bfloat16"):
        return "f32"
    if dtype == "int8":
        return "i32"
    if dtype == "int16":
        return "i48"
    raise Unsupported(f"no TOSA accumulator for {dtype}")


def _product(dims: Sequence):
    if _static(dims):
        return int(np.prod(dims)) if dims else 1
    return None


def _matmul3(e: _Emitter, a: T, b: T) -> T:
    """tosa.matmul of rank-3 operands [B, M, K] x [B, K, N]."""
    if a.dtype not in ("float", "float16", "bfloat16"):
        raise Unsupported(f"{a.dtype} matrix products (only float ones)")
    zp = e.zp(a.dtype)
    return e.op("tosa.matmul", [a, b, zp, zp], a.dtype, (a.shape[0], a.shape[1], b.shape[2]))


@lowers("MatMul")
def _matmul(e: _Emitter) -> List[T]:
    a, b = e.input(0), e.input(1)
    _, out_shape = e.out_type()
    if a.rank == 1:
        a = e.reshape(a, (1,) + a.shape)
    if b.rank == 1:
        b = e.reshape(b, b.shape + (1,))
    ba, bb = a.shape[:-2], b.shape[:-2]
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    if not bb or all(d == 1 for d in bb):
        # B is one matrix: fold A's batch dims into its rows
        a3 = e.reshape(a, (1, _product(tuple(ba) + (m,)), k))
        b3 = e.reshape(b, (1, k, n))
    else:
        rank = max(len(ba), len(bb))
        ba, bb = (1,) * (rank - len(ba)) + tuple(ba), (1,) * (rank - len(bb)) + tuple(bb)
        if tuple(ba) != tuple(bb):
            if not (_static(ba) and _static(bb)):
                raise Unsupported("MatMul with broadcast batch dims needs static shapes")
            batch = _broadcast(ba, bb)
            a = _tile(e, e.expand_rank(a, rank + 2), [o // d for d, o in zip(ba, batch)] + [1, 1],
                      tuple(batch) + (m, k)) if tuple(ba) != batch else e.expand_rank(a, rank + 2)
            b = _tile(e, e.expand_rank(b, rank + 2), [o // d for d, o in zip(bb, batch)] + [1, 1],
                      tuple(batch) + (k, n)) if tuple(bb) != batch else e.expand_rank(b, rank + 2)
            ba = batch
        nb = _product(ba)
        a3 = e.reshape(a, (nb, m, k))
        b3 = e.reshape(b, (nb, k, n))
    y = _matmul3(e, a3, b3)
    return [e.reshape(y, out_shape, result=e.result_name())]


@lowers("Gemm")
def _gemm(e: _Emitter) -> List[T]:
    a = e.input(0)
    node = e.node
    if a.rank != 2 or e.node.inputs[1].type.rank != 2:
        raise Unsupported("Gemm operands must be matrices")
    if _attr(node, "transA", 0):
        a = e.transpose(a, [1, 0])
    wb = e.const_input(1)
    if _attr(node, "transB", 0):
        b = e.const(np.asarray(wb).T, e.node.inputs[1].type.dtype or "float") if wb is not None \
            else e.transpose(e.input(1), [1, 0])
    else:
        b = e.input(1)
    m, k = a.shape
    n = b.shape[1]
    y = _matmul3(e, e.reshape(a, (1, m, k)), e.reshape(b, (1, k, n)))
    alpha, beta = float(_attr(node, "alpha", 1.0)), float(_attr(node, "beta", 1.0))
    has_c = e.has_input(2) and beta != 0.0
    y = e.reshape(y, (m, n), result=None if (has_c or alpha != 1.0) else e.result_name())
    if alpha != 1.0:
        y = e.mul_scalar(y, alpha, result=None if has_c else e.result_name())
    if has_c:
        c = e.expand_rank(e.input(2), 2)
        if beta != 1.0:
            c = e.mul_scalar(c, beta)
        y = e.binary("tosa.add", y, c, result=e.result_name())
    return [y]


# -- convolution and pooling ---------------------------------------------------------------

@dataclass
class _Window:
    """A sliding window's parameters over the two spatial dims (1-D ops get a leading 1)."""

    kernel: List[int]
    stride: List[int]
    dilation: List[int]
    pad: List[int]  # TOSA order: top, bottom, left, right
    declared_end: List[int]  # the end pads the op declares (the rest makes ceil_mode's size)


def _window(e: _Emitter, x: T, kernel: List[int], out_spatial: Sequence) -> Tuple[T, _Window]:
    """The window of the current Conv/Pool node on ``x`` (NCHW, 2-D spatial): pads from
    ``pads``/``auto_pad`` at the start, at the end what gives the output size shape
    inference found (TOSA wants it exact; ceil_mode is this too). A negative end pad
    crops ``x`` instead."""
    node = e.node
    n = len(kernel)
    stride = list(_attr(node, "strides", [1] * n))
    dilation = list(_attr(node, "dilations", [1] * n))
    pads = list(_attr(node, "pads", [0] * (2 * n)))
    auto = _attr(node, "auto_pad", "NOTSET")
    spatial = list(x.shape[2:])
    if not (_static(spatial) and _static(out_spatial)):
        raise Unsupported(f"a window over dynamic spatial dims ({_shape_text(x.shape)}) needs static shapes")
    begin, declared = [], []
    for i in range(n):
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            total = max((out_spatial[i] - 1) * stride[i] + (kernel[i] - 1) * dilation[i] + 1 - spatial[i], 0)
            begin.append(total // 2 if auto == "SAME_UPPER" else total - total // 2)
            declared.append(total - begin[-1])
        elif auto == "VALID":
            begin.append(0)
            declared.append(0)
        else:
            begin.append(pads[i])
            declared.append(pads[n + i])
    end, crop = [], [0] * n
    for i in range(n):
        need = (out_spatial[i] - 1) * stride[i] + (kernel[i] - 1) * dilation[i] + 1 - spatial[i] - begin[i]
        if need < 0:
            crop[i], need = -need, 0
        end.append(need)
    if any(crop):
        size = list(x.shape[:2]) + [s - c for s, c in zip(spatial, crop)]
        x = e.slice(x, [0] * x.rank, size)
    if n == 1:
        kernel, stride, dilation = [1] + kernel, [1] + stride, [1] + dilation
        begin, end, declared = [0] + begin, [0] + end, [0] + declared
    return x, _Window(list(kernel), stride, dilation, [begin[0], end[0], begin[1], end[1]], declared)


def _to_2d(e: _Emitter, x: T) -> T:
    if x.rank == 3:
        return e.reshape(x, (x.shape[0], x.shape[1], 1, x.shape[2]))
    if x.rank != 4:
        raise Unsupported(f"{x.rank - 2}-D windows (only 1-D and 2-D)")
    return x


def _nhwc(e: _Emitter, x: T) -> T:
    return e.transpose(x, [0, 2, 3, 1])


def _back(e: _Emitter, y: T, out_shape: Sequence) -> T:
    """NHWC result -> the ONNX layout (NCHW, or NCW for 1-D)."""
    y = e.transpose(y, [0, 3, 1, 2], result=None if len(out_shape) == 3 else e.result_name())
    if len(out_shape) == 3:
        y = e.reshape(y, out_shape, result=e.result_name())
    return y


@lowers("Conv")
def _conv(e: _Emitter) -> List[T]:
    x = e.input(0)
    dtype, out_shape = e.out_type()
    if dtype not in ("float", "float16", "bfloat16"):
        raise Unsupported(f"{dtype} convolution (only float ones)")
    w_val = e.node.inputs[1]
    w_const = e.const_of(w_val)
    w_shape = tuple(w_val.type.shape) if w_val.type.shape is not None else None
    if w_shape is None or not _static(w_shape):
        raise Unsupported("the weight's shape must be static")
    kernel = list(_attr(e.node, "kernel_shape", w_shape[2:]))
    group = int(_attr(e.node, "group", 1))
    one_d = x.rank == 3
    if x.rank not in (3, 4):
        raise Unsupported(f"{x.rank - 2}-D convolution (only 1-D and 2-D)")
    out4 = tuple(out_shape) if not one_d else (out_shape[0], out_shape[1], 1, out_shape[2])
    x, win = _window(e, x, kernel, out_shape[2:])
    xh = _nhwc(e, _to_2d(e, x))
    m = w_shape[0]
    if w_const is not None:
        w_arr = np.asarray(w_const)
        if one_d:
            w_arr = w_arr.reshape(w_shape[0], w_shape[1], 1, w_shape[2])
    bias = e.input(2) if e.has_input(2) else e.shared_const(0.0, x.dtype, (m,))
    zp = e.zp(x.dtype)
    attrs = {"pad": _i64_array(win.pad), "stride": _i64_array(win.stride), "dilation": _i64_array(win.dilation),
             "acc_type": _acc_type(x.dtype)}
    oh, ow = out4[2], out4[3]
    c_in = xh.shape[3]

    def weight(perm, o_slice=None, reshape=None) -> T:
        if w_const is not None:
            arr = w_arr if o_slice is None else w_arr[o_slice]
            if reshape is not None:
                arr = arr.reshape(reshape)
            return e.const(np.transpose(arr, perm), x.dtype)
        w = e.input(1)
        w = e.reshape(w, w.shape[:2] + (1,) + w.shape[2:]) if one_d else w
        if o_slice is not None:
            start = [o_slice.start, 0, 0, 0]
            w = e.slice(w, start, [o_slice.stop - o_slice.start] + list(w.shape[1:]))
        if reshape is not None:
            w = e.reshape(w, reshape)
        return e.transpose(w, perm)

    if group == 1:
        y = e.op("tosa.conv2d", [xh, weight([0, 2, 3, 1]), bias, zp, zp], x.dtype, (xh.shape[0], oh, ow, m), attrs)
    elif isinstance(c_in, int) and group == c_in and m % c_in == 0:
        mult = m // c_in
        w = weight([2, 3, 0, 1], reshape=(c_in, mult) + tuple(kernel if not one_d else [1] + kernel))
        y = e.op("tosa.depthwise_conv2d", [xh, w, bias, zp, zp], x.dtype, (xh.shape[0], oh, ow, m), attrs)
    else:
        if not isinstance(c_in, int) or c_in % group or m % group:
            raise Unsupported(f"group={group} with {c_in} input channels")
        ci, co = c_in // group, m // group
        parts = []
        for g in range(group):
            xg = e.slice(xh, [0, 0, 0, g * ci], list(xh.shape[:3]) + [ci])
            bg = e.slice(bias, [g * co], [co]) if bias.shape[0] == m else bias
            wg = weight([0, 2, 3, 1], o_slice=slice(g * co, (g + 1) * co))
            parts.append(e.op("tosa.conv2d", [xg, wg, bg, zp, zp], x.dtype, (xh.shape[0], oh, ow, co), attrs))
        y = e.concat(parts, 3)
    return [_back(e, y, out_shape)]


@lowers("MaxPool", "AveragePool")
def _pool(e: _Emitter) -> List[Optional[T]]:
    node = e.node
    if node.op_type == "MaxPool" and e.used(1):
        raise Unsupported("its Indices output is used")
    x = e.input(0)
    dtype, out_shape = e.out_type()
    kernel = list(_attr(node, "kernel_shape"))
    if any(d != 1 for d in _attr(node, "dilations", [1] * len(kernel))):
        raise Unsupported("dilated pooling")
    one_d = x.rank == 3
    if not one_d and x.rank != 4:
        raise Unsupported(f"{x.rank - 2}-D pooling (only 1-D and 2-D)")
    include_pad = node.op_type == "AveragePool" and _attr(node, "count_include_pad", 0)
    x, win = _window(e, x, kernel, out_shape[2:])
    x4 = _to_2d(e, x)
    xh = _nhwc(e, x4)
    oh, ow = (1, out_shape[2]) if one_d else (out_shape[2], out_shape[3])
    if include_pad and any(win.pad):
        # the declared pads count in the average (TOSA's do not): pad with zeros explicitly;
        # what ceil_mode adds beyond them stays out of the count, as in onnxruntime
        ends = [min(win.pad[1], win.declared_end[0]), min(win.pad[3], win.declared_end[1])]
        xh = _tosa_pad(e, xh, [(0, 0), (win.pad[0], ends[0]), (win.pad[2], ends[1]), (0, 0)], 0.0)
        win.pad = [0, win.pad[1] - ends[0], 0, win.pad[3] - ends[1]]
    attrs = {"kernel": _i64_array(win.kernel), "stride": _i64_array(win.stride), "pad": _i64_array(win.pad)}
    shape = (xh.shape[0], oh, ow, xh.shape[3])
    if node.op_type == "MaxPool":
        y = e.op("tosa.max_pool2d", [xh], x.dtype, shape, attrs)
    else:
        zp = e.zp(x.dtype)
        attrs["acc_type"] = _acc_type(x.dtype)
        y = e.op("tosa.avg_pool2d", [xh, zp, zp], x.dtype, shape, attrs)
    return [_back(e, y, out_shape)] + [None] * (len(node.outputs) - 1)


# ---- folding ---------------------------------------------------------------------------

_NO_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"}


def _fold(e: _Emitter, node: Node) -> Optional[List[np.ndarray]]:
    """The outputs of ``node`` if they are known at compile time, else None."""
    op = node.op
    if op == "Constant":
        c = constant_array(node.outputs[0])
        return None if c is None else [c]
    if op == "ConstantOfShape":
        shape = e.const_of(node.inputs[0]) if node.inputs else None
        if shape is None:
            return None
        value = node.attrs.get("value")
        fill = np.zeros(1, np.float32) if value is None else attribute_array(node, "value")
        # a splat view: never materialized (a 100M-element weight costs nothing)
        return [np.broadcast_to(fill.reshape(-1)[0], tuple(int(d) for d in np.asarray(shape).reshape(-1)))]
    if op in ("Shape", "Size"):
        s = node.inputs[0].type.shape if node.inputs and node.inputs[0] is not None else None
        if s is None or not _static(s):
            return None
        if op == "Size":
            return [np.asarray(int(np.prod(s)), np.int64)]
        start, end = _attr(node, "start", 0), _attr(node, "end", None)
        return [np.asarray(s[start:end], np.int64)]
    if any(True for _ in node.subgraphs()) or op in _NO_FOLD or node.domain not in ("", "ai.onnx"):
        return None
    ins = [v for v in node.inputs]
    arrays = [None if v is None or v.name == "" else e.const_of(v) for v in ins]
    if any(a is None for v, a in zip(ins, arrays) if v is not None and v.name != ""):
        return None
    if op in ("Identity", "Unsqueeze", "Squeeze", "Reshape", "Flatten") and node.outputs[0].type.shape is not None \
            and _static(node.outputs[0].type.shape):
        return [np.reshape(arrays[0], tuple(node.outputs[0].type.shape))]
    if op == "Transpose":
        perm = _attr(node, "perm")
        return [np.transpose(arrays[0], perm)]
    for v in node.outputs:
        s = v.type.shape
        if s is not None and _static(s) and int(np.prod(s)) > FOLD_LIMIT:
            return None
    if any(a is not None and a.size > FOLD_LIMIT for a in arrays):
        return None
    return _evaluate(e.graph, node, arrays)


def _evaluate(graph: Graph, node: Node, arrays: List[Optional[np.ndarray]]) -> Optional[List[np.ndarray]]:
    """One node on constants, with onnx's reference evaluator."""
    from onnx.reference import ReferenceEvaluator

    names = [f"i{k}" if a is not None else "" for k, a in enumerate(arrays)]
    outs = [f"o{k}" for k in range(len(node.outputs))]
    proto = helper.make_node(node.op_type, names, outs, domain=node.domain)
    proto.attribute.extend(a for a in node.attrs.values() if hasattr(a, "name"))
    try:
        ev = ReferenceEvaluator(proto, opsets={"": graph.opset_of(node)})
        res = ev.run(None, {n: np.asarray(a) for n, a in zip(names, arrays) if n})
    except Exception:  # noqa: BLE001 - not foldable here; lowered as an op instead
        return None
    return [np.asarray(r) for r in res]


# ---- the module ------------------------------------------------------------------------

def _specialize(model: Model, dims: Mapping[str, int]) -> Model:
    """The model with symbolic dims bound to sizes: its ONNX form re-imported, so that
    shape inference makes static what it can."""
    from .onnx_form import to_onnx
    from ..importers.onnx import import_model

    proto = to_onnx(model)
    g = proto.graph
    for vi in list(g.input) + list(g.output):
        if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
            continue
        for d in vi.type.tensor_type.shape.dim:
            if d.WhichOneof("value") == "dim_param":
                if d.dim_param in dims:
                    d.dim_value = int(dims[d.dim_param])
                elif vi in g.output:
                    d.ClearField("dim_param")
    del g.value_info[:]
    return import_model(proto, model.base_dir)


def emit_tosa(model: Model, *, dims: Optional[Mapping[str, int]] = None, func_name: str = "main") -> str:
    """TOSA MLIR text of ``model`` (ONNX frontend, legalized for ``tosa``). ``dims``
    binds symbolic dims to sizes. BadInput names every op that cannot be emitted."""
    if model.format == "tflite":
        from .onnx_form import to_onnx
        from ..importers.onnx import import_model

        model = import_model(to_onnx(model), None)
    elif model.format != "onnx":
        raise BadInput(f"TOSA export reads ONNX or TFLite models, not {model.format}")
    if dims:
        model = _specialize(model, dims)
    return _emit_graph(model.graph, func_name)


def _placeholder(v: Value) -> Optional[T]:
    t = v.type
    if t.dtype in ELEMENT_TYPES and t.shape is not None:
        return T("%<unavailable>", t.dtype, tuple(t.shape))
    return None


def _emit_graph(graph: Graph, func_name: str) -> str:
    e = _Emitter(graph)
    args: List[T] = []
    failures: List[str] = []
    for n in graph.inputs:
        v = n.outputs[0]
        if n.data is not None:  # IR < 4: an initializer listed as an input
            e.consts[id(v)] = np.asarray(n.data.array)
            continue
        t = v.type
        if t.dtype is None or t.shape is None or t.dtype not in ELEMENT_TYPES:
            failures.append(f"input '{v.name}' ({t}: needs a ranked tensor type TOSA has)")
            continue
        arg = T(e.fresh(f"arg{len(args)}"), t.dtype, tuple(t.shape))
        args.append(arg)
        e.env[id(v)] = arg
    for n in graph.constants():
        if n.data is not None and not n.data.sparse:
            e.consts[id(n.outputs[0])] = n.data.array
    for node in graph.nodes():
        if node.kind != OP:
            continue
        folded = _fold(e, node)
        if folded is not None:
            for v, a in zip(node.outputs, folded):
                e.consts[id(v)] = a
            continue
        e.node = node
        lower = _LOWER.get(node.op)
        failed = True
        try:
            if lower is None:
                raise Unsupported("no TOSA lowering")
            outs = lower(e)
            failed = False
        except Unsupported as why:
            failures.append(f"'{node.label}' ({node.op}: {why})")
        except _Poisoned:  # an operand's op failed and is reported; this op is only if it has no lowering
            if lower is None:
                failures.append(f"'{node.label}' ({node.op}: no TOSA lowering)")
        if failed:  # later ops still get checked, on placeholders of the IR's types
            outs = [_placeholder(v) for v in node.outputs]
        for v, t in zip(node.outputs, outs):
            if t is not None:
                e.env[id(v)] = t
            elif failed:
                e.poisoned.add(id(v))
    results: List[T] = []
    for n in graph.outputs:
        v = n.inputs[0]
        if v is None:
            continue
        try:
            results.append(e.value(v))
        except (Unsupported, _Poisoned):
            if not failures:
                failures.append(f"output '{v.name}' (not computed)")
    if failures:
        raise BadInput(f"cannot emit TOSA for {len(failures)} op{'s' if len(failures) != 1 else ''}: "
                       + "; ".join(failures))
    sig_args = ", ".join(f"{a.ssa}: {a.type}" for a in args)
    res_types = [r.type for r in results]
    ret = res_types[0] if len(res_types) == 1 else "(" + ", ".join(res_types) + ")"
    names = ", ".join(n.outputs[0].name for n in graph.inputs if n.data is None)
    header = f"// TOSA form of graph '{graph.name}' (inputs: {names}) written by legalize"
    out = [" ".join(header.splitlines()), "module {", f"  func.func @{func_name}({sig_args}) -> {ret} {{"]
    out.extend("    " + line for line in e.lines)
    if results:
        out.append(f"    return {', '.join(r.ssa for r in results)} : {', '.join(res_types)}")
    else:
        out.append("    return")
    out.append("  }")
    out.append("}")
    return "\n".join(out) + "\n"
