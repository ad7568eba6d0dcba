"""Build small .tflite flatbuffers in tests, from plain Python descriptions, with the
``flatbuffers`` builder functions of the ``tflite`` package (no TensorFlow needed).

    from tflite_build import build_tflite, tensor, op

    data = build_tflite(
        tensors=[tensor("x", "float32", [1, 2, 3]),
                 tensor("c", "float32", [3], data=np.array([1, 2, 3], np.float32)),
                 tensor("y", "float32", [1, 2, 3])],
        operators=[op("ADD", [0, 1], [2], "AddOptions", fused_activation_function=0)],
        inputs=[0], outputs=[2])

A tensor is a dict: ``name``, ``dtype`` (numpy dtype or name, or a TensorType name such
as ``"INT8"``), ``shape``, optional ``shape_signature`` (-1 for a dynamic dim), ``data``
(an array: the tensor becomes a constant with its own buffer), ``scale``/``zero_point``
(a number or a list: per-tensor or per-axis quantization) and ``quantized_dimension``,
``is_variable``, ``has_rank`` (default true, as the TFLite converter writes it; an
empty shape without it is an unranked tensor).

An operator is a dict: ``op`` (a BuiltinOperator name, or ``"CUSTOM"`` with
``custom_code``), ``inputs``/``outputs`` (tensor indices; -1 for an absent optional
input), ``options_table`` (e.g. ``"AddOptions"``; looked up in BuiltinOptions, then
BuiltinOptions2) and ``options`` (a dict with snake_case keys of that table: ints,
floats, bools, strings, or lists for vector fields), ``version``.

The descriptions become ``FbTable``s written by legalize's own flatbuffer writer
(``legalizer.tflite_schema``), index for index as given: unlike the IR-level builder
of scripts/tflite_models.py, this one can also write what the importer must reject.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from legalizer.importers.tflite import TFLITE_TYPES
from legalizer.ir.dtypes import dtype_of_array
from legalizer.tflite_schema import FbTable, builtin_code, enum_value, options_type, serialize

_NAMES = {"float32": "float", "float64": "double", "str": "string"}


def tensor(name: str, dtype, shape: Sequence[int], *, shape_signature: Optional[Sequence[int]] = None,
           data=None, scale=None, zero_point=None, quantized_dimension: int = 0,
           is_variable: bool = False, has_rank: bool = True) -> Dict[str, Any]:
    """A tensor description (a plain dict; see the module doc). ``has_rank=False``
    with an empty shape makes an unranked tensor (with has_rank set, [] is a scalar)."""
    return {"name": name, "dtype": dtype, "shape": list(shape), "shape_signature": shape_signature,
            "data": data, "scale": scale, "zero_point": zero_point,
            "quantized_dimension": quantized_dimension, "is_variable": is_variable,
            "has_rank": has_rank}


def op(name: str, inputs: Sequence[int], outputs: Sequence[int], options_table: Optional[str] = None,
       *, custom_code: Optional[str] = None, version: int = 1, **options) -> Dict[str, Any]:
    """An operator description (a plain dict); ``options`` are the table's snake_case keys."""
    return {"op": name, "inputs": list(inputs), "outputs": list(outputs), "options_table": options_table,
            "options": options, "custom_code": custom_code, "version": version}


def tensor_type(dtype) -> int:
    """The TensorType code for a numpy dtype, a dtype name or a TensorType name."""
    if isinstance(dtype, int):
        return dtype
    if isinstance(dtype, str) and dtype.isupper():
        return enum_value("TensorType", dtype)  # (the tflite package shadows its module with the class)
    name = str(np.dtype(dtype)) if not isinstance(dtype, str) else dtype
    return TFLITE_TYPES[_NAMES.get(name, name if name in TFLITE_TYPES else dtype_of_array(np.zeros(0, dtype)))]


def _tensor_table(t: Dict[str, Any], buffer: int) -> FbTable:
    f: Dict[str, Any] = {"name": t["name"], "type": tensor_type(t["dtype"]),
                         "shape": np.asarray(t["shape"], np.int32), "buffer": buffer,
                         "is_variable": t["is_variable"], "has_rank": t["has_rank"]}
    if t.get("shape_signature") is not None:
        f["shape_signature"] = np.asarray(t["shape_signature"], np.int32)
    if t.get("scale") is not None:
        scale = np.atleast_1d(np.asarray(t["scale"], np.float32))
        zp = np.broadcast_to(np.atleast_1d(np.asarray(t.get("zero_point") or 0, np.int64)), scale.shape)
        f["quantization"] = FbTable("QuantizationParameters", {
            "scale": scale, "zero_point": np.array(zp), "quantized_dimension": t["quantized_dimension"]})
    return FbTable("Tensor", f)


