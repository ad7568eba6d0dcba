"""Shape and data movement: reshapes, slices, pads, splits and joins, gathers, and the
moves between the batch and the spatial dims."""

from __future__ import annotations

from typing import List, Sequence, Tuple

import numpy as np
from onnx import TensorProto, helper

from ....ir.dtypes import elem_type
from ....ir.graph import Node, Value
from .emitter import Emitter, NoForm, const_data, const_ints, option, static_sizes
from .registry import op

_BIG = int(np.iinfo(np.int64).max)  # a Slice bound meaning "to the end" (onnx clamps it)


@op("SHAPE", raw=True)
def _shape(e, n):
    return [e.cast(e.emit("Shape", [e.raw(n.inputs[0])]), "int64", n.outputs[0].type.dtype)]


@op("RESHAPE")
def _reshape(e, n):
    if len(n.inputs) > 1 and n.inputs[1] is not None:
        shape = e.index(n.inputs[1])
    elif "new_shape" in n.attrs:
        shape = e.ints(n.attrs["new_shape"])
    elif n.outputs[0].type.is_static:
        shape = e.ints(n.outputs[0].type.shape)
    else:
        raise NoForm("no target shape")
    # allowzero: a 0 in a TFLite shape is a size, not "copy this dim".
    return [e.emit("Reshape", [e.real(n.inputs[0]), shape], allowzero=1)]


# Ops of (x, an index operand) that are ONNX's op of the same two operands. EXPAND_DIMS:
# a negative axis counts from the end of the result, in both.
_WITH_INDEX = {"BROADCAST_TO": "Expand", "EXPAND_DIMS": "Unsqueeze", "TILE": "Tile"}


@op(*_WITH_INDEX)
def _with_index(e, n):
    return [e.emit(_WITH_INDEX[n.op_type], [e.real(n.inputs[0]), e.index(n.inputs[1])])]


@op("SQUEEZE")
def _squeeze(e, n):
    dims = list(option(n, "squeeze_dims", []) or [])
    return [e.emit("Squeeze", [e.real(n.inputs[0])] + ([e.ints(dims)] if dims else []))]


@op("TRANSPOSE")
def _transpose(e, n):
    perm = const_ints(n.inputs[1], "perm")
    return [e.emit("Transpose", [e.real(n.inputs[0])], perm=perm)]


@op("CONCATENATION")
def _concatenation(e, n):
    return [e.emit("Concat", e.reals(n), axis=int(option(n, "axis")))]


@op("PACK")
def _pack(e, n):
    axes = e.ints([int(option(n, "axis"))])
    return [e.emit("Concat", [e.emit("Unsqueeze", [x, axes]) for x in e.reals(n)], axis=int(option(n, "axis")))]


@op("UNPACK")
def _unpack(e, n):
    axis, num = int(option(n, "axis")), len(n.outputs)
    parts = e.emit_all("Split", [e.real(n.inputs[0])], num, axis=axis, num_outputs=num)
    return [e.emit("Squeeze", [p, e.ints([axis])]) for p in parts]


@op("SPLIT")
def _split(e, n):
    axis = const_ints(n.inputs[0], "axis")[0]  # TFLite's SPLIT takes the axis first
    num = len(n.outputs)
    return e.emit_all("Split", [e.real(n.inputs[1])], num, axis=axis, num_outputs=num)


@op("GATHER")
def _gather(e, n):
    if option(n, "batch_dims"):
        raise NoForm("batch_dims")
    return [e.emit("Gather", [e.real(n.inputs[0]), e.raw(n.inputs[1])], axis=int(option(n, "axis")))]


def _pads(e: Emitter, paddings: Value) -> str:
    """TFLite's [rank, 2] paddings (before, after per axis) as ONNX's pads: all the
    befores, then all the afters."""
    data = const_data(paddings)
    if data is not None:
        return e.ints(data.T)
    p = e.emit("Cast", [e.raw(paddings)], to=TensorProto.INT64)
    return e.emit("Reshape", [e.emit("Transpose", [p], perm=[1, 0]), e.ints([-1])])


@op("PAD", "PADV2")
def _pad(e, n):
    x, paddings = n.inputs[0], n.inputs[1]
    # A quantized PAD pads with the zero point, i.e. real 0: the default here.
    value = n.inputs[2] if len(n.inputs) > 2 else None
    ins = [e.real(x), _pads(e, paddings)]
    if value is not None:
        ins.append(e.emit("Reshape", [e.real(value), e.ints([])]))
    return [e.emit("Pad", ins)]


def _bits(mask: int, rank: int) -> np.ndarray:
    return np.array([(mask >> i) & 1 for i in range(rank)], bool)


