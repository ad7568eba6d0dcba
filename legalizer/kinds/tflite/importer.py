"""TFLite flatbuffer -> IR, through the ``tflite`` package's readers.

Every subgraph becomes a top-level ``Graph`` (frontend ``tflite``; ``Model.subgraphs``
in file order). Conventions of the TFLite IR:

- An operator is a node of domain ``tflite`` named as ``BuiltinOperator`` does
  (``tflite.ADD``); a custom op is domain ``tflite.custom`` with its custom code as
  op type, kept opaque. ``attrs`` are the builtin options by snake_case schema field
  name (``fused_activation_function``, ``new_shape``), vectors as lists;
  ``proto`` is an ``OpRecord`` with what the IR does not model.
- A tensor is a ``Value`` named as the tensor (names made unique); its shape is
  ``shape_signature`` where there is one (-1 is a dynamic dim, ``None``), else
  ``shape``; ``quant`` holds its quantization; ``info`` the rest of its table (the
  fields not at their default; None when none are left).
- A tensor with buffer data is a constant whose array is a view of the file's bytes
  (no copy), in the stored dtype (int8 weights stay int8).
- An absent optional operand (index -1) is ``None``.
"""

from __future__ import annotations

import functools
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ...errors import BadInput
from ...ir.constdata import ConstData
from ...ir.gc import paused_gc
from ...ir.graph import CONST, INPUT, OP, OUTPUT, Graph, Node, Value
from ...ir.types import Quantization, TensorType
from .kind import KIND as TFLITE
from ...model import Model
from ...oprules import has_effects
from .schema import FILE_IDENTIFIER, SCHEMA_VERSION, FbTable, builtin_name, enum_name, read, without_defaults
# (re-exported: the records are the importer's, kept below it so the exporters need not import it)
from .records import CUSTOM_DOMAIN, DTYPES, TFLITE_DOMAIN, TFLITE_TYPES, OpRecord, TFLiteSource  # noqa: F401

# TFLite TensorType -> numpy dtype, by IR dtype name.
NUMPY = {"float": np.float32, "float16": np.float16, "int32": np.int32, "uint8": np.uint8, "int64": np.int64,
         "bool": np.bool_, "int16": np.int16, "complex64": np.complex64, "int8": np.int8, "double": np.float64,
         "complex128": np.complex128, "uint64": np.uint64, "uint32": np.uint32, "uint16": np.uint16}

# Fields of a tensor / operator table that the IR models; the rest is kept as it was.
TENSOR_FIELDS = frozenset(("shape", "shape_signature", "type", "buffer", "name", "quantization"))
OPERATOR_FIELDS = frozenset(("opcode_index", "inputs", "outputs", "builtin_options", "builtin_options_type",
                             "builtin_options2", "builtin_options2_type"))


def _quantization(q: Optional[FbTable]) -> Optional[Quantization]:
    if q is None:
        return None
    scale = q.get("scale")
    if scale is None or len(scale) == 0:
        return Quantization(extra=q) if q.fields else None
    zp = q.get("zero_point")
    zp = tuple(int(z) for z in zp) if zp is not None and len(zp) else (0,) * len(scale)
    return Quantization(tuple(float(s) for s in scale), zp, int(q.get("quantized_dimension", 0)), q)


def _ints(a) -> List[int]:
    """A vector of the file (a numpy view) as Python ints."""
    return a.tolist() if isinstance(a, np.ndarray) else [int(x) for x in a]


def _tensor_at(index: int, values: List[Value], idx: int, where: str) -> Optional[Value]:
    """Tensor ``idx`` of subgraph ``index`` (None for -1, no operand)."""
    if idx == -1:
        return None
    if not 0 <= idx < len(values):
        raise BadInput(f"subgraph {index}: {where} refers to tensor {idx}, but the subgraph has"
                       f" {len(values)}")
    return values[idx]


