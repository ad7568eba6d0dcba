"""ONNX ModelProto -> IR. Translates only; never rewrites.

Types come from ONNX shape inference (non-strict, with data propagation) merged with
what the model declares; the protos the model declares (value_info, graph inputs and
outputs, initializers, node attributes) are kept on the IR so that an export with no
pass in between gives the model back.
"""

from __future__ import annotations

import functools
import itertools
import re
import threading
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import onnx
import onnx.defs
from onnx import AttributeProto, GraphProto, ModelProto, TensorProto, TypeProto

from ...errors import BadInput
from ...ir.gc import paused_gc
from ...ir.graph import CONST, INPUT, OP, OUTPUT, Graph, Node, Value
from ...ir.types import UNKNOWN, TensorType, names_a_dim
from ...ir.constdata import ConstData, check_external, check_tensor
from ...ir.dtypes import dtype_name
from .kind import KIND as ONNX
from ...model import Model
from ...shapes.ranks import infer_ranks
from . import contrib_shapes
from .protoutil import copy_fields, parse_types, strings_are_utf8
from .infer import infer_bytes as _infer_bytes, infer_here as _infer_here

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
        elif kind == "dim_param" and names_a_dim(d.dim_param):
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


# A node operand not defined yet (``_Importer.graph`` resolves it once all are).
_MISSING = Value("")
_ALWAYS_MISSING = itertools.repeat(_MISSING)
_NO_INFO = (-1, None)
_SUBGRAPH_TYPES = (AttributeProto.GRAPH, AttributeProto.GRAPHS)


class _GraphBuild:
    """One ONNX graph being imported: its proto, its values' types, its value_info
    entries by name, the values defined so far and the nodes made."""

    def __init__(self, g: GraphProto, types: Dict[str, TensorType], infos: Dict[str, Tuple[int, Any]]):
        self.g = g
        self.types = types
        self.infos = infos
        self.defined: Dict[str, Value] = {}
        self.nodes: List[Node] = []
        # Initializers (sparse ones too) by name: their element type and dims, which
        # their type keeps whatever is declared or inferred for them.
        self.consts: Dict[str, Tuple[int, Tuple[int, ...]]] = {}
        # The subgraphs built: (node index, attribute index, index in a GRAPHS list or
        # None, the Graph), as ``retype`` finds their inferred twins.
        self.children: List[Tuple[int, int, Optional[int], Graph]] = []
        self.out_nodes: List[Node] = []

    def define(self, name: str, what: str) -> Value:
        if name in self.defined:
            raise BadInput(f"graph '{self.g.name}': value '{name}' is defined twice ({what})")
        idx, vi = self.infos.get(name, (-1, None))
        v = Value(name, self.types.get(name, UNKNOWN), info=vi, info_index=idx)
        self.defined[name] = v
        return v

    def outputs(self) -> List[Node]:
        """The graph's output nodes (appended to ``nodes``), their operands unresolved."""
        out_nodes = []
        for vi in self.g.output:
            if not vi.name:
                raise BadInput(f"graph '{self.g.name}': a graph output has no name")
            n = Node(OUTPUT, "$output", name=vi.name, proto=vi)
            out_nodes.append(n)
            self.nodes.append(n)
        return out_nodes

    def resolve(self, scopes: List[Dict[str, Value]], name: str, user: str) -> Optional[Value]:
        """The value ``name`` as the innermost scope defines it; None for no operand."""
        if not name:
            return None
        for scope in scopes:
            v = scope.get(name)
            if v is not None:
                return v
        raise BadInput(f"graph '{self.g.name}': {user} uses value '{name}', which no node,"
                       " input or initializer defines")


