"""The few ops the passes build, spelled in each frontend's op set.

A pass asks ``ops_for(graph)`` and gets the same operations for an ONNX graph
(``Unsqueeze``, ``Expand``, ``Shape``, ...) and for a TFLite one (``RESHAPE``,
``BROADCAST_TO``, ``SHAPE``, ...), so the rewrite logic is written once.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np
import onnx.numpy_helper
from onnx import helper

from ..kinds.pt2.records import ATEN_CALL, AtenCall, In
from ..ir.constdata import ConstData
from ..ir.dtypes import dtype_of_array
from ..ir.graph import CONST, Graph, Node, Value
from ..ir.types import Quantization, TensorType


def _placed_quant(q: Optional[Quantization], axes: Sequence[int], rank: int) -> Optional[Quantization]:
    """Quantization of data given 1-dims at ``axes`` (of the new rank): a per-axis
    quantized dim moves with its dim."""
    if q is None or not q.per_axis:
        return q
    kept = [k for k in range(rank) if k not in axes]
    return Quantization(q.scale, q.zero_point, kept[q.quantized_dimension], q.extra)


class OnnxOps:
    index_dtype = "int64"
    # The rank-agnostic rewrites (passes.rank_agnostic) are written in its ops: Shape,
    # Expand, Where at an opset that has them.
    rank_agnostic = True

    @staticmethod
    def ints_attr(key: str, values: List[int]):
        """A list-of-ints attribute as its nodes hold one: an AttributeProto, typed (an
        empty list has no type onnx can infer)."""
        return helper.make_attribute(key, values, attr_type=onnx.AttributeProto.INTS)

    @staticmethod
    def const(graph: Graph, base: str, array: np.ndarray, quant: Optional[Quantization] = None,
              data: Optional[ConstData] = None) -> Value:
        """A new constant: an initializer, or a ``Constant`` op in models of IR version < 4
        (whose initializers must all be graph inputs too, which would make them overridable).
        ``data``: the array's bytes as they already are (external data, never read)."""
        name = graph.fresh_name(base)
        t = TensorType(dtype_of_array(array), tuple(array.shape))
        if graph.ir_version < 4:
            attr = helper.make_attribute("value", onnx.numpy_helper.from_array(np.asarray(array), name))
            return graph.add_op("Constant", [], [t], name=name, attrs={"value": attr}, output_names=[name]).output
        v = Value(name, t)
        graph.add_node(Node(CONST, "$const", name=name, outputs=[v], data=data or ConstData.from_array(array)))
        return v

    @classmethod
    def expand_rank(cls, graph: Graph, value: Value, axes: Tuple[int, ...], new_shape: Tuple, base: str) -> Value:
        out_type = [value.type.with_shape(new_shape)]
        name = graph.fresh_name(base)
        if graph.opsets.get("", 1) >= 13:
            axes_value = cls.const(graph, base + "_axes", np.asarray(axes, np.int64))
            return graph.add_op("Unsqueeze", [value, axes_value], out_type, name=name, output_names=[base]).output
        return graph.add_op("Unsqueeze", [value], out_type, attrs={"axes": helper.make_attribute("axes", list(axes))},
                            name=name, output_names=[base]).output

    @classmethod
    def reshape(cls, graph: Graph, value: Value, dims: Sequence[int], out_type: TensorType, base: str) -> Value:
        """``value``'s elements in the shape ``dims`` (constant; -1 for one unknown dim)."""
        shape = cls.const(graph, base + "_shape", np.asarray(list(dims), np.int64))
        return graph.add_op("Reshape", [value, shape], [out_type], name=graph.fresh_name(base),
                            output_names=[base]).output

    @staticmethod
    def shape(graph: Graph, v: Value, base: str) -> Value:
        return graph.add_op("Shape", [v], [TensorType("int64", (len(v.type.shape),))], name=graph.fresh_name(base),
                            output_names=[base]).output

    @staticmethod
    def gather(graph: Graph, data: Value, index: Value, base: str) -> Value:
        return graph.add_op("Gather", [data, index], [TensorType(data.type.dtype, index.type.shape)],
                            name=graph.fresh_name(base), output_names=[base]).output

    @staticmethod
    def equal(graph: Graph, a: Value, b: Value, base: str) -> Value:
        return graph.add_op("Equal", [a, b], [TensorType("bool", a.type.shape)], name=graph.fresh_name(base),
                            output_names=[base]).output

    @staticmethod
    def where(graph: Graph, cond: Value, a: Value, b: Value, base: str) -> Value:
        return graph.add_op("Where", [cond, a, b], [a.type], name=graph.fresh_name(base), output_names=[base]).output

    @staticmethod
    def concat(graph: Graph, pieces: List[Value], out_type: TensorType, base: str) -> Value:
        return graph.add_op("Concat", pieces, [out_type], name=graph.fresh_name(base),
                            attrs={"axis": helper.make_attribute("axis", 0)}, output_names=[base]).output

    @staticmethod
    def broadcast_to(graph: Graph, v: Value, shape: Value, out_type: TensorType, name: str, base: str) -> Value:
        return graph.add_op("Expand", [v, shape], [out_type], name=name, output_names=[base]).output


