"""StableHLO lowerings of ONNX shape ops: Shape, Reshape and its kin, Expand (the ``xla``
form's broadcast), Concat, Transpose, Slice, Split, Gather, Pad. A dim known only at run
time is read with ``get_dimension_size``; the ``dynamic_*`` ops take runtime shapes."""

from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import numpy as np

from ....ir.constdata import attribute_array
from ....ir.graph import Node
from ..onnx_attrs import axis_index, params_are_operands
from ..printer import i64_array, int_list
from ..registry import Unsupported
from .emitter import LOWERINGS, TT, Emitter, RDim, arg, result_type

# An integer that means "to the end" in Slice ends (ONNX exporters write INT64_MAX or
# INT32_MAX).
_HUGE = 2 ** 30


@LOWERINGS.register("Shape")
def _shape(cx: Emitter, node: Node):
    x = arg(cx, node, 0)
    rank = cx.tt(x).rank
    start = axis_index(cx.attr(node, "start", 0), rank)
    end = cx.attr(node, "end", rank)
    end = min(axis_index(end, rank), rank)
    return [cx.shape_vector(cx.rdims(x)[max(start, 0):end])]


@LOWERINGS.register("Size")
def _size(cx: Emitter, node: Node):
    x, out = arg(cx, node, 0), result_type(node)
    n = cx.product(cx.rdims(x))
    if isinstance(n, int):
        return [cx.const(np.asarray(n, np.int64), out)]
    return [cx.reshape(n, out)]


def _new_dims_runtime(cx: Emitter, x: str, out: TT, kept: Sequence[int]) -> List[RDim]:
    """Runtime dims of ``out`` whose dims ``kept`` are ``x``'s dims in order and whose
    other dims are static (the 1s of Unsqueeze)."""
    src = iter(range(cx.tt(x).rank))
    dims: List[RDim] = []
    for k, d in enumerate(out.dims):
        if k in kept:
            i = next(src)
            dims.append(d if isinstance(d, int) else cx.rdim(x, i))
        else:
            dims.append(d if isinstance(d, int) else 1)
    return dims


@LOWERINGS.register("Unsqueeze")
def _unsqueeze(cx: Emitter, node: Node):
    x, out = arg(cx, node, 0), result_type(node)
    if out.static:  # the axes (maybe a runtime input) are in the result type already
        return [cx.reshape(x, out)]
    axes = cx.ints_arg(node, "axes", 1)
    axes = sorted(axis_index(a, out.rank) for a in axes)
    kept = [k for k in range(out.rank) if k not in axes]
    return [cx.reshape(x, out, None if out.static else _new_dims_runtime(cx, x, out, kept))]


@LOWERINGS.register("Squeeze")
def _squeeze(cx: Emitter, node: Node):
    x, out = arg(cx, node, 0), result_type(node)
    src = cx.tt(x)
    if out.static:  # the axes (maybe a runtime input) are in the result type already
        return [cx.reshape(x, out)]
    axes = cx.ints_arg(node, "axes", 1)
    if axes is None:
        axes = [k for k, d in enumerate(src.dims) if d == 1]
        if len(axes) != src.rank - out.rank:
            raise Unsupported("no axes and dims not known to be 1")
    axes = [axis_index(a, src.rank) for a in axes]
    dims = [cx.rdim(x, k) for k in range(src.rank) if k not in axes]
    return [cx.reshape(x, out, None if out.static else dims)]


@LOWERINGS.register("Flatten")
def _flatten(cx: Emitter, node: Node):
    x, out = arg(cx, node, 0), result_type(node)
    rank = cx.tt(x).rank
    axis = axis_index(cx.attr(node, "axis", 1), rank)
    if out.static:
        return [cx.reshape(x, out)]
    dims = cx.rdims(x)
    return [cx.reshape(x, out, [cx.product(dims[:axis]), cx.product(dims[axis:])])]


