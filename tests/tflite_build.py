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
``custom_code`` and optional ``custom_options`` bytes), ``inputs``/``atomic_files`` (tensor
indices; -1 for an absent optional input), ``options_table`` (e.g. ``"AddOptions"``;
looked up in BuiltinOptions, then BuiltinOptions2) and ``options`` (a dict with snake_case keys of that table: ints,
floats, bools, strings, or lists for vector fields), ``version``.

The descriptions become ``FbTable``s written by legalize's own flatbuffer writer
(``legalizer.kinds.tflite.schema``), index for index as given: unlike the IR-level builder
of tests/tflite_models.py, this one can also write what the importer must reject.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from legalizer.kinds.tflite.importer import TFLITE_TYPES
from legalizer.ir.dtypes import dtype_of_array
from legalizer.kinds.tflite.schema import FbTable, builtin_code, enum_value, options_type, serialize

_NAMES = {"float32": "float", "float64": "double", "str": "string"}


def tensor(name: str, dtype, shape: Sequence[int], *, shape_signature: Optional[Sequence[int]] = None,
           data=None, scale=None, zero_point=None, quantized_dimension: int = 0,
           is_variable: bool = False, has_rank: bool = True, sparsity: Optional[FbTable] = None,
           empty_buffer: bool = False) -> Dict[str, Any]:
    """A tensor description (a plain dict; see the module doc). ``has_rank=False``
    with an empty shape makes an unranked tensor (with has_rank set, [] is a scalar).
    ``sparsity`` (see ``sparse_rows``) goes with ``data`` holding the stored values;
    ``empty_buffer`` gives the tensor a buffer of its own with no data."""
    return {"name": name, "dtype": dtype, "shape": list(shape), "shape_signature": shape_signature,
            "data": data, "scale": scale, "zero_point": zero_point,
            "quantized_dimension": quantized_dimension, "is_variable": is_variable,
            "has_rank": has_rank, "sparsity": sparsity, "empty_buffer": empty_buffer}