class TFLiteOps:
    """TFLite builtins; shape tensors are int32, as TFLite's kernels take them."""

    index_dtype = "int32"
    rank_agnostic = False

    @staticmethod
    def ints_attr(key: str, values: List[int]):
        return values

    @staticmethod
    def const(graph: Graph, base: str, array: np.ndarray, quant: Optional[Quantization] = None,
              data: Optional[ConstData] = None) -> Value:
        name = graph.fresh_name(base)
        v = Value(name, TensorType(dtype_of_array(array), tuple(array.shape)), quant=quant)
        graph.add_node(Node(CONST, "$const", name=name, outputs=[v], data=data or ConstData.from_array(array)))
        return v

    @classmethod
    def _op(cls, graph: Graph, op: str, inputs, out_type: TensorType, base: str, attrs=None,
            quant: Optional[Quantization] = None) -> Value:
        out = graph.add_op(op, inputs, [out_type], domain="tflite", attrs=attrs or {}, output_names=[base]).output
        out.quant = quant
        return out

    @classmethod
    def expand_rank(cls, graph: Graph, value: Value, axes: Tuple[int, ...], new_shape: Tuple, base: str) -> Value:
        quant = _placed_quant(value.quant, axes, len(new_shape))
        out_type = value.type.with_shape(new_shape)
        dynamic = [d for d in new_shape if not isinstance(d, int)]
        if len(dynamic) <= 1:  # one unknown dim: RESHAPE's -1 stands for it
            dims = [d if isinstance(d, int) else -1 for d in new_shape]
            shape = cls.const(graph, base + "_shape", np.asarray(dims, np.int32))
            return cls._op(graph, "RESHAPE", [value, shape], out_type, base, {"new_shape": dims}, quant)
        if list(axes) != list(range(len(axes))):
            raise NotImplementedError("TFLite rank expansion places 1-dims in front only")
        ones = cls.const(graph, base + "_ones", np.ones(len(axes), np.int32))
        shape = cls.concat(graph, [ones, cls.shape(graph, value, base + "_inshape")],
                           TensorType("int32", (len(new_shape),)), base + "_shape")
        return cls._op(graph, "RESHAPE", [value, shape], out_type, base, {}, quant)

    @classmethod
    def reshape(cls, graph: Graph, value: Value, dims: Sequence[int], out_type: TensorType, base: str) -> Value:
        shape = cls.const(graph, base + "_shape", np.asarray(list(dims), np.int32))
        return cls._op(graph, "RESHAPE", [value, shape], out_type, base, {"new_shape": list(dims)}, value.quant)

    @classmethod
    def shape(cls, graph: Graph, v: Value, base: str) -> Value:
        return cls._op(graph, "SHAPE", [v], TensorType("int32", (len(v.type.shape),)), base, {"out_type": 2})

    @classmethod
    def gather(cls, graph: Graph, data: Value, index: Value, base: str) -> Value:
        return cls._op(graph, "GATHER", [data, index], TensorType(data.type.dtype, index.type.shape), base,
                       {"axis": 0, "batch_dims": 0})

    @classmethod
    def equal(cls, graph: Graph, a: Value, b: Value, base: str) -> Value:
        return cls._op(graph, "EQUAL", [a, b], TensorType("bool", a.type.shape), base)

    @classmethod
    def where(cls, graph: Graph, cond: Value, a: Value, b: Value, base: str) -> Value:
        return cls._op(graph, "SELECT_V2", [cond, a, b], a.type, base)

    @classmethod
    def concat(cls, graph: Graph, pieces: List[Value], out_type: TensorType, base: str) -> Value:
        return cls._op(graph, "CONCATENATION", pieces, out_type, base, {"axis": 0, "fused_activation_function": 0})

    @classmethod
    def broadcast_to(cls, graph: Graph, v: Value, shape: Value, out_type: TensorType, name: str, base: str) -> Value:
        return cls._op(graph, "BROADCAST_TO", [v, shape], out_type, base, quant=v.quant)


def _aten(name: str):
    """``torch.ops.aten.NAME`` (``view.default``): torch is imported only for a program
    that has ATen ops."""
    import torch

    packet, overload = name.split(".")
    return getattr(getattr(torch.ops.aten, packet), overload)


def _edge(name: str):
    """ExecuTorch's Edge op ``NAME`` (``view_copy.default``; a dim-order copy's in its
    namespace)."""
    from executorch.exir.dialects._ops import ops as exir_ops

    packet, overload = name.split(".")
    ns = exir_ops.edge.dim_order_ops if packet.startswith(("_clone_dim_order", "_to_dim_order")) else exir_ops.edge.aten
    return getattr(getattr(ns, packet), overload)


def _view_dims(shape: Sequence) -> List[int]:
    """A view's target for ``shape``: -1 for its one unknown dim."""
    unknown = [d for d in shape if not isinstance(d, int)]
    if len(unknown) > 1:
        raise NotImplementedError("an ATen view to a shape with more than one symbolic dim")
    return [d if isinstance(d, int) else -1 for d in shape]