@LOWERINGS.register("Reshape")
def _reshape(cx: Emitter, node: Node):
    x, out = arg(cx, node, 0), result_type(node)
    if out.static:
        return [cx.reshape(x, out)]
    # The runtime shape, dim by dim: a static dim of the result; else the requested
    # size where it is known (0: copy the input's dim; -1: what is left), or the
    # runtime element of the shape operand.
    spec = node.inputs[1]
    parts = cx.vector_parts(spec)
    allowzero = cx.attr(node, "allowzero", 0)
    dims: List[RDim] = []
    infer_at = None
    for k, d in enumerate(out.dims):
        p = parts[k] if parts is not None else None
        if isinstance(d, int):
            dims.append(d)
        elif p == 0 and not allowzero:
            dims.append(cx.rdim(x, k))
        elif p == -1:
            dims.append(1)
            infer_at = k
        elif p is not None:
            dims.append(p)
        else:
            dims.append(cx.element(cx.v(spec), k))
    if infer_at is not None:
        rest = cx.product([d for k, d in enumerate(dims) if k != infer_at])
        dims[infer_at] = cx.dim_op("divide", cx.product(cx.rdims(x)), rest)
    return [cx.reshape(x, out, dims)]


@LOWERINGS.register("Expand")
def _expand(cx: Emitter, node: Node):
    # Expand is the xla form's broadcast: operand right-aligned into the result (the
    # pass has made ranks equal with an Unsqueeze already). The runtime result shape is
    # the shape operand, which the pass built as the result's dims.
    x, out = arg(cx, node, 0), result_type(node)
    src = cx.tt(x)
    bdims = list(range(out.rank - src.rank, out.rank))
    if src.static and out.static:
        return [cx.broadcast(x, out, bdims)]
    shape = node.inputs[1]
    parts = cx.vector_parts(shape)
    if parts is None or all(p is None and not isinstance(d, int) or p == d for p, d in zip(parts, out.dims)):
        # The vector is the result's dims (no 1 standing for a larger operand dim).
        return [cx.broadcast(x, out, bdims, shape=cx.v(shape))]
    rd: List[RDim] = []
    for k, d in enumerate(out.dims):
        if isinstance(d, int):
            rd.append(d)
        elif parts is not None and parts[k] is not None and parts[k] != 1:
            rd.append(parts[k])
        else:
            rd.append(cx.element(cx.v(shape), k))
    return [cx.broadcast(x, out, bdims, rd)]


@LOWERINGS.register("ConstantOfShape")
def _constant_of_shape(cx: Emitter, node: Node):
    out = result_type(node)
    value = node.attrs.get("value")
    fill = attribute_array(node, "value").reshape(-1)[0].item() if value is not None else 0.0
    if out.static:
        return [cx.splat(fill, out)]
    shape = cx.v(node.inputs[0])
    return [cx.splat(fill, out, [d if isinstance(d, int) else cx.element(shape, k) for k, d in enumerate(out.dims)])]


@LOWERINGS.register("Concat")
def _concat(cx: Emitter, node: Node):
    out = result_type(node)
    axis = axis_index(cx.attr(node, "axis"), out.rank)
    xs = [cx.v(v) for v in node.inputs if v is not None]
    if len(xs) == 1:
        return [xs[0]]
    types = ", ".join(str(cx.tt(x)) for x in xs)
    return [cx.emit(f"stablehlo.concatenate {', '.join(xs)}, dim = {axis} : ({types}) -> {out}", out)]


@LOWERINGS.register("Transpose")
def _transpose(cx: Emitter, node: Node):
    x, out = arg(cx, node, 0), result_type(node)
    perm = cx.attr(node, "perm") or list(reversed(range(cx.tt(x).rank)))
    return [cx.emit(f"stablehlo.transpose {x}, dims = {int_list(perm)} : ({cx.tt(x)}) -> {out}", out)]


