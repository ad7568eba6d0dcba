"""The StableHLO emitter: SSA names, types, constants, runtime dims, and the StableHLO
building blocks every lowering shares (https://openxla.org/stablehlo/spec).

Types come from the IR: a static dim prints as its size, a symbol or ``?`` as ``?``;
symbols are still used here, to prove dims equal (``known_nonexpanding_dimensions``).
Shape vectors are ``tensor<Nxi64>``, as ONNX's ``Shape`` makes them; a runtime dim is
``stablehlo.get_dimension_size`` (i32) converted to i64 and reshaped to ``tensor<1xi64>``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ....ir.dtypes import DTYPE_OF_MLIR, MLIR_ELEMENT, numpy_dtype
from ....ir.graph import Graph, Node, Value
from .. import onnx_attrs
from ..printer import (STABLEHLO_LITERALS, dense_body, i64_array, int_list, is_float, mlir_string,
                       tensor_type)
from ..registry import LoweringTable, Unsupported
from ....ir.types import all_static

# ONNX op type -> its lowering: ``(cx: Emitter, node) -> [SSA name or None per output]``.
LOWERINGS = LoweringTable("stablehlo")

Dim = Union[int, str, None]
# A runtime dim: a static size, or the SSA name of a tensor<1xi64> holding it.
RDim = Union[int, str]


@dataclass(frozen=True)
class TT:
    """A ranked tensor type: MLIR element type and IR dims (int, symbol or None)."""

    elem: str
    dims: Tuple[Dim, ...]

    @classmethod
    def of(cls, v: Value) -> "TT":
        t = v.type
        if t.dtype not in MLIR_ELEMENT:
            raise Unsupported(f"element type {t.dtype}")
        if t.shape is None:
            raise Unsupported(f"unranked value '{v.name}'")
        return cls(MLIR_ELEMENT[t.dtype], tuple(t.shape))

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def static(self) -> bool:
        return all_static(self.dims)

    def with_dims(self, dims) -> "TT":
        return TT(self.elem, tuple(dims))

    def with_elem(self, elem: str) -> "TT":
        return TT(elem, self.dims)

    def __str__(self) -> str:
        return tensor_type(self.elem, self.dims)


def np_type(elem: str) -> np.dtype:
    """The numpy type of an MLIR element type."""
    return numpy_dtype(DTYPE_OF_MLIR[elem])


def dense(array: np.ndarray, tt: TT) -> str:
    """``dense<...> : tensor<...>``."""
    return f"dense<{dense_body(array, tt.elem, STABLEHLO_LITERALS)}> : {tt}"


def escape_braces(s: str) -> str:
    """``s`` in a shape assertion's message, where ``{0}`` stands for an operand: a
    literal ``{`` doubled. (Shape refinement fills the message in with LLVM's ``formatv``,
    which reads ``{{`` as ``{`` and a lone ``}`` as itself.)"""
    return s.replace("{", "{{")


def _compare_type(elem: str) -> str:
    if is_float(elem):
        return "FLOAT"
    return "UNSIGNED" if elem.startswith("ui") or elem == "i1" else "SIGNED"


def dims_equal(a: Dim, b: Dim) -> bool:
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
        if not is_float(elem) and isinstance(x, float) and np.isinf(x):
            if elem == "i1":
                x = x > 0
            else:
                info = np.iinfo(np_type(elem))
                x = info.max if x > 0 else info.min
        return self.const(np.asarray(x, np_type(elem)), TT(elem, ()), "cst")

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
            return self.emit(f"stablehlo.broadcast_in_dim {ssa}, dims = {int_list(bdims)} : ({src}) -> {out}", out)
        if shape is None:
            if out_rdims is None:
                raise AssertionError("a dynamic broadcast needs its runtime result shape")
            shape = self.shape_vector(out_rdims)
        expanding, nonexpanding = [], []
        for i, j in enumerate(bdims):
            a, b = src.dims[i], out.dims[j]
            if a == 1 and b != 1:
                expanding.append(i)
            elif dims_equal(a, b):
                nonexpanding.append(i)
        attrs = []
        if expanding:
            attrs.append(f"known_expanding_dimensions = {i64_array(expanding)}")
        if nonexpanding:
            attrs.append(f"known_nonexpanding_dimensions = {i64_array(nonexpanding)}")
        attr = (" {" + ", ".join(attrs) + "}") if attrs else ""
        return self.emit(f"stablehlo.dynamic_broadcast_in_dim {ssa}, {shape}, dims = {int_list(bdims)}{attr}"
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
               f"    }}) {{dimensions = {i64_array(sorted(axes))}}} : ({src}, {it}) -> {out}")
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
               f"    }}) {{window_dimensions = {i64_array(window)}, window_strides = {i64_array(strides)},"
               f" window_dilations = {i64_array(dilations)}, padding = dense<{pad}> : tensor<{len(padding)}x2xi64>}}"
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
        self.shape_assertion(ok, [a, b], f"legalize: {escape_braces(what)}: runtime dims {{0}} and {{1}} do not"
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
                          f"{mlir_string(message)}, has_side_effect = true}} : ({types}) -> ()")

    def dim_vector(self, d: RDim) -> str:
        """A runtime dim as a tensor<1xi64> (a constant when static)."""
        return self.index_vector([d]) if isinstance(d, int) else d

    def broadcast_rdim(self, a: Tuple[str, int], b: Tuple[str, int], what: str) -> RDim:
        """numpy's broadcast of dim ``a[1]`` of ``a[0]`` and dim ``b[1]`` of ``b[0]``,
        at run time when neither is statically 1 nor provably equal to the other."""
        da, db = self.tt(a[0]).dims[a[1]], self.tt(b[0]).dims[b[1]]
        if da == 1:
            return self.rdim(*b)
        if db == 1 or dims_equal(da, db):
            return self.rdim(*a)
        if isinstance(da, int) and isinstance(db, int):
            raise Unsupported(f"dims {da} and {db} do not broadcast")
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
        return onnx_attrs.attr(node, name, default)

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
            raise Unsupported(f"runtime {what}")
        return k

    def ints_arg(self, node: Node, attr: str, index: int) -> Optional[List[int]]:
        """An int list that is an attribute before ``onnx_attrs.OPERANDS_SINCE`` and an
        operand from it."""
        if not onnx_attrs.params_are_operands(self.graph, node) or attr in node.attrs:
            a = self.attr(node, attr)
            return None if a is None else [int(x) for x in a]
        k = self.const_input(node, index, attr)
        return None if k is None else [int(x) for x in np.asarray(k).reshape(-1)]


def arg(cx: Emitter, node: Node, i: int) -> str:
    """The SSA name of operand ``i``."""
    return cx.v(node.inputs[i])


def result_type(node: Node, i: int = 0) -> TT:
    return TT.of(node.outputs[i])


def has_input(node: Node, i: int) -> bool:
    return i < len(node.inputs) and node.inputs[i] is not None
