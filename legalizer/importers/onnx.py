"""ONNX ModelProto -> IR. Translates only; never rewrites.

Types come from ONNX shape inference (non-strict, with data propagation) merged with
what the model declares; the protos the model declares (value_info, graph inputs and
outputs, initializers, node attributes) are kept on the IR so that an export with no
pass in between gives the model back.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import onnx
import onnx.defs
from onnx import AttributeProto, GraphProto, ModelProto, TensorProto, TypeProto

from ..errors import BadInput
from ..ir.gc import paused_gc
from ..ir.graph import CONST, INPUT, OP, OUTPUT, Graph, Node, Value
from ..ir.types import UNKNOWN, TensorType
from ..ir.constdata import ConstData, check_external, check_tensor
from ..ir.dtypes import dtype_name
from ..model import Model
from ..passes.base import _graphs as all_graphs
from ..protoutil import copy_fields, strings_are_utf8

_ELEM_TYPES = frozenset(onnx.TensorProto.DataType.values())


def tensor_type(tp: TypeProto, what: str) -> Tuple[TensorType, Tuple[Tuple[int, int], ...]]:
    """TypeProto -> TensorType, and the (axis, size) of each negative dim in it;
    non-tensor types (sequences, maps, optionals) and missing types are UNKNOWN, as
    the Broadcastable trait never looks at them. A negative dim is an anonymous dynamic
    dim, ``?``: Paddle2ONNX and older exporters write -1 for a dynamic dim, and
    onnxruntime reads it so (shape inference sometimes produces one too)."""
    if tp is None or tp.WhichOneof("value") != "tensor_type":
        return UNKNOWN, ()
    tt = tp.tensor_type
    if tt.elem_type not in _ELEM_TYPES:
        raise BadInput(f"{what} has element type {tt.elem_type}, which ONNX does not define")
    dtype = dtype_name(tt.elem_type)
    if not tt.HasField("shape"):
        return TensorType(dtype, None), ()
    dims = []
    negative = []
    for k, d in enumerate(tt.shape.dim):
        kind = d.WhichOneof("value")
        if kind == "dim_value" and d.dim_value >= 0:
            dims.append(d.dim_value)
        elif kind == "dim_param" and d.dim_param:
            dims.append(d.dim_param)
        else:
            if kind == "dim_value":
                negative.append((k, d.dim_value))
            dims.append(None)
    return TensorType(dtype, tuple(dims)), tuple(negative)


# A model may declare a negative dim in many places (every value_info entry of an
# exporter that writes -1 for each dynamic dim): the first ones are named, then counted.
NEGATIVE_DIM_WARNINGS = 10


def _merge(declared: TensorType, inferred: TensorType) -> TensorType:
    """The more specific of two types for one value, dim by dim; declared wins ties."""
    if inferred.shape is None or (declared.shape is not None and len(declared.shape) != len(inferred.shape)):
        shape = declared.shape
    elif declared.shape is None:
        shape = inferred.shape
    else:
        shape = tuple(d if d is not None else i for d, i in zip(declared.shape, inferred.shape))
    return TensorType(declared.dtype or inferred.dtype, shape)


class _Importer:
    def __init__(self, model: ModelProto, inferred: Optional[ModelProto], base_dir: Optional[Path]):
        self.model = model
        self.inferred = inferred
        self.base_dir = base_dir
        self.opsets = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
        self.local_functions = {(f.domain, f.name) for f in model.functions}
        self.warnings: List[str] = []
        self._warned_ops = set()
        self.pending: Dict[Graph, List[Node]] = {}
        self._type_cache: Dict[bytes, Tuple[TensorType, tuple]] = {}
        self.negative_dims = 0  # declared negative dims, warned of up to NEGATIVE_DIM_WARNINGS

    def register(self, graph: Graph) -> None:
        graph.add_nodes(self.pending.pop(graph))
        for _, _, sub in graph.subgraphs():
            self.register(sub)

    # Types of one graph's values: declared (value_info, inputs, outputs) merged with
    # inferred. Both protos describe the same graph, node for node.
    def _types(self, g: GraphProto, inf: Optional[GraphProto]) -> Dict[str, TensorType]:
        types: Dict[str, TensorType] = {}
        cache = self._type_cache

        def add(infos, where, declared=True):
            for vi in infos:
                if vi.HasField("type"):
                    # Large graphs repeat a few types: each distinct TypeProto is read once.
                    key = vi.type.SerializeToString()
                    got = cache.get(key)
                    if got is None:
                        got = cache[key] = tensor_type(vi.type, f"{where} '{vi.name}'")
                    t, negative = got
                    if negative and declared:
                        self._negative_dims(g, f"{where} '{vi.name}'", negative)
                    old = types.get(vi.name)
                    types[vi.name] = t if old is None else _merge(old, t)
        add(g.input, "graph input")
        add(g.output, "graph output")
        add(g.value_info, "value")
        if inf is not None:
            add(inf.value_info, "value", declared=False)
            add(inf.output, "graph output", declared=False)
        return types

    def _negative_dims(self, g: GraphProto, what: str, negative) -> None:
        """One warning for each place the model declares a negative dim (read as ``?``)."""
        graph = f"graph '{g.name}': " if g is not self.model.graph else ""
        for axis, size in negative:
            self.negative_dims += 1
            if self.negative_dims <= NEGATIVE_DIM_WARNINGS:
                self.warnings.append(f"{graph}{what} dim {axis} is {size}: read as a dynamic dim")

    def _check_op(self, np_: onnx.NodeProto) -> None:
        domain = "" if np_.domain == "ai.onnx" else np_.domain
        if len(np_.input) > MAX_NODE_INPUTS:  # a Sum of a million operands: 7 GB and minutes, split
            raise BadInput(f"node '{np_.name or (np_.output[0] if np_.output else '')}': '{np_.op_type}' op has"
                           f" {len(np_.input):,} operands; legalize reads at most {MAX_NODE_INPUTS:,} per node")
        if (np_.domain, np_.op_type) in self.local_functions:
            return
        if domain not in self.opsets:
            raise BadInput(f"node '{np_.name or np_.output[0] if np_.output else ''}' uses domain "
                           f"'{np_.domain}' that the model does not import (opset_import)")
        if onnx.defs.has(np_.op_type, domain):
            return
        if domain in ("", "ai.onnx.ml", "ai.onnx.preview.training"):
            raise BadInput(f"node '{np_.name}' uses unknown op '{np_.op_type}' in the ONNX domain"
                           f" '{domain or 'ai.onnx'}'")
        key = (domain, np_.op_type)
        if key not in self._warned_ops:
            self._warned_ops.add(key)
            self.warnings.append(f"op '{domain}.{np_.op_type}' is from a domain legalize does not know;"
                                 " kept as an opaque node with its declared output types")

    def graph(self, g: GraphProto, inf: Optional[GraphProto], owner: Optional[Node],
              outer: List[Dict[str, Value]]) -> Graph:
        """Build one graph; its nodes are registered later, outermost first, by
        ``_register`` (a subgraph's links to outer values need the outer nodes)."""
        graph = Graph(g.name, self.opsets, owner)
        graph.ir_version = self.model.ir_version
        graph.base_dir = self.base_dir
        graph.proto = g
        types = self._types(g, inf)
        infos = {vi.name: (i, vi) for i, vi in enumerate(g.value_info)}
        initializers = {t.name: (i, t) for i, t in enumerate(g.initializer)}
        for t in g.initializer:
            check_tensor(t)
        nodes: List[Node] = []
        defined: Dict[str, Value] = {}

        def define(name: str, what: str) -> Value:
            if name in defined:
                raise BadInput(f"graph '{g.name}': value '{name}' is defined twice ({what})")
            idx, vi = infos.get(name, (-1, None))
            v = Value(name, types.get(name, UNKNOWN), info=vi, info_index=idx)
            defined[name] = v
            return v

        for vi in g.input:
            n = Node(INPUT, "$input", name=vi.name, proto=vi)
            n.outputs = [define(vi.name, "graph input")]
            if vi.name in initializers:  # an input with a default (IR version < 4 style)
                idx, t = initializers[vi.name]
                n.data = ConstData(t, self.base_dir, idx)
            nodes.append(n)
        inputs = {vi.name for vi in g.input}
        for name, (idx, t) in initializers.items():
            if name in inputs:
                continue
            n = Node(CONST, "$const", name=name, proto=t, data=ConstData(t, self.base_dir, idx))
            v = define(name, "initializer")
            # Its dims are its shape, whatever a value_info entry declares (a '?' or a -1
            # there is no dynamic dim of a constant).
            v.type = TensorType(dtype_name(t.data_type) or v.type.dtype, tuple(t.dims))
            n.outputs = [v]
            nodes.append(n)
        for idx, st in enumerate(g.sparse_initializer):
            name = st.values.name
            n = Node(CONST, "$const", name=name, proto=st, data=ConstData(st, self.base_dir, idx, sparse=True))
            v = define(name, "sparse initializer")
            v.type = TensorType(dtype_name(st.values.data_type) or v.type.dtype, tuple(st.dims))
            n.outputs = [v]
            nodes.append(n)

        op_nodes = []
        inf_nodes = inf.node if inf is not None and len(inf.node) == len(g.node) else None
        for k, np_ in enumerate(g.node):
            self._check_op(np_)
            n = Node(OP, np_.op_type, np_.domain, np_.name, proto=np_)
            n.outputs = [define(o, f"output of node '{np_.name}'") if o else Value("") for o in np_.output]
            op_nodes.append((n, np_, inf_nodes[k] if inf_nodes is not None else None))
            nodes.append(n)

        out_nodes = []
        for vi in g.output:
            if not vi.name:
                raise BadInput(f"graph '{g.name}': a graph output has no name")
            n = Node(OUTPUT, "$output", name=vi.name, proto=vi)
            out_nodes.append(n)
            nodes.append(n)

        # Subgraphs see this graph's values; resolve them after all values are defined.
        scopes = [defined] + outer
        for n, np_, inf_np in op_nodes:
            for a_idx, a in enumerate(np_.attribute):
                inf_a = inf_np.attribute[a_idx] if inf_np is not None else None
                if a.type == AttributeProto.GRAPH:
                    n.attrs[a.name] = self.graph(a.g, inf_a.g if inf_a is not None else None, n, scopes)
                elif a.type == AttributeProto.GRAPHS:
                    infs = list(inf_a.graphs) if inf_a is not None else [None] * len(a.graphs)
                    n.attrs[a.name] = [self.graph(sg, ig, n, scopes) for sg, ig in zip(a.graphs, infs)]
                else:
                    n.attrs[a.name] = a

        def resolve(name: str, user: str) -> Optional[Value]:
            if not name:
                return None
            for scope in scopes:
                v = scope.get(name)
                if v is not None:
                    return v
            raise BadInput(f"graph '{g.name}': {user} uses value '{name}', which no node,"
                               " input or initializer defines")
            return v

        for n, np_, _ in op_nodes:
            n.inputs = [resolve(i, f"node '{np_.name or np_.op_type}'") for i in np_.input]
        for n in out_nodes:
            v = resolve(n.name, "graph output")
            n.inputs = [v]
            if v.type.shape is None and v.type.dtype is None:
                v.type = types.get(n.name, UNKNOWN)
        # value_info entries no value of this graph took (naming a value of an enclosing
        # or nested graph, or nothing, or repeated): valid ONNX, kept for the export.
        taken = {v.info_index for v in defined.values()}
        graph.foreign_value_info = [(i, vi) for i, vi in enumerate(g.value_info) if i not in taken]
        self.pending[graph] = nodes
        return graph


# Operands of one node, at most: a variadic op (Sum, Max, Concat) of more is no model
# anyone exports, and the tosa target splits it into that many nodes.
MAX_NODE_INPUTS = 1 << 16

# Initializers larger than this are given to shape inference without their data: no
# shape computation reads a tensor this large (shapes, pads, scales and axes are a few
# numbers), and a multi-GB model is then not serialized and parsed twice more by it.
_INFER_DATA_LIMIT = 1 << 16


def _without_weights(model: ModelProto) -> ModelProto:
    """A copy of ``model`` whose large main-graph initializers keep their name, type
    and dims but not their data (external ones are small and kept as they are)."""
    stub = ModelProto()
    copy_fields(stub, model, {"graph"})
    g, sg = model.graph, stub.graph
    copy_fields(sg, g, {"initializer"})
    for t in g.initializer:
        if t.data_location == TensorProto.EXTERNAL or t.ByteSize() <= _INFER_DATA_LIMIT:
            sg.initializer.append(t)
        else:
            sg.initializer.add(name=t.name, data_type=t.data_type, dims=t.dims)
    return stub


# ``TensorProto.data_location = EXTERNAL`` serialized (field 14, varint 1): the weightless
# copy of a model holds every tensor's metadata (only large inline data is left out), so
# a model whose copy lacks these bytes has no external tensor; one that has them (or
# bytes of a small tensor that look like them) is walked.
_EXTERNAL = bytes([TensorProto.DESCRIPTOR.fields_by_name["data_location"].number << 3, TensorProto.EXTERNAL])


# A negative int64 in a protobuf varint takes ten bytes, the last 0x01; after 0x08, the
# tag of ``Dimension.dim_value``, it is a negative dim (or, rarely, bytes of a small
# initializer that look like one: then the search below finds nothing).
_NEGATIVE_DIM = re.compile(rb"\x08[\x80-\xff]{9}\x01")


def _clear_negative_dims(g: GraphProto) -> bool:
    """Make the negative dims declared on ``g``'s inputs, outputs and value_info
    anonymous, as onnxruntime reads them, so that shape inference does not compute with
    -1 as a size (an Add of ``-1x3`` and ``2x3`` would be left untyped); whether any was."""
    found = False
    for vi in itertools.chain(g.input, g.output, g.value_info):
        if vi.type.HasField("tensor_type"):
            for d in vi.type.tensor_type.shape.dim:
                if d.WhichOneof("value") == "dim_value" and d.dim_value < 0:
                    d.ClearField("dim_value")
                    found = True
    return found


# What ONNX shape inference may take beyond the helper's own memory (``bounded``), and
# how long: its data propagation allocates by a dim's size (``Mul(x[2^62], z[2^62])``, a
# model of 90 bytes, grows until the machine runs out), which no legal model needs.
INFER_MEMORY = 1 << 30
INFER_MEMORY_PER_BYTE = 32  # and this much per byte of the model without its weights
INFER_TIMEOUT_S = 300.0


def _infer(serialized: bytes) -> Tuple[Optional[ModelProto], Optional[str]]:
    """ONNX shape inference, non-strict, with data propagation (else without it), in
    the bounded helper; the inferred model or None, and why not, or why without data
    propagation (a warning), or None."""
    from .. import bounded

    try:
        out = bounded.call(_infer_here, serialized, timeout=INFER_TIMEOUT_S,
                           memory=max(INFER_MEMORY, INFER_MEMORY_PER_BYTE * len(serialized)))
    except bounded.Failed as e:
        return None, f"ONNX shape inference did not finish ({e}); the shapes are those the model declares"
    if out[:1] == b"-":
        return None, None  # inference fails on this model: the verifier judges its shapes
    note = None
    if out[:1] == b"m":
        note = ("ONNX shape inference with data propagation ran out of its memory"
                f" ({INFER_MEMORY / 2**30:.0f} GiB or more); shapes were inferred without it")
    return onnx.load_model_from_string(out[1:]), note


def _infer_here(serialized: bytes) -> bytes:
    """``_infer``'s work, in the helper: the inferred model's bytes after a tag: ``+``
    with data propagation, ``m`` without it after it ran out of memory, ``0`` without it
    after it failed, ``-`` for none."""
    try:
        tag, model = b"+", onnx.shape_inference.infer_shapes(serialized, check_type=False, strict_mode=False,
                                                              data_prop=True)
    except MemoryError:
        tag, model = b"m", None
    except Exception:  # noqa: BLE001 - inference is best effort; the verifier judges shapes
        tag, model = b"0", None
    if model is None:
        try:
            model = onnx.shape_inference.infer_shapes(serialized, check_type=False, strict_mode=False)
        except Exception:  # noqa: BLE001
            return b"-"
    return tag + model.SerializeToString()


def _check_strings(model: ModelProto, serialized: Optional[bytes]) -> None:
    """BadInput if a string field is not valid UTF-8 (proto2 parses any bytes into one,
    and the Python API then hands back ``bytes`` for a name or an op type). One C-level
    parse of the model without its weights decides; only then is the field looked for."""
    if serialized is not None and strings_are_utf8(serialized):
        return
    from ..fileio import invalid_string_field

    bad = invalid_string_field(model)
    if bad is not None:
        raise BadInput(f"not a valid ONNX model (string field '{bad}' is not valid UTF-8)")
    if serialized is None:
        raise BadInput("not a valid ONNX model (a string field is not valid UTF-8)")


def import_model(model: ModelProto, base_dir: Optional[Path] = None, infer: bool = True) -> Model:
    if not model.HasField("graph"):
        raise BadInput("the model has no graph")
    if not model.opset_import and model.ir_version >= 3:
        raise BadInput("the model imports no opset (opset_import is empty)")
    # The model without its weights: UTF-8 checked and shape-inferred, from one serialization.
    try:
        stub = _without_weights(model)
        serialized = stub.SerializeToString()
    except UnicodeDecodeError:  # a string field holds bytes that are not UTF-8
        stub = serialized = None
    _check_strings(model, serialized)
    # Every external location before a byte is read; with a model file, its data files
    # and offsets too (a model held in memory may name files it never needs read).
    if _EXTERNAL in serialized:
        check_external(model, base_dir, files=base_dir is not None)
    if infer and _NEGATIVE_DIM.search(serialized) and _clear_negative_dims(stub.graph):
        serialized = stub.SerializeToString()
    inferred, note = _infer(serialized) if infer else (None, None)
    del serialized, stub
    imp = _Importer(model, inferred, base_dir)
    if note is not None:
        imp.warnings.append(note)
    with paused_gc():
        graph = imp.graph(model.graph, inferred.graph if inferred is not None else None, None, [])
        imp.register(graph)
    if imp.negative_dims > NEGATIVE_DIM_WARNINGS:
        imp.warnings.append(f"{imp.negative_dims - NEGATIVE_DIM_WARNINGS} more declared dims are negative:"
                            " read as dynamic dims")
    for g in all_graphs(graph):
        g.nodes()  # a cycle is bad input: fail now, not in a pass
    return Model(graph, "onnx", model, base_dir, warnings=imp.warnings)