def _slice(cx: Emitter, x: str, ranges: Dict[int, Tuple[int, int, int]], out: TT) -> str:
    """``x`` sliced along the axes in ``ranges`` (ONNX start, end, step: unnormalized,
    clamped as ONNX clamps them). A negative step reverses the axis first. A dynamic dim
    is sliced by ``real_dynamic_slice``, its bounds clamped to the dim at run time."""
    src = cx.tt(x)
    starts: List[RDim] = [0] * src.rank
    limits: List[RDim] = [d if isinstance(d, int) else cx.rdim(x, k) for k, d in enumerate(src.dims)]
    strides = [1] * src.rank
    for k, (b, e, s) in ranges.items():
        d = src.dims[k]
        if isinstance(d, int):
            b, e, s = slice(b, e, s).indices(d)
            if s < 0:
                count = len(range(b, e, s))
                x = cx.emit(f"stablehlo.reverse {x}, dims = [{k}] : {cx.tt(x)}", cx.tt(x))
                b, s = d - 1 - b, -s
                e = b + (count - 1) * s + 1 if count else b
            starts[k], limits[k], strides[k] = b, max(e, b), s
            continue
        if s < 0 or b < 0 or e < 0:
            raise Unsupported("negative start, end or step on a dynamic dim")
        dim = limits[k]
        starts[k] = cx.dim_op("minimum", b, dim) if b else 0
        limits[k] = dim if e >= _HUGE else cx.dim_op("minimum", e, dim)
        strides[k] = s
    if all(isinstance(v, int) for v in starts + limits):
        spec = ", ".join(f"{a}:{b}" + (f":{s}" if s != 1 else "") for a, b, s in zip(starts, limits, strides))
        return cx.emit(f"stablehlo.slice {x} [{spec}] : ({cx.tt(x)}) -> {out}", out)
    sv, lv, tv = cx.shape_vector(starts), cx.shape_vector(limits), cx.index_vector(strides)
    vt = TT("i64", (src.rank,))
    return cx.emit(f"stablehlo.real_dynamic_slice {x}, {sv}, {lv}, {tv} : ({cx.tt(x)}, {vt}, {vt}, {vt}) -> {out}",
                   out)


@LOWERINGS.register("Slice")
def _slice_op(cx: Emitter, node: Node):
    x, out = arg(cx, node, 0), result_type(node)
    rank = cx.tt(x).rank
    if not params_are_operands(cx.graph, node):
        starts, ends = cx.attr(node, "starts"), cx.attr(node, "ends")
        axes, steps = cx.attr(node, "axes"), None
    else:
        starts = cx.const_input(node, 1, "starts")
        ends = cx.const_input(node, 2, "ends")
        axes = cx.const_input(node, 3, "axes")
        steps = cx.const_input(node, 4, "steps")
    starts = [int(v) for v in np.asarray(starts).reshape(-1)]
    ends = [int(v) for v in np.asarray(ends).reshape(-1)]
    axes = list(range(len(starts))) if axes is None else \
        [axis_index(int(a), rank) for a in np.asarray(axes).reshape(-1)]
    steps = [1] * len(starts) if steps is None else [int(s) for s in np.asarray(steps).reshape(-1)]
    ranges = {a: (b, e, s) for a, b, e, s in zip(axes, starts, ends, steps)}
    return [_slice(cx, x, ranges, out)]


@LOWERINGS.register("Split")
def _split(cx: Emitter, node: Node):
    x = arg(cx, node, 0)
    src = cx.tt(x)
    axis = axis_index(cx.attr(node, "axis", 0), src.rank)
    sizes = cx.ints_arg(node, "split", 1)
    if sizes is None:
        sizes = [TT.of(o).dims[axis] for o in node.outputs]
        if not all(isinstance(s, int) for s in sizes):
            raise Unsupported("split sizes known only at run time")
    outs, at = [], 0
    for o, n in zip(node.outputs, sizes):
        outs.append(_slice(cx, x, {axis: (at, at + n, 1)}, TT.of(o)))
        at += n
    return outs


