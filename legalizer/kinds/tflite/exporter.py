"""IR -> TFLite flatbuffer. Everything the importer kept (the Model table's
description, metadata and signatures, each operator's opcode version and options,
each tensor's quantization, sparsity and flags) is written back; what the passes
added is written in the same form. Original buffers keep their indices (metadata and
signatures refer to them); a buffer no tensor uses any more is left empty.

A model whose buffers came stored by offset (Buffer.offset/size: data after the
flatbuffer, the layout of models over 2 GB) is written the same way: every buffer
that was stored so, and every new one, goes after the flatbuffer, 16-byte aligned.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np

from ...errors import BadInput
from ...atomic_files import Staged, staged_output
from ...ir.gc import paused_gc
from ...ir.graph import CONST, OP, Graph, Node, Value
from ...ir.types import Quantization
from ...model import Model
from ...oprules import frontend_rules
from .schema import SCHEMA_VERSION, FbTable, builtin_code, enum_name, options_type, serialize
from .records import CUSTOM_DOMAIN, TFLITE_DOMAIN, TFLITE_TYPES, OpRecord, TFLiteSource

CUSTOM_CODE = 32
# BuiltinOperator codes above 127 do not fit the int8 deprecated_builtin_code field,
# which then holds this placeholder.
PLACEHOLDER_FOR_GREATER_OP_CODES = 127
# Data stored after the flatbuffer starts on this boundary, as the TFLite converter
# aligns it, so that the runtime can use it in place from a memory map.
EXTERNAL_ALIGN = 16


class _Writer:
    def __init__(self, model: Model):
        src = model.proto if isinstance(model.proto, TFLiteSource) else None
        self.table = FbTable("Model", dict(src.table.fields) if src is not None else {"version": SCHEMA_VERSION})
        self.buffers: List[FbTable] = [FbTable("Buffer", {})] + [FbTable("Buffer", dict(b.fields)) for b in
                                                                self.table.fields.get("buffers", [])[1:]]
        # buffer index -> its bytes, for buffers stored after the flatbuffer
        self.external: Dict[int, np.ndarray] = dict(src.external) if src is not None else {}
        self.out_of_line = bool(self.external)  # new buffers follow the model's layout
        self.used_buffers = {int(m.get("buffer", 0)) for m in self.table.fields.get("metadata", [])}
        self.used_buffers |= {int(b) for b in self.table.fields.get("metadata_buffer", [])}
        self.opcodes: List[FbTable] = list(self.table.fields.get("operator_codes", []))
        self.opcode_index: Dict[int, int] = {id(c): i for i, c in enumerate(self.opcodes)}
        self.new_opcodes: Dict[Tuple, int] = {}
        self.buffer_of: Dict[int, int] = {}  # id(array) -> buffer index
        self.rules = frontend_rules("tflite")

    # ---- buffers and tensors -----------------------------------------------------
    def buffer(self, node: Node) -> int:
        # a sparse constant's stored values (never densified on the way through)
        arr = node.data.stored if node.data.stored is not None else node.data.array
        hit = self.buffer_of.get(id(arr))
        if hit is not None:
            return hit
        orig = node.data.index
        if orig > 0 and orig < len(self.buffers) and self._is_original(orig, arr):
            idx = orig
        else:
            idx = len(self.buffers)
            self.buffers.append(FbTable("Buffer", {}))
            data = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
            if self.out_of_line:
                self.external[idx] = data
            else:
                self.buffers[idx].fields["data"] = data
        self.used_buffers.add(idx)
        self.buffer_of[id(arr)] = idx
        return idx

    def _is_original(self, idx: int, arr: np.ndarray) -> bool:
        data = self.buffers[idx].fields.get("data")
        if data is None:
            data = self.external.get(idx)
        if data is None and arr.size == 0:
            return True  # a zero-element constant, whose buffer is empty
        base = arr.base if isinstance(arr, np.ndarray) else None
        return data is not None and (arr is data or base is data or
                                     (isinstance(base, np.ndarray) and base.base is data.base and base.base is not None))

    def tensor(self, v: Value, buffer: int) -> FbTable:
        t = FbTable("Tensor", dict(v.info.fields) if isinstance(v.info, FbTable) else {})
        t.fields["name"] = v.name
        t.fields["type"] = _type_code(v)
        shape = v.type.shape
        if shape is not None:
            # (lists: the writer packs a short vector of scalars faster than numpy does)
            t.fields["shape"] = [d if isinstance(d, int) else 1 for d in shape]
            if any(not isinstance(d, int) for d in shape) or "shape_signature" in (v.info.fields if isinstance(v.info, FbTable) else {}):
                t.fields["shape_signature"] = [d if isinstance(d, int) else -1 for d in shape]
            else:
                t.fields.pop("shape_signature", None)
        else:
            t.fields.pop("shape", None)
            t.fields.pop("shape_signature", None)
        if buffer:
            t.fields["buffer"] = buffer
        q = _quantization(v.quant)
        if q is not None:
            t.fields["quantization"] = q
        return t

    # ---- operators --------------------------------------------------------------------
    def opcode(self, node: Node) -> int:
        rec = node.proto if isinstance(node.proto, OpRecord) else None
        if rec is not None and id(rec.opcode) in self.opcode_index:
            return self.opcode_index[id(rec.opcode)]
        if node.domain == CUSTOM_DOMAIN:
            code, custom, version = CUSTOM_CODE, node.op_type, 1
        elif node.domain == TFLITE_DOMAIN:
            try:
                code = builtin_code(node.op_type)
            except AttributeError:
                raise BadInput(f"node '{node.label}': no TFLite builtin op {node.op_type}") from None
            rule = self.rules.get(node.op)
            custom, version = None, rule.version if rule is not None else 1
        else:
            raise BadInput(f"node '{node.label}': op {node.op} is not a TFLite op, and a .tflite file"
                           " cannot hold it")
        key = (code, custom, version)
        if key not in self.new_opcodes:
            fields = {"deprecated_builtin_code": min(code, PLACEHOLDER_FOR_GREATER_OP_CODES), "builtin_code": code,
                      "version": version}
            if custom is not None:
                fields["custom_code"] = custom
            self.new_opcodes[key] = len(self.opcodes)
            self.opcodes.append(FbTable("OperatorCode", fields))
        return self.new_opcodes[key]

    def operator(self, node: Node, index: Dict[int, int]) -> FbTable:
        rec = node.proto if isinstance(node.proto, OpRecord) else None
        op = FbTable("Operator", dict(rec.rest.fields) if rec is not None else {})
        op.fields["opcode_index"] = self.opcode(node)
        op.fields["inputs"] = [-1 if v is None else index[id(v)] for v in node.inputs]
        op.fields["outputs"] = [index[id(v)] for v in node.outputs]
        table = rec.options_table if rec is not None else None
        if rec is None and node.domain == TFLITE_DOMAIN:  # a new node; an imported one keeps its own
            rule = self.rules.get(node.op)
            table = rule.options if rule is not None else None
        if table is not None:
            union, code = options_type(table)
            op.fields[f"{union}_type"] = code
            op.fields[union] = FbTable(table, dict(node.attrs))
        return op

    # ---- graphs -----------------------------------------------------------------------
    def subgraph(self, g: Graph) -> Tuple[FbTable, Dict[int, int]]:
        nodes = g.nodes()
        values: List[Value] = []
        seen = set()

        def add(v: Optional[Value]) -> None:
            if v is not None and id(v) not in seen:
                seen.add(id(v))
                values.append(v)

        for n in nodes:
            for v in n.outputs:
                add(v)
            for v in n.inputs:
                add(v)
        # The imported tensors keep their order; new ones follow.
        values.sort(key=lambda v: (v.info_index < 0, v.info_index))
        index = {id(v): i for i, v in enumerate(values)}
        consts = {id(n.output): self.buffer(n) for n in nodes if n.kind == CONST and n.data is not None}
        tensors = [self.tensor(v, consts.get(id(v), 0)) for v in values]
        sg = FbTable("SubGraph", dict(g.proto.fields) if isinstance(g.proto, FbTable) else {})
        sg.fields.update(
            tensors=tensors,
            inputs=np.array([index[id(n.output)] for n in g.inputs], np.int32),
            outputs=np.array([index[id(n.inputs[0])] for n in g.outputs], np.int32),
            operators=[self.operator(n, index) for n in nodes if n.kind == OP])
        if g.name and not g.name.startswith("subgraph"):
            sg.fields["name"] = g.name
        return sg, index

    def model(self, model: Model) -> FbTable:
        graphs = model.graphs
        old_io = getattr(model.proto, "io", None)
        subgraphs, indices = [], []
        for g in graphs:
            sg, index = self.subgraph(g)
            subgraphs.append(sg)
            indices.append(index)
        for i, b in enumerate(self.buffers):
            if i and i not in self.used_buffers:
                self.external.pop(i, None)  # no tensor uses it any more
                for key in ("data", "offset", "size"):
                    b.fields.pop(key, None)
            elif "data" in b.fields or i not in self.external:
                # inline data (or none): an offset/size beside it would point into
                # whatever follows the new flatbuffer
                self.external.pop(i, None)
                b.fields.pop("offset", None)
                b.fields.pop("size", None)
        fields = self.table.fields
        fields["subgraphs"] = subgraphs
        fields["buffers"] = self.buffers
        fields["operator_codes"] = self.opcodes
        if "signature_defs" in fields:
            fields["signature_defs"] = [_remap_signature(s, graphs, indices, old_io) for s in fields["signature_defs"]]
        return self.table


def _type_code(v: Value) -> int:
    """The TensorType code of ``v``; a type the IR keeps by number (``tflite_type13``,
    RESOURCE) goes back as that number."""
    dtype = v.type.dtype
    if dtype in TFLITE_TYPES:
        return TFLITE_TYPES[dtype]
    m = re.fullmatch(r"tflite_type(\d+)", dtype)
    if m is not None and enum_name("TensorType", int(m.group(1))) is not None:
        return int(m.group(1))
    raise BadInput(f"tensor '{v.name}' has type {dtype}, which TFLite has no code for")


def _remap_signature(sig: FbTable, graphs: List[Graph], indices: List[Dict[int, int]], old_io) -> FbTable:
    """A signature names tensors by index: follow its graph's inputs and outputs to
    their new indices."""
    k = int(sig.get("subgraph_index", 0))
    if k >= len(graphs):
        return sig
    g = graphs[k]
    out = FbTable("SignatureDef", dict(sig.fields))
    for key, ends in (("inputs", [n.output for n in g.inputs]), ("outputs", [n.inputs[0] for n in g.outputs])):
        maps = []
        old = old_io[k][0 if key == "inputs" else 1] if old_io else []
        for m in sig.get(key, []):
            idx = int(m.get("tensor_index", 0))
            pos = old.index(idx) if idx in old else None
            fields = dict(m.fields)
            if pos is not None and pos < len(ends):
                fields["tensor_index"] = indices[k][id(ends[pos])]
            maps.append(FbTable("TensorMap", fields))
        out.fields[key] = maps
    return out


def _quantization(q: Optional[Quantization]) -> Optional[FbTable]:
    if q is None:
        return None
    t = FbTable("QuantizationParameters", dict(q.extra.fields) if isinstance(q.extra, FbTable) else {})
    if q.scale:
        t.fields["scale"] = np.array(q.scale, np.float32)
        t.fields["zero_point"] = np.array(q.zero_point, np.int64)
        t.fields["quantized_dimension"] = q.quantized_dimension
    return t


def _encode(model: Model) -> Tuple[bytes, List[Tuple[int, np.ndarray]]]:
    """The flatbuffer of ``model``'s IR, and the (offset, bytes) of each buffer stored
    after it."""
    w = _Writer(model)
    for g in model.graphs:
        if g.frontend != TFLITE_DOMAIN:
            raise BadInput(f"graph '{g.name}' holds {g.frontend} ops; only a TFLite model can be written as .tflite")
    with paused_gc():  # a table or more a node: the collector would walk them all, again and again
        table = w.model(model)
        size = sum(int(b.fields["data"].size) for b in w.buffers if "data" in b.fields)
        initial = max(1024, size + (1 << 16))
        if not w.external:
            return serialize(table, initial_size=initial), []
        return _with_external(table, w.buffers, w.external, initial)


def _with_external(table: FbTable, buffers: List[FbTable], external: Dict[int, np.ndarray],
                   initial: int) -> Tuple[bytes, List[Tuple[int, np.ndarray]]]:
    """Serialize with each external buffer's offset pointing past the flatbuffer. The
    offsets are not known until the flatbuffer's length is, so it is written twice: first
    with placeholders (non-zero, so that the fields are present: a flatbuffer leaves out
    a field at its default), then with the offsets, which take the same 8 bytes each."""
    order = sorted(external)
    for i in order:
        buffers[i].fields.pop("data", None)
        buffers[i].fields.update(offset=1 << 62, size=int(external[i].size))
    head = serialize(table, initial_size=initial)
    placed, end = [], len(head)
    for i in order:
        start = -(-end // EXTERNAL_ALIGN) * EXTERNAL_ALIGN
        buffers[i].fields["offset"] = start
        placed.append((start, external[i]))
        end = start + int(external[i].size)
    final = serialize(table, initial_size=initial)
    if len(final) != len(head):  # cannot happen: offsets are fixed-size scalars
        raise RuntimeError("flatbuffer length changed when its buffer offsets were filled in")
    return final, placed


def _chunks(head: bytes, placed: List[Tuple[int, np.ndarray]]):
    """The file's bytes in order: the flatbuffer, then each external buffer after the
    zero padding that aligns it."""
    yield head
    pos = len(head)
    for start, data in placed:
        if start > pos:
            yield bytes(start - pos)
        yield memoryview(data)
        pos = start + int(data.size)


def to_tflite(model: Model) -> bytes:
    """The ``.tflite`` bytes of ``model``'s IR (with the data stored after the flatbuffer,
    for a model that came so)."""
    head, placed = _encode(model)
    return head if not placed else b"".join(_chunks(head, placed))


@contextmanager
def staged_tflite(model: Model, path, *, force: bool = False, protect: Optional[Path] = None) -> Iterator[Staged]:
    """Write ``model`` as ``.tflite`` under a temporary name beside ``path`` and yield it
    (``atomic_files.staged_output``: it takes its name if accepted). Data stored after the
    flatbuffer is written from its views, never gathered into one copy in memory."""
    head, placed = _encode(model)
    with staged_output(Path(path), force=force, protect=protect) as staged:
        with open(staged.path, "wb") as f:
            for chunk in _chunks(head, placed):
                f.write(chunk)
        yield staged


def save_tflite(model: Model, path, *, force: bool = False, protect: Optional[Path] = None,
                inspect: Optional[Callable[[Path], None]] = None) -> Path:
    """Write ``model`` as ``.tflite`` atomically (``staged_tflite``); ``inspect`` sees the
    written file before it takes its name."""
    with staged_tflite(model, path, force=force, protect=protect) as staged:
        if inspect is not None:
            inspect(staged.path)
        staged.accept()
    return Path(path)
