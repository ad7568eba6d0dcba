"""IR -> StableHLO MLIR text: ``emit_stablehlo(model)``.

The input is an ONNX-frontend model legalized for target ``xla``: every broadcasting
op's operands already have the result's shape, made so by ``Unsqueeze`` (rank) +
``Expand`` (the broadcast) nodes whose runtime shapes are ``Shape``/``Gather``/``Equal``/
``Where``/``Concat`` computations. This module lowers each ONNX op, one function per op
registered in ``LOWERINGS``, to StableHLO ops in a single ``func.func @main`` whose
arguments are the graph inputs in order and whose results are the graph outputs in order.

Conventions:
- Types come from the IR: a static dim prints as its size, a symbol or ``?`` as ``?``.
  Symbols are still used here, to prove dims equal (``known_nonexpanding_dimensions``).
- Shape vectors are ``tensor<Nxi64>``, as ONNX's ``Shape`` makes them; a runtime dim is
  ``stablehlo.get_dimension_size`` (i32) converted to i64 and reshaped to ``tensor<1xi64>``.
- Values known at compile time (initializers, ``Constant`` ops, inputs with an initializer
  default, small computations on those, folded with onnx's reference evaluator) are
  emitted as ``stablehlo.constant`` only where an op needs them at run time; an op that
  needs an operand at compile time (``Slice`` starts, ``Unsqueeze`` axes, ...) reads it.
- Elementwise ops are emitted only on operands of one shape; an implicit broadcast left
  in the graph is a bug upstream and raises ``ImplicitBroadcast``. Where an op's own
  semantics broadcast (a Conv bias, BatchNormalization's per-channel parameters, a
  scalar in a composite like Relu's 0) the lowering writes the ``broadcast_in_dim``.
- Every runtime constraint of the model (what the verifier lists and the report shows:
  ``b[0] == 2 or b[0] == 1``, ``M == N`` in strict symbolic mode) is a
  ``stablehlo.custom_call @shape_assertion`` as JAX writes them (spec/shape-dialect.md's
  asserting form): the predicate computed from ``get_dimension_size`` of the values the
  constraint names, then those dims, which ``{0}``, ``{1}``... of its ``error_message``
  (the constraint's text and its nodes) stand for. A binding that breaks one fails at
  shape refinement with that message, before anything is computed on a bad shape.
  (So do the broadcasts an op's own semantics make at run time: MatMul's batch dims.)
- An op that cannot be lowered is collected; after the whole graph is walked, one
  ``BadInput`` names every such op and its nodes. No partial module is ever returned.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
from onnx import helper

from ..errors import BadInput, LegalizeError
from . import registrar
from ..ir.constdata import attribute_array
from ..ir.dtypes import numpy_dtype
from ..ir.graph import CONST, INPUT, OP, Graph, Node, Value
from ..oprules import frontend_rules
from ..shapes import same_shape

__all__ = ["emit_stablehlo", "ImplicitBroadcast", "LOWERINGS"]


class ImplicitBroadcast(LegalizeError):
    """An elementwise op whose operands differ in shape: the model is not in the ``xla``
    legal form (a bug in the legalization, or a model that skipped it)."""


class _Unsupported(Exception):
    """Raised by a lowering: this node cannot be emitted (the reason, or "" for none)."""


_ELEM = {"float": "f32", "double": "f64", "float16": "f16", "bfloat16": "bf16", "int8": "i8",
         "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "ui8", "uint16": "ui16",
         "uint32": "ui32", "uint64": "ui64", "bool": "i1"}
_ONNX_OF_ELEM = {v: k for k, v in _ELEM.items()}

# An integer that means "to the end" in Slice ends (ONNX exporters write INT64_MAX or
# INT32_MAX).
_HUGE = 2 ** 30

Dim = Union[int, str, None]
# A runtime dim: a static size, or the SSA name of a tensor<1xi64> holding it.
RDim = Union[int, str]


# ---- types and constants --------------------------------------------------------------

@dataclass(frozen=True)
class TT:
    """A ranked tensor type: MLIR element type and IR dims (int, symbol or None)."""

    elem: str
    dims: Tuple[Dim, ...]

    @classmethod
    def of(cls, v: Value) -> "TT":
        t = v.type
        if t.dtype not in _ELEM:
            raise _Unsupported(f"element type {t.dtype}")
        if t.shape is None:
            raise _Unsupported(f"unranked value '{v.name}'")
        return cls(_ELEM[t.dtype], tuple(t.shape))

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def static(self) -> bool:
        return all(isinstance(d, int) for d in self.dims)

    def with_dims(self, dims) -> "TT":
        return TT(self.elem, tuple(dims))

    def with_elem(self, elem: str) -> "TT":
        return TT(elem, self.dims)

    def __str__(self) -> str:
        shape = "".join(f"{d}x" if isinstance(d, int) else "?x" for d in self.dims)
        return f"tensor<{shape}{self.elem}>"


def _is_float(elem: str) -> bool:
    return elem in ("f16", "bf16", "f32", "f64")


def _float_literal(x: float) -> str:
    s = repr(float(x))
    if "e" in s and "." not in s:  # MLIR wants a '.' in a decimal float literal
        s = s.replace("e", ".0e")
    return s


def _hex_scalar(x, np_dtype) -> str:
    """A float's bit pattern, big-endian hex: how MLIR writes inf and nan."""
    bits = np.asarray(x, np_dtype).view(f"u{np.dtype(np_dtype).itemsize}")
    return f"0x{int(bits):0{2 * np.dtype(np_dtype).itemsize}X}"


def _elem_literal(x, elem: str, np_dtype) -> str:
    if elem == "i1":
        return "true" if bool(x) else "false"
    if _is_float(elem):
        return _float_literal(x) if np.isfinite(x) else _hex_scalar(x, np_dtype)
    return str(int(x))


def _nested(a: np.ndarray, elem: str) -> str:
    if a.ndim == 0:
        return _elem_literal(a[()], elem, a.dtype)
    return "[" + ", ".join(_nested(s, elem) for s in a) + "]"


_SMALL = 16  # up to this many elements a constant is written out, beyond it as hex


def dense(array: np.ndarray, tt: TT) -> str:
    """``dense<...> : tensor<...>``: a splat, a nested literal, or hex bytes (little-endian)."""
    a = np.asarray(array)
    if a.size == 0:
        return f"dense<> : {tt}"
    flat = a.reshape(-1)
    if (flat == flat[0]).all() or (tt.elem != "i1" and _is_float(tt.elem) and np.isnan(flat).all()):
        return f"dense<{_elem_literal(flat[0], tt.elem, a.dtype)}> : {tt}"
    if tt.elem == "i1" or (a.size <= _SMALL and (not _is_float(tt.elem) or np.isfinite(flat).all())):
        return f"dense<{_nested(a, tt.elem)}> : {tt}"
    data = np.ascontiguousarray(a, a.dtype.newbyteorder("<")).tobytes()
    return f'dense<"0x{data.hex().upper()}"> : {tt}'


def _mlir_string(s: str) -> str:
    out = []
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif 32 <= ord(ch) < 127:
            out.append(ch)
        else:
            out.extend(f"\\{b:02X}" for b in ch.encode())
    return '"' + "".join(out) + '"'


def _escape_braces(s: str) -> str:
    """``s`` in a shape assertion's message, where ``{0}`` stands for an operand: a
    literal ``{`` doubled. (Shape refinement fills the message in with LLVM's ``formatv``,
    which reads ``{{`` as ``{`` and a lone ``}`` as itself.)"""
    return s.replace("{", "{{")


def _ints(xs: Sequence[int]) -> str:
    return "[" + ", ".join(str(int(x)) for x in xs) + "]"


def _array(xs: Sequence[int]) -> str:
    return "array<i64" + (": " + ", ".join(str(int(x)) for x in xs) if len(xs) else "") + ">"


def _compare_type(elem: str) -> str:
    if _is_float(elem):
        return "FLOAT"
    return "UNSIGNED" if elem.startswith("ui") or elem == "i1" else "SIGNED"


def _dims_equal(a: Dim, b: Dim) -> bool:
    """Provably equal: the same static size or the same symbol."""
    return a is not None and a == b


# ---- the emitter ------------------------------------------------------------------------