def _check_reads_defined(index: int, nodes: List[Node], produced: set) -> None:
    """BadInput for an operator of subgraph ``index`` that reads a tensor nothing defines."""
    for node in (n for n in nodes if n.kind == OP):
        for v in node.inputs:
            if v is not None and v.info_index not in produced:
                raise BadInput(f"subgraph {index}: operator {node.op} reads tensor '{v.name}', which no"
                               " operator, input or buffer defines")


class _Importer:
    def __init__(self, table: FbTable, buf, warnings: List[str]):
        self.table = table
        self.buf = buf
        self.warnings = warnings
        self.buffers: List[FbTable] = table.get("buffers", [])
        self.opcodes: List[FbTable] = table.get("operator_codes", [])
        self.external: Dict[int, np.ndarray] = {}  # TFLiteSource.external
        self.kinds: Dict[int, Tuple[str, str]] = {}  # opcode index -> (domain, op type), once known good
        self.types: Dict[Tuple, TensorType] = {}

    def buffer_data(self, index: int, tensor: str) -> Optional[np.ndarray]:
        if index <= 0:
            return None  # buffer 0 is the empty sentinel: an activation
        if index >= len(self.buffers):
            raise BadInput(f"tensor '{tensor}' refers to buffer {index}, but the model has {len(self.buffers)}")
        data = self.buffers[index].get("data")
        if data is not None and len(data):
            return data
        return self.stored(index, f"tensor '{tensor}'")

    def stored(self, index: int, user: str) -> Optional[np.ndarray]:
        """The bytes of buffer ``index`` if it is stored by offset (a large model's data
        lies after the flatbuffer: file bytes [offset, offset + size); an offset of 0 or
        1 means none), else None. ``user`` names who refers to it, for the error."""
        b = self.buffers[index]
        offset, size = int(b.get("offset", 0)), int(b.get("size", 0))
        if offset <= 1 or not size:
            return None
        if offset + size > len(self.buf):
            raise BadInput(f"{user}: buffer {index} lies past the end of the file"
                           f" (bytes {offset}..{offset + size}, the file has {len(self.buf)})")
        view = self.external.get(index)
        if view is None:  # one view per buffer: the exporter recognizes it by identity
            view = self.external[index] = np.frombuffer(self.buf, np.uint8, size, offset)
        return view

    def metadata(self) -> None:
        """Metadata kept in buffers stored by offset is written back the same way: find
        it (the IR does not model metadata, so no tensor leads to it)."""
        refs = [(int(m.get("buffer", 0)), f"metadata '{m.get('name', '')}'") for m in self.table.get("metadata", [])]
        refs += [(int(b), "metadata_buffer") for b in self.table.get("metadata_buffer", [])]
        for index, user in refs:
            if not 0 < index < len(self.buffers):
                continue  # written back as it was: nothing here reads metadata
            data = self.buffers[index].get("data")
            if data is None or not len(data):
                self.stored(index, user)

    def subgraph(self, index: int, sg: FbTable) -> Graph:
        g = Graph(sg.get("name") or f"subgraph{index}", {TFLITE_DOMAIN: SCHEMA_VERSION})
        g.frontend = "tflite"
        g.proto = FbTable("SubGraph", {k: v for k, v in sg.fields.items()
                                       if k not in ("tensors", "inputs", "outputs", "operators")})
        tensors: List[FbTable] = sg.get("tensors", [])
        values, consts = self._tensors(index, tensors)
        tensor = functools.partial(_tensor_at, index, values)
        nodes: List[Node] = []
        graph_inputs = [int(i) for i in sg.get("inputs", [])]
        for i in graph_inputs:
            v = tensor(i, "an input")
            if i in consts:  # fed or constant? LiteRT crashes writing into its read-only data
                raise BadInput(f"subgraph {index}: input tensor '{v.name}' also has constant data"
                               f" (buffer {consts[i].data.index})")
            nodes.append(Node(INPUT, "$input", name=v.name, outputs=[v]))
        produced = set(graph_inputs)
        for i in sorted(consts):
            if i not in produced:
                nodes.append(consts[i])
                produced.add(i)
        nodes += self._operators(index, sg, values, produced)
        _check_reads_defined(index, nodes, produced)
        for i in [int(i) for i in sg.get("outputs", [])]:
            v = tensor(i, "an output")
            if v.info_index not in produced:
                raise BadInput(f"subgraph {index}: output tensor '{v.name}' is never defined")
            nodes.append(Node(OUTPUT, "$output", name=v.name, inputs=[v]))
        g.add_nodes(nodes)
        _order_effects(g, [n for n in nodes if n.kind == OP])
        g.nodes()  # the topological order; a cycle is bad input
        return g

    def _tensors(self, index: int, tensors: List[FbTable]) -> Tuple[List[Value], Dict[int, Node]]:
        """One value per tensor of subgraph ``index`` (names made unique), and a
        constant node for each tensor with data, by tensor index."""
        values: List[Value] = []
        consts: Dict[int, Node] = {}
        names = set()
        for i, t in enumerate(tensors):
            f = t.fields  # (the dict itself: FbTable.get's call a field was a tenth of the import)
            name = f.get("name") or f"tensor{i}"
            if name in names:
                base, k = name, 1
                while f"{base}_{k}" in names:
                    k += 1
                name = f"{base}_{k}"
            names.add(name)
            ttype = self.tensor_type(t, index, i, name)
            info = without_defaults("Tensor", f, TENSOR_FIELDS)
            info = FbTable("Tensor", info) if info else None  # (most tensors: nothing more to keep)
            q = f.get("quantization")
            v = Value(name, ttype, info=info, info_index=i, quant=None if q is None else _quantization(q))
            values.append(v)
            buffer = int(f.get("buffer", 0))
            data = self.buffer_data(buffer, name)
            if data is None and buffer > 0 and ttype.is_static and 0 in ttype.shape:
                data = _EMPTY  # a zero-element constant has no bytes to store (LiteRT reads it so)
            if data is not None:
                consts[i] = Node(CONST, "$const", name=name, outputs=[v],
                                 data=self.const_data(data, v, name, t.get("sparsity"), buffer))
            # made into the IR: let the table go (the file's tables and the IR built from
            # them held at once were the peak; the list keeps its length for the checks)
            tensors[i] = None
        return values, consts

    def _operators(self, index: int, sg: FbTable, values: List[Value], produced: set) -> List[Node]:
        """The operator nodes of subgraph ``index``, in the order listed (which is the
        order TFLite runs them); adds the tensors they write to ``produced``."""
        nodes = []
        ops = sg.get("operators", [])
        outputs = [_ints(op.fields.get("outputs", ())) for op in ops]
        later = {i: k for k, outs in enumerate(outputs) for i in outs}
        count = len(values)
        for k, op in enumerate(ops):
            node = self.operator(k, op, index)
            ins = _ints(op.fields.get("inputs", ()))
            if ins and (min(ins) < -1 or max(ins) >= count):  # (the message names the first)
                for i in ins:
                    _tensor_at(index, values, i, f"operator {k} ({node.op})")
            node.inputs = [None if i == -1 else values[i] for i in ins]
            for i in ins:
                # TFLite runs operators in the order listed (LiteRT aborts on this).
                if i != -1 and i not in produced and later.get(i, -1) >= k:
                    raise BadInput(f"subgraph {index}: operator {k} ({node.op}) reads tensor '{values[i].name}'"
                                   f" before operator {later[i]} writes it (operators run in the order listed)")
            outs = outputs[k]
            for i in outs:
                if i in produced or not 0 <= i < count:
                    what = "refers to a missing tensor" if not 0 <= i < count else "writes a tensor that is already defined"
                    raise BadInput(f"subgraph {index}: operator {k} ({node.op}) {what} (index {i})")
                produced.add(i)
            node.outputs = [values[i] for i in outs]
            if node.op_type == "BROADCAST_TO":
                _name_broadcast_dims(node)
            nodes.append(node)
            ops[k] = None  # as the tensors' tables
        return nodes

    def tensor_type(self, t: FbTable, index: int, i: int, name: str) -> TensorType:
        """The type of tensor ``i`` (named ``name``) of subgraph ``index``."""
        f = t.fields
        code = int(f.get("type", 0))
        dtype = DTYPES.get(code)
        if dtype is None:
            # A code the schema defines but the IR has no dtype for (RESOURCE, VARIANT)
            # is kept by number; one it does not define is a corrupt or foreign file.
            if enum_name("TensorType", code) is None:
                raise BadInput(f"subgraph {index}: tensor {i} '{name}' has type code {code}, which TFLite does"
                               " not define")
            dtype = f"tflite_type{code}"
        sig = f.get("shape_signature")
        shape = f.get("shape")
        dims = sig if sig is not None and len(sig) else shape
        if dims is None or len(dims) == 0:
            # No dims: a scalar says so with has_rank (or is a constant); otherwise the
            # rank is unknown, and an unranked tensor is never reshaped on a guess.
            shape = () if f.get("has_rank") or f.get("buffer", 0) else None
        else:
            dims = _ints(dims)
            shape = tuple(dims) if min(dims) >= 0 else tuple(None if d < 0 else d for d in dims)
        # one (frozen) type for the tensors of one dtype and shape, as the ONNX importer does
        got = self.types.get((dtype, shape))
        if got is None:
            got = self.types[dtype, shape] = TensorType(dtype, shape)
        return got

    def const_data(self, data: np.ndarray, v: Value, name: str, sparsity: Optional[FbTable], buffer: int) -> ConstData:
        """A constant's data. A sparse one (pruned weights: the buffer holds the nonzero
        values, ``sparsity`` where they go) is written back as it is stored, and made
        dense, as LiteRT's DENSIFY does, only when its value is needed (a fold)."""
        if sparsity is None:
            return ConstData(None, None, buffer, array=self.const_array(data, v, name))
        np_dtype, shape = NUMPY.get(v.type.dtype), v.type.shape
        if np_dtype is None or shape is None or not v.type.is_static:
            raise BadInput(f"sparse constant tensor '{name}' must have a numeric type and a static shape")
        levels = _sparse_levels(sparsity, shape, name)
        need = levels.count * np.dtype(np_dtype).itemsize
        if len(data) < need:
            raise BadInput(f"sparse constant tensor '{name}': its sparsity places {levels.count} values, which"
                           f" need {need} bytes, its buffer has {len(data)}")
        return ConstData(None, None, buffer, stored=data,
                         loader=lambda: _densify(levels, shape, np.frombuffer(data, np_dtype, levels.count)))

    def const_array(self, data: np.ndarray, v: Value, name: str) -> np.ndarray:
        np_dtype = NUMPY.get(v.type.dtype)
        shape = v.type.shape
        if np_dtype is not None and shape is not None and any(d is None for d in shape):
            raise BadInput(f"constant tensor '{name}' has a dynamic or negative dim in its shape"
                           f" ({'x'.join('?' if d is None else str(d) for d in shape)})")
        if np_dtype is None or shape is None:
            return data  # strings, packed int4, ...: the raw bytes, written back as they are
        count = int(np.prod(shape, dtype=np.int64))
        need = count * np.dtype(np_dtype).itemsize
        if len(data) < need:
            raise BadInput(f"constant tensor '{name}' of shape {list(shape)} needs {need} bytes, its buffer has"
                           f" {len(data)}")
        return np.frombuffer(data, np_dtype, count).reshape(shape)

    def operator(self, k: int, op: FbTable, sg_index: int) -> Node:
        f = op.fields
        idx = int(f.get("opcode_index", 0))
        if not 0 <= idx < len(self.opcodes):
            raise BadInput(f"subgraph {sg_index}: operator {k} has opcode index {idx}, but the model has"
                           f" {len(self.opcodes)} operator codes")
        code = self.opcodes[idx]
        kind = self.kinds.get(idx)
        if kind is None:
            builtin = max(int(code.get("deprecated_builtin_code", 0)), int(code.get("builtin_code", 0)))
            name = builtin_name(builtin)
            if name is None:
                raise BadInput(f"subgraph {sg_index}: operator {k} has unknown builtin operator code {builtin}")
            if name == "CUSTOM":
                kind = CUSTOM_DOMAIN, code.get("custom_code") or "custom"
            else:
                kind = TFLITE_DOMAIN, name
            self.kinds[idx] = kind
        domain, op_type = kind
        rest = FbTable("Operator", without_defaults("Operator", f, OPERATOR_FIELDS))
        options_table, attrs = None, {}
        for union in ("builtin_options", "builtin_options2"):
            opts = f.get(union)
            if opts is not None:
                options_table = opts.type
                attrs = {key: v.tolist() if isinstance(v, np.ndarray) else v for key, v in opts.fields.items()}
        return Node(OP, op_type, domain, "", attrs=attrs, proto=OpRecord(code, rest, options_table))