class AtenOps:
    """Core ATen calls (``kinds.pt2.importer``): a node holds the ``AtenCall`` it is written
    back as; sizes are Python lists in the call, not tensors. A view reads a contiguous
    tensor: a permute's or an expand's result is copied (``clone``) first."""

    index_dtype = "int64"
    rank_agnostic = False
    # Results that are views with other strides: ``view`` cannot read them as they are.
    STRIDED = frozenset({"aten.permute.default", "aten.expand.default", "aten.slice.Tensor", "aten.select.int",
                         "aten.transpose.int", "aten.t.default", "aten.as_strided.default", "aten.diagonal.default"})

    @staticmethod
    def ints_attr(key: str, values: List[int]):
        return list(values)

    @staticmethod
    def const(graph: Graph, base: str, array: np.ndarray, quant: Optional[Quantization] = None,
              data: Optional[ConstData] = None) -> Value:
        return TFLiteOps.const(graph, base, array, None, data)

    # ExecuTorch's Edge dialect has copies for views, and dim-order copies for clones.
    EDGE_NAMES = {"view.default": "view_copy.default", "permute.default": "permute_copy.default",
                  "expand.default": "expand_copy.default", "unsqueeze.default": "unsqueeze_copy.default",
                  "clone.default": "_clone_dim_order.default"}

    @classmethod
    def call(cls, graph: Graph, name: str, inputs: List[Value], args: tuple, out_type: TensorType, base: str,
             meta: Optional[dict] = None, kwargs: Optional[dict] = None, target=None) -> Value:
        """A call of ``aten.NAME`` on ``inputs`` (``In(i)`` in ``args`` stands for input i),
        in the graph's op set (Core ATen, or ExecuTorch's Edge dialect); ``target``: the
        op itself (a node's own op, made again at another rank)."""
        kwargs = dict(kwargs or {})
        if getattr(graph, "aten_dialect", "aten") == "edge":
            name = cls.EDGE_NAMES.get(name, name)
            if target is None:
                target = _edge(name)
            if "dim_order" in kwargs or name == "_clone_dim_order.default":
                kwargs.pop("memory_format", None)
                kwargs["dim_order"] = list(range(len(out_type.shape or ())))
        attrs = {ATEN_CALL: AtenCall(target if target is not None else _aten(name), tuple(args), kwargs,
                                     dict(meta or {}))}
        return graph.add_op(name, list(inputs), [out_type], domain="aten", attrs=attrs,
                            name=graph.fresh_name(base), output_names=[base]).output

    @classmethod
    def contiguous(cls, graph: Graph, v: Value, meta: Optional[dict] = None) -> Value:
        if getattr(graph, "aten_dialect", "aten") == "edge":
            return v  # its views are copies
        prod = v.producer
        if prod is not None and prod.op in cls.STRIDED:
            return cls.call(graph, "clone.default", [v], (In(0),), v.type, f"{v.name}_contiguous", meta,
                            {"memory_format": _contiguous_format()})
        return v

    @classmethod
    def view(cls, graph: Graph, v: Value, shape: Sequence, base: str, meta: Optional[dict] = None) -> Value:
        """``v`` viewed as ``shape`` (its dims: ints, or a symbol for one unknown dim)."""
        src = cls.contiguous(graph, v, meta)
        return cls.call(graph, "view.default", [src], (In(0), _view_dims(shape)), v.type.with_shape(tuple(shape)),
                        base, meta)

    @classmethod
    def expand_rank(cls, graph: Graph, value: Value, axes: Tuple[int, ...], new_shape: Tuple, base: str) -> Value:
        """``unsqueeze`` at each of ``axes`` (of the new rank, in order): exact for any
        symbolic dims, and for a strided operand."""
        out = value
        shape = list(value.type.shape)
        for a in sorted(axes):
            shape.insert(a, 1)
            out = cls.call(graph, "unsqueeze.default", [out], (In(0), a), value.type.with_shape(tuple(shape)), base)
        return out

    @classmethod
    def reshape(cls, graph: Graph, value: Value, dims: Sequence[int], out_type: TensorType, base: str) -> Value:
        src = cls.contiguous(graph, value)
        return cls.call(graph, "view.default", [src], (In(0), list(dims)), out_type, base)

    @classmethod
    def broadcast_to(cls, graph: Graph, v: Value, shape: Value, out_type: TensorType, name: str, base: str) -> Value:
        return cls.call(graph, "expand.default", [v], (In(0), _view_dims(out_type.shape)), out_type, base)

    @staticmethod
    def _no_tensor_shapes(*_a, **_k):
        raise NotImplementedError("ATen programs take sizes as SymInts, not shape tensors")

    shape = gather = equal = where = concat = _no_tensor_shapes


def _contiguous_format():
    import torch

    return torch.contiguous_format


FRONTEND_OPS = {"onnx": OnnxOps, "tflite": TFLiteOps, "aten": AtenOps}


def ops_for(graph: Graph):
    return FRONTEND_OPS[graph.frontend]