class _Importer:
    def __init__(self, model: ModelProto, base_dir: Optional[Path]):
        self.model = model
        self.base_dir = base_dir
        self.opsets = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
        self.local_functions = {(f.domain, f.name) for f in model.functions}
        self.warnings: List[str] = []
        self._warned_ops = set()
        self._checked_ops = set()
        self.pending: Dict[Graph, List[Node]] = {}
        self.builds: Dict[Graph, _GraphBuild] = {}
        self._type_cache: Dict[bytes, Tuple[TensorType, tuple]] = {}
        self.negative_dims = 0  # declared negative dims, warned of up to NEGATIVE_DIM_WARNINGS

    def register(self, graph: Graph) -> None:
        graph.add_nodes(self.pending.pop(graph))
        for _, _, sub in graph.subgraphs():
            self.register(sub)

    # Types of one graph's values: declared (value_info, inputs, outputs), then merged
    # with inferred ones once ONNX shape inference answers (``retype``). Both protos
    # describe the same graph, node for node.
    def _add_types(self, g: GraphProto, types: Dict[str, TensorType], infos, where: str,
                   declared: bool = True, touched: Optional[List[str]] = None) -> None:
        """Merge the types of ``infos`` (ValueInfoProtos; inferred ones are read as
        ``protoutil.parse_types`` holds them) into ``types``, naming each in ``touched``."""
        cache = self._type_cache
        for vi in infos:
            if vi.HasField("type"):
                # Large graphs repeat a few types: each distinct TypeProto is read once.
                # (Inferred ones are held serialized: see protoutil.parse_types.)
                key = vi.type.SerializeToString() if declared else vi.type
                got = cache.get(key)
                if got is None:
                    tp = vi.type if declared else TypeProto.FromString(key)
                    got = cache[key] = tensor_type(tp, f"{where} '{vi.name}'")
                t, negative = got
                if negative and declared:
                    self._negative_dims(g, f"{where} '{vi.name}'", negative)
                name = vi.name
                old = types.get(name)
                types[name] = t if old is None else _merge(old, t)
                if touched is not None:
                    touched.append(name)

    def _declared_types(self, g: GraphProto) -> Dict[str, TensorType]:
        types: Dict[str, TensorType] = {}
        self._add_types(g, types, g.input, "graph input")
        self._add_types(g, types, g.output, "graph output")
        self._add_types(g, types, g.value_info, "value")
        return types

    def _negative_dims(self, g: GraphProto, what: str, negative) -> None:
        """One warning for each place the model declares a negative dim (read as ``?``)."""
        graph = f"graph '{g.name}': " if g is not self.model.graph else ""
        for axis, size in negative:
            self.negative_dims += 1
            if self.negative_dims <= NEGATIVE_DIM_WARNINGS:
                self.warnings.append(f"{graph}{what} dim {axis} is {size}: read as a dynamic dim")

    def _check_op(self, np_: onnx.NodeProto) -> None:
        """BadInput for an op of a domain the model does not import, or unknown in an
        ONNX domain; a warning (once) for an op of a domain legalize does not know.
        What it decides depends on the op alone: each op is looked at once."""
        key = (np_.domain, np_.op_type)
        if key in self._checked_ops:
            return
        self._check_op_once(np_)
        self._checked_ops.add(key)

    def _check_op_once(self, np_: onnx.NodeProto) -> None:
        domain = "" if np_.domain == "ai.onnx" else np_.domain
        if len(np_.input) > MAX_NODE_INPUTS:  # a Sum of a million operands: 7 GB and minutes, split
            raise _too_many_operands(np_)
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

    def graph(self, g: GraphProto, owner: Optional[Node], outer: List[Dict[str, Value]]) -> Graph:
        """Build one graph with the types it declares (``retype`` adds the inferred
        ones); its nodes are registered later, outermost first, by ``register`` (a
        subgraph's links to outer values need the outer nodes)."""
        graph = Graph(g.name, self.opsets, owner)
        graph.ir_version = self.model.ir_version
        graph.base_dir = self.base_dir
        graph.proto = g
        b = _GraphBuild(g, self._declared_types(g), {vi.name: (i, vi) for i, vi in enumerate(g.value_info)})
        self.builds[graph] = b
        self._sources(b)
        later, with_subgraphs = self._ops(b)
        b.out_nodes = b.outputs()
        # Subgraphs see this graph's values; resolve them after all values are defined.
        scopes = [b.defined] + outer
        self._subgraphs(b, with_subgraphs, scopes)
        for n, np_ in later:
            n.inputs = [b.resolve(scopes, i, f"node '{np_.name or np_.op_type}'") for i in np_.input]
        for n in b.out_nodes:
            n.inputs = [b.resolve(scopes, n.name, "graph output")]
        # value_info entries no value of this graph took (naming a value of an enclosing
        # or nested graph, or nothing, or repeated): valid ONNX, kept for the export.
        if b.infos:
            taken = {v.info_index for v in b.defined.values()}
            graph.foreign_value_info = [(i, vi) for i, vi in enumerate(g.value_info) if i not in taken]
        self.pending[graph] = b.nodes
        return graph

    def _sources(self, b: _GraphBuild) -> None:
        """The graph's inputs (with their defaults), initializers and sparse initializers."""
        g = b.g
        initializers = {t.name: (i, t) for i, t in enumerate(g.initializer)}
        for t in g.initializer:
            check_tensor(t)
        for vi in g.input:
            n = Node(INPUT, "$input", name=vi.name, proto=vi)
            n.outputs = [b.define(vi.name, "graph input")]
            if vi.name in initializers:  # an input with a default (IR version < 4 style)
                idx, t = initializers[vi.name]
                n.data = ConstData(t, self.base_dir, idx)
            b.nodes.append(n)
        inputs = {vi.name for vi in g.input}
        for name, (idx, t) in initializers.items():
            if name in inputs:
                continue
            n = Node(CONST, "$const", name=name, proto=t, data=ConstData(t, self.base_dir, idx))
            v = b.define(name, "initializer")
            b.consts[name] = (t.data_type, tuple(t.dims))
            # Its dims are its shape, whatever a value_info entry declares (a '?' or a -1
            # there is no dynamic dim of a constant).
            v.type = TensorType(dtype_name(t.data_type) or v.type.dtype, tuple(t.dims))
            n.outputs = [v]
            b.nodes.append(n)
        for idx, st in enumerate(g.sparse_initializer):
            name = st.values.name
            n = Node(CONST, "$const", name=name, proto=st, data=ConstData(st, self.base_dir, idx, sparse=True))
            v = b.define(name, "sparse initializer")
            b.consts[name] = (st.values.data_type, tuple(st.dims))
            v.type = TensorType(dtype_name(st.values.data_type) or v.type.dtype, tuple(st.dims))
            n.outputs = [v]
            b.nodes.append(n)

    def _ops(self, b: _GraphBuild) -> Tuple[List[Tuple[Node, onnx.NodeProto]], List[Tuple[Node, onnx.NodeProto, int]]]:
        """The graph's nodes, in one pass over them: a node's operands defined before it
        (the usual order) are resolved at once. Returns the nodes with others (defined
        later, or in an enclosing graph: resolved once all are defined) and the nodes
        with subgraph attributes, which see every value of this graph."""
        g, defined = b.g, b.defined
        checked, get, missing = self._checked_ops, defined.get, _MISSING
        type_of, info_of = b.types.get, (b.infos.get if b.infos else None)
        later: List[Tuple[Node, onnx.NodeProto]] = []
        with_subgraphs: List[Tuple[Node, onnx.NodeProto, int]] = []
        append = b.nodes.append
        for k, np_ in enumerate(g.node):
            op_type, domain = np_.op_type, np_.domain
            if (domain, op_type) not in checked:
                self._check_op(np_)
            outputs = []
            for o in np_.output[:]:
                if not o:
                    outputs.append(Value(""))
                    continue
                if o in defined:
                    raise BadInput(f"graph '{g.name}': value '{o}' is defined twice (output of node '{np_.name}')")
                idx, vi = info_of(o, _NO_INFO) if info_of is not None else _NO_INFO
                v = defined[o] = Value(o, type_of(o, UNKNOWN), None, 0, vi, idx)
                outputs.append(v)
            # An operand not defined yet, and an empty name (no operand), are resolved later.
            inputs = list(map(get, np_.input[:], _ALWAYS_MISSING))
            n = Node(OP, op_type, domain, np_.name, inputs, outputs, {}, np_)
            if missing in inputs:
                later.append((n, np_))
            if np_.attribute:
                attributes = np_.attribute
                if any(a.type in _SUBGRAPH_TYPES for a in attributes):
                    with_subgraphs.append((n, np_, k))
                else:
                    n.attrs = {a.name: a for a in attributes}
            append(n)
        return later, with_subgraphs

    def _subgraphs(self, b: _GraphBuild, with_subgraphs: List[Tuple[Node, onnx.NodeProto, int]],
                   scopes: List[Dict[str, Value]]) -> None:
        """The attributes of the nodes that hold subgraphs."""
        for n, np_, k in with_subgraphs:
            for a_idx, a in enumerate(np_.attribute):
                if a.type == AttributeProto.GRAPH:
                    sub = n.attrs[a.name] = self.graph(a.g, n, scopes)
                    b.children.append((k, a_idx, None, sub))
                elif a.type == AttributeProto.GRAPHS:
                    subs = n.attrs[a.name] = [self.graph(sg, n, scopes) for sg in a.graphs]
                    b.children.extend((k, a_idx, j, sub) for j, sub in enumerate(subs))
                else:
                    n.attrs[a.name] = a

    def retype(self, graph: Graph, inf: Optional[GraphProto]) -> None:
        """Merge the types ONNX shape inference found (``inf``, the graph's inferred
        twin, or None) into the values of ``graph`` and of its subgraphs (their twins
        found node for node, when inference kept the graph so), outermost first; then a
        graph output of an outer value whose type is unknown takes the type named here."""
        b = self.builds.pop(graph)
        types, defined, consts = b.types, b.defined, b.consts
        if inf is not None:
            touched: List[str] = []
            self._add_types(b.g, types, inf.value_info, "value", declared=False, touched=touched)
            self._add_types(b.g, types, inf.output, "graph output", declared=False, touched=touched)
            for name in touched:
                v = defined.get(name)
                if v is not None:
                    t, c = types[name], consts.get(name)
                    # an initializer's dims are its shape, whatever is declared or inferred
                    v.type = t if c is None else TensorType(dtype_name(c[0]) or t.dtype, c[1])
        inf_nodes = inf.node if inf is not None and len(inf.node) == len(b.g.node) else None
        for k, a_idx, j, sub in b.children:
            twin = None
            if inf_nodes is not None and a_idx < len(inf_nodes[k].attribute):
                inf_a = inf_nodes[k].attribute[a_idx]
                twin = inf_a.g if j is None else (inf_a.graphs[j] if j < len(inf_a.graphs) else None)
            self.retype(sub, twin)
        for n in b.out_nodes:
            v = n.inputs[0]
            if v.type.shape is None and v.type.dtype is None:
                v.type = types.get(n.name, UNKNOWN)