_EMPTY = np.zeros(0, np.uint8)
_DENSE = 0  # DimensionType: DENSE, SPARSE_CSR


@dataclass
class _SparseLevels:
    """A sparse tensor's SparsityParameters, checked: per traversal level its dense size
    or its CSR (segments, indices); the traversal order; per block dim the original dim
    it blocks and its size."""

    levels: List[Any]  # int (dense size) or (segments, indices)
    order: List[int]
    block_map: List[int]
    block_size: List[int]
    count: int  # how many values they place


def _sparse_levels(sparsity: FbTable, shape: Tuple[int, ...], name: str) -> _SparseLevels:
    """The levels of ``sparsity`` as LiteRT's FormatConverter reads them, or BadInput
    where they do not describe a tensor of ``shape``."""
    def bad(why: str) -> BadInput:
        return BadInput(f"sparse constant tensor '{name}' of shape {list(shape)}: {why}")

    order = [int(x) for x in np.asarray(sparsity.get("traversal_order", ()), np.int64).reshape(-1)]
    block_map = [int(x) for x in np.asarray(sparsity.get("block_map", ()), np.int64).reshape(-1)]
    dims: List[FbTable] = sparsity.get("dim_metadata", []) or []
    rank, total = len(shape), len(order)
    if total != rank + len(block_map) or sorted(order[:rank]) != list(range(rank)) or \
            sorted(order[rank:]) != list(range(rank, total)) or len(dims) != total:
        raise bad(f"traversal order {order} with block map {block_map} and {len(dims)} dim metadata"
                  " does not describe its dims")
    if any(not 0 <= d < rank for d in block_map):
        raise bad(f"block map {block_map} names a dim it does not have")
    block_size = [int(dims[order[rank + k]].get("dense_size", 0)) for k in range(len(block_map))]
    if any(b <= 0 or shape[d] % b for b, d in zip(block_size, block_map)):
        raise bad(f"block sizes {block_size} do not divide dims {[shape[d] for d in block_map]}")
    # the size of each traversal level's dim: the tensor's dims in blocks, then the blocks'
    blocked = list(shape)
    for b, d in zip(block_size, block_map):
        blocked[d] //= b
    bounds = [blocked[d] if d < rank else block_size[d - rank] for d in order]
    levels: List[Any] = []
    # Entries per level: the entries of a level are numbered 0..count-1, which is what
    # the next level's segments are indexed by.
    count, limit = 1, int(np.prod(shape, dtype=np.int64))
    for k, m in enumerate(dims):
        if int(m.get("format", _DENSE)) == _DENSE:
            size = int(m.get("dense_size", 0))
            if not 0 <= size <= bounds[k]:
                raise bad(f"level {k} has dense size {size}, its dim {bounds[k]}")
            levels.append(size)
            count *= size
        else:
            seg, idx = m.get("array_segments"), m.get("array_indices")
            if seg is None or idx is None:
                raise bad(f"level {k} is sparse but has no segments or indices")
            seg = np.asarray(seg.get("values", ()), np.int64).reshape(-1)
            idx = np.asarray(idx.get("values", ()), np.int64).reshape(-1)
            if len(seg) <= count or seg[0] != 0 or np.any(np.diff(seg) < 0) or seg[-1] > len(idx):
                raise bad(f"level {k}: its {len(seg)} segments are not an increasing run from 0, one more than"
                          f" the {count} entries of the level before, into its {len(idx)} indices")
            used = idx[:seg[count]]
            if len(used) and (used.min() < 0 or used.max() >= bounds[k]):
                raise bad(f"level {k} has an index outside its dim of {bounds[k]}")
            levels.append((seg, idx))
            count = int(seg[count])
        if count > limit:
            raise bad(f"level {k} makes more entries ({count}) than the tensor has")
    return _SparseLevels(levels, order, block_map, block_size, count)


