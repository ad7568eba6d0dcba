"""Specialize a TFLite model's dynamic dims to static sizes, for backends that only take
static shapes (LiteRT's GPU delegate: "only supports static-sized tensors"; Vela:
"Tensors must have constant shape").

    specialize_tflite(model, path, sizes, default=1) -> Specialized(bound, shapes_set, folded)

Every dynamic dim of the primary subgraph's inputs gets the size the user bound
(``--dim``, ``--input-shape``: ``sizes``, keyed as the check keys dims, ``input[axis]``)
or ``default`` (``--static``). The shapes of all tensors, and the values of the shape
arithmetic (``SHAPE`` and what computes on its result: ``STRIDED_SLICE``, ``PACK``,
``CONCATENATION``, ...) that are then constants, come from LiteRT itself: the model is
resized to those shapes and run once on zeros, with every intermediate tensor kept. The
shape values that the rest of the graph reads become constants, so that a ``RESHAPE`` to a
runtime shape becomes a ``RESHAPE`` to a constant one; what only fed them is then dead code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Mapping, Set

import numpy as np

from ..errors import BadInput
from ..ir.graph import CONST, OP, Graph, Node, Value
from ..ir.types import all_static
from ..model import Model
from ..kinds.tflite.records import TFLITE_DOMAIN
from .inputs import dim_key
from .litert import LiteRTError, LiteRTModel

# Ops whose result is a function of shapes only, when their operands are (int tensors).
SHAPE_ARITHMETIC = frozenset({
    "STRIDED_SLICE", "SLICE", "GATHER", "PACK", "UNPACK", "CONCATENATION", "RESHAPE", "SQUEEZE", "EXPAND_DIMS",
    "CAST", "ADD", "SUB", "MUL", "DIV", "FLOOR_DIV", "MAXIMUM", "MINIMUM", "REDUCE_PROD", "SUM", "FILL",
})
INT_TYPES = ("int32", "int64")


@dataclass
class Specialized:
    bound: Dict[str, int] = field(default_factory=dict)  # dim key -> size
    shapes_set: int = 0  # tensors whose shape became static
    folded: int = 0  # shape values made constants


def specialize_tflite(model: Model, path: Path, sizes: Mapping[str, int], default: int = 1) -> Specialized:
    graph = model.graph
    out = Specialized()
    feeds: Dict[str, np.ndarray] = {}
    for node in graph.inputs:
        v = node.output
        if v.type.shape is None:
            raise BadInput(f"input '{v.name}' has no known rank: its shape cannot be made static")
        shape = []
        for axis, d in enumerate(v.type.shape):
            if isinstance(d, int):
                shape.append(d)
                continue
            key = dim_key(v.name, axis) if d is None else d
            size = int(sizes.get(key, sizes.get(dim_key(v.name, axis), default)))
            out.bound[key] = size
            shape.append(size)
        feeds[v.name] = np.zeros(shape, _numpy(v))
    if not out.bound:
        return out
    try:
        lite = LiteRTModel(path, keep_tensors=True)
        lite.run(feeds)
    except LiteRTError as e:
        raise BadInput(f"{path}: LiteRT cannot run the model at the static shapes"
                       f" ({', '.join(f'{k}={v}' for k, v in out.bound.items())}): {e.reason}") from None
    it = lite.interpreter
    shapes = {d["index"]: [int(s) for s in d["shape"]] for d in it.get_tensor_details()}
    values = _values(graph)
    for index, v in values.items():
        s = v.type.shape
        if s is not None and not all_static(s) and index in shapes and len(shapes[index]) == len(s):
            v.type = v.type.with_shape(tuple(shapes[index]))
            out.shapes_set += 1
    for v in _shape_frontier(graph):
        index = v.info_index
        try:
            array = np.asarray(it.get_tensor(index))
        except Exception:  # noqa: BLE001 - a tensor LiteRT freed: left as it is
            continue
        _make_constant(graph, v, array)
        out.folded += 1
    return out


def _numpy(v: Value):
    return np.dtype({"float": "float32", "double": "float64", "string": "object"}.get(v.type.dtype, v.type.dtype))


def _values(graph: Graph) -> Dict[int, Value]:
    """The primary subgraph's values by tensor index (the importer keeps it in info_index)."""
    out: Dict[int, Value] = {}
    for node in graph.nodes():
        for v in node.outputs:
            if v.info_index >= 0:
                out[v.info_index] = v
    return out


def _shape_frontier(graph: Graph) -> List[Value]:
    """The shape values (computed from shapes and constants only) that something other
    than shape arithmetic reads: the ones worth a constant."""
    shape_only: Set[int] = set()
    for node in graph.ops():
        if node.graph is not graph or node.domain != TFLITE_DOMAIN or len(node.outputs) < 1:
            continue
        if any(v.type.dtype not in INT_TYPES for v in node.outputs):
            continue
        if node.op_type == "SHAPE" or (node.op_type in SHAPE_ARITHMETIC and all(
                v is None or id(v) in shape_only or (v.producer is not None and v.producer.kind == CONST)
                for v in node.inputs)):
            shape_only.update(id(v) for v in node.outputs)
    frontier = []
    for node in graph.ops():
        for v in node.outputs:
            if id(v) in shape_only and v.info_index >= 0 and any(
                    id(u.outputs[0]) not in shape_only if u.kind == OP and u.outputs else True
                    for u, _ in graph.users(v)):
                frontier.append(v)
    return frontier


def _make_constant(graph: Graph, v: Value, array: np.ndarray) -> None:
    from ..ir.constdata import ConstData

    name = graph.fresh_name(f"{v.name}_static")
    c = Value(name, v.type.with_shape(tuple(array.shape)), quant=v.quant)
    graph.add_node(Node(CONST, "$const", name=name, outputs=[c], data=ConstData.from_array(array)))
    graph.replace_all_uses_with(v, c)