# Operands of one node, at most: a variadic op (Sum, Max, Concat) of more is no model
# anyone exports, and the tosa target splits it into that many nodes.
MAX_NODE_INPUTS = 1 << 16

# Initializers larger than this are given to shape inference without their data: no
# shape computation reads a tensor this large (shapes, pads, scales and axes are a few
# numbers), and a multi-GB model is then not serialized and parsed twice more by it.
_INFER_DATA_LIMIT = 1 << 16


def _has_large_initializers(model: ModelProto) -> bool:
    """Whether ``_without_weights`` would leave anything out (else the model itself is
    what shape inference gets: no copy of a graph of many nodes)."""
    return any(t.data_location != TensorProto.EXTERNAL and t.ByteSize() > _INFER_DATA_LIMIT
               for t in model.graph.initializer)


def weightless(model: ModelProto) -> ModelProto:
    """``model`` without the data of its large main-graph initializers (their name, type
    and dims kept: ``_without_weights``), or ``model`` itself if it has none: what a
    function that reads the model's bytes but not its weights is given (shape inference,
    onnx's version converter)."""
    return _without_weights(model) if _has_large_initializers(model) else model


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


# Data propagation (``infer_shapes(..., data_prop=True)``) computes the values of small
# integer tensors (shapes) so that more shapes are known: it changes nothing where no
# value has data to propagate. Data comes from an integer initializer or ``Constant`` of
# rank 0 or 1 (what ONNX's DataPropagationContext reads), or from an op whose propagation
# makes it from types (Shape, Size); the other ops with a propagation function only pass
# their operands' data on, and a subgraph (the ops with graph attributes) may hold
# initializers of its own. tests/test_ir.py checks these lists against onnx.defs.
DATA_SOURCE_OPS = ("Shape", "Size", "Constant")
SUBGRAPH_OPS = ("If", "Loop", "Scan", "SequenceMap", "FlexAttention")
DATA_PASSING_OPS = ("Add", "Sub", "Mul", "Cast", "Concat", "Gather", "Slice", "Squeeze", "Unsqueeze")
# ``NodeProto.op_type`` serialized: a node of one of these ops, in any graph or function,
# has these bytes (other bytes that look like them only keep data propagation on).
_OP_TYPE_TAG = bytes([onnx.NodeProto.DESCRIPTOR.fields_by_name["op_type"].number << 3 | 2])
_DATA_SOURCES = re.compile(_OP_TYPE_TAG + b"(?:" + b"|".join(
    re.escape(bytes([len(op)]) + op.encode()) for op in DATA_SOURCE_OPS + SUBGRAPH_OPS) + b")")