def _densify(s: _SparseLevels, shape: Tuple[int, ...], values: np.ndarray) -> np.ndarray:
    """The dense tensor: LiteRT's FormatConverter::SparseToDense, one traversal level at
    a time over all paths at once (``_sparse_levels`` has checked every index). Each path
    is a position in every level so far; ``prev`` is its position in the last one (what
    the next level's segments index)."""
    cols: List[np.ndarray] = []
    prev = np.zeros(1, np.int64)
    for level in s.levels:
        if isinstance(level, int):
            parent = np.repeat(np.arange(len(prev)), level)
            here = np.tile(np.arange(level, dtype=np.int64), len(prev))
            prev = prev[parent] * level + here
        else:
            seg, idx = level
            counts = seg[prev + 1] - seg[prev]
            parent = np.repeat(np.arange(len(prev)), counts)
            prev = seg[prev][parent] + np.arange(len(parent)) - np.repeat(np.cumsum(counts) - counts, counts)
            here = idx[prev]
        cols = [c[parent] for c in cols] + [here]
    rank = len(shape)
    orig: List[np.ndarray] = [np.zeros(0)] * rank
    for level, dim in enumerate(s.order[:rank]):
        orig[dim] = cols[level]
    for level in range(rank, len(s.order)):
        b = s.order[level] - rank
        orig[s.block_map[b]] = orig[s.block_map[b]] * s.block_size[b] + cols[level]
    dense = np.zeros(shape, values.dtype)
    if len(values):
        dense[tuple(orig)] = values
    return dense


