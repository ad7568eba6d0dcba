"""The TOSA emitter: SSA names, constants (emitted once, where first used) and the TOSA
building blocks the lowerings share (https://www.mlplatform.org/tosa/tosa_spec.html).

- Ops without attributes in their pretty form (``tosa.add %a, %b : (...) -> ...``), ops
  with attributes and ``tosa.const``/``tosa.const_shape`` in the generic form
  (``"tosa.const"() <{values = dense<...> : tensor<...>}> : () -> tensor<...>``), which
  every TOSA parser reads whatever its version's pretty syntax is.
- An op result that is an ONNX value is named after it (sanitized).
- Dynamic (``?``) and symbolic dims stay dynamic where TOSA allows it; a reshape may have
  one dynamic dim (``-1``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ....ir.dtypes import MLIR_ELEMENT, MLIR_FLOATS, dtype_of_array, numpy_dtype
from ....ir.graph import Graph, Node, Value
from ..printer import TOSA_LITERALS, dense_array, dense_body, scientific_float, shape_text
from ..printer import tensor_type as printed_type
from ..driver import OperandFailed
from ..registry import LoweringTable, Unsupported
from ....ir.types import all_static

# ONNX op type -> its lowering: ``(e: Emitter, node) -> [T or None per output]`` (the
# driver's one rule signature; ``e.node`` is ``node``, which ``e.input(i)`` and the like read).
LOWERINGS = LoweringTable("tosa")

# IR dtype name -> MLIR element type, of the types TOSA has: MLIR_ELEMENT without the
# unsigned ones (TOSA's integers are signless and read as signed).
TOSA_ELEMENT = {dtype: elem for dtype, elem in MLIR_ELEMENT.items() if not elem.startswith("ui")}
FLOATS = tuple(dtype for dtype, elem in TOSA_ELEMENT.items() if elem in MLIR_FLOATS)
# The largest finite value of each float type: Relu's clamp bound.
FLOAT_MAX = {"float": "3.40282347E+38", "float16": "6.550400e+04", "bfloat16": "3.38953139E+38",
             "double": "1.7976931348623157E+308"}
INT_RANGE = {"int8": (-2 ** 7, 2 ** 7 - 1), "int16": (-2 ** 15, 2 ** 15 - 1), "int32": (-2 ** 31, 2 ** 31 - 1),
             "int64": (-2 ** 63, 2 ** 63 - 1)}


class Poisoned(OperandFailed):
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
    elem = TOSA_ELEMENT.get(dtype)
    if elem is None:
        raise Unsupported(f"element type '{dtype}' has no TOSA form")
    return printed_type(elem, shape)


def static(shape: Sequence) -> bool:
    return all_static(shape)


def _sanitize(name: str) -> str:
    """An MLIR SSA suffix-id from an ONNX value name."""
    out = "".join(c if (c.isascii() and c.isalnum()) or c in "_$.-" else "_" for c in name) or "v"
    if out[0].isdigit() and not out.isdigit():
        out = "v" + out
    return out


def dense_literal(array: np.ndarray, dtype: str) -> str:
    """The body of ``dense<...>`` for ``array`` as ``dtype``: a splat, a literal list, or hex."""
    return dense_body(array, TOSA_ELEMENT[dtype], TOSA_LITERALS, storage=numpy_dtype(dtype))


def _attr_text(attrs: Mapping[str, str]) -> str:
    return "<{" + ", ".join(f"{k} = {v}" for k, v in attrs.items()) + "}>"


def i64_array(values: Sequence[int]) -> str:
    return dense_array("i64", values)


def i32_array(values: Sequence[int]) -> str:
    return dense_array("i32", values)


class Emitter:
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
        if v.type.dtype not in TOSA_ELEMENT:
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
            raise Poisoned(v.name)
        array = self.consts.get(id(v))
        if array is None:
            raise Unsupported(f"value '{v.name}' is not available")
        dtype = v.type.dtype or dtype_of_array(array)
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
        shape = broadcast_shape(a.shape, b.shape)
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
        shape = broadcast_shape(broadcast_shape(c.shape, a.shape), b.shape)
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
            raise Unsupported(f"reshape {shape_text(t.shape)} -> {shape_text(shape)} needs static shapes"
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
        return self.op("tosa.transpose", [t], t.dtype, shape, {"perms": i32_array(perm)}, result=result)

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
        shape[axis] = sum(dims) if all_static(dims) else None
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
    elem = TOSA_ELEMENT[dtype]
    if dtype in FLOATS:
        if v is None or not math.isfinite(float(v)):
            big = FLOAT_MAX[dtype]
            return f"{'-' if low else ''}{big} : {elem}"
        return f"{scientific_float(v, elem)} : {elem}"
    lo, hi = INT_RANGE.get(dtype, (0, 1))
    v = (lo if low else hi) if v is None else max(lo, min(hi, int(v)))
    return f"{v} : {elem}"


def broadcast_shape(a: Sequence, b: Sequence) -> Tuple:
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


def ints(array: Optional[np.ndarray]) -> Optional[List[int]]:
    return None if array is None else [int(x) for x in np.asarray(array).reshape(-1)]


def need_const(e: Emitter, i: int, what: str) -> np.ndarray:
    c = e.const_input(i)
    if c is None:
        raise Unsupported(f"{what} (operand #{i}) must be a constant")
    return c


def identity(e: Emitter, t: T) -> T:
    """A value passed through unchanged: its users use ``t`` itself, no op is emitted."""
    return t