_INTEGER_TYPES = (TensorProto.INT32, TensorProto.INT64)


def _needs_data_propagation(model: ModelProto, serialized: bytes) -> bool:
    """Whether data propagation may find any data in ``model`` (``serialized``): else
    shape inference without it infers the same types, in a third less time."""
    if _DATA_SOURCES.search(serialized):
        return True
    g = model.graph
    return any(t.data_type in _INTEGER_TYPES and len(t.dims) <= 1
               for t in itertools.chain(g.initializer, (st.values for st in g.sparse_initializer)))


# What ONNX shape inference may take beyond the helper's own memory (``bounded_helper``), and
# how long: its data propagation allocates by a dim's size (``Mul(x[2^62], z[2^62])``, a
# model of 90 bytes, grows until the machine runs out), which no legal model needs.
INFER_MEMORY = 1 << 30
# and this much per byte of the model without its weights: inference without data
# propagation grows the helper by 26-31 B a byte (the 100k- and 1M-node chains; 32 was
# too few at 1M, whose inference then ran out and its types came from legalize's rules)
INFER_MEMORY_PER_BYTE = 64
INFER_TIMEOUT_S = 300.0


def _infer(serialized: bytes, data_prop: bool = True) -> Tuple[Optional[Any], Optional[str]]:
    """ONNX shape inference, non-strict, with data propagation (unless ``data_prop`` is
    false: see ``_needs_data_propagation``; else without it), in the bounded helper;
    the inferred types (``protoutil.parse_types``) or None, and why not, or why without
    data propagation (a warning), or None."""
    from ... import bounded_helper

    memory = max(INFER_MEMORY, INFER_MEMORY_PER_BYTE * len(serialized))
    try:
        out = bounded_helper.call(functools.partial(_infer_here, data_prop=data_prop), serialized,
                                  timeout=INFER_TIMEOUT_S, memory=memory)
    except bounded_helper.Failed as e:
        return None, f"ONNX shape inference did not finish ({e}); the shapes are those the model declares"
    if out[:1] == b"-":
        return None, None  # inference fails on this model: the verifier judges its shapes
    if out[:1] == b"M":
        return None, (f"ONNX shape inference ran out of its memory ({memory / 2**30:.1f} GiB); the shapes are"
                      " those the model declares")
    note = None
    if out[:1] == b"m":
        note = ("ONNX shape inference with data propagation ran out of its memory"
                f" ({INFER_MEMORY / 2**30:.0f} GiB or more); shapes were inferred without it")
    return parse_types(memoryview(out)[1:]), note  # (a slice would copy the reply)