@LOWERINGS.register("Gather")
def _gather(cx: Emitter, node: Node):
    data, out = arg(cx, node, 0), result_type(node)
    src = cx.tt(data)
    axis = axis_index(cx.attr(node, "axis", 0), src.rank)
    idx_known = cx.known_array(node.inputs[1])
    d = src.dims[axis]
    if idx_known is not None:
        idx = np.asarray(idx_known).astype(np.int64)
        if isinstance(d, int):
            idx = np.where(idx < 0, idx + d, idx)
        if idx.ndim <= 1 and (idx >= 0).all():
            flat = idx.reshape(-1)
            # A run of consecutive indices is a slice (how shape dims are picked).
            if flat.size and (np.diff(flat) == 1).all():
                sliced_dims = list(src.dims)
                sliced_dims[axis] = int(flat.size)
                sliced = _slice(cx, data, {axis: (int(flat[0]), int(flat[-1]) + 1, 1)}, src.with_dims(sliced_dims))
                if idx.ndim == 1:
                    return [cx.reshape(sliced, out)] if cx.tt(sliced) == out else [sliced]
                rd = None if out.static else [cx.rdim(sliced, k) for k in range(src.rank) if k != axis]
                return [cx.reshape(sliced, out, rd)]
    # General case: stablehlo.gather of the (normalized) indices along ``axis``, or
    # dynamic_gather when a dim it takes whole is dynamic (its slice size is runtime).
    idx = cx.convert(cx.v(node.inputs[1]), "i64")
    it = cx.tt(idx)
    if idx_known is None or (np.asarray(idx_known) < 0).any():
        size = cx.rdim_scalar(cx.rdim(data, axis), "i64")
        size_b = cx.broadcast(size, it, [], None if it.static else cx.rdims(idx))
        neg = cx.compare("LT", idx, cx.splat_like(0, idx))
        idx = cx.select(neg, cx.op("stablehlo.add", [idx, size_b], it), idx, it)
    offset_dims = list(range(axis)) + list(range(axis + it.rank, src.rank - 1 + it.rank))
    dn = (f"#stablehlo.gather<offset_dims = {int_list(offset_dims)}, collapsed_slice_dims = [{axis}],"
          f" start_index_map = [{axis}], index_vector_dim = {it.rank}>")
    sizes = [1 if k == axis else x for k, x in enumerate(src.dims)]
    if all(isinstance(x, int) for x in sizes):
        return [cx.emit(f'"stablehlo.gather"({data}, {idx}) <{{dimension_numbers = {dn}, indices_are_sorted = false,'
                        f" slice_sizes = {i64_array(sizes)}}}> : ({src}, {it}) -> {out}", out)]
    sv = cx.shape_vector([1 if k == axis else cx.rdim(data, k) for k in range(src.rank)])
    return [cx.emit(f'"stablehlo.dynamic_gather"({data}, {idx}, {sv}) <{{dimension_numbers = {dn},'
                    f" indices_are_sorted = false}}> : ({src}, {it}, {cx.tt(sv)}) -> {out}", out)]


@LOWERINGS.register("Pad")
def _pad(cx: Emitter, node: Node):
    x, out = arg(cx, node, 0), result_type(node)
    src = cx.tt(x)
    if cx.attr(node, "mode", "constant") != "constant":
        raise Unsupported(f"mode {cx.attr(node, 'mode')}")
    if not params_are_operands(cx.graph, node):
        pads, value = cx.attr(node, "pads"), cx.attr(node, "value", 0.0)
        axes = list(range(src.rank))
    else:
        pads = [int(p) for p in cx.const_input(node, 1, "pads").reshape(-1)]
        v = cx.const_input(node, 2, "constant_value")
        value = 0 if v is None else np.asarray(v).reshape(-1)[0].item()
        a = cx.const_input(node, 3, "axes")
        axes = list(range(src.rank)) if a is None else [axis_index(int(i), src.rank) for i in a.reshape(-1)]
    low, high = [0] * src.rank, [0] * src.rank
    for i, k in enumerate(axes):
        low[k], high[k] = pads[i], pads[i + len(axes)]
    pv = cx.scalar(value, src.elem)
    return [cx.emit(f"stablehlo.pad {x}, {pv}, low = {int_list(low)}, high = {int_list(high)},"
                    f" interior = {int_list([0] * src.rank)} : ({src}, tensor<{src.elem}>) -> {out}", out)]


def track_parts(cx: Emitter, node: Node) -> None:
    """Per-element compile-time knowledge of 1-D int vectors: which dims of a runtime
    shape are static (a Reshape's 0 and -1, an Expand's static dims)."""
    parts_of = cx.vector_parts
    out = node.outputs[0] if node.outputs else None
    if out is None or out.type.shape is None or len(out.type.shape) != 1:
        return
    if node.op == "Shape":
        shape = node.inputs[0].type.shape
        if shape is not None:
            rank = len(shape)
            start = axis_index(cx.attr(node, "start", 0), rank)
            end = min(axis_index(cx.attr(node, "end", rank), rank), rank)
            cx.parts[out] = [d if isinstance(d, int) else None for d in shape][max(start, 0):end]
    elif node.op == "Concat":
        ps = [parts_of(v) for v in node.inputs if v is not None]
        if all(p is not None for p in ps):
            cx.parts[out] = [x for p in ps for x in p]
    elif node.op == "Gather" and cx.attr(node, "axis", 0) == 0:
        p, idx = parts_of(node.inputs[0]), cx.known_array(node.inputs[1])
        if p is not None and idx is not None:
            cx.parts[out] = [p[int(i)] for i in np.asarray(idx).reshape(-1)]
    elif node.op in ("Cast", "Identity"):
        p = parts_of(node.inputs[0])
        if p is not None:
            cx.parts[out] = p