@op("STRIDED_SLICE")
def _strided_slice(e, n):
    for mask in ("ellipsis_mask", "new_axis_mask"):
        if option(n, mask):
            raise NoForm(mask)
    x, begin, end, strides = n.inputs[:4]
    steps = const_data(strides)
    if steps is None:
        raise NoForm("strides not constant")
    steps = steps.reshape(-1).astype(np.int64)
    rank = len(steps)
    shrink = _bits(option(n, "shrink_axis_mask"), rank)
    begin_masked = _bits(option(n, "begin_mask"), rank) & ~shrink
    end_masked = _bits(option(n, "end_mask"), rank) & ~shrink
    starts, ends = e.index(begin), e.index(end)
    if option(n, "offset", False):  # end is relative to begin
        ends = e.emit("Add", [starts, ends])
    # A masked bound is the far end in the stride's direction.
    if begin_masked.any():
        starts = e.emit("Where", [e.const(begin_masked), e.ints(np.where(steps > 0, 0, _BIG)), starts])
    if end_masked.any():
        ends = e.emit("Where", [e.const(end_masked), e.ints(np.where(steps > 0, _BIG, -_BIG - 1)), ends])
    if shrink.any():
        # A shrunk axis takes the one element at begin: end = begin + 1 (-1 + 1 would be
        # an empty slice, so "to the end" there), stride 1.
        after = e.emit("Where", [e.emit("Equal", [starts, e.ints([-1])]), e.ints([_BIG]),
                                 e.emit("Add", [starts, e.ints([1])])])
        ends = e.emit("Where", [e.const(shrink), after, ends])
        steps = np.where(shrink, 1, steps)
    y = e.emit("Slice", [e.real(x), starts, ends, e.ints(range(rank)), e.ints(steps)])
    if shrink.any():
        y = e.emit("Squeeze", [y, e.ints(np.flatnonzero(shrink))])
    return [y]


@op("SLICE")
def _slice(e, n):
    x, begin, size = n.inputs
    starts, sizes = e.index(begin), e.index(size)
    ends = e.emit("Where", [e.emit("Equal", [sizes, e.ints([-1])]), e.ints([_BIG]),
                            e.emit("Add", [starts, sizes])])
    return [e.emit("Slice", [e.real(x), starts, ends])]


@op("SPLIT_V")
def _split_v(e, n):
    x, sizes, axis = n.inputs
    sizes, axis = const_data(sizes), const_data(axis)
    if sizes is None or axis is None:
        raise NoForm("sizes or axis not constant")
    axis = int(axis.reshape(-1)[0])
    sizes = [int(s) for s in sizes.reshape(-1)]
    if -1 in sizes:  # the one size TFLite lets be inferred: what the others leave
        dim = x.type.shape[axis] if x.type.shape is not None else None
        if not isinstance(dim, int):
            raise NoForm("size -1 on a dynamic dim")
        sizes[sizes.index(-1)] = dim - (sum(sizes) + 1)
    return e.emit_all("Split", [e.real(x), e.ints(sizes)], len(sizes), axis=axis)


def _reversed(e: Emitter, x: str, axes: Sequence[int]) -> str:
    """``x`` read backwards along ``axes`` (a Slice of step -1 from the last element
    through the first)."""
    k = len(axes)
    return e.emit("Slice", [x, e.ints([-1] * k), e.ints([-_BIG - 1] * k), e.ints(axes), e.ints([-1] * k)])


@op("REVERSE_V2")
def _reverse_v2(e, n):
    axes = const_ints(n.inputs[1], "axis")
    return [_reversed(e, e.real(n.inputs[0]), axes)]


_REFLECT, _SYMMETRIC = 0, 1  # tflite.MirrorPadMode


@op("MIRROR_PAD")
def _mirror_pad(e, n):
    x, paddings = n.inputs
    mode = option(n, "mode")
    if mode == _REFLECT:  # the edge row is not repeated, as in ONNX's reflect
        return [e.emit("Pad", [e.real(x), _pads(e, paddings)], mode="reflect")]
    if mode != _SYMMETRIC:
        raise NoForm(f"mode {mode}")
    # SYMMETRIC repeats the edge row, which no ONNX Pad mode does: along each axis, the
    # first `before` rows reversed, the tensor, the last `after` rows reversed.
    pads = const_data(paddings)
    if pads is None:
        raise NoForm("SYMMETRIC paddings not constant")
    y = e.real(x)
    for axis, (before, after) in enumerate(pads.reshape(-1, 2).tolist()):
        parts = [y]
        if before:
            parts.insert(0, _reversed(e, e.emit("Slice", [y, e.ints([0]), e.ints([before]), e.ints([axis])]), [axis]))
        if after:
            parts.append(_reversed(e, e.emit("Slice", [y, e.ints([-after]), e.ints([_BIG]), e.ints([axis])]), [axis]))
        if len(parts) > 1:
            y = e.emit("Concat", parts, axis=axis)
    return [y]