class _Inference:
    """``_infer`` in a thread of its own, which spends its time waiting on the helper
    (the GIL free): the caller works meanwhile and takes the answer with ``result``."""

    def __init__(self, serialized: bytes, data_prop: bool):
        self._out: Tuple[Optional[Any], Optional[str]] = (None, None)
        self._error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._run, args=(serialized, data_prop), daemon=True,
                                        name="legalize-shape-inference")
        self._thread.start()

    def _run(self, serialized: bytes, data_prop: bool) -> None:
        try:
            self._out = _infer(serialized, data_prop)
        except BaseException as e:  # noqa: BLE001 - raised again in the caller's thread
            self._error = e

    def result(self) -> Tuple[Optional[Any], Optional[str]]:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._out


def _check_strings(model: ModelProto, serialized: Optional[bytes]) -> None:
    """BadInput if a string field is not valid UTF-8 (proto2 parses any bytes into one,
    and the Python API then hands back ``bytes`` for a name or an op type). One C-level
    parse of the model without its weights decides; only then is the field looked for."""
    if serialized is not None and strings_are_utf8(serialized):
        return
    from .protoutil import invalid_string_field

    bad = invalid_string_field(model)
    if bad is not None:
        raise BadInput(f"not a valid ONNX model (string field '{bad}' is not valid UTF-8)")
    if serialized is None:
        raise BadInput("not a valid ONNX model (a string field is not valid UTF-8)")


