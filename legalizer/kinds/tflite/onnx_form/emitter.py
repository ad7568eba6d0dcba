"""The ONNX graph being written (``Emitter``) and what every op's translation reads
through it: operands as stored or as real values, constants, quantization, results."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ....ir.dtypes import elem_type, numpy_dtype
from ....ir.graph import CONST, Graph, Node, Value
from ....ir.types import Quantization

FLOATS = ("float", "float16", "double", "bfloat16")


class NoForm(Exception):
    """The node has no ONNX form; the message names the part that has none, if not
    the op itself."""


def quantization(v: Value) -> Optional[Quantization]:
    """The quantization ``v`` is read through: only an integer tensor with a scale is
    quantized (float tensors may carry min/max statistics, which change nothing)."""
    q = v.quant
    if q is None or not q.scale or v.type.dtype in FLOATS:
        return None
    return q


def const_data(v: Optional[Value]) -> Optional[np.ndarray]:
    """The data of ``v`` if a constant holds it; None if it is computed (or absent)."""
    prod = None if v is None else v.producer
    if prod is not None and prod.kind == CONST and prod.data is not None:
        return np.asarray(prod.data.array)
    return None


def operand(n: Node, i: int) -> Optional[Value]:
    """Input ``i`` of ``n``; None for an optional one left out."""
    return n.inputs[i] if len(n.inputs) > i else None


def const_ints(v: Value, what: str) -> List[int]:
    """A constant index operand (an axis, a permutation) as ints; a dynamic one has no form."""
    data = const_data(v)
    if data is None:
        raise NoForm(f"{what} not constant")
    return [int(x) for x in data.reshape(-1)]


def _dequantized(data: np.ndarray, q: Quantization) -> np.ndarray:
    """What DequantizeLinear computes: (q - zero_point) * scale, in float32."""
    zp = np.asarray(q.zero_point or (0,), np.int64)
    scale = np.asarray(q.scale, np.float32)
    if q.per_axis:
        shape = [1] * data.ndim
        shape[q.quantized_dimension] = -1
        zp, scale = np.broadcast_to(zp, scale.shape).reshape(shape), scale.reshape(shape)
    else:
        zp, scale = zp[0], scale[0]
    # (8- and 16-bit data in int32, exact as in int64 and half the memory traffic)
    wide = np.int32 if data.dtype.itemsize <= 2 else np.int64
    return (data.astype(wide) - zp.astype(wide)).astype(np.float32) * scale


def option(n: Node, key: str, default=0):
    """A builtin option; a missing key is the schema default."""
    return n.attrs.get(key, default)


def _unique(base: str, taken: set) -> str:
    """``base``, or ``base_1``, ``base_2``, ... whichever is free first; now taken."""
    name, k = base, 0
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    taken.add(name)
    return name


class Emitter:
    """The ONNX graph being written, and where each IR value went in it."""

    def __init__(self, graph: Graph, opset: int, subgraphs: Sequence[Graph] = (),
                 caller: Optional["Emitter"] = None, nodes: Optional[List[onnx.NodeProto]] = None):
        self.graph, self.opset = graph, opset
        self.subgraphs = list(subgraphs)  # the model's, which WHILE / IF / CALL name by index
        self.nodes: List[onnx.NodeProto] = [] if nodes is None else nodes
        self.names: Dict[int, str] = {}  # id(Value) -> the ONNX tensor of its stored data
        self._real: Dict[int, str] = {}  # id(Value) -> its dequantized form
        self._reserved: Dict[int, str] = {}  # id(Value) -> its name as a graph output
        # A called subgraph is written into its caller's model: one namespace, one set of
        # initializers (a Loop body or If branch reads them from the outer scope).
        self.depth = 0 if caller is None else caller.depth + 1
        self.inits: List[TensorProto] = [] if caller is None else caller.inits
        self._taken: set = set() if caller is None else caller._taken
        self._node_names: set = set() if caller is None else caller._node_names
        self._small: Dict[tuple, str] = {} if caller is None else caller._small  # small constants, shared
        self.label = ""
        self._op_start = 0
        self._fresh: set = set()  # tensors made by the op being translated
        self.results: Dict[str, Value] = {}  # ONNX tensor -> the op result it holds (stored data)

    # ---- names ----------------------------------------------------------------------
    def fresh(self, base: str) -> str:
        return _unique(base or "t", self._taken)

    def reserve_boundary(self) -> None:
        """Graph inputs and outputs keep their TFLite names: claim them first."""
        for n in self.graph.inputs:
            self._taken.add(n.output.name)
            self.names[id(n.output)] = n.output.name
        for n in self.graph.outputs:
            v = n.inputs[0]
            if id(v) not in self.names:
                self._reserved[id(v)] = v.name
                self._taken.add(v.name)

    def _name_for(self, v: Value) -> str:
        return self._reserved.get(id(v)) or self.fresh(v.name)

    # ---- nodes and constants -----------------------------------------------------------
    def begin(self, n: Node) -> None:
        self.label = n.label
        self._op_start = len(self.nodes)
        self._fresh = set()

    def add_node(self, op_type: str, inputs: Sequence[str], outputs: Sequence[str], **attrs) -> None:
        name = _unique(f"{self.label}/{op_type}", self._node_names)
        # Trailing absent optional inputs are dropped, inner ones stay "".
        inputs = list(inputs)
        while inputs and not inputs[-1]:
            inputs.pop()
        self.nodes.append(helper.make_node(op_type, inputs, list(outputs), name=name, **attrs))

    def emit_all(self, op_type: str, inputs: Sequence[str], outputs: int, *, shared: str = "",
                 **attrs) -> List[str]:
        """One ONNX node of the op being translated; its output names. A ``shared``
        tensor (a dequantized value, named so) is not the op's own: never renamed."""
        outs = [self.fresh(shared or f"{self.label}/{op_type}") for _ in range(outputs)]
        if not shared:
            self._fresh.update(outs)
        self.add_node(op_type, inputs, outs, **attrs)
        return outs

    def emit(self, op_type: str, inputs: Sequence[str], *, shared: str = "", **attrs) -> str:
        """``emit_all`` of a node with one output: its name."""
        return self.emit_all(op_type, inputs, 1, shared=shared, **attrs)[0]

    def const(self, array, base: str = "const") -> str:
        a = np.asarray(array)
        key = (a.dtype.str, a.shape, a.tobytes()) if a.size <= 16 else None
        if key is not None and key in self._small:
            return self._small[key]
        name = self.fresh(base)
        # Not np.ascontiguousarray: it makes a scalar 1-D (a scalar constant packed into
        # Keras' Flatten shape vector gave Concat a rank-2 operand; a WHILE body's
        # counter came back as [1] for a [] loop variable).
        self.inits.append(numpy_helper.from_array(np.require(a, requirements="C"), name))
        if key is not None:
            self._small[key] = name
        return name

    def ints(self, values) -> str:
        return self.const(np.asarray(values, np.int64).reshape(-1), "ints")

    def scalar(self, value, dtype: str) -> str:
        return self.const(np.asarray(value, numpy_dtype(dtype)), "scalar")

    # ---- reading values -------------------------------------------------------------
    def raw(self, v: Value) -> str:
        """The tensor holding ``v``'s stored data (int8 for a quantized tensor)."""
        name = self.names.get(id(v))
        if name is None:
            data = const_data(v)
            if data is None:
                raise AssertionError(f"value {v.name!r} is used before it is produced")
            name = self.const(data, v.name or "const")
            self.names[id(v)] = name
        return name

    def real(self, v: Optional[Value]) -> str:
        """The tensor of ``v``'s real values, dequantized once if quantized; "" for an
        absent optional operand. A quantized constant is dequantized now: the model
        then computes exactly in float, whatever onnxruntime would fuse a
        DequantizeLinear of weights into (MatMul of dynamically quantized inputs)."""
        if v is None:
            return ""
        q = quantization(v)
        if q is None:
            return self.raw(v)
        hit = self._real.get(id(v))
        if hit is None:
            data = const_data(v)
            if data is not None:
                hit = self.const(_dequantized(data, q), f"{v.name}_real")
            else:
                hit = self.dequantize(self.raw(v), q, v.type.dtype, f"{v.name}_real")
            self._real[id(v)] = hit
        return hit

    def reals(self, n: Node) -> List[str]:
        return [self.real(v) for v in n.inputs]

    def real_dtype(self, v: Value) -> str:
        return "float" if quantization(v) is not None else v.type.dtype

    def cast(self, name: str, dtype: str, to: str) -> str:
        """``name`` (of ``dtype``) as ``to``: a Cast only where they differ."""
        return name if dtype == to else self.emit("Cast", [name], to=elem_type(to))

    def index(self, v: Value) -> str:
        """An index operand (shape, axes, begin, ...) as a 1-D int64 tensor: folded when
        constant."""
        data = const_data(v)
        if data is not None:
            return self.ints(data)
        name = self.raw(v)
        if v.type.dtype != "int64":
            name = self.emit("Cast", [name], to=TensorProto.INT64)
        return self.emit("Reshape", [name, self.ints([-1])])

    def permuted(self, v: Value, perm: Sequence[int]) -> str:
        """The real values of ``v`` transposed by ``perm``; a constant is transposed now."""
        data = const_data(v)
        if data is None:
            return self.emit("Transpose", [self.real(v)], perm=list(perm))
        q = quantization(v)
        return self.const(np.transpose(data if q is None else _dequantized(data, q), perm), f"{v.name}_t")

    # ---- quantization ---------------------------------------------------------------
    def _qparams(self, q: Quantization, dtype: str) -> Tuple[str, str, dict]:
        if dtype == "int16" and self.opset < 21:
            raise NoForm("int16 quantization needs opset 21")
        scale = np.asarray(q.scale, np.float32)
        zp = np.asarray(q.zero_point or (0,), numpy_dtype(dtype))
        if q.per_axis:
            return (self.const(scale, "scale"), self.const(np.broadcast_to(zp, scale.shape), "zero_point"),
                    {"axis": q.quantized_dimension})
        return self.const(scale.reshape(()), "scale"), self.const(zp.reshape(-1)[0], "zero_point"), {}

    def dequantize(self, name: str, q: Quantization, dtype: str, result: str) -> str:
        scale, zp, attrs = self._qparams(q, dtype)
        return self.emit("DequantizeLinear", [name, scale, zp], shared=result, **attrs)

    # ---- results --------------------------------------------------------------------
    def bind(self, v: Value, name: str, raw: bool) -> None:
        """Make ``name`` (the op's real result, or its stored data if ``raw``) the
        tensor of ``v``: quantized if ``v`` is, and named after ``v``."""
        q = None if raw else quantization(v)
        if q is not None:
            if v.type.dtype not in ("int8", "uint8", "int16"):
                raise NoForm(f"{v.type.dtype} quantized output")
            scale, zp, attrs = self._qparams(q, v.type.dtype)
            target = self._name_for(v)
            self.add_node("QuantizeLinear", [name, scale, zp], [target], **attrs)
        elif name in self._fresh:
            # The op's own tensor: renamed after the TFLite value, in the op's nodes only.
            self._fresh.discard(name)
            target = self._name_for(v)
            for node in self.nodes[self._op_start:]:
                for field in (node.input, node.output):
                    for i, x in enumerate(field):
                        if x == name:
                            field[i] = target
        elif id(v) in self._reserved:
            target = self._reserved[id(v)]
            self.add_node("Identity", [name], [target])
        else:
            target = name
        self.names[id(v)] = target
        self.results[target] = v

    def give_out(self, outputs: Sequence[Node]) -> None:
        """Graph outputs not written by an op under their name (a constant, a graph
        input given out again) get it through an Identity."""
        for out in outputs:
            v = out.inputs[0]
            name = self.raw(v)
            if name != v.name:
                self.label = v.name
                self.add_node("Identity", [name], [v.name])

    @contextmanager
    def writing_into(self, nodes: List[onnx.NodeProto]) -> Iterator[None]:
        """Nodes emitted meanwhile go into ``nodes`` (a Loop body being written)."""
        caller_nodes, self.nodes = self.nodes, nodes
        try:
            yield
        finally:
            self.nodes = caller_nodes

    def clip(self, y: str, lo, hi, dtype: str) -> str:
        return self.emit("Clip", [y, "" if lo is None else self.scalar(lo, dtype),
                                  "" if hi is None else self.scalar(hi, dtype)])

    def activation(self, n: Node, y: str) -> str:
        act = option(n, "fused_activation_function")
        fn = _ACTIVATIONS.get(act)
        if fn is None:
            raise NoForm(f"fused activation {act}")
        return fn(self, y, self.real_dtype(n.outputs[0]))


# tflite.ActivationFunctionType -> the ONNX form (SIGN_BIT has none).
_ACTIVATIONS: Dict[int, Callable[[Emitter, str, str], str]] = {
    0: lambda e, y, dt: y,
    1: lambda e, y, dt: e.clip(y, 0, None, dt),
    2: lambda e, y, dt: e.clip(y, -1, 1, dt),
    3: lambda e, y, dt: e.clip(y, 0, 6, dt),
    4: lambda e, y, dt: e.emit("Tanh", [y]),
}


def static_sizes(v: Value, dims: Sequence[int], why: str) -> List[int]:
    """The sizes of ``v``'s ``dims``, which must be known."""
    shape = v.type.shape
    sizes = [shape[d] if shape is not None and d < len(shape) else None for d in dims]
    if not all(isinstance(s, int) for s in sizes):
        raise NoForm(why)
    return sizes