@op("GATHER_ND")
def _gather_nd(e, n):
    indices = e.emit("Cast", [e.raw(n.inputs[1])], to=TensorProto.INT64)
    return [e.emit("GatherND", [e.real(n.inputs[0]), indices])]


@op("FILL")
def _fill(e, n):
    dims, value = n.inputs
    return [e.emit("Expand", [e.emit("Reshape", [e.real(value), e.ints([])]), e.index(dims)])]


@op("ZEROS_LIKE", raw=True)
def _zeros_like(e, n):
    x = n.inputs[0]
    zero = helper.make_tensor("value", elem_type(x.type.dtype), [1], [0])
    return [e.emit("ConstantOfShape", [e.emit("Shape", [e.raw(x)])], value=zero)]


@op("RANGE", raw=True)
def _range(e, n):
    return [e.emit("Range", [e.emit("Reshape", [e.raw(v), e.ints([])]) for v in n.inputs])]


@op("TOPK_V2")
def _topk_v2(e, n):
    x, k = n.inputs
    values, indices = e.emit_all("TopK", [e.real(x), e.index(k)], 2, axis=-1, largest=1, sorted=1)
    return [values, e.cast(indices, "int64", n.outputs[1].type.dtype)]


def _blocked(n: Node) -> Tuple[List[int], np.ndarray, List[int]]:
    """SPACE_TO_BATCH_ND's or BATCH_TO_SPACE_ND's block shape, paddings (or crops) as
    [M, 2], and the sizes of x's dims after the batch, which must be known."""
    block, pads = const_data(n.inputs[1]), const_data(n.inputs[2])
    if block is None or pads is None:
        raise NoForm("block shape or paddings not constant")
    x = n.inputs[0]
    sizes = static_sizes(x, range(1, x.type.rank or 0), "spatial or inner dims not static")
    return [int(b) for b in block.reshape(-1)], pads.reshape(-1, 2).astype(np.int64), sizes


@op("SPACE_TO_BATCH_ND")
def _space_to_batch_nd(e, n):
    """x [N, S1..SM, R...] padded, each spatial dim split into (S/b, b), the b's moved
    in front of N: [b1*..*bM*N, S1/b1.., R...] (TF's order: block offsets outermost)."""
    x = n.inputs[0]
    block, pads, sizes = _blocked(n)
    m = len(block)
    spatial = [s + int(p.sum()) for s, p in zip(sizes[:m], pads)]
    rest = sizes[m:]
    y = e.emit("Pad", [e.real(x), e.ints(np.concatenate([[0], pads[:, 0], [0] * len(rest),
                                                          [0], pads[:, 1], [0] * len(rest)]))])
    split = [-1] + [v for s, b in zip(spatial, block) for v in (s // b, b)] + rest
    y = e.emit("Reshape", [y, e.ints(split)])
    inner = list(range(1 + 2 * m, 1 + 2 * m + len(rest)))
    perm = [2 + 2 * i for i in range(m)] + [0] + [1 + 2 * i for i in range(m)] + inner
    y = e.emit("Transpose", [y], perm=perm)
    return [e.emit("Reshape", [y, e.ints([-1] + [s // b for s, b in zip(spatial, block)] + rest)])]


@op("BATCH_TO_SPACE_ND")
def _batch_to_space_nd(e, n):
    """SPACE_TO_BATCH_ND undone, then cropped: [b1*..*bM*N, S1..SM, R...] ->
    [N, S1*b1 - crops, .., R...]."""
    x = n.inputs[0]
    block, crops, sizes = _blocked(n)
    m = len(block)
    spatial, rest = sizes[:m], sizes[m:]
    y = e.emit("Reshape", [e.real(x), e.ints(block + [-1] + sizes)])
    perm = [m] + [v for i in range(m) for v in (m + 1 + i, i)] + list(range(2 * m + 1, 2 * m + 1 + len(rest)))
    y = e.emit("Transpose", [y], perm=perm)
    full = [s * b for s, b in zip(spatial, block)]
    y = e.emit("Reshape", [y, e.ints([-1] + full + rest)])
    if crops.any():
        y = e.emit("Slice", [y, e.ints(crops[:, 0]), e.ints(np.asarray(full) - crops[:, 1]), e.ints(range(1, m + 1))])
    return [y]


@op("DENSIFY", raw=True)
def _densify(e, n):
    return [e.raw(n.inputs[0])]  # a sparse constant is read dense (kinds.tflite.importer)
