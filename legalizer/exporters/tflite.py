"""IR -> TFLite flatbuffer. Everything the importer kept (the Model table's
description, metadata and signatures, each operator's opcode version and options,
each tensor's quantization, sparsity and flags) is written back; what the passes
added is written in the same form. Original buffers keep their indices (metadata and
signatures refer to them); a buffer no tensor uses any more is left empty.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from ..errors import BadInput
from ..fileio import atomic_output
from ..ir.graph import CONST, OP, Graph, Node, Value
from ..ir.types import Quantization
from ..model import Model
from ..oprules import frontend_rules
from ..tflite_schema import SCHEMA_VERSION, FbTable, builtin_code, options_type, serialize
from ..importers.tflite import CUSTOM_DOMAIN, TFLITE_DOMAIN, TFLITE_TYPES, OpRecord, TFLiteSource

CUSTOM_CODE = 32
# BuiltinOperator codes above 127 do not fit the int8 deprecated_builtin_code field,
# which then holds this placeholder.
PLACEHOLDER_FOR_GREATER_OP_CODES = 127


class _Writer:
    def __init__(self, model: Model):
        src = model.proto if isinstance(model.proto, TFLiteSource) else None
        self.table = FbTable("Model", dict(src.table.fields) if src is not None else {"version": SCHEMA_VERSION})
        self.buffers: List[FbTable] = [FbTable("Buffer", {})] + [FbTable("Buffer", dict(b.fields)) for b in
                                                                self.table.fields.get("buffers", [])[1:]]
        self.used_buffers = {int(m.get("buffer", 0)) for m in self.table.fields.get("metadata", [])}
        self.used_buffers |= {int(b) for b in self.table.fields.get("metadata_buffer", [])}
        self.opcodes: List[FbTable] = list(self.table.fields.get("operator_codes", []))
        self.opcode_index: Dict[int, int] = {id(c): i for i, c in enumerate(self.opcodes)}
        self.new_opcodes: Dict[Tuple, int] = {}
        self.buffer_of: Dict[int, int] = {}  # id(array) -> buffer index
        self.rules = frontend_rules("tflite")

    # ---- buffers and tensors -----------------------------------------------------
    def buffer(self, node: Node) -> int:
        arr = node.data.array
        hit = self.buffer_of.get(id(arr))
        if hit is not None:
            return hit
        orig = node.data.index
        if orig > 0 and orig < len(self.buffers) and self._is_original(orig, arr):
            idx = orig
        else:
            idx = len(self.buffers)
            self.buffers.append(FbTable("Buffer", {}))
            self.buffers[idx].fields["data"] = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
        self.used_buffers.add(idx)
        self.buffer_of[id(arr)] = idx
        return idx

    def _is_original(self, idx: int, arr: np.ndarray) -> bool:
        data = self.buffers[idx].fields.get("data")
        base = arr.base if isinstance(arr, np.ndarray) else None
        return data is not None and (arr is data or base is data or
                                     (isinstance(base, np.ndarray) and base.base is data.base and base.base is not None))

    def tensor(self, v: Value, buffer: int) -> FbTable:
        t = FbTable("Tensor", dict(v.info.fields) if isinstance(v.info, FbTable) else {})
        t.fields["name"] = v.name
        dtype = v.type.dtype
        if dtype not in TFLITE_TYPES:
            raise BadInput(f"tensor '{v.name}' has type {dtype}, which TFLite has no code for")
        t.fields["type"] = TFLITE_TYPES[dtype]
        shape = v.type.shape
        if shape is not None:
            t.fields["shape"] = np.array([d if isinstance(d, int) else 1 for d in shape], np.int32)
            if any(not isinstance(d, int) for d in shape) or "shape_signature" in (v.info.fields if isinstance(v.info, FbTable) else {}):
                t.fields["shape_signature"] = np.array([d if isinstance(d, int) else -1 for d in shape], np.int32)
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
        op.fields["inputs"] = np.array([-1 if v is None else index[id(v)] for v in node.inputs], np.int32)
        op.fields["outputs"] = np.array([index[id(v)] for v in node.outputs], np.int32)
        table = rec.options_table if rec is not None else None
        if table is None and node.domain == TFLITE_DOMAIN:
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
                b.fields.pop("data", None)  # no tensor uses it any more
        fields = self.table.fields
        fields["subgraphs"] = subgraphs
        fields["buffers"] = self.buffers
        fields["operator_codes"] = self.opcodes
        if "signature_defs" in fields:
            fields["signature_defs"] = [_remap_signature(s, graphs, indices, old_io) for s in fields["signature_defs"]]
        return self.table


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


def to_tflite(model: Model) -> bytes:
    """The flatbuffer bytes of ``model``'s IR."""
    w = _Writer(model)
    for g in model.graphs:
        if g.frontend != "tflite":
            raise BadInput(f"graph '{g.name}' holds {g.frontend} ops; only a TFLite model can be written as .tflite")
    table = w.model(model)
    size = sum(int(b.fields["data"].size) for b in w.buffers if "data" in b.fields)
    return serialize(table, initial_size=max(1024, size + (1 << 16)))


def save_tflite(model: Model, path, *, force: bool = False, protect: Optional[Path] = None,
                inspect: Optional[Callable[[Path], None]] = None) -> Path:
    """Write ``model`` as ``.tflite`` atomically (``atomic_output``'s rules); ``inspect``
    sees the written file before it takes its name."""
    data = to_tflite(model)
    path = Path(path)
    with atomic_output(path, force=force, protect=protect) as tmp:
        tmp.write_bytes(data)
        if inspect is not None:
            inspect(tmp)
    return path