def _too_many_operands(np_: onnx.NodeProto) -> BadInput:
    return BadInput(f"node '{np_.name or (np_.output[0] if np_.output else '')}': '{np_.op_type}' op has"
                    f" {len(np_.input):,} operands; legalize reads at most {MAX_NODE_INPUTS:,} per node")


# ``AttributeProto.type`` serialized as GRAPH or GRAPHS: a model without these bytes has
# no subgraph attribute (bytes of other fields that look like them only make the
# operand-count check walk the attributes too).
_TYPE_KEY = AttributeProto.DESCRIPTOR.fields_by_name["type"].number << 3  # (wire type 0, a varint: 160)
_TYPE_TAG = bytes([_TYPE_KEY & 0x7F | 0x80, _TYPE_KEY >> 7])
_SUBGRAPH_ATTRIBUTE = re.compile(re.escape(_TYPE_TAG) + b"[" + bytes([AttributeProto.GRAPH, AttributeProto.GRAPHS]) + b"]")


def _check_operand_counts(g: GraphProto, serialized: Optional[bytes]) -> None:
    """BadInput for a node (subgraphs' too) of more than ``MAX_NODE_INPUTS`` operands,
    from the proto's counts before any work: a value read a million times by one node
    took 44 s and 2.9 GB of shape inference and import before the node was refused.
    Where the model (``serialized``) has no subgraph attribute, the graph's nodes'
    attributes are not looked at."""
    if serialized is not None and not _SUBGRAPH_ATTRIBUTE.search(serialized):
        for np_ in g.node:
            if len(np_.input) > MAX_NODE_INPUTS:
                raise _too_many_operands(np_)
        return
    todo = [g]
    while todo:
        for np_ in todo.pop().node:
            if len(np_.input) > MAX_NODE_INPUTS:
                raise _too_many_operands(np_)
            for a in np_.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    todo.append(a.g)
                elif a.type == onnx.AttributeProto.GRAPHS:
                    todo.extend(a.graphs)