def _order_effects(g: Graph, ops: List[Node]) -> None:
    """TFLite runs operators in the order listed. Data edges keep most of that order;
    ops with effects (a variable assigned, then read) have nothing else that orders
    them: they are chained in file order, so that no rewrite moves one past another."""
    prev = None
    for n in ops:
        if has_effects(n.op):
            if prev is not None:
                g.order(prev, n)
            prev = n


def _name_broadcast_dims(node: Node) -> None:
    """TFLite has no names for dynamic dims. The dynamic dims of BROADCAST_TO results
    are named after the shape tensor they come from (``s[0]``), so that operands
    broadcast to one shape are visibly one shape (what the ``xla`` profile asks)."""
    if node.op != "tflite.BROADCAST_TO" or len(node.inputs) < 2 or node.inputs[1] is None or not node.outputs:
        return
    out, shape = node.outputs[0], node.inputs[1]
    if out.type.shape is not None:
        out.type = out.type.with_shape(tuple(f"{shape.name}[{k}]" if d is None else d
                                             for k, d in enumerate(out.type.shape)))


_READ_ERRORS = (struct.error, IndexError, ValueError, TypeError, UnicodeDecodeError, OverflowError,
                RecursionError, AttributeError, KeyError)


def _check_identifier(path: Path, buf) -> None:
    """BadInput unless bytes 4..8 are the TFLite file identifier. Files get here by their
    name or a flatbuffer-like header (``importers.reader.sniff``); say what was found."""
    if len(buf) < 8:
        raise BadInput(f"{path}: not a TFLite flatbuffer ({len(buf)} bytes, too short for the"
                       " 8-byte flatbuffer header)")
    found = bytes(buf[4:8])
    if found != FILE_IDENTIFIER:
        shown = repr(found)[1:]  # 'XXXX', control bytes escaped: one line
        raise BadInput(f"{path}: not a TFLite flatbuffer (file identifier {shown} at bytes 4..8,"
                       f" expected '{FILE_IDENTIFIER.decode()}')")