class Emitter:
    """Builds one function body. ``values`` maps IR values to SSA names; ``known``
    holds compile-time values; ``parts`` the per-element compile-time knowledge of 1-D
    integer vectors (a shape with some dims static), None where only the run time knows."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.lines: List[str] = []
        self.values: Dict[Value, str] = {}
        self.types: Dict[str, TT] = {}  # SSA name -> type
        self.known: Dict[Value, np.ndarray] = {}
        self.parts: Dict[Value, List[Optional[int]]] = {}
        self._names: set = set()
        self._dim_cache: Dict[Tuple[str, int], str] = {}
        self._const_cache: Dict[Tuple[str, bytes, Tuple], str] = {}
        self.node: Optional[Node] = None  # the node being lowered (for names, messages)
        self.base: Optional[str] = None  # names new SSA values when no node is lowered

    # -- names and lines
    def fresh(self, base: str) -> str:
        """A new SSA name from ``base`` (an ONNX name, sanitized); a base ending in "."
        is numbered from 1 (``%y.1``: the lowering steps of ``%y``)."""
        base = re.sub(r"[^A-Za-z0-9_$.]", "_", base) or "v"
        if not re.match(r"[A-Za-z_$.]", base):
            base = "_" + base
        name, i = (base + "1", 1) if base.endswith(".") else (base, 0)
        while name in self._names:
            i += 1
            name = f"{base}{i}" if base.endswith(".") else f"{base}_{i}"
        self._names.add(name)
        return "%" + name

    def emit(self, rhs: str, tt: TT, base: Optional[str] = None) -> str:
        """``%name = rhs`` (rhs ends with its type signature); returns %name."""
        if base is None:
            base = self.base or ((self.node.output.name + ".") if self.node is not None and self.node.outputs
                                 else "t.")
        name = self.fresh(base)
        self.lines.append(f"{name} = {rhs}")
        self.types[name] = tt
        return name

    def tt(self, ssa: str) -> TT:
        return self.types[ssa]

    def rename_new(self, ssa: str, base: str, mark: int) -> str:
        """Give ``ssa``, defined at or after line ``mark``, a fresh name made from
        ``base`` (a lowering's result takes its ONNX value's name)."""
        defined = next((i for i in range(mark, len(self.lines)) if self.lines[i].startswith(ssa + " = ")), None)
        if defined is None or ssa in self._dim_cache.values() or ssa in self._const_cache.values():
            return ssa
        name = self.fresh(base)
        pattern = re.compile(re.escape(ssa) + r"(?![A-Za-z0-9_$.])")
        for i in range(defined, len(self.lines)):
            self.lines[i] = pattern.sub(name, self.lines[i])
        self.types[name] = self.types[ssa]
        return name

    # -- IR values
    def v(self, value: Value) -> str:
        """The SSA name of ``value``, emitting its constant on first use."""
        hit = self.values.get(value)
        if hit is not None:
            return hit
        k = self.known.get(value)
        if k is None:
            raise AssertionError(f"value {value.name!r} used before it is defined")
        name = self.const(k, TT.of(value), base=value.name)
        self.values[value] = name
        return name

    def known_array(self, value: Optional[Value]) -> Optional[np.ndarray]:
        return None if value is None else self.known.get(value)

    def const(self, array: np.ndarray, tt: TT, base: str = "c") -> str:
        a = np.asarray(array)
        key = (str(tt), a.tobytes(), a.shape)
        hit = self._const_cache.get(key) if a.size <= 64 else None
        if hit is not None:
            return hit
        name = self.emit(f"stablehlo.constant {dense(a, tt)}", tt, base)
        if a.size <= 64:
            self._const_cache[key] = name
        return name

    def scalar(self, x, elem: str) -> str:
        """A tensor<elem> constant; +-inf in an integer type is its largest/smallest value
        (the identity of max/min reductions)."""
        if not _is_float(elem) and isinstance(x, float) and np.isinf(x):
            if elem == "i1":
                x = x > 0
            else:
                info = np.iinfo(numpy_dtype(_ONNX_OF_ELEM[elem]))
                x = info.max if x > 0 else info.min
        return self.const(np.asarray(x, numpy_dtype(_ONNX_OF_ELEM[elem])), TT(elem, ()), "cst")

    def index_vector(self, xs: Sequence[int]) -> str:
        return self.const(np.asarray(xs, np.int64), TT("i64", (len(xs),)), "dims")

    # -- runtime dims
    def rdim(self, ssa: str, k: int) -> RDim:
        d = self.tt(ssa).dims[k]
        if isinstance(d, int):
            return d
        key = (ssa, k)
        hit = self._dim_cache.get(key)
        if hit is None:
            tt = self.tt(ssa)
            base = ssa[1:] + f"_dim{k}"
            s32 = self.emit(f"stablehlo.get_dimension_size {ssa}, dim = {k} : ({tt}) -> tensor<i32>",
                            TT("i32", ()), base + ".")
            s64 = self.emit(f"stablehlo.convert {s32} : (tensor<i32>) -> tensor<i64>", TT("i64", ()), base + ".")
            hit = self.emit(f"stablehlo.reshape {s64} : (tensor<i64>) -> tensor<1xi64>", TT("i64", (1,)), base)
            self._dim_cache[key] = hit
        return hit

    def rdims(self, ssa: str) -> List[RDim]:
        return [self.rdim(ssa, k) for k in range(self.tt(ssa).rank)]

    def element(self, vector: str, k: int) -> str:
        """Element ``k`` of a 1-D shape vector, as a tensor<1xi64>."""
        return self.emit(f"stablehlo.slice {vector} [{k}:{k + 1}] : ({self.tt(vector)}) -> tensor<1xi64>",
                         TT("i64", (1,)), "dim")

    def shape_vector(self, dims: Sequence[RDim]) -> str:
        """A tensor<Nxi64> of ``dims``: a constant when all are static."""
        pieces: List[str] = []
        run: List[int] = []
        for d in dims:
            if isinstance(d, int):
                run.append(d)
                continue
            if run:
                pieces.append(self.index_vector(run))
                run = []
            pieces.append(d)
        if run:
            pieces.append(self.index_vector(run))
        if len(pieces) == 1:
            return pieces[0]
        if not pieces:
            return self.index_vector([])
        types = ", ".join(str(self.tt(p)) for p in pieces)
        out = TT("i64", (len(dims),))
        return self.emit(f"stablehlo.concatenate {', '.join(pieces)}, dim = 0 : ({types}) -> {out}", out, "shape")

    def dim_op(self, op: str, a: RDim, b: RDim) -> RDim:
        """``a op b`` on runtime dims, folded when both are static."""
        if isinstance(a, int) and isinstance(b, int):
            return {"multiply": a * b, "divide": a // b if b else 0, "add": a + b, "subtract": a - b,
                    "minimum": min(a, b)}[op]
        t = TT("i64", (1,))
        a = self.index_vector([a]) if isinstance(a, int) else a
        b = self.index_vector([b]) if isinstance(b, int) else b
        return self.emit(f"stablehlo.{op} {a}, {b} : {t}", t, "dim")

    def product(self, dims: Sequence[RDim]) -> RDim:
        static = int(np.prod([d for d in dims if isinstance(d, int)], dtype=np.int64))
        acc: RDim = static
        for d in dims:
            if not isinstance(d, int):
                acc = d if acc == 1 else self.dim_op("multiply", acc, d)
        return acc

    def rdim_scalar(self, d: RDim, elem: str) -> str:
        """A runtime dim as a tensor<elem> scalar (a count to divide by)."""
        if isinstance(d, int):
            return self.scalar(d, elem)
        s = self.emit(f"stablehlo.reshape {d} : (tensor<1xi64>) -> tensor<i64>", TT("i64", ()), "n")
        return self.emit(f"stablehlo.convert {s} : (tensor<i64>) -> tensor<{elem}>", TT(elem, ()), "n")

    # -- shape ops every lowering uses
    def broadcast(self, ssa: str, out: TT, bdims: Sequence[int], out_rdims: Optional[Sequence[RDim]] = None,
                  shape: Optional[str] = None) -> str:
        """``ssa`` broadcast to ``out`` with operand dim i at result dim ``bdims[i]``:
        ``broadcast_in_dim`` when both shapes are static, else ``dynamic_broadcast_in_dim``
        with the runtime result shape (``shape``, a tensor<Nxi64>, or made of ``out_rdims``)
        and the dims known to expand (a static 1 going to a dim not statically 1) or not
        (provably equal dims)."""
        src = self.tt(ssa)
        if src == out and list(bdims) == list(range(out.rank)):
            return ssa
        if src.static and out.static:
            return self.emit(f"stablehlo.broadcast_in_dim {ssa}, dims = {_ints(bdims)} : ({src}) -> {out}", out)
        if shape is None:
            if out_rdims is None:
                raise AssertionError("a dynamic broadcast needs its runtime result shape")
            shape = self.shape_vector(out_rdims)
        expanding, nonexpanding = [], []
        for i, j in enumerate(bdims):
            a, b = src.dims[i], out.dims[j]
            if a == 1 and b != 1:
                expanding.append(i)
            elif _dims_equal(a, b):
                nonexpanding.append(i)
        attrs = []
        if expanding:
            attrs.append(f"known_expanding_dimensions = {_array(expanding)}")
        if nonexpanding:
            attrs.append(f"known_nonexpanding_dimensions = {_array(nonexpanding)}")
        attr = (" {" + ", ".join(attrs) + "}") if attrs else ""
        return self.emit(f"stablehlo.dynamic_broadcast_in_dim {ssa}, {shape}, dims = {_ints(bdims)}{attr}"
                         f" : ({src}, {self.tt(shape)}) -> {out}", out)

    def splat(self, x, out: TT, out_rdims: Optional[Sequence[RDim]] = None) -> str:
        """A tensor of ``out``'s shape filled with ``x``: a scalar constant broadcast
        (XLA keeps it a broadcast; a splat constant of a big shape would be materialized)."""
        return self.broadcast(self.scalar(x, out.elem), out, [], out_rdims)

    def splat_like(self, x, ssa: str, elem: Optional[str] = None) -> str:
        tt = self.tt(ssa)
        tt = tt if elem is None else tt.with_elem(elem)
        return self.splat(x, tt, None if tt.static else self.rdims(ssa))

    def reshape(self, ssa: str, out: TT, out_rdims: Optional[Sequence[RDim]] = None) -> str:
        src = self.tt(ssa)
        if src == out:
            return ssa
        if out.static:
            return self.emit(f"stablehlo.reshape {ssa} : ({src}) -> {out}", out)
        if out_rdims is None:
            raise AssertionError("a dynamic reshape needs its runtime result shape")
        shape = self.shape_vector(out_rdims)
        return self.emit(f"stablehlo.dynamic_reshape {ssa}, {shape} : ({src}, {self.tt(shape)}) -> {out}", out)

    def op(self, name: str, operands: Sequence[str], out: TT) -> str:
        """An elementwise StableHLO op; the short type form when all types agree."""
        types = [self.tt(o) for o in operands]
        if all(t == out for t in types):
            sig = str(out)
        else:
            sig = f"({', '.join(str(t) for t in types)}) -> {out}"
        return self.emit(f"{name} {', '.join(operands)} : {sig}", out)

    def compare(self, direction: str, a: str, b: str, out: Optional[TT] = None) -> str:
        ta, tb = self.tt(a), self.tt(b)
        out = out or ta.with_elem("i1")
        return self.emit(f"stablehlo.compare {direction}, {a}, {b}, {_compare_type(ta.elem)}"
                         f" : ({ta}, {tb}) -> {out}", out)

    def select(self, cond: str, a: str, b: str, out: Optional[TT] = None) -> str:
        out = out or self.tt(a)
        return self.emit(f"stablehlo.select {cond}, {a}, {b} : ({self.tt(cond)}, {self.tt(a)}, {self.tt(b)})"
                         f" -> {out}", out)

    def convert(self, ssa: str, elem: str) -> str:
        src = self.tt(ssa)
        if src.elem == elem:
            return ssa
        out = src.with_elem(elem)
        return self.emit(f"stablehlo.convert {ssa} : ({src}) -> {out}", out)

    def reduce(self, ssa: str, init: str, body_op: str, axes: Sequence[int], out: TT) -> str:
        """``stablehlo.reduce`` of ``ssa`` over ``axes`` with a region applying ``body_op``."""
        src, it = self.tt(ssa), self.tt(init)
        p, q, r = self.fresh("lhs"), self.fresh("rhs"), self.fresh("acc")
        rhs = (f'"stablehlo.reduce"({ssa}, {init}) ({{\n'
               f"    ^bb0({p}: {it}, {q}: {it}):\n"
               f"      {r} = {body_op} {p}, {q} : {it}\n"
               f"      stablehlo.return {r} : {it}\n"
               f"    }}) {{dimensions = {_array(sorted(axes))}}} : ({src}, {it}) -> {out}")
        return self.emit(rhs, out)

    def reduce_window(self, ssa: str, init: str, body_op: str, window: Sequence[int], strides: Sequence[int],
                      dilations: Sequence[int], padding: Sequence[Tuple[int, int]], out: TT) -> str:
        src, it = self.tt(ssa), self.tt(init)
        p, q, r = self.fresh("lhs"), self.fresh("rhs"), self.fresh("acc")
        pad = "[" + ", ".join(f"[{a}, {b}]" for a, b in padding) + "]"
        rhs = (f'"stablehlo.reduce_window"({ssa}, {init}) ({{\n'
               f"    ^bb0({p}: {it}, {q}: {it}):\n"
               f"      {r} = {body_op} {p}, {q} : {it}\n"
               f"      stablehlo.return {r} : {it}\n"
               f"    }}) {{window_dimensions = {_array(window)}, window_strides = {_array(strides)},"
               f" window_dilations = {_array(dilations)}, padding = dense<{pad}> : tensor<{len(padding)}x2xi64>}}"
               f" : ({src}, {it}) -> {out}")
        return self.emit(rhs, out)

    def assert_broadcastable(self, a: str, b: str, what: str, a_is_one: Optional[str] = None) -> None:
        """``@shape_assertion``: runtime dims ``a`` and ``b`` (tensor<1xi64>, or i32 as a
        TFLite model's ONNX form has them) broadcast."""
        if self.tt(a).elem != "i64" or self.tt(b).elem != "i64":
            a, b, a_is_one = self.convert(a, "i64"), self.convert(b, "i64"), None
        one = self.index_vector([1])
        eq = self.compare("EQ", a, b)
        a1 = a_is_one or self.compare("EQ", a, one)
        b1 = self.compare("EQ", b, one)
        ok = self.op("stablehlo.or", [self.op("stablehlo.or", [eq, a1], self.tt(eq)), b1], self.tt(eq))
        self.shape_assertion(ok, [a, b], f"legalize: {_escape_braces(what)}: runtime dims {{0}} and {{1}} do not"
                             " broadcast (they must be equal, or one of them 1)")

    def shape_assertion(self, ok: str, inputs: Sequence[str], message: str) -> None:
        """``stablehlo.custom_call @shape_assertion``, as JAX writes it: the predicate
        ``ok`` (a tensor<1xi1>), then the dims (tensor<1xi64>) that ``{0}``, ``{1}``...
        of ``message`` stand for; shape refinement evaluates it and fails with the
        message, its placeholders filled in, where ``ok`` is false."""
        pred = self.emit(f"stablehlo.reshape {ok} : ({self.tt(ok)}) -> tensor<i1>", TT("i1", ()))
        scalars = [self.emit(f"stablehlo.reshape {x} : ({self.tt(x)}) -> tensor<i64>", TT("i64", ())) for x in inputs]
        types = ", ".join(["tensor<i1>"] + ["tensor<i64>"] * len(scalars))
        self.lines.append(f"stablehlo.custom_call @shape_assertion({', '.join([pred] + scalars)}) {{error_message = "
                          f"{_mlir_string(message)}, has_side_effect = true}} : ({types}) -> ()")

    def dim_vector(self, d: RDim) -> str:
        """A runtime dim as a tensor<1xi64> (a constant when static)."""
        return self.index_vector([d]) if isinstance(d, int) else d

    def broadcast_rdim(self, a: Tuple[str, int], b: Tuple[str, int], what: str) -> RDim:
        """numpy's broadcast of dim ``a[1]`` of ``a[0]`` and dim ``b[1]`` of ``b[0]``,
        at run time when neither is statically 1 nor provably equal to the other."""
        da, db = self.tt(a[0]).dims[a[1]], self.tt(b[0]).dims[b[1]]
        if da == 1:
            return self.rdim(*b)
        if db == 1 or _dims_equal(da, db):
            return self.rdim(*a)
        if isinstance(da, int) and isinstance(db, int):
            raise _Unsupported(f"dims {da} and {db} do not broadcast")
        ra, rb = self.rdim(*a), self.rdim(*b)
        if isinstance(ra, int):
            ra = self.index_vector([ra])
        if isinstance(rb, int):
            rb = self.index_vector([rb])
        a_is_one = self.compare("EQ", ra, self.index_vector([1]))
        self.assert_broadcastable(ra, rb, what, a_is_one)
        return self.select(a_is_one, rb, ra)

    # -- attributes and compile-time operands
    def attr(self, node: Node, name: str, default=None):
        a = node.attrs.get(name)
        if a is None:
            return default
        value = helper.get_attribute_value(a)
        return value.decode() if isinstance(value, bytes) else value

    def vector_parts(self, v: Optional[Value]) -> Optional[List[Optional[int]]]:
        """What is known at compile time of each element of a 1-D int vector."""
        if v is None:
            return None
        if v in self.known:
            a = np.asarray(self.known[v])
            return [int(x) for x in a.reshape(-1)] if a.ndim <= 1 and a.dtype.kind in "iu" else None
        return self.parts.get(v)

    def const_input(self, node: Node, index: int, what: str) -> Optional[np.ndarray]:
        """Operand ``index`` as a compile-time array (None if absent); unsupported if it
        is only known at run time."""
        if index >= len(node.inputs) or node.inputs[index] is None:
            return None
        k = self.known.get(node.inputs[index])
        if k is None:
            raise _Unsupported(f"runtime {what}")
        return k

    def ints_arg(self, node: Node, attr: str, index: int, opset_since: int) -> Optional[List[int]]:
        """An int list that is an attribute before ``opset_since`` and an input from it."""
        if self.graph.opset_of(node) < opset_since or attr in node.attrs:
            a = self.attr(node, attr)
            return None if a is None else [int(x) for x in a]
        k = self.const_input(node, index, attr)
        return None if k is None else [int(x) for x in np.asarray(k).reshape(-1)]


Lowering = Callable[[Emitter, Node], List[Optional[str]]]
LOWERINGS: Dict[str, Lowering] = {}


lowering = registrar(LOWERINGS)


def _in(cx: Emitter, node: Node, i: int) -> str:
    return cx.v(node.inputs[i])


def _out(node: Node, i: int = 0) -> TT:
    return TT.of(node.outputs[i])


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def _has(node: Node, i: int) -> bool:
    return i < len(node.inputs) and node.inputs[i] is not None


# ---- elementwise ------------------------------------------------------------------------

# The broadcasting ops and which operands broadcast onto what: the rules table.
_RULES = {op: r for op, r in frontend_rules("onnx").items() if r.broadcasting}


def _no_implicit_broadcast(node: Node) -> None:
    """The ``xla`` form's promise, checked for every op the rules table says broadcasts:
    its broadcasting operands provably have the shape they broadcast onto (equal static
    sizes, equal symbols). Anything else is an implicit broadcast left in the graph."""
    rule = _RULES.get(node.op)
    if rule is None:
        return
    if rule.broadcast == "multidirectional":
        vals = [v for v in node.inputs if v is not None]
        onto = vals[0]
    else:
        vals = [node.inputs[i] for i in rule.broadcasts if _has(node, i)]
        onto = node.outputs[0] if rule.onto == "result" else node.inputs[0]
    bad = [v for v in vals if not same_shape(v.type.shape, onto.type.shape)]
    if bad:
        raise ImplicitBroadcast(
            f"cannot emit StableHLO: {node.op} '{node.label}' broadcasts implicitly ("
            + ", ".join(str(v.type) for v in bad) + f" onto {onto.type}); emit_stablehlo needs a model"
            " legalized for target xla")


_BINARY = {"Add": "stablehlo.add", "Sub": "stablehlo.subtract", "Mul": "stablehlo.multiply",
           "Div": "stablehlo.divide", "Max": "stablehlo.maximum", "Min": "stablehlo.minimum",
           "And": "stablehlo.and", "Or": "stablehlo.or", "Xor": "stablehlo.xor",
           "BitwiseAnd": "stablehlo.and", "BitwiseOr": "stablehlo.or", "BitwiseXor": "stablehlo.xor",
           "Sum": "stablehlo.add", "Mean": "stablehlo.add"}
_COMPARE = {"Equal": "EQ", "Less": "LT", "Greater": "GT", "LessOrEqual": "LE", "GreaterOrEqual": "GE"}


@lowering(*_BINARY)
def _binary(cx: Emitter, node: Node):
    # Variadic Sum/Max/Min/Mean: a chain of binary ops (the xla pipeline splits them, a
    # model that was not split still lowers the same way).
    out = _out(node)
    xs = [cx.v(v) for v in node.inputs if v is not None]
    acc = xs[0]
    for x in xs[1:]:
        acc = cx.op(_BINARY[node.op], [acc, x], out)
    if node.op == "Mean" and len(xs) > 1:
        acc = cx.op("stablehlo.divide", [acc, cx.splat_like(len(xs), acc)], out)
    return [acc]


@lowering(*_COMPARE)
def _compare(cx: Emitter, node: Node):
    return [cx.compare(_COMPARE[node.op], _in(cx, node, 0), _in(cx, node, 1), _out(node))]


@lowering("Pow")
def _pow(cx: Emitter, node: Node):
    base, exp = _in(cx, node, 0), _in(cx, node, 1)
    out = _out(node)
    # ONNX lets the exponent have its own type; StableHLO's power takes one.
    return [cx.op("stablehlo.power", [base, cx.convert(exp, cx.tt(base).elem)], out)]


@lowering("Mod")
def _mod(cx: Emitter, node: Node):
    a, b = _in(cx, node, 0), _in(cx, node, 1)
    out = _out(node)
    r = cx.op("stablehlo.remainder", [a, b], out)  # C's fmod: the sign of the dividend
    if cx.attr(node, "fmod", 0):
        return [r]
    # fmod=0 is Python's (numpy's) mod, the sign of the divisor: r + b where r != 0 and
    # the signs of r and b differ.
    zero = cx.splat_like(0, r)
    fix = cx.op("stablehlo.and", [cx.compare("NE", r, zero),
                                  cx.compare("NE", cx.compare("LT", r, zero), cx.compare("LT", b, zero))],
                out.with_elem("i1"))
    return [cx.select(fix, cx.op("stablehlo.add", [r, b], out), r, out)]


@lowering("BitShift")
def _bitshift(cx: Emitter, node: Node):
    # A right shift of a signed type is arithmetic (the sign fills); StableHLO, like
    # ONNX, saturates a count out of range (negative, or at least the width).
    right = "stablehlo.shift_right_logical" if _out(node).elem.startswith("ui") else "stablehlo.shift_right_arithmetic"
    name = "stablehlo.shift_left" if cx.attr(node, "direction") == "LEFT" else right
    return [cx.op(name, [_in(cx, node, 0), _in(cx, node, 1)], _out(node))]


@lowering("Where")
def _where(cx: Emitter, node: Node):
    # (The xla pass's runtime broadcast checks are a Where each: the runtime constraint
    # they compute under is asserted with the others, see ``_Assertions``.)
    return [cx.select(_in(cx, node, 0), _in(cx, node, 1), _in(cx, node, 2), _out(node))]


@lowering("PRelu")
def _prelu(cx: Emitter, node: Node):
    x, slope = _in(cx, node, 0), _in(cx, node, 1)
    out = _out(node)
    neg = cx.compare("LT", x, cx.splat_like(0, x))
    return [cx.select(neg, cx.op("stablehlo.multiply", [x, slope], out), x, out)]


# Unary ops that are one StableHLO (or CHLO) op.
_UNARY = {"Exp": "stablehlo.exponential", "Log": "stablehlo.log", "Sqrt": "stablehlo.sqrt",
          "Neg": "stablehlo.negate", "Abs": "stablehlo.abs", "Tanh": "stablehlo.tanh",
          "Sigmoid": "stablehlo.logistic", "Floor": "stablehlo.floor", "Ceil": "stablehlo.ceil",
          "Round": "stablehlo.round_nearest_even", "Sign": "stablehlo.sign", "Not": "stablehlo.not",
          "BitwiseNot": "stablehlo.not", "Sin": "stablehlo.sine", "Cos": "stablehlo.cosine",
          "Tan": "stablehlo.tan"}


@lowering(*_UNARY)
def _unary(cx: Emitter, node: Node):
    return [cx.op(_UNARY[node.op], [_in(cx, node, 0)], _out(node))]


@lowering("Erf")
def _erf(cx: Emitter, node: Node):
    # StableHLO has no erf; CHLO's (which XLA and JAX use) is the portable form.
    return [_erf_of(cx, _in(cx, node, 0))]


def _erf_of(cx: Emitter, x: str) -> str:
    return cx.emit(f"chlo.erf {x} : {cx.tt(x)} -> {cx.tt(x)}", cx.tt(x))


@lowering("Reciprocal")
def _reciprocal(cx: Emitter, node: Node):
    x = _in(cx, node, 0)
    return [cx.op("stablehlo.divide", [cx.splat_like(1, x), x], _out(node))]


@lowering("Relu")
def _relu(cx: Emitter, node: Node):
    x = _in(cx, node, 0)
    return [cx.op("stablehlo.maximum", [x, cx.splat_like(0, x)], _out(node))]


@lowering("LeakyRelu")
def _leaky_relu(cx: Emitter, node: Node):
    x, out = _in(cx, node, 0), _out(node)
    alpha = cx.attr(node, "alpha", 0.01)
    neg = cx.compare("LT", x, cx.splat_like(0, x))
    return [cx.select(neg, cx.op("stablehlo.multiply", [x, cx.splat_like(alpha, x)], out), x, out)]


@lowering("Elu", "Selu", "Celu")
def _elu(cx: Emitter, node: Node):
    x, out = _in(cx, node, 0), _out(node)
    default_alpha = {"Elu": 1.0, "Selu": 1.67326319217681884765625, "Celu": 1.0}[node.op]
    alpha = cx.attr(node, "alpha", default_alpha)
    gamma = cx.attr(node, "gamma", 1.05070102214813232421875) if node.op == "Selu" else 1.0
    xs = cx.op("stablehlo.divide", [x, cx.splat_like(alpha, x)], out) if node.op == "Celu" else x
    em1 = cx.emit(f"stablehlo.exponential_minus_one {xs} : {cx.tt(xs)}", cx.tt(xs))
    neg = cx.op("stablehlo.multiply", [em1, cx.splat_like(alpha, x)], out)
    y = cx.select(cx.compare("LT", x, cx.splat_like(0, x)), neg, x, out)
    if gamma != 1.0:
        y = cx.op("stablehlo.multiply", [y, cx.splat_like(gamma, x)], out)
    return [y]


@lowering("HardSigmoid", "HardSwish")
def _hard_sigmoid(cx: Emitter, node: Node):
    x, out = _in(cx, node, 0), _out(node)
    alpha = cx.attr(node, "alpha", 0.2 if node.op == "HardSigmoid" else 1 / 6)
    beta = cx.attr(node, "beta", 0.5)
    lin = cx.op("stablehlo.add", [cx.op("stablehlo.multiply", [x, cx.splat_like(alpha, x)], out),
                                  cx.splat_like(beta, x)], out)
    y = cx.emit(f"stablehlo.clamp {cx.scalar(0, out.elem)}, {lin}, {cx.scalar(1, out.elem)}"
                f" : (tensor<{out.elem}>, {out}, tensor<{out.elem}>) -> {out}", out)
    return [cx.op("stablehlo.multiply", [x, y], out) if node.op == "HardSwish" else y]


@lowering("Softplus")
def _softplus(cx: Emitter, node: Node):
    # log(1 + e^x) = max(x, 0) + log1p(e^-|x|): no overflow for large x.
    x, out = _in(cx, node, 0), _out(node)
    t = cx.tt(x)
    e = cx.emit(f"stablehlo.exponential {cx.op('stablehlo.negate', [cx.op('stablehlo.abs', [x], t)], t)} : {t}", t)
    lp = cx.emit(f"stablehlo.log_plus_one {e} : {t}", t)
    return [cx.op("stablehlo.add", [cx.op("stablehlo.maximum", [x, cx.splat_like(0, x)], t), lp], out)]


@lowering("Softsign")
def _softsign(cx: Emitter, node: Node):
    x, out = _in(cx, node, 0), _out(node)
    t = cx.tt(x)
    den = cx.op("stablehlo.add", [cx.op("stablehlo.abs", [x], t), cx.splat_like(1, x)], t)
    return [cx.op("stablehlo.divide", [x, den], out)]


@lowering("Gelu")
def _gelu(cx: Emitter, node: Node):
    x, out = _in(cx, node, 0), _out(node)
    t = cx.tt(x)
    half_x = cx.op("stablehlo.multiply", [x, cx.splat_like(0.5, x)], t)
    if cx.attr(node, "approximate", "none") == "tanh":
        # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        x3 = cx.op("stablehlo.multiply", [cx.op("stablehlo.multiply", [x, x], t), x], t)
        inner = cx.op("stablehlo.add", [x, cx.op("stablehlo.multiply", [x3, cx.splat_like(0.044715, x)], t)], t)
        inner = cx.op("stablehlo.multiply", [inner, cx.splat_like(float(np.sqrt(2 / np.pi)), x)], t)
        s = cx.op("stablehlo.tanh", [inner], t)
    else:
        s = _erf_of(cx, cx.op("stablehlo.multiply", [x, cx.splat_like(float(1 / np.sqrt(2)), x)], t))
    return [cx.op("stablehlo.multiply", [half_x, cx.op("stablehlo.add", [s, cx.splat_like(1, x)], t)], out)]


@lowering("Clip")
def _clip(cx: Emitter, node: Node):
    x, out = _in(cx, node, 0), _out(node)
    if cx.graph.opset_of(node) < 11:
        lo = cx.scalar(cx.attr(node, "min", -np.inf), out.elem)
        hi = cx.scalar(cx.attr(node, "max", np.inf), out.elem)
    else:
        # min and max are scalars: StableHLO's clamp takes scalar bounds as they are.
        lo = cx.v(node.inputs[1]) if _has(node, 1) else cx.scalar(-np.inf, out.elem)
        hi = cx.v(node.inputs[2]) if _has(node, 2) else cx.scalar(np.inf, out.elem)
        lo, hi = (cx.reshape(b, TT(out.elem, ())) for b in (lo, hi))  # a [1] bound is a scalar too
    return [cx.emit(f"stablehlo.clamp {lo}, {x}, {hi} : ({cx.tt(lo)}, {cx.tt(x)}, {cx.tt(hi)}) -> {out}", out)]


@lowering("Cast")
def _cast(cx: Emitter, node: Node):
    x, out = _in(cx, node, 0), _out(node)
    if cx.tt(x) == out:
        return [x]
    return [cx.emit(f"stablehlo.convert {x} : ({cx.tt(x)}) -> {out}", out)]


@lowering("Identity", "Dropout")
def _identity(cx: Emitter, node: Node):
    # Dropout at inference is the identity; its mask, if used, is all true.
    if node.op == "Dropout" and _has(node, 2):
        mode = cx.known_array(node.inputs[2])
        if mode is None or bool(np.asarray(mode).reshape(-1)[0]):
            raise _Unsupported("training mode")
    x = _in(cx, node, 0)
    outs: List[Optional[str]] = [x]
    if node.op == "Dropout" and len(node.outputs) > 1:
        outs.append(cx.splat_like(True, x, "i1") if node.graph.users(node.outputs[1]) else None)
    return outs


# ---- shapes ------------------------------------------------------------------------------

@lowering("Shape")
def _shape(cx: Emitter, node: Node):
    x = _in(cx, node, 0)
    rank = cx.tt(x).rank
    start = _axis(cx.attr(node, "start", 0), rank)
    end = cx.attr(node, "end", rank)
    end = min(_axis(end, rank), rank)
    return [cx.shape_vector(cx.rdims(x)[max(start, 0):end])]


@lowering("Size")
def _size(cx: Emitter, node: Node):
    x, out = _in(cx, node, 0), _out(node)
    n = cx.product(cx.rdims(x))
    if isinstance(n, int):
        return [cx.const(np.asarray(n, np.int64), out)]
    return [cx.reshape(n, out)]


def _new_dims_runtime(cx: Emitter, x: str, out: TT, kept: Sequence[int]) -> List[RDim]:
    """Runtime dims of ``out`` whose dims ``kept`` are ``x``'s dims in order and whose
    other dims are static (the 1s of Unsqueeze)."""
    src = iter(range(cx.tt(x).rank))
    dims: List[RDim] = []
    for k, d in enumerate(out.dims):
        if k in kept:
            i = next(src)
            dims.append(d if isinstance(d, int) else cx.rdim(x, i))
        else:
            dims.append(d if isinstance(d, int) else 1)
    return dims


@lowering("Unsqueeze")
def _unsqueeze(cx: Emitter, node: Node):
    x, out = _in(cx, node, 0), _out(node)
    if out.static:  # the axes (maybe a runtime input) are in the result type already
        return [cx.reshape(x, out)]
    axes = cx.ints_arg(node, "axes", 1, 13)
    axes = sorted(_axis(a, out.rank) for a in axes)
    kept = [k for k in range(out.rank) if k not in axes]
    return [cx.reshape(x, out, None if out.static else _new_dims_runtime(cx, x, out, kept))]


@lowering("Squeeze")
def _squeeze(cx: Emitter, node: Node):
    x, out = _in(cx, node, 0), _out(node)
    src = cx.tt(x)
    if out.static:  # the axes (maybe a runtime input) are in the result type already
        return [cx.reshape(x, out)]
    axes = cx.ints_arg(node, "axes", 1, 13)
    if axes is None:
        axes = [k for k, d in enumerate(src.dims) if d == 1]
        if len(axes) != src.rank - out.rank:
            raise _Unsupported("no axes and dims not known to be 1")
    axes = [_axis(a, src.rank) for a in axes]
    dims = [cx.rdim(x, k) for k in range(src.rank) if k not in axes]
    return [cx.reshape(x, out, None if out.static else dims)]


@lowering("Flatten")
def _flatten(cx: Emitter, node: Node):
    x, out = _in(cx, node, 0), _out(node)
    rank = cx.tt(x).rank
    axis = _axis(cx.attr(node, "axis", 1), rank)
    if out.static:
        return [cx.reshape(x, out)]
    dims = cx.rdims(x)
    return [cx.reshape(x, out, [cx.product(dims[:axis]), cx.product(dims[axis:])])]


@lowering("Reshape")
def _reshape(cx: Emitter, node: Node):
    x, out = _in(cx, node, 0), _out(node)
    if out.static:
        return [cx.reshape(x, out)]
    # The runtime shape, dim by dim: a static dim of the result; else the requested
    # size where it is known (0: copy the input's dim; -1: what is left), or the
    # runtime element of the shape operand.
    spec = node.inputs[1]
    parts = cx.vector_parts(spec)
    allowzero = cx.attr(node, "allowzero", 0)
    dims: List[RDim] = []
    infer_at = None
    for k, d in enumerate(out.dims):
        p = parts[k] if parts is not None else None
        if isinstance(d, int):
            dims.append(d)
        elif p == 0 and not allowzero:
            dims.append(cx.rdim(x, k))
        elif p == -1:
            dims.append(1)
            infer_at = k
        elif p is not None:
            dims.append(p)
        else:
            dims.append(cx.element(cx.v(spec), k))
    if infer_at is not None:
        rest = cx.product([d for k, d in enumerate(dims) if k != infer_at])
        dims[infer_at] = cx.dim_op("divide", cx.product(cx.rdims(x)), rest)
    return [cx.reshape(x, out, dims)]


@lowering("Expand")
def _expand(cx: Emitter, node: Node):
    # Expand is the xla form's broadcast: operand right-aligned into the result (the
    # pass has made ranks equal with an Unsqueeze already). The runtime result shape is
    # the shape operand, which the pass built as the result's dims.
    x, out = _in(cx, node, 0), _out(node)
    src = cx.tt(x)
    bdims = list(range(out.rank - src.rank, out.rank))
    if src.static and out.static:
        return [cx.broadcast(x, out, bdims)]
    shape = node.inputs[1]
    parts = cx.vector_parts(shape)
    if parts is None or all(p is None and not isinstance(d, int) or p == d for p, d in zip(parts, out.dims)):
        # The vector is the result's dims (no 1 standing for a larger operand dim).
        return [cx.broadcast(x, out, bdims, shape=cx.v(shape))]
    rd: List[RDim] = []
    for k, d in enumerate(out.dims):
        if isinstance(d, int):
            rd.append(d)
        elif parts is not None and parts[k] is not None and parts[k] != 1:
            rd.append(parts[k])
        else:
            rd.append(cx.element(cx.v(shape), k))
    return [cx.broadcast(x, out, bdims, rd)]


@lowering("ConstantOfShape")
def _constant_of_shape(cx: Emitter, node: Node):
    out = _out(node)
    value = node.attrs.get("value")
    fill = attribute_array(node, "value").reshape(-1)[0].item() if value is not None else 0.0
    if out.static:
        return [cx.splat(fill, out)]
    shape = cx.v(node.inputs[0])
    return [cx.splat(fill, out, [d if isinstance(d, int) else cx.element(shape, k) for k, d in enumerate(out.dims)])]


@lowering("Concat")
def _concat(cx: Emitter, node: Node):
    out = _out(node)
    axis = _axis(cx.attr(node, "axis"), out.rank)
    xs = [cx.v(v) for v in node.inputs if v is not None]
    if len(xs) == 1:
        return [xs[0]]
    types = ", ".join(str(cx.tt(x)) for x in xs)
    return [cx.emit(f"stablehlo.concatenate {', '.join(xs)}, dim = {axis} : ({types}) -> {out}", out)]


@lowering("Transpose")
def _transpose(cx: Emitter, node: Node):
    x, out = _in(cx, node, 0), _out(node)
    perm = cx.attr(node, "perm") or list(reversed(range(cx.tt(x).rank)))
    return [cx.emit(f"stablehlo.transpose {x}, dims = {_ints(perm)} : ({cx.tt(x)}) -> {out}", out)]


def _slice(cx: Emitter, x: str, ranges: Dict[int, Tuple[int, int, int]], out: TT) -> str:
    """``x`` sliced along the axes in ``ranges`` (ONNX start, end, step: unnormalized,
    clamped as ONNX clamps them). A negative step reverses the axis first. A dynamic dim
    is sliced by ``real_dynamic_slice``, its bounds clamped to the dim at run time."""
    src = cx.tt(x)
    starts: List[RDim] = [0] * src.rank
    limits: List[RDim] = [d if isinstance(d, int) else cx.rdim(x, k) for k, d in enumerate(src.dims)]
    strides = [1] * src.rank
    for k, (b, e, s) in ranges.items():
        d = src.dims[k]
        if isinstance(d, int):
            b, e, s = slice(b, e, s).indices(d)
            if s < 0:
                count = len(range(b, e, s))
                x = cx.emit(f"stablehlo.reverse {x}, dims = [{k}] : {cx.tt(x)}", cx.tt(x))
                b, s = d - 1 - b, -s
                e = b + (count - 1) * s + 1 if count else b
            starts[k], limits[k], strides[k] = b, max(e, b), s
            continue
        if s < 0 or b < 0 or e < 0:
            raise _Unsupported("negative start, end or step on a dynamic dim")
        dim = limits[k]
        starts[k] = cx.dim_op("minimum", b, dim) if b else 0
        limits[k] = dim if e >= _HUGE else cx.dim_op("minimum", e, dim)
        strides[k] = s
    if all(isinstance(v, int) for v in starts + limits):
        spec = ", ".join(f"{a}:{b}" + (f":{s}" if s != 1 else "") for a, b, s in zip(starts, limits, strides))
        return cx.emit(f"stablehlo.slice {x} [{spec}] : ({cx.tt(x)}) -> {out}", out)
    sv, lv, tv = cx.shape_vector(starts), cx.shape_vector(limits), cx.index_vector(strides)
    vt = TT("i64", (src.rank,))
    return cx.emit(f"stablehlo.real_dynamic_slice {x}, {sv}, {lv}, {tv} : ({cx.tt(x)}, {vt}, {vt}, {vt}) -> {out}",
                   out)


@lowering("Slice")
def _slice_op(cx: Emitter, node: Node):
    x, out = _in(cx, node, 0), _out(node)
    rank = cx.tt(x).rank
    if cx.graph.opset_of(node) < 10:
        starts, ends = cx.attr(node, "starts"), cx.attr(node, "ends")
        axes, steps = cx.attr(node, "axes"), None
    else:
        starts = cx.const_input(node, 1, "starts")
        ends = cx.const_input(node, 2, "ends")
        axes = cx.const_input(node, 3, "axes")
        steps = cx.const_input(node, 4, "steps")
    starts = [int(v) for v in np.asarray(starts).reshape(-1)]
    ends = [int(v) for v in np.asarray(ends).reshape(-1)]
    axes = list(range(len(starts))) if axes is None else [_axis(int(a), rank) for a in np.asarray(axes).reshape(-1)]
    steps = [1] * len(starts) if steps is None else [int(s) for s in np.asarray(steps).reshape(-1)]
    ranges = {a: (b, e, s) for a, b, e, s in zip(axes, starts, ends, steps)}
    return [_slice(cx, x, ranges, out)]


@lowering("Split")
def _split(cx: Emitter, node: Node):
    x = _in(cx, node, 0)
    src = cx.tt(x)
    axis = _axis(cx.attr(node, "axis", 0), src.rank)
    sizes = cx.ints_arg(node, "split", 1, 13)
    if sizes is None:
        sizes = [TT.of(o).dims[axis] for o in node.outputs]
        if not all(isinstance(s, int) for s in sizes):
            raise _Unsupported("split sizes known only at run time")
    outs, at = [], 0
    for o, n in zip(node.outputs, sizes):
        outs.append(_slice(cx, x, {axis: (at, at + n, 1)}, TT.of(o)))
        at += n
    return outs


@lowering("Gather")
def _gather(cx: Emitter, node: Node):
    data, out = _in(cx, node, 0), _out(node)
    src = cx.tt(data)
    axis = _axis(cx.attr(node, "axis", 0), src.rank)
    idx_known = cx.known_array(node.inputs[1])
    d = src.dims[axis]
    if idx_known is not None:
        idx = np.asarray(idx_known).astype(np.int64)
        if isinstance(d, int):
            idx = np.where(idx < 0, idx + d, idx)
        if idx.ndim <= 1 and (idx >= 0).all():
            flat = idx.reshape(-1)
            # A run of consecutive indices is a slice (how shape dims are picked).
            if flat.size and (np.diff(flat) == 1).all():
                sliced_dims = list(src.dims)
                sliced_dims[axis] = int(flat.size)
                sliced = _slice(cx, data, {axis: (int(flat[0]), int(flat[-1]) + 1, 1)}, src.with_dims(sliced_dims))
                if idx.ndim == 1:
                    return [cx.reshape(sliced, out)] if cx.tt(sliced) == out else [sliced]
                rd = None if out.static else [cx.rdim(sliced, k) for k in range(src.rank) if k != axis]
                return [cx.reshape(sliced, out, rd)]
    # General case: stablehlo.gather of the (normalized) indices along ``axis``, or
    # dynamic_gather when a dim it takes whole is dynamic (its slice size is runtime).
    idx = cx.convert(cx.v(node.inputs[1]), "i64")
    it = cx.tt(idx)
    if idx_known is None or (np.asarray(idx_known) < 0).any():
        size = cx.rdim_scalar(cx.rdim(data, axis), "i64")
        size_b = cx.broadcast(size, it, [], None if it.static else cx.rdims(idx))
        neg = cx.compare("LT", idx, cx.splat_like(0, idx))
        idx = cx.select(neg, cx.op("stablehlo.add", [idx, size_b], it), idx, it)
    offset_dims = list(range(axis)) + list(range(axis + it.rank, src.rank - 1 + it.rank))
    dn = (f"#stablehlo.gather<offset_dims = {_ints(offset_dims)}, collapsed_slice_dims = [{axis}],"
          f" start_index_map = [{axis}], index_vector_dim = {it.rank}>")
    sizes = [1 if k == axis else x for k, x in enumerate(src.dims)]
    if all(isinstance(x, int) for x in sizes):
        return [cx.emit(f'"stablehlo.gather"({data}, {idx}) <{{dimension_numbers = {dn}, indices_are_sorted = false,'
                        f" slice_sizes = {_array(sizes)}}}> : ({src}, {it}) -> {out}", out)]
    sv = cx.shape_vector([1 if k == axis else cx.rdim(data, k) for k in range(src.rank)])
    return [cx.emit(f'"stablehlo.dynamic_gather"({data}, {idx}, {sv}) <{{dimension_numbers = {dn},'
                    f" indices_are_sorted = false}}> : ({src}, {it}, {cx.tt(sv)}) -> {out}", out)]


@lowering("Pad")
def _pad(cx: Emitter, node: Node):
    x, out = _in(cx, node, 0), _out(node)
    src = cx.tt(x)
    if cx.attr(node, "mode", "constant") != "constant":
        raise _Unsupported(f"mode {cx.attr(node, 'mode')}")
    if cx.graph.opset_of(node) < 11:
        pads, value = cx.attr(node, "pads"), cx.attr(node, "value", 0.0)
        axes = list(range(src.rank))
    else:
        pads = [int(p) for p in cx.const_input(node, 1, "pads").reshape(-1)]
        v = cx.const_input(node, 2, "constant_value")
        value = 0 if v is None else np.asarray(v).reshape(-1)[0].item()
        a = cx.const_input(node, 3, "axes")
        axes = list(range(src.rank)) if a is None else [_axis(int(i), src.rank) for i in a.reshape(-1)]
    low, high = [0] * src.rank, [0] * src.rank
    for i, k in enumerate(axes):
        low[k], high[k] = pads[i], pads[i + len(axes)]
    pv = cx.scalar(value, src.elem)
    return [cx.emit(f"stablehlo.pad {x}, {pv}, low = {_ints(low)}, high = {_ints(high)},"
                    f" interior = {_ints([0] * src.rank)} : ({src}, tensor<{src.elem}>) -> {out}", out)]


# ---- contractions ----------------------------------------------------------------------

def _dot(cx: Emitter, a: str, b: str, contracting: Tuple[int, int], batching: int, out: TT) -> str:
    batch = f"batching_dims = {_ints(range(batching))} x {_ints(range(batching))}, " if batching else ""
    return cx.emit(f"stablehlo.dot_general {a}, {b}, {batch}contracting_dims = [{contracting[0]}] x"
                   f" [{contracting[1]}] : ({cx.tt(a)}, {cx.tt(b)}) -> {out}", out)


@lowering("MatMul")
def _matmul(cx: Emitter, node: Node):
    a, b, out = _in(cx, node, 0), _in(cx, node, 1), _out(node)
    ta, tb = cx.tt(a), cx.tt(b)
    ra, rb = ta.rank, tb.rank
    if ra == 1 or rb == 1 or ra == 2:
        # One side has no batch dims: a plain contraction, whose free dims come out as
        # lhs-free then rhs-free. Only a 2-D lhs with a batched rhs needs a transpose.
        lc, rc = ra - 1, (0 if rb == 1 else rb - 2)
        if ra == 2 and rb >= 3:
            nb = rb - 2
            mid = out.with_dims([out.dims[nb]] + list(out.dims[:nb]) + [out.dims[nb + 1]])
            r = _dot(cx, a, b, (lc, rc), 0, mid)
            perm = list(range(1, nb + 1)) + [0, nb + 1]
            return [cx.emit(f"stablehlo.transpose {r}, dims = {_ints(perm)} : ({mid}) -> {out}", out)]
        return [_dot(cx, a, b, (lc, rc), 0, out)]
    if rb == 2:
        return [_dot(cx, a, b, (ra - 1, 0), 0, out)]
    # Both batched: the batch dims broadcast (numpy rules) - made explicit here, then
    # dot_general with batching dims.
    nb = out.rank - 2
    batch: List[RDim] = []
    for k in range(nb):
        ka, kb = k - (nb - (ra - 2)), k - (nb - (rb - 2))
        if ka < 0:
            batch.append(cx.rdim(b, kb))
        elif kb < 0:
            batch.append(cx.rdim(a, ka))
        else:
            batch.append(cx.broadcast_rdim((a, ka), (b, kb), f"MatMul '{node.label}' batch dim {k}"))
    ops = []
    for x, t in ((a, ta), (b, tb)):
        full = t.with_dims(list(out.dims[:nb]) + list(t.dims[-2:]))
        same = t.rank == out.rank and all(_dims_equal(p, q) for p, q in zip(t.dims[:nb], out.dims[:nb]))
        if same:
            ops.append(x)
            continue
        rd = None if full.static else batch + [cx.rdim(x, t.rank - 2), cx.rdim(x, t.rank - 1)]
        ops.append(cx.broadcast(x, full, list(range(out.rank - t.rank, out.rank)), rd))
    return [_dot(cx, ops[0], ops[1], (out.rank - 1, out.rank - 2), nb, out)]


@lowering("Gemm")
def _gemm(cx: Emitter, node: Node):
    a, b, out = _in(cx, node, 0), _in(cx, node, 1), _out(node)
    ta, tb = cx.attr(node, "transA", 0), cx.attr(node, "transB", 0)
    alpha, beta = cx.attr(node, "alpha", 1.0), cx.attr(node, "beta", 1.0)
    y = _dot(cx, a, b, (0 if ta else 1, 1 if tb else 0), 0, out)
    if alpha != 1.0:
        y = cx.op("stablehlo.multiply", [y, cx.splat_like(alpha, y)], out)
    if _has(node, 2):
        c = node.inputs[2]  # the result's shape: checked by _no_implicit_broadcast
        cv = cx.v(c)
        if beta != 1.0:
            cv = cx.op("stablehlo.multiply", [cv, cx.splat_like(beta, cv)], cx.tt(cv))
        y = cx.op("stablehlo.add", [y, cv], out)
    return [y]


# ---- convolution and pooling ---------------------------------------------------------------

def _spatial(cx: Emitter, node: Node, x: str, kernel: Sequence[int], out: TT):
    """(strides, dilations, [(pad_lo, pad_hi)]) of a Conv/pool node; auto_pad is
    resolved against the static input dims."""
    n = len(kernel)
    strides = list(cx.attr(node, "strides", [1] * n))
    dilations = list(cx.attr(node, "dilations", [1] * n))
    pads = list(cx.attr(node, "pads", [0] * (2 * n)))
    auto = cx.attr(node, "auto_pad", "NOTSET")
    padding = [(pads[i], pads[i + n]) for i in range(n)]
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        padding = []
        for i in range(n):
            d = cx.tt(x).dims[2 + i]
            if not isinstance(d, int):
                raise _Unsupported(f"auto_pad {auto} on a dynamic spatial dim")
            o = -(-d // strides[i])
            total = max(0, (o - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - d)
            small, big = total // 2, total - total // 2
            padding.append((small, big) if auto == "SAME_UPPER" else (big, small))
    elif auto == "VALID":
        padding = [(0, 0)] * n
    return strides, dilations, padding


def _dim_numbers(n: int) -> str:
    sp = ", ".join(str(i) for i in range(n))
    return f"[b, f, {sp}]x[o, i, {sp}]->[b, f, {sp}]"


@lowering("Conv")
def _conv(cx: Emitter, node: Node):
    x, w, out = _in(cx, node, 0), _in(cx, node, 1), _out(node)
    wt = cx.tt(w)
    kernel = cx.attr(node, "kernel_shape") or list(wt.dims[2:])
    if not all(isinstance(k, int) for k in kernel):
        raise _Unsupported("dynamic kernel shape")
    strides, dilations, padding = _spatial(cx, node, x, kernel, out)
    group = cx.attr(node, "group", 1)
    pad = "[" + ", ".join(f"[{a}, {b}]" for a, b in padding) + "]"
    y = cx.emit(f"stablehlo.convolution({x}, {w}) dim_numbers = {_dim_numbers(len(kernel))},"
                f" window = {{stride = {_ints(strides)}, pad = {pad}, rhs_dilate = {_ints(dilations)}}}"
                f" {{batch_group_count = 1 : i64, feature_group_count = {group} : i64}}"
                f" : ({cx.tt(x)}, {wt}) -> {out}", out)
    if _has(node, 2):
        # The bias lies along the channel dim: the op's own broadcast, written out.
        bias = cx.broadcast(_in(cx, node, 2), out, [1], None if out.static else cx.rdims(y))
        y = cx.op("stablehlo.add", [y, bias], out)
    return [y]


def _ceil_extra(x_dims, out: TT, kernel, strides, dilations, padding):
    """Extra high padding so a ceil_mode pool makes the output size the IR says."""
    extra = []
    for i, k in enumerate(kernel):
        d, o = x_dims[2 + i], out.dims[2 + i]
        if not (isinstance(d, int) and isinstance(o, int)):
            raise _Unsupported("ceil_mode with dynamic spatial dims")
        lo, hi = padding[i]
        need = (o - 1) * strides[i] + (k - 1) * dilations[i] + 1 - (d + lo + hi)
        extra.append(max(0, need))
    return extra


def _pool_window(cx: Emitter, node: Node, x: str, out: TT):
    kernel = list(cx.attr(node, "kernel_shape"))
    strides, dilations, padding = _spatial(cx, node, x, kernel, out)
    extra = [0] * len(kernel)
    if cx.attr(node, "ceil_mode", 0):
        extra = _ceil_extra(cx.tt(x).dims, out, kernel, strides, dilations, padding)
    return kernel, strides, dilations, padding, extra


@lowering("MaxPool")
def _maxpool(cx: Emitter, node: Node):
    if len(node.outputs) > 1 and node.outputs[1] is not None and node.graph.users(node.outputs[1]):
        raise _Unsupported("Indices output")
    x, out = _in(cx, node, 0), _out(node)
    kernel, strides, dilations, padding, extra = _pool_window(cx, node, x, out)
    elem = out.elem
    init = cx.scalar(-np.inf, elem)
    pads = [(0, 0), (0, 0)] + [(lo, hi + e) for (lo, hi), e in zip(padding, extra)]
    return [cx.reduce_window(x, init, "stablehlo.maximum", [1, 1] + kernel, [1, 1] + strides,
                             [1, 1] + dilations, pads, out)] + [None] * (len(node.outputs) - 1)


@lowering("AveragePool")
def _avgpool(cx: Emitter, node: Node):
    x, out = _in(cx, node, 0), _out(node)
    kernel, strides, dilations, padding, extra = _pool_window(cx, node, x, out)
    pads = [(0, 0), (0, 0)] + [(lo, hi + e) for (lo, hi), e in zip(padding, extra)]
    s = cx.reduce_window(x, cx.scalar(0, out.elem), "stablehlo.add", [1, 1] + kernel, [1, 1] + strides,
                         [1, 1] + dilations, pads, out)
    if not any(lo or hi for lo, hi in padding) and not any(extra):
        return [cx.op("stablehlo.divide", [s, cx.splat_like(float(np.prod(kernel)), s)], out)]
    # With padding, each window's divisor is how many of its cells count: input cells,
    # plus the explicit pads with count_include_pad, never the ceil_mode extra. Known
    # at compile time from the static spatial dims.
    xd = cx.tt(x).dims[2:]
    if not all(isinstance(d, int) for d in list(xd) + list(out.dims[2:])):
        raise _Unsupported("padding with dynamic spatial dims")
    include = cx.attr(node, "count_include_pad", 0)
    counts = np.ones(xd, np.float64)
    counts = np.pad(counts, [(lo, hi) for lo, hi in padding], constant_values=1.0 if include else 0.0)
    counts = np.pad(counts, [(0, e) for e in extra])
    div = np.zeros(out.dims[2:], np.float64)
    for o in np.ndindex(*div.shape):
        sl = tuple(slice(o[i] * strides[i], o[i] * strides[i] + (kernel[i] - 1) * dilations[i] + 1, dilations[i])
                   for i in range(len(kernel)))
        div[o] = counts[sl].sum()
    np_dt = numpy_dtype(_ONNX_OF_ELEM[out.elem]) if out.elem != "bf16" else np.float32
    dtt = TT(out.elem, tuple(div.shape))
    d = cx.const(div.astype(np_dt), dtt, "divisor")
    rd = None if out.static else cx.rdims(s)
    return [cx.op("stablehlo.divide", [s, cx.broadcast(d, out, list(range(2, out.rank)), rd)], out)]


@lowering("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(cx: Emitter, node: Node):
    x, out = _in(cx, node, 0), _out(node)
    src = cx.tt(x)
    axes = list(range(2, src.rank))
    red = TT(src.elem, src.dims[:2])
    if node.op == "GlobalMaxPool":
        r = cx.reduce(x, cx.scalar(-np.inf, src.elem), "stablehlo.maximum", axes, red)
    else:
        r = cx.reduce(x, cx.scalar(0, src.elem), "stablehlo.add", axes, red)
        n = cx.product([cx.rdim(x, k) for k in axes])
        nb = cx.broadcast(cx.rdim_scalar(n, src.elem), red, [], None if red.static else cx.rdims(r))
        r = cx.op("stablehlo.divide", [r, nb], red)
    rd = None if out.static else [cx.rdim(x, 0), cx.rdim(x, 1)] + [1] * len(axes)
    return [cx.reshape(r, out, rd)]


@lowering("LRN")
def _lrn(cx: Emitter, node: Node):
    # y = x / (bias + alpha/size * sum of x^2 over a window of channels)^beta
    x, out = _in(cx, node, 0), _out(node)
    t = cx.tt(x)
    size = cx.attr(node, "size")
    alpha, beta, bias = cx.attr(node, "alpha", 1e-4), cx.attr(node, "beta", 0.75), cx.attr(node, "bias", 1.0)
    sq = cx.op("stablehlo.multiply", [x, x], t)
    window = [1] * t.rank
    window[1] = size
    pads = [(0, 0)] * t.rank
    pads[1] = ((size - 1) // 2, size - 1 - (size - 1) // 2)
    s = cx.reduce_window(sq, cx.scalar(0, t.elem), "stablehlo.add", window, [1] * t.rank, [1] * t.rank, pads, t)
    base = cx.op("stablehlo.add", [cx.splat_like(bias, s), cx.op("stablehlo.multiply",
                                                                 [s, cx.splat_like(alpha / size, s)], t)], t)
    den = cx.op("stablehlo.power", [base, cx.splat_like(beta, s)], t)
    return [cx.op("stablehlo.divide", [x, den], out)]


# ---- normalizations and reductions ------------------------------------------------------------

def _reduce_keep(cx: Emitter, x: str, axes: Sequence[int], init, body: str) -> Tuple[str, TT]:
    src = cx.tt(x)
    red = src.with_dims([d for k, d in enumerate(src.dims) if k not in axes])
    return cx.reduce(x, cx.scalar(init, src.elem), body, axes, red), red


def _back(cx: Emitter, r: str, x: str, axes: Sequence[int]) -> str:
    """A reduction's result broadcast back over the reduced ``axes`` of ``x``."""
    src = cx.tt(x)
    kept = [k for k in range(src.rank) if k not in axes]
    return cx.broadcast(r, src, kept, None if src.static else cx.rdims(x))


def _count(cx: Emitter, x: str, axes: Sequence[int], elem: str) -> str:
    return cx.rdim_scalar(cx.product([cx.rdim(x, k) for k in axes]), elem)


@lowering("Softmax", "LogSoftmax")
def _softmax(cx: Emitter, node: Node):
    x, out = _in(cx, node, 0), _out(node)
    t = cx.tt(x)
    if cx.graph.opset_of(node) < 13:
        # Opset < 13 flattens to 2-D at ``axis`` (default 1): a softmax over every dim
        # from ``axis`` on.
        axes = list(range(_axis(cx.attr(node, "axis", 1), t.rank), t.rank))
    else:
        axes = [_axis(cx.attr(node, "axis", -1), t.rank)]
    m, _ = _reduce_keep(cx, x, axes, -np.inf, "stablehlo.maximum")
    shifted = cx.op("stablehlo.subtract", [x, _back(cx, m, x, axes)], t)
    e = cx.op("stablehlo.exponential", [shifted], t)
    s, _ = _reduce_keep(cx, e, axes, 0, "stablehlo.add")
    if node.op == "LogSoftmax":
        ls = cx.op("stablehlo.log", [s], cx.tt(s))
        return [cx.op("stablehlo.subtract", [shifted, _back(cx, ls, x, axes)], out)]
    return [cx.op("stablehlo.divide", [e, _back(cx, s, x, axes)], out)]


_REDUCE = {"ReduceSum": ("stablehlo.add", 0), "ReduceMean": ("stablehlo.add", 0),
           "ReduceMax": ("stablehlo.maximum", -np.inf), "ReduceMin": ("stablehlo.minimum", np.inf),
           "ReduceProd": ("stablehlo.multiply", 1)}  # (body, its identity)
_REDUCE_AXES_INPUT_SINCE = {"ReduceSum": 13}


@lowering(*_REDUCE)
def _reduce_op(cx: Emitter, node: Node):
    x, out = _in(cx, node, 0), _out(node)
    t = cx.tt(x)
    axes = cx.ints_arg(node, "axes", 1, _REDUCE_AXES_INPUT_SINCE.get(node.op, 18))
    if not axes:
        if cx.attr(node, "noop_with_empty_axes", 0):
            return [x]
        axes = list(range(t.rank))
    axes = sorted({_axis(a, t.rank) for a in axes})
    body, init = _REDUCE[node.op]
    r, red = _reduce_keep(cx, x, axes, init, body)
    if node.op == "ReduceMean":
        n = cx.broadcast(_count(cx, x, axes, t.elem), red, [], None if red.static else cx.rdims(r))
        r = cx.op("stablehlo.divide", [r, n], red)
    if out.rank == red.rank:
        return [cx.reshape(r, out)] if red != out else [r]
    rd = None if out.static else [1 if k in axes else cx.rdim(x, k) for k in range(t.rank)]
    return [cx.reshape(r, out, rd)]


@lowering("LayerNormalization")
def _layer_norm(cx: Emitter, node: Node):
    x, out = _in(cx, node, 0), _out(node)
    t = cx.tt(x)
    axis = _axis(cx.attr(node, "axis", -1), t.rank)
    eps = cx.attr(node, "epsilon", 1e-5)
    axes = list(range(axis, t.rank))
    n = _count(cx, x, axes, t.elem)
    s, red = _reduce_keep(cx, x, axes, 0, "stablehlo.add")
    mean = cx.op("stablehlo.divide", [s, cx.broadcast(n, red, [], None if red.static else cx.rdims(s))], red)
    xc = cx.op("stablehlo.subtract", [x, _back(cx, mean, x, axes)], t)
    v, _ = _reduce_keep(cx, cx.op("stablehlo.multiply", [xc, xc], t), axes, 0, "stablehlo.add")
    var = cx.op("stablehlo.divide", [v, cx.broadcast(n, red, [], None if red.static else cx.rdims(v))], red)
    inv = cx.op("stablehlo.rsqrt", [cx.op("stablehlo.add", [var, cx.splat_like(eps, var)], red)], red)
    y = cx.op("stablehlo.multiply", [xc, _back(cx, inv, x, axes)], t)
    # Scale and bias span the normalized dims (right-aligned): the op's own broadcast.
    rd = None if t.static else cx.rdims(x)
    for i, name in ((1, "stablehlo.multiply"), (2, "stablehlo.add")):
        if _has(node, i):
            p = _in(cx, node, i)
            pr = cx.tt(p).rank
            y = cx.op(name, [y, cx.broadcast(p, t, list(range(t.rank - pr, t.rank)), rd)], t)
    if t != out:
        y = cx.emit(f"stablehlo.convert {y} : ({t}) -> {out}", out)
    # Mean and InvStdDev keep the normalized dims as 1s.
    extra = []
    for o, v in zip(node.outputs[1:], (mean, inv)):
        if not o.name or not node.graph.users(o):
            extra.append(None)
            continue
        ot = TT.of(o)
        rd = None if ot.static else [cx.rdim(x, k) if k < axis else 1 for k in range(t.rank)]
        extra.append(cx.reshape(cx.convert(v, ot.elem), ot, rd))
    return [y] + extra


@lowering("BatchNormalization")
def _batch_norm(cx: Emitter, node: Node):
    if cx.attr(node, "training_mode", 0) or any(o is not None and node.graph.users(o) for o in node.outputs[1:]):
        raise _Unsupported("training mode")
    if cx.attr(node, "spatial", 1) != 1:
        raise _Unsupported("spatial=0")
    x, out = _in(cx, node, 0), _out(node)
    t = cx.tt(x)
    scale, bias, mean, var = (_in(cx, node, i) for i in range(1, 5))
    eps = cx.attr(node, "epsilon", 1e-5)
    # Per channel: a = scale / sqrt(var + eps), b = bias - mean * a; then y = x * a + b
    # with a and b along dim 1.
    pt = cx.tt(scale)
    a = cx.op("stablehlo.multiply", [scale, cx.op("stablehlo.rsqrt", [
        cx.op("stablehlo.add", [var, cx.splat_like(eps, var)], pt)], pt)], pt)
    b = cx.op("stablehlo.subtract", [bias, cx.op("stablehlo.multiply", [mean, a], pt)], pt)
    rd = None if t.static else cx.rdims(x)
    y = cx.op("stablehlo.multiply", [x, cx.broadcast(a, t, [1], rd)], t)
    return [cx.op("stablehlo.add", [y, cx.broadcast(b, t, [1], rd)], out)] + [None] * (len(node.outputs) - 1)


@lowering("DequantizeLinear")
def _dequantize(cx: Emitter, node: Node):
    # y = (x - zero_point) * scale, in the scale's float type
    x, out = _in(cx, node, 0), _out(node)
    if cx.attr(node, "block_size", 0):
        raise _Unsupported("blocked quantization")
    xf = cx.convert(x, out.elem)
    t = cx.tt(xf)
    rd = None if cx.tt(x).static else cx.rdims(x)
    scale = _quant_param(cx, node, 1, t, rd)
    zp = _quant_param(cx, node, 2, t, rd)
    if zp is not None:
        xf = cx.op("stablehlo.subtract", [xf, zp], t)
    return [cx.op("stablehlo.multiply", [xf, scale], out)]


@lowering("QuantizeLinear")
def _quantize(cx: Emitter, node: Node):
    # y = saturate(round_half_to_even(x / scale) + zero_point), in the integer type
    x, out = _in(cx, node, 0), _out(node)
    if cx.attr(node, "block_size", 0) or _is_float(out.elem):
        raise _Unsupported("blocked or float8 quantization")
    t = cx.tt(x)
    rd = None if cx.tt(x).static else cx.rdims(x)
    # The quotient in f64, rounded once to f32: XLA turns a division by a constant into a
    # product with its reciprocal, which in f32 may cross a rounding tie that ONNX's
    # division does not (requantized values sit near ties); in f64 it lands where x / s does.
    wide = t.with_elem("f64") if t.elem in ("f32", "f16", "bf16") else t
    q = cx.op("stablehlo.divide", [cx.convert(x, wide.elem), _quant_param(cx, node, 1, wide, rd)], wide)
    q = cx.op("stablehlo.round_nearest_even", [cx.convert(q, t.elem)], t)
    zp = _quant_param(cx, node, 2, t, rd)
    if zp is not None:
        q = cx.op("stablehlo.add", [q, zp], t)
    info = np.iinfo(numpy_dtype(_ONNX_OF_ELEM[out.elem]))
    q = cx.emit(f"stablehlo.clamp {cx.scalar(info.min, t.elem)}, {q}, {cx.scalar(info.max, t.elem)}"
                f" : (tensor<{t.elem}>, {t}, tensor<{t.elem}>) -> {t}", t)
    return [cx.convert(q, out.elem)]


def _quant_param(cx: Emitter, node: Node, i: int, like: TT, rd) -> Optional[str]:
    """Operand ``i`` (a scale or zero point: a scalar, or 1-D along ``axis``) converted
    to ``like``'s element type and broadcast to its shape: the op's own broadcast."""
    if not _has(node, i):
        return None
    p = cx.convert(_in(cx, node, i), like.elem)
    pt = cx.tt(p)
    if pt.rank == 1 and pt.dims[0] == 1:
        p, pt = cx.reshape(p, TT(like.elem, ())), TT(like.elem, ())
    if pt.rank > 1:
        raise _Unsupported("blocked quantization")
    bdims = [] if pt.rank == 0 else [_axis(cx.attr(node, "axis", 1), like.rank)]
    return cx.broadcast(p, like, bdims, rd)


@lowering("Constant")
def _constant(cx: Emitter, node: Node):
    # A Constant with a tensor or number is known at compile time (see ``_fold``); what
    # reaches here holds a sparse tensor or strings.
    raise _Unsupported("sparse or string value")


# ---- compile-time values --------------------------------------------------------------------------

# Ops evaluated at compile time when all their operands are known and the result is
# small: shape arithmetic (a Reshape's target from Shape/Gather/Concat of static dims).
_FOLD_LIMIT = 4096
_NO_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
            "Bernoulli", "Dropout"}


def _fold(cx: Emitter, node: Node) -> bool:
    if node.domain not in ("", "ai.onnx") or node.op in _NO_FOLD or any(True for _ in node.subgraphs()):
        return False
    ins = [v for v in node.inputs if v is not None]
    if any(v not in cx.known for v in ins):
        return False
    if node.op == "Constant":
        from ..passes.rewrite import constant_array
        arr = constant_array(node.output)
        if arr is None:
            return False
        cx.known[node.output] = arr
        return True
    for o in node.outputs:
        shape = o.type.shape
        if shape is None or not all(isinstance(d, int) for d in shape) or int(np.prod(shape)) > _FOLD_LIMIT:
            return False
    if any(cx.known[v].size > _FOLD_LIMIT for v in ins):
        return False
    try:
        results = _evaluate(cx.graph, node, [None if v is None else cx.known[v] for v in node.inputs])
    except Exception:  # noqa: BLE001 - not foldable: lowered at run time instead
        return False
    for o, r in zip(node.outputs, results):
        cx.known[o] = np.asarray(r)
    return True


def _evaluate(graph: Graph, node: Node, inputs: List[Optional[np.ndarray]]) -> List[np.ndarray]:
    """Run one node on onnx's reference evaluator, at the graph's opset."""
    from onnx import TensorProto
    from onnx.reference import ReferenceEvaluator

    names = [f"i{k}" if v is not None else "" for k, v in enumerate(inputs)]
    outs = [f"o{k}" for k in range(len(node.outputs))]
    proto = helper.make_node(node.op_type, names, outs)
    proto.attribute.extend(a for a in node.attrs.values() if not isinstance(a, (list, Graph)))
    feeds = {n: a for n, a in zip(names, inputs) if a is not None}
    g = helper.make_graph([proto], "fold",
                          [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
                           for n, a in feeds.items()],
                          [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outs])
    opsets = [helper.make_opsetid(d, v) for d, v in graph.opsets.items()]
    model = helper.make_model(g, opset_imports=opsets)
    return ReferenceEvaluator(model).run(None, feeds)


def _track_parts(cx: Emitter, node: Node) -> None:
    """Per-element compile-time knowledge of 1-D int vectors: which dims of a runtime
    shape are static (a Reshape's 0 and -1, an Expand's static dims)."""
    parts_of = cx.vector_parts
    out = node.outputs[0] if node.outputs else None
    if out is None or out.type.shape is None or len(out.type.shape) != 1:
        return
    if node.op == "Shape":
        shape = node.inputs[0].type.shape
        if shape is not None:
            rank = len(shape)
            start = _axis(cx.attr(node, "start", 0), rank)
            end = min(_axis(cx.attr(node, "end", rank), rank), rank)
            cx.parts[out] = [d if isinstance(d, int) else None for d in shape][max(start, 0):end]
    elif node.op == "Concat":
        ps = [parts_of(v) for v in node.inputs if v is not None]
        if all(p is not None for p in ps):
            cx.parts[out] = [x for p in ps for x in p]
    elif node.op == "Gather" and cx.attr(node, "axis", 0) == 0:
        p, idx = parts_of(node.inputs[0]), cx.known_array(node.inputs[1])
        if p is not None and idx is not None:
            cx.parts[out] = [p[int(i)] for i in np.asarray(idx).reshape(-1)]
    elif node.op in ("Cast", "Identity"):
        p = parts_of(node.inputs[0])
        if p is not None:
            cx.parts[out] = p


# ---- runtime constraints ----------------------------------------------------------------------

# A term of a constraint, resolved in the graph: a static size, ("dim", value, axis), or
# ("broadcast", term, term), numpy's broadcast of two dims.
Term = Union[int, Tuple]


def _names(labels: Sequence[str], limit: int = 5) -> str:
    """``node 'a'`` / ``nodes 'a', 'b'``; past ``limit`` names, how many more."""
    if not labels:
        return ""
    shown = ", ".join(f"'{x}'" for x in labels[:limit])
    more = f" and {len(labels) - limit} more" if len(labels) > limit else ""
    return f"node{'s' if len(labels) > 1 else ''} {shown}{more}"


class _Assertions:
    """Every runtime constraint as a ``@shape_assertion``, written as soon as the values
    whose dims it reads are defined (a constraint on graph inputs: at the top of
    ``@main``, where JAX writes its own). A label names a dim as the verifier does: a
    symbol (its first occurrence, graph inputs first), ``value[axis]``, a
    ``broadcast(a, b)`` of two, or a number. A constraint whose labels name nothing in
    this graph (a value legalization removed as dead) is not asserted, and a comment in
    the module says so."""

    def __init__(self, cx: Emitter, graph: Graph, constraints):
        from ..shapes import alternatives

        self.cx, self.graph = cx, graph
        self._symbols: Optional[Dict[str, Tuple[Value, int]]] = None
        self.todo: List[Tuple[str, str, List[Tuple[Term, Term]], List[Tuple[str, Term]]]] = []
        self.missing: List[int] = []
        self.waiting: Dict[Value, List[int]] = {}
        self.skipped: List[str] = []
        for key, c in constraints.items.items():
            nodes = _names(constraints.nodes.get(key, []))
            pairs, shown, ok = [], {}, True
            for a, b in alternatives(c):
                ta, tb = self.term(a), self.term(b)
                if ta is None or tb is None:
                    ok = False
                    break
                pairs.append((ta, tb))
                for label, t in ((a, ta), (b, tb)):
                    if not isinstance(t, int):
                        shown.setdefault(label, t)
            if not ok:
                self.skipped.append(f"// legalize: runtime constraint {c.text} ({nodes}) is not asserted:"
                                    " it names dims of no value of this graph")
                continue
            values = {d[1] for t in shown.values() for d in _dim_terms(t)}
            self.todo.append((c.text, nodes, pairs, list(shown.items())))
            self.missing.append(len(values))
            for v in values:
                self.waiting.setdefault(v, []).append(len(self.todo) - 1)
            if not values:
                self.write(len(self.todo) - 1)

    # -- labels
    def symbols(self) -> Dict[str, Tuple[Value, int]]:
        if self._symbols is None:
            self._symbols = {}
            values = [n.output for n in self.graph.inputs] + \
                [v for n in self.graph.nodes() if n.kind == OP for v in n.outputs]
            for v in values:
                for k, d in enumerate(v.type.shape or ()):
                    if isinstance(d, str):
                        self._symbols.setdefault(d, (v, k))
        return self._symbols

    def term(self, label: str) -> Optional[Term]:
        from ..shapes import broadcast_label_operands

        if label.isdigit():
            return int(label)
        hit = self.symbols().get(label)
        if hit is not None:
            return ("dim",) + hit
        pair = broadcast_label_operands(label)
        if pair is not None:
            a, b = self.term(pair[0]), self.term(pair[1])
            return None if a is None or b is None else ("broadcast", a, b)
        m = re.fullmatch(r"(.*)\[(\d+)\]", label, re.S)
        if m is not None:
            v, k = self.graph.value(m[1]), int(m[2])
            if v is not None and v.type.shape is not None and k < len(v.type.shape):
                return ("dim", v, k)
        return None

    # -- writing
    def defined(self, values: Sequence[Optional[Value]]) -> None:
        """``values`` are defined (emitted, or known at compile time): write the
        assertions that waited only for them."""
        for v in values:
            for i in self.waiting.pop(v, ()) if v is not None else ():
                self.missing[i] -= 1
                if self.missing[i] == 0:
                    self.write(i)

    def dim(self, t: Term) -> RDim:
        cx = self.cx
        if isinstance(t, int):
            return t
        if t[0] == "broadcast":
            a, b = self.dim(t[1]), self.dim(t[2])
            if isinstance(a, int) and isinstance(b, int):
                return b if a == 1 else a
            a, b = cx.dim_vector(a), cx.dim_vector(b)
            return cx.select(cx.compare("EQ", a, cx.index_vector([1])), b, a)
        _, v, k = t
        if v in cx.known:
            return int(np.shape(cx.known[v])[k])
        return cx.rdim(cx.v(v), k)

    def write(self, i: int) -> None:
        cx = self.cx
        text, nodes, pairs, shown = self.todo[i]
        node, cx.node, cx.base = cx.node, None, f"cstr{i}."
        try:
            always, conds = False, []
            for a, b in pairs:
                da, db = self.dim(a), self.dim(b)
                if isinstance(da, int) and isinstance(db, int):
                    always |= da == db
                else:
                    conds.append(cx.compare("EQ", cx.dim_vector(da), cx.dim_vector(db)))
            if always or not conds:
                ok = cx.const(np.array([always]), TT("i1", (1,)), f"cstr{i}.")
            else:
                ok = conds[0]
                for c in conds[1:]:
                    ok = cx.op("stablehlo.or", [ok, c], cx.tt(ok))
            inputs, values = [], []
            for label, t in shown:
                d = self.dim(t)
                if isinstance(d, int):
                    values.append(f"{_escape_braces(label)} = {d}")
                else:
                    values.append(f"{_escape_braces(label)} = {{{len(inputs)}}}")
                    inputs.append(d)
            message = (f"legalize: runtime constraint {_escape_braces(text)} ({_escape_braces(nodes)}) does not hold"
                       + (": " + ", ".join(values) if values else ""))
            cx.shape_assertion(ok, inputs, message)
        finally:
            cx.node, cx.base = node, None

    def finish(self) -> None:
        """Constraints still waiting read dims of values never defined (an optional
        output no one uses): said in a comment, as the unresolved ones."""
        for i, n in enumerate(self.missing):
            if n > 0:
                text, nodes = self.todo[i][:2]
                self.skipped.append(f"// legalize: runtime constraint {text} ({nodes}) is not asserted:"
                                    " it names dims of a value this module does not compute")
        self.cx.lines.extend(" ".join(line.splitlines()) for line in self.skipped)


def _dim_terms(t: Term):
    """The ("dim", value, axis) terms in ``t``."""
    if isinstance(t, int):
        return
    if t[0] == "broadcast":
        yield from _dim_terms(t[1])
        yield from _dim_terms(t[2])
    else:
        yield t


# ---- the module ------------------------------------------------------------------------------

def _describe(failures: List[Tuple[str, str, Optional[str]]]) -> str:
    """One line naming every op that cannot be emitted: ``failures`` holds (op, reason,
    node label), or (what, reason, None) for an input or initializer; grouped by op and
    reason, in the order first met."""
    groups: Dict[Tuple[str, str], List[str]] = {}
    for what, reason, label in failures:
        names = groups.setdefault((what, reason), [])
        if label is not None:
            names.append(label)
    parts = []
    for (what, reason), labels in groups.items():
        inner = ": ".join(x for x in (_names(labels), reason) if x)
        parts.append(f"{what} ({inner})" if inner else what)
    n = len(failures)
    return " ".join(f"cannot emit StableHLO for {n} op{'s' if n != 1 else ''}: {', '.join(parts)}".splitlines())


def emit_stablehlo(model, constraints=None) -> str:
    """StableHLO MLIR text of ``model`` (a ``Model`` or a ``Graph``), which must be in
    the ``xla`` legal form. Every runtime constraint becomes a ``@shape_assertion``:
    ``constraints`` (a ``ConstraintSet`` or ``VerifyResult``), by default those
    ``legalize`` recorded on the model (``Model.constraints``: what the report lists),
    else those of the graph as it is. Raises ``BadInput`` naming every op that cannot be
    lowered, and ``ImplicitBroadcast`` if an elementwise op still broadcasts."""
    graph: Graph = model if isinstance(model, Graph) else model.graph
    if graph.frontend != "onnx":
        raise BadInput("cannot emit StableHLO for a TFLite model's graph (its ONNX form can be)")
    cx = Emitter(graph)
    if constraints is None:
        constraints = getattr(model, "constraints", None)
    if constraints is None:
        from ..verify import verify

        constraints = verify(graph, "mlir")
    asserts = _Assertions(cx, graph, getattr(constraints, "constraints", constraints))
    failures: List[Tuple[str, str, Optional[str]]] = []
    poisoned: set = set()
    args: List[str] = []
    for node in graph.nodes():
        if node.kind == CONST:
            if node.data is None or node.data.sparse:
                failures.append((f"initializer '{node.output.name}'", "sparse", None))
                poisoned.update(node.outputs)
            else:
                cx.known[node.output] = np.asarray(node.data.array)
                asserts.defined(node.outputs)
            continue
        if node.kind == INPUT:
            # An input with an initializer default (IR version < 4) is that constant:
            # the check feeds only inputs without one, and XLA needs its static value.
            if node.data is not None:
                cx.known[node.output] = np.asarray(node.data.array)
                asserts.defined(node.outputs)
                continue
            try:
                tt = TT.of(node.output)
            except _Unsupported as e:
                failures.append((f"input '{node.output.name}'", str(e), None))
                poisoned.add(node.output)
                continue
            name = cx.fresh(node.output.name)
            cx.values[node.output] = name
            cx.types[name] = tt
            args.append(f"{name}: {tt}")
            asserts.defined(node.outputs)
            continue
        if node.kind != OP:
            continue
        if any(v in poisoned for v in node.inputs if v is not None):
            poisoned.update(node.outputs)
            if node.op not in LOWERINGS:
                failures.append((node.op, "", node.label))
            continue
        cx.node = node
        try:
            if _fold(cx, node):
                asserts.defined(node.outputs)
                continue
            fn = LOWERINGS.get(node.op)
            if fn is None or node.domain not in ("", "ai.onnx") or any(True for _ in node.subgraphs()):
                raise _Unsupported("")
            _no_implicit_broadcast(node)
            for v in node.inputs:
                if v is not None:
                    TT.of(v)
            mark = len(cx.lines)
            results = fn(cx, node)
            for o, r in zip(node.outputs, results):
                if r is None:
                    continue
                tt = TT.of(o)
                if cx.tt(r) != tt:
                    r = cx.emit(f"stablehlo.convert {r} : ({cx.tt(r)}) -> {tt}", tt, o.name)
                cx.values[o] = cx.rename_new(r, o.name, mark)
            _track_parts(cx, node)
        except _Unsupported as e:
            failures.append((node.op, str(e), node.label))
            poisoned.update(node.outputs)
            continue
        asserts.defined([o for o in node.outputs if o in cx.values])
    cx.node = None
    if failures:
        raise BadInput(_describe(failures))
    asserts.finish()
    rets, types = [], []
    for out in graph.outputs:
        v = out.inputs[0]
        rets.append(cx.v(v))
        types.append(str(cx.tt(rets[-1])))
    body = "\n".join("    " + line for text in cx.lines for line in text.split("\n"))
    ret = f"    return {', '.join(rets)} : {', '.join(types)}" if rets else "    return"
    return (f"module {{\n  func.func public @main({', '.join(args)}) -> ({', '.join(types)}) {{\n"
            f"{body}\n{ret}\n  }}\n}}\n")


def portable_artifact(text: str) -> bytes:
    """``text`` as a StableHLO portable artifact (VHLO bytecode at the current StableHLO
    version, readable by later versions), serialized by jaxlib's StableHLO (the jax
    extra). CHLO ops (erf: ONNX's Erf, Gelu) have no stable form: BadInput naming them."""
    try:
        from jaxlib.mlir.dialects import stablehlo
    except ImportError:
        raise BadInput("--emit stablehlo-bytecode needs jaxlib: pip install 'legalize[jax]'"
                       " (or write text: --emit stablehlo)") from None
    chlo = sorted(set(re.findall(r"\bchlo\.[a-z_]+", text)))
    if chlo:
        raise BadInput(f"cannot write a StableHLO portable artifact: {', '.join(chlo)} "
                       "is not in StableHLO's stable opset (--emit stablehlo writes the text)")
    try:
        return bytes(stablehlo.serialize_portable_artifact_str(text, stablehlo.get_current_version()))
    except ValueError as e:
        raise BadInput(f"cannot write a StableHLO portable artifact: {e}") from None