def sparse_rows(dense: np.ndarray, block: int = 1):
    """(SparsityParameters, stored values) of a 2-D ``dense`` as TFLite's converter
    prunes weights: rows dense, each row's nonzero blocks of ``block`` columns in CSR
    (``block`` > 1: block sparse, the block stored whole). Written independently of the
    importer's reader, to test it."""
    rows, cols = dense.shape
    blocks = dense.reshape(rows, cols // block, block)
    keep = np.abs(blocks).sum(axis=2) != 0  # [rows, cols // block]
    segments = np.concatenate([[0], np.cumsum(keep.sum(axis=1))]).astype(np.int32)
    indices = np.nonzero(keep)[1].astype(np.int32)
    values = blocks[keep].reshape(-1)
    csr = FbTable("DimensionMetadata", {
        "format": 1, "array_segments_type": enum_value("SparseIndexVector", "Int32Vector"),
        "array_segments": FbTable("Int32Vector", {"values": segments}),
        "array_indices_type": enum_value("SparseIndexVector", "Int32Vector"),
        "array_indices": FbTable("Int32Vector", {"values": indices})})
    dims = [FbTable("DimensionMetadata", {"format": 0, "dense_size": rows}), csr]
    fields = {"traversal_order": np.arange(2 if block == 1 else 3, dtype=np.int32), "dim_metadata": dims}
    if block > 1:
        dims.append(FbTable("DimensionMetadata", {"format": 0, "dense_size": block}))
        fields["block_map"] = np.array([1], np.int32)
    return FbTable("SparsityParameters", fields), values


def op(name: str, inputs: Sequence[int], outputs: Sequence[int], options_table: Optional[str] = None,
       *, custom_code: Optional[str] = None, custom_options: Optional[bytes] = None, version: int = 1,
       **options) -> Dict[str, Any]:
    """An operator description (a plain dict); ``options`` are the table's snake_case keys,
    ``custom_options`` a custom op's raw option bytes."""
    return {"op": name, "inputs": list(inputs), "outputs": list(outputs), "options_table": options_table,
            "options": options, "custom_code": custom_code, "custom_options": custom_options, "version": version}


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
    if t.get("sparsity") is not None:
        f["sparsity"] = t["sparsity"]
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
            if t.get("empty_buffer"):
                buffers.append(FbTable("Buffer", {}))
                buffer = len(buffers) - 1
            elif t.get("data") is not None:
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
            if o.get("custom_options") is not None:
                fields["custom_options"] = np.frombuffer(o["custom_options"], np.uint8)
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


def stateful_model() -> bytes:
    """A resource variable, as TensorFlow's converter writes one: CALL_ONCE runs the
    init subgraph (VAR_HANDLE 'acc' <- c0[2,3]); main reads it, adds x[3] to it, assigns
    the sum back and reads it again: y = (c0 + x) * c[3]. Both broadcasts are
    rank-mismatched: legalizing reshapes x (a new op) and folds c."""
    c0 = np.arange(6, dtype=np.float32).reshape(2, 3) / 4
    c = np.array([1.5, -2.0, 0.5], np.float32)
    init = {"name": "init", "inputs": [], "outputs": [],
            "tensors": [tensor("h0", "RESOURCE", []), tensor("c0", "float32", [2, 3], data=c0)],
            "operators": [op("VAR_HANDLE", [], [0], "VarHandleOptions", shared_name="acc"),
                          op("ASSIGN_VARIABLE", [0, 1], [], "AssignVariableOptions")]}
    return build_tflite(
        [tensor("x", "float32", [3]), tensor("h", "RESOURCE", []), tensor("v", "float32", [2, 3]),
         tensor("u", "float32", [2, 3]), tensor("w", "float32", [2, 3]), tensor("c", "float32", [3], data=c),
         tensor("y", "float32", [2, 3])],
        [op("CALL_ONCE", [], [], "CallOnceOptions", init_subgraph_index=1),
         op("VAR_HANDLE", [], [1], "VarHandleOptions", shared_name="acc"),
         op("READ_VARIABLE", [1], [2], "ReadVariableOptions"),
         op("ADD", [2, 0], [3], "AddOptions", fused_activation_function=0),
         op("ASSIGN_VARIABLE", [1, 3], [], "AssignVariableOptions"),
         op("READ_VARIABLE", [1], [4], "ReadVariableOptions"),
         op("MUL", [4, 5], [6], "MulOptions", fused_activation_function=0)],
        [0], [6], subgraphs=[init])


SPARSE_W = np.array([[0, 1.5, 0, -2], [0, 0, 0, 0], [3, 0, 0.5, 0]], np.float32)
SPARSE_V = np.array([[0, 0, 0, 0, 1, 2, 0, 3], [4, 0, 0, 5, 0, 0, 0, 0]], np.float32)
SPARSE_B = np.array([0.25, -1, 2], np.float32)


def sparse_model() -> bytes:
    """Pruned weights, as TFLite stores them: y[2,3] = FULLY_CONNECTED(x[2,4], w[3,4])
    + b[3] with w = SPARSE_W sparse (rows dense, columns CSR), which LiteRT's kernel
    reads sparse; z[2,8] = DENSIFY(v[2,8]) + x2[8] with v = SPARSE_V block sparse (1x4
    blocks). The second sum is rank-mismatched: legalizing reshapes x2 and leaves v as
    stored."""
    ws, wv = sparse_rows(SPARSE_W)
    vs, vv = sparse_rows(SPARSE_V, block=4)
    return build_tflite(
        [tensor("x", "float32", [2, 4]), tensor("w", "float32", [3, 4], data=wv, sparsity=ws),
         tensor("b", "float32", [3], data=SPARSE_B), tensor("y", "float32", [2, 3]),
         tensor("v", "float32", [2, 8], data=vv, sparsity=vs), tensor("vd", "float32", [2, 8]),
         tensor("x2", "float32", [8]), tensor("z", "float32", [2, 8])],
        [op("FULLY_CONNECTED", [0, 1, 2], [3], "FullyConnectedOptions", fused_activation_function=0),
         op("DENSIFY", [4], [5], "DensifyOptions"),
         op("ADD", [5, 6], [7], "AddOptions", fused_activation_function=0)],
        [0, 6], [3, 7])


def empty_constant_model() -> bytes:
    """A zero-element constant with an empty buffer, as TensorFlow's converter writes
    the shape of a reshape to a scalar: s = RESHAPE(x[1,1], shape[0] = {}) is a scalar,
    y[3] = s + c[3] (rank-mismatched: legalizing reshapes s), and a CONCATENATION with
    an empty [2,0] constant."""
    return build_tflite(
        [tensor("x", "float32", [1, 1]), tensor("shape", "int32", [0], empty_buffer=True),
         tensor("s", "float32", []), tensor("c", "float32", [3], data=np.array([1, 2, 3], np.float32)),
         tensor("y", "float32", [3]), tensor("e", "float32", [2, 0], empty_buffer=True),
         tensor("x2", "float32", [2, 3]), tensor("z", "float32", [2, 3])],
        [op("RESHAPE", [0, 1], [2], "ReshapeOptions", new_shape=[]),
         op("ADD", [2, 3], [4], "AddOptions", fused_activation_function=0),
         op("CONCATENATION", [6, 5], [7], "ConcatenationOptions", axis=1, fused_activation_function=0)],
        [0, 6], [4, 7])


def deconv_model() -> bytes:
    """MediaPipe's custom op Convolution2DTransposeBias (no builtin kernel; LiteRT's
    default delegate, XNNPACK, runs it): d[1,6,6,3] = deconv(x[1,3,3,2], DECONV_W
    [3,2,2,2], DECONV_B[3], VALID, stride 2), then y = d + c[3] (rank-mismatched)."""
    options = np.array([2, 2, 2, 0], "<i4").tobytes()  # TfLiteTransposeConvParams: VALID, strides 2, 2
    return build_tflite(
        [tensor("x", "float32", [1, 3, 3, 2]), tensor("w", "float32", [3, 2, 2, 2], data=DECONV_W),
         tensor("b", "float32", [3], data=DECONV_B), tensor("d", "float32", [1, 6, 6, 3]),
         tensor("c", "float32", [3], data=np.array([1, -1, 0.5], np.float32)), tensor("y", "float32", [1, 6, 6, 3])],
        [op("CUSTOM", [0, 1, 2], [3], custom_code="Convolution2DTransposeBias", custom_options=options),
         op("ADD", [3, 4], [5], "AddOptions", fused_activation_function=0)], [0], [5])


DECONV_W = (np.arange(24, dtype=np.float32).reshape(3, 2, 2, 2) - 12) / 8  # [out, kh, kw, in]
DECONV_B = np.array([0.5, -1, 0.25], np.float32)


def attention_int8_model(seq: int = 8, dim: int = 16, seed: int = 0) -> bytes:
    """A full-int8 attention block, as TFLite's converter quantizes one: q, k, v =
    FULLY_CONNECTED(x) (per-channel int8 weights, int32 bias), s = BATCH_MATMUL(q, k,
    adj_y), p = SOFTMAX(s) (scale 1/256, zero point -128), o = BATCH_MATMUL(p, v),
    y = FULLY_CONNECTED(o) + r[dim] (rank-mismatched). Activation scales come from a
    float run on a calibration input, as the converter's would."""
    rng = np.random.default_rng(seed)
    xs = 0.05
    x = rng.normal(0, 1.5, (1, seq, dim)).astype(np.float32)

    def weights():
        w = rng.normal(0, 0.3, (dim, dim)).astype(np.float32)
        ws = np.abs(w).max(axis=1) / 127
        return np.round(w / ws[:, None]).astype(np.int8), ws

    def scale(a):
        return float(np.abs(a).max() / 127)

    tensors = [tensor("x", "int8", [1, seq, dim], scale=xs, zero_point=0)]
    ops = []

    def fc(name, src, src_scale, real_in):
        wq, ws = weights()
        b = rng.normal(0, 0.2, dim).astype(np.float32)
        bq = np.round(b / (src_scale * ws)).astype(np.int32)
        real = real_in @ (wq * ws[:, None]).T + bq * src_scale * ws
        s = scale(real)
        k = len(tensors)
        tensors.extend([tensor(f"{name}_w", "int8", [dim, dim], data=wq, scale=list(ws), zero_point=[0] * dim),
                        tensor(f"{name}_b", "int32", [dim], data=bq, scale=list(src_scale * ws), zero_point=[0] * dim),
                        tensor(name, "int8", [1, seq, dim], scale=s, zero_point=0)])
        ops.append(op("FULLY_CONNECTED", [src, k, k + 1], [k + 2], "FullyConnectedOptions", keep_num_dims=True))
        return k + 2, s, np.round(real / s).clip(-128, 127) * s

    xq = np.round(x / xs).clip(-128, 127) * xs
    q, qs, qr = fc("q", 0, xs, xq)
    k, ks, kr = fc("k", 0, xs, xq)
    v, vs, vr = fc("v", 0, xs, xq)
    sr = qr @ kr.transpose(0, 2, 1)
    ss = scale(sr)
    s_i = len(tensors)
    tensors.append(tensor("s", "int8", [1, seq, seq], scale=ss, zero_point=0))
    ops.append(op("BATCH_MATMUL", [q, k], [s_i], "BatchMatMulOptions", adj_y=True))
    p_i = len(tensors)
    tensors.append(tensor("p", "int8", [1, seq, seq], scale=1 / 256, zero_point=-128))
    ops.append(op("SOFTMAX", [s_i], [p_i], "SoftmaxOptions", beta=1.0))
    e = np.exp(sr - sr.max(-1, keepdims=True))
    orr = (e / e.sum(-1, keepdims=True)) @ vr
    o_i = len(tensors)
    os_ = scale(orr)
    tensors.append(tensor("o", "int8", [1, seq, dim], scale=os_, zero_point=0))
    ops.append(op("BATCH_MATMUL", [p_i, v], [o_i], "BatchMatMulOptions"))
    y, ys, yr = fc("y", o_i, os_, np.round(orr / os_) * os_)
    r = rng.normal(0, 0.5, dim).astype(np.float32)
    out_s = scale(yr + r)
    k = len(tensors)
    tensors.extend([tensor("r", "int8", [dim], data=np.round(r / out_s).astype(np.int8), scale=out_s, zero_point=0),
                    tensor("out", "int8", [1, seq, dim], scale=out_s, zero_point=0)])
    ops.append(op("ADD", [y, k], [k + 1], "AddOptions", fused_activation_function=0))
    return build_tflite(tensors, ops, [0], [k + 1])


def deep_cnn_model(seed: int = 2, blocks: int = 20, channels: int = 48, size: int = 32) -> bytes:
    """A float conv net whose activations grow with depth, as in networks without
    normalization: CONV_2D 3x3 + DEPTHWISE_CONV_2D 3x3 (RELU) per block, weights 1.4x
    He-scaled, then MEAN and a FULLY_CONNECTED to 100 logits (magnitudes in the
    hundreds). Nothing in it broadcasts: legalizing leaves it unchanged."""
    rng = np.random.default_rng(seed)
    tensors = [tensor("x", "float32", [1, size, size, 3])]
    ops = []

    def add(t) -> int:
        tensors.append(t)
        return len(tensors) - 1

    def weights(name, shape, std):
        return add(tensor(name, "float32", shape, data=rng.normal(0, std, shape).astype(np.float32)))

    cur, c_in = 0, 3
    for i in range(blocks):
        stride = 2 if i in (0, 3, 6) else 1
        size = -(-size // stride)
        w, b = weights(f"w{i}", (channels, 3, 3, c_in), 1.4 * np.sqrt(2 / (9 * c_in))), weights(f"b{i}", (channels,), 0.1)
        conv = add(tensor(f"conv{i}", "float32", [1, size, size, channels]))
        ops.append(op("CONV_2D", [cur, w, b], [conv], "Conv2DOptions", padding=0, stride_w=stride, stride_h=stride,
                      fused_activation_function=1))
        w, b = weights(f"dw{i}", (1, 3, 3, channels), 1.4 * np.sqrt(2 / 9)), weights(f"db{i}", (channels,), 0.1)
        cur = add(tensor(f"dwconv{i}", "float32", [1, size, size, channels]))
        ops.append(op("DEPTHWISE_CONV_2D", [conv, w, b], [cur], "DepthwiseConv2DOptions", padding=0, stride_w=1,
                      stride_h=1, depth_multiplier=1, fused_activation_function=1))
        c_in = channels
    axes = add(tensor("axes", "int32", [2], data=np.array([1, 2], np.int32)))
    mean = add(tensor("mean", "float32", [1, channels]))
    ops.append(op("MEAN", [cur, axes], [mean], "ReducerOptions", keep_dims=False))
    w, b = weights("fc_w", (100, channels), np.sqrt(1 / channels)), weights("fc_b", (100,), 0.1)
    logits = add(tensor("logits", "float32", [1, 100]))
    ops.append(op("FULLY_CONNECTED", [mean, w, b], [logits], "FullyConnectedOptions"))
    return build_tflite(tensors, ops, [0], [logits])


def with_dynamic_batch(data: bytes) -> bytes:
    """``data`` with the batch dim of every activation (a tensor without data whose first
    dim is 1) made dynamic (-1 in its shape_signature), as a converter writes a model
    exported with a dynamic batch."""
    import tflite

    from legalizer.kinds.tflite.schema import read

    model = read(tflite.Model.GetRootAs(data, 0), "Model")
    for sg in model.get("subgraphs"):
        for t in sg.get("tensors"):
            shape = t.get("shape")
            if not int(t.get("buffer", 0)) and shape is not None and len(shape) and shape[0] == 1:
                t.fields["shape_signature"] = np.concatenate([[-1], shape[1:]]).astype(np.int32)
    return serialize(model)


def assert_same_tables(got: bytes, want: bytes) -> None:
    """``got`` and ``want`` hold the same model, table for table and field for field, as
    the ``tflite`` package's own accessors read them (not the same bytes: the writer
    lays fields out in its own order and writes what repeats once)."""
    import tflite

    from legalizer.kinds.tflite.schema import read_by_accessors

    same_table(read_by_accessors(tflite.Model.GetRootAs(got, 0)),
               read_by_accessors(tflite.Model.GetRootAs(want, 0)))


def same_table(a: Any, b: Any, where: str = "Model") -> None:
    """``a`` is ``b``: the same tables, fields and values (arrays of the same dtype and
    bytes), ``where`` naming the first difference."""
    if isinstance(b, FbTable):
        assert isinstance(a, FbTable) and a.type == b.type, where
        assert sorted(a.fields) == sorted(b.fields), (where, sorted(set(a.fields) ^ set(b.fields)))
        for k in b.fields:
            same_table(a.fields[k], b.fields[k], f"{where}.{k}")
    elif isinstance(b, list):
        assert isinstance(a, list) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            same_table(x, y, f"{where}[{i}]")
    elif isinstance(b, np.ndarray):
        assert isinstance(a, np.ndarray) and a.dtype == b.dtype and a.tobytes() == b.tobytes(), where
    elif isinstance(b, float) and b != b:
        assert isinstance(a, float) and a != a, where  # NaN
    else:
        assert type(a) is type(b) and a == b, (where, a, b)


def add_chain(ops: int, elements: int = 1, wrong_at: int = -1) -> bytes:
    """A chain of ADDs: x[elements] (float32), then ``ops`` ADDs of the constant 1
    (the one at ``wrong_at`` adds 2): tensors x, one, two, v1..v<ops>, v<ops> the output.
    (scripts/tflite_chain.py writes it at scale.)"""
    def i32(*v):
        return np.array(v, np.int32)

    def const(v: float):
        return FbTable("Buffer", {"data": np.frombuffer(np.float32([v]).tobytes(), np.uint8)})

    tensors = [FbTable("Tensor", {"shape": i32(elements), "type": 0, "buffer": 1, "name": "x"}),
               FbTable("Tensor", {"shape": i32(1), "type": 0, "buffer": 2, "name": "one"}),
               FbTable("Tensor", {"shape": i32(1), "type": 0, "buffer": 3, "name": "two"})]
    union, code = options_type("AddOptions")
    opts = []
    for i in range(ops):
        tensors.append(FbTable("Tensor", {"shape": i32(elements), "type": 0, "buffer": 0, "name": f"v{i + 1}"}))
        src = len(tensors) - 2 if i else 0
        opts.append(FbTable("Operator", {"opcode_index": 0, "inputs": i32(src, 2 if i == wrong_at else 1),
                                         "outputs": i32(len(tensors) - 1), f"{union}_type": code,
                                         union: FbTable("AddOptions", {})}))
    add = builtin_code("ADD")
    return serialize(FbTable("Model", {
        "version": 3, "description": "chain",
        "buffers": [FbTable("Buffer", {}), FbTable("Buffer", {}), const(1.0), const(2.0)],
        "operator_codes": [FbTable("OperatorCode", {"builtin_code": add, "deprecated_builtin_code": add,
                                                    "version": 1})],
        "subgraphs": [FbTable("SubGraph", {"tensors": tensors, "inputs": i32(0), "outputs": i32(len(tensors) - 1),
                                           "operators": opts, "name": "main"})]}))