def _check_signatures(signatures: List[FbTable], subgraphs: List[FbTable]) -> None:
    """A SignatureDef names a subgraph and tensors of it by index; LiteRT trusts them,
    and the exporter follows them to their new indices, so an index out of range is
    bad input here rather than a crash or a dangling signature later."""
    for k, sig in enumerate(signatures):
        key = sig.get("signature_key") or f"#{k}"
        sg = int(sig.get("subgraph_index", 0))
        if not 0 <= sg < len(subgraphs):
            raise BadInput(f"signature '{key}' refers to subgraph {sg}, but the model has {len(subgraphs)}")
        count = len(subgraphs[sg].get("tensors", []))
        for what in ("inputs", "outputs"):
            for m in sig.get(what, []):
                idx = int(m.get("tensor_index", 0))
                if not 0 <= idx < count:
                    raise BadInput(f"signature '{key}': {what[:-1]} '{m.get('name', '')}' refers to tensor {idx},"
                                   f" but subgraph {sg} has {count}")


def load_tflite(path: Path) -> Model:
    """Read a ``.tflite`` file (memory-mapped: weights are views, not copies)."""
    try:
        import tflite
    except ImportError:  # a dependency, so a broken install: say so, not a traceback
        raise BadInput(f"{path}: reading TFLite needs the 'tflite' package, which is not installed"
                       " (pip install tflite)") from None

    try:
        with open(path, "rb") as f:
            buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as e:
        raise BadInput(f"{path}: cannot read: {getattr(e, 'strerror', None) or e}") from None
    _check_identifier(path, buf)
    warnings: List[str] = []
    try:
        (root,) = struct.unpack_from("<I", buf, 0)
        if root + 4 > len(buf):
            raise ValueError("root offset past the end")
        with paused_gc():  # a table a field: the collector would walk them all, again and again
            table = read(tflite.Model.GetRootAs(buf, 0), "Model")
        subgraphs = table.fields.pop("subgraphs", [])
        if not subgraphs:
            raise BadInput(f"{path}: TFLite model has no subgraph")
        imp = _Importer(table, buf, warnings)
        with paused_gc():
            graphs = [imp.subgraph(i, sg) for i, sg in enumerate(subgraphs)]
        _check_signatures(table.get("signature_defs", []), subgraphs)
        imp.metadata()
    except BadInput as e:
        raise BadInput(f"{path}: {e}" if not str(e).startswith(str(path)) else str(e)) from None
    except _READ_ERRORS as e:
        raise BadInput(f"{path}: not a valid TFLite flatbuffer (truncated or corrupt:"
                       f" {type(e).__name__}: {str(e).splitlines()[0] if str(e) else 'bad offset'})") from None
    for g in graphs:
        custom = sorted({n.op_type for n in g.ops() if n.domain == CUSTOM_DOMAIN})
        if custom:
            warnings.append(f"subgraph '{g.name}': custom ops kept opaque: {', '.join(custom)}")
    io = [([int(i) for i in sg.get("inputs", [])], [int(i) for i in sg.get("outputs", [])]) for sg in subgraphs]
    model = Model(graphs[0], TFLITE.name, TFLiteSource(table, len(buf), io, imp.external), path.resolve().parent, path,
                  warnings, subgraphs=graphs)
    return model