def build_tflite(tensors: Sequence[Dict[str, Any]], operators: Sequence[Dict[str, Any]],
                 inputs: Sequence[int], outputs: Sequence[int], *, name: str = "main",
                 subgraphs: Sequence[Dict[str, Any]] = (),
                 signatures: Optional[Sequence[Dict[str, Any]]] = None,
                 description: str = "legalize test model", offset_buffers: bool = False) -> bytes:
    """The .tflite bytes of a model whose subgraph 0 is (tensors, operators, inputs,
    outputs); ``subgraphs`` are further subgraphs as dicts with those keys (and
    ``name``). ``signatures``: dicts ``{"key", "subgraph", "inputs": {name: tensor
    index}, "outputs": {name: tensor index}}``. ``offset_buffers``: constant data is
    stored after the flatbuffer (Buffer.offset/size, 64-byte aligned), as the TFLite
    converter lays out models over 2 GB."""
    graphs = [{"tensors": list(tensors), "operators": list(operators), "inputs": list(inputs),
               "outputs": list(outputs), "name": name}] + [dict(g) for g in subgraphs]
    buffers = [FbTable("Buffer", {})]  # buffer 0: the empty sentinel
    codes: List[tuple] = []
    sg_tables = []
    for g in graphs:
        tables = []
        for t in g["tensors"]:
            buffer = 0
            if t.get("data") is not None:
                arr = np.ascontiguousarray(np.asarray(t["data"]))
                buffers.append(FbTable("Buffer", {"data": arr.reshape(-1).view(np.uint8)}))
                buffer = len(buffers) - 1
            tables.append(_tensor_table(t, buffer))
        ops = []
        for o in g["operators"]:
            key = (o["op"], o.get("custom_code"), int(o.get("version") or 1))
            if key not in codes:
                codes.append(key)
            fields: Dict[str, Any] = {"opcode_index": codes.index(key), "inputs": np.asarray(o["inputs"], np.int32),
                                      "outputs": np.asarray(o["outputs"], np.int32)}
            if o.get("options_table"):
                union, code = options_type(o["options_table"])
                fields[f"{union}_type"] = code
                fields[union] = FbTable(o["options_table"], dict(o["options"]))
            ops.append(FbTable("Operator", fields))
        sg_tables.append(FbTable("SubGraph", {
            "tensors": tables, "operators": ops, "name": g.get("name", ""),
            "inputs": np.asarray(g["inputs"], np.int32), "outputs": np.asarray(g["outputs"], np.int32)}))
    opcodes = []
    for op_name, custom, version in codes:
        code = builtin_code(op_name)
        fields = {"deprecated_builtin_code": min(code, 127), "builtin_code": code, "version": version}
        if custom is not None:
            fields["custom_code"] = custom
        opcodes.append(FbTable("OperatorCode", fields))
    model = {"version": 3, "description": description, "operator_codes": opcodes, "subgraphs": sg_tables,
             "buffers": buffers}
    if signatures:
        model["signature_defs"] = [FbTable("SignatureDef", {
            "signature_key": s["key"], "subgraph_index": s.get("subgraph", 0),
            "inputs": [FbTable("TensorMap", {"name": n, "tensor_index": i}) for n, i in s["inputs"].items()],
            "outputs": [FbTable("TensorMap", {"name": n, "tensor_index": i}) for n, i in s["outputs"].items()]})
            for s in signatures]
    if offset_buffers:
        return _with_offset_buffers(FbTable("Model", model), buffers)
    return serialize(FbTable("Model", model))


def _with_offset_buffers(model: FbTable, buffers: List[FbTable], align: int = 64) -> bytes:
    """Move every buffer's data after the flatbuffer. Written on its own, not with the
    exporter's code, so that the importer and exporter are tested against an independent
    layout (a wider alignment than the exporter's 16, and a trailing pad)."""
    blobs = {i: b.fields.pop("data") for i, b in enumerate(buffers) if "data" in b.fields}
    for i, data in blobs.items():  # placeholders first: a zero field would be left out
        buffers[i].fields.update(offset=1 << 40, size=int(data.size))
    length = len(serialize(model))
    out = bytearray()
    end = length
    for i, data in blobs.items():
        start = -(-end // align) * align
        buffers[i].fields["offset"] = start
        end = start + int(data.size)
    out += serialize(model)
    assert len(out) == length
    for i, data in blobs.items():
        out += bytes(int(buffers[i].fields["offset"]) - len(out))
        out += data.tobytes()
    return bytes(out + bytes(align))


# -- ready-made tiny models --------------------------------------------------------

def add_const_model(dtype="float32") -> bytes:
    """y[1,2,3] = x[1,2,3] + c[3] (constant c = [1, 2, 3]): a rank-mismatched ADD."""
    c = np.array([1, 2, 3], dtype)
    return build_tflite(
        [tensor("x", dtype, [1, 2, 3]), tensor("c", dtype, [3], data=c), tensor("y", dtype, [1, 2, 3])],
        [op("ADD", [0, 1], [2], "AddOptions", fused_activation_function=0)], [0], [2])


def add_dynamic_model() -> bytes:
    """y[?,2,3] = x[?,2,3] + b[3] (both inputs): a dynamic batch dim."""
    return build_tflite(
        [tensor("x", "float32", [1, 2, 3], shape_signature=[-1, 2, 3]), tensor("b", "float32", [3]),
         tensor("y", "float32", [1, 2, 3], shape_signature=[-1, 2, 3])],
        [op("ADD", [0, 1], [2], "AddOptions", fused_activation_function=0)], [0, 1], [2])


def add_int8_model() -> bytes:
    """Quantized int8 ADD: y[1,2,3] = x[1,2,3] + c[3], scale 0.5 zero point -1 / 0.25, 2."""
    c = np.array([4, -8, 12], np.int8)
    return build_tflite(
        [tensor("x", "int8", [1, 2, 3], scale=0.5, zero_point=-1),
         tensor("c", "int8", [3], data=c, scale=0.25, zero_point=2),
         tensor("y", "int8", [1, 2, 3], scale=0.5, zero_point=-1)],
        [op("ADD", [0, 1], [2], "AddOptions", fused_activation_function=0)], [0], [2])