def import_model(model: ModelProto, base_dir: Optional[Path] = None, infer: bool = True) -> Model:
    if not model.HasField("graph"):
        raise BadInput("the model has no graph")
    if not model.opset_import and model.ir_version >= 3:
        raise BadInput("the model imports no opset (opset_import is empty)")
    # The model without its weights: operand counts and UTF-8 checked, and shape-inferred,
    # from one serialization.
    try:
        stub = weightless(model)
        serialized = stub.SerializeToString()
    except UnicodeDecodeError:  # a string field holds bytes that are not UTF-8
        stub = serialized = None
    _check_operand_counts(model.graph, serialized)
    _check_strings(model, serialized)
    # Every external location before a byte is read; with a model file, its data files
    # and offsets too (a model held in memory may name files it never needs read).
    if _EXTERNAL in serialized:
        check_external(model, base_dir, files=base_dir is not None)
    if infer and _NEGATIVE_DIM.search(serialized):
        if stub is model:  # the model itself is left as it is
            stub = ModelProto()
            stub.CopyFrom(model)
        if _clear_negative_dims(stub.graph):
            serialized = stub.SerializeToString()
    # Shape inference runs in the helper while this process builds the IR from what the
    # model declares; the inferred types are merged in when it answers.
    inference = _Inference(serialized, _needs_data_propagation(model, serialized)) if infer else None
    del serialized, stub
    imp = _Importer(model, base_dir)
    with paused_gc():
        graph = imp.graph(model.graph, None, [])
    inferred, note = inference.result() if inference is not None else (None, None)
    if note is not None:
        imp.warnings.insert(0, note)
    with paused_gc():
        imp.retype(graph, inferred.graph if inferred is not None else None)
        del inferred
        imp.register(graph)
    if imp.negative_dims > NEGATIVE_DIM_WARNINGS:
        imp.warnings.append(f"{imp.negative_dims - NEGATIVE_DIM_WARNINGS} more declared dims are negative:"
                            " read as dynamic dims")
    for g in graph.graphs():
        g.nodes()  # a cycle is bad input: fail now, not in a pass
    infer_ranks(graph)  # where ONNX's inference gave up
    if infer and contrib_shapes.wanted(model, graph):  # contrib ops: onnxruntime's inference knows some
        stub = weightless(model)
        if contrib_shapes.contrib_ranks(graph, stub.SerializeToString(), tensor_type):
            infer_ranks(graph)
    return Model(graph, ONNX.name, model, base_dir, warnings=imp.warnings)


def inferred_types(model: ModelProto) -> Dict[str, TensorType]:
    """The types of the values of ``model``'s main graph, by name, as ``import_model``
    gives them (what the graph declares, merged with one ONNX shape inference, in the
    bounded helper), without building an IR: what a caller that holds the IR already
    (``emit_formats.bound_dims``) retypes it with. Initializers are not in it."""
    stub = weightless(model)
    serialized = stub.SerializeToString()  # what the helper reads: not parsed back into a model
    if _NEGATIVE_DIM.search(serialized):
        if stub is model:  # the model itself is left as it is
            stub = ModelProto()
            stub.CopyFrom(model)
        if _clear_negative_dims(stub.graph):
            serialized = stub.SerializeToString()
    inferred, _ = _infer(serialized, _needs_data_propagation(model, serialized))
    del serialized, stub
    imp = _Importer(model, None)
    g = model.graph
    types = imp._declared_types(g)
    if inferred is not None:
        imp._add_types(g, types, inferred.graph.value_info, "value", declared=False)
        imp._add_types(g, types, inferred.graph.output, "graph output", declared=False)
    for t in g.initializer:
        types.pop(t.name, None)
    return types
