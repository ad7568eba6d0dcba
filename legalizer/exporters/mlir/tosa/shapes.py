"""TOSA lowerings of ONNX shape ops: Reshape and its kin, Transpose, Concat, Slice,
Split, Gather (of constant indices), Expand and Tile, Pad. The dims they compute with
must be static (``dims=`` binds symbolic ones); shapes computed at run time have no
TOSA form."""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

from ....ir.graph import Node
from ..onnx_attrs import attr, axis_index, params_are_operands
from ..printer import shape_text
from ..registry import Unsupported
from .emitter import LOWERINGS, Emitter, T, ints, need_const, static


@LOWERINGS.register("Shape", "Size", "ConstantOfShape")
def _shape_of_dynamic(e: Emitter, node: Node) -> List[T]:
    """Reached only when folding could not: the shape is not known at compile time."""
    raise Unsupported("a shape computed at run time needs static shapes (bind the dims with dims=)")


# -- shape ops ---------------------------------------------------------------------------

@LOWERINGS.register("Reshape", "Unsqueeze", "Squeeze", "Flatten")
def _reshape(e: Emitter, node: Node) -> List[T]:
    _, shape = e.out_type()
    return [e.reshape(e.input(0), shape, result=e.result_name())]


@LOWERINGS.register("Transpose")
def _transpose(e: Emitter, node: Node) -> List[T]:
    x = e.input(0)
    perm = attr(node, "perm") or list(reversed(range(x.rank)))
    return [e.transpose(x, perm, result=e.result_name())]


@LOWERINGS.register("Concat")
def _concat(e: Emitter, node: Node) -> List[T]:
    parts = [e.input(i) for i in range(len(node.inputs)) if e.has_input(i)]
    axis = axis_index(attr(node, "axis", 0), parts[0].rank)
    parts = [p for p in parts if p.shape[axis] != 0] or parts[:1]
    return [e.concat(parts, axis, result=e.result_name())]


def _slice_bounds(start: int, end: int, dim: int) -> Tuple[int, int]:
    """ONNX Slice's clamping of one axis with step 1: (start, size)."""
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    start = max(0, min(dim, start))
    end = max(0, min(dim, end))
    return start, max(0, end - start)


@LOWERINGS.register("Slice")
def _slice(e: Emitter, node: Node) -> List[T]:
    x = e.input(0)
    if not params_are_operands(e.graph, node):
        starts, ends = attr(node, "starts"), attr(node, "ends")
        axes, steps = attr(node, "axes"), None
    else:
        starts = ints(need_const(e, 1, "starts"))
        ends = ints(need_const(e, 2, "ends"))
        axes = ints(need_const(e, 3, "axes")) if e.has_input(3) else None
        steps = ints(need_const(e, 4, "steps")) if e.has_input(4) else None
    axes = [axis_index(a, x.rank) for a in (axes or range(len(starts)))]
    if steps and any(s != 1 for s in steps):
        raise Unsupported("steps other than 1")
    start, size = [0] * x.rank, list(x.shape)
    for a, s, t in zip(axes, starts, ends):
        dim = x.shape[a]
        if not isinstance(dim, int):
            raise Unsupported(f"slicing dynamic dim {a} of {shape_text(x.shape)} needs static shapes")
        start[a], size[a] = _slice_bounds(s, t, dim)
    return [e.slice(x, start, size, result=e.result_name())]


@LOWERINGS.register("Split")
def _split(e: Emitter, node: Node) -> List[T]:
    x = e.input(0)
    axis = axis_index(attr(node, "axis", 0), x.rank)
    outs, offset = [], 0
    for i in range(len(node.outputs)):
        _, shape = e.out_type(i)
        size = shape[axis]
        if not isinstance(size, int):
            raise Unsupported(f"split of dynamic dim {axis} needs static shapes")
        sizes = list(x.shape)
        sizes[axis] = size
        start = [0] * x.rank
        start[axis] = offset
        outs.append(e.slice(x, start, sizes, result=e.result_name(i)))
        offset += size
    return outs


@LOWERINGS.register("Gather")
def _gather(e: Emitter, node: Node) -> List[T]:
    x = e.input(0)
    indices = e.const_input(1)
    if indices is None:
        raise Unsupported("indices must be a constant (no tosa.gather lowering)")
    axis = axis_index(attr(node, "axis", 0), x.rank)
    dim = x.shape[axis]
    if not isinstance(dim, int):
        raise Unsupported(f"gathering along dynamic dim {axis} needs static shapes")
    idx = [int(i) + dim if int(i) < 0 else int(i) for i in np.asarray(indices).reshape(-1)]
    parts = []
    for i in idx:  # runs of consecutive indices become one slice each
        if parts and parts[-1][0] + parts[-1][1] == i:
            parts[-1][1] += 1
        else:
            parts.append([i, 1])
    pieces = []
    for s, n in parts:
        start, size = [0] * x.rank, list(x.shape)
        start[axis], size[axis] = s, n
        pieces.append(e.slice(x, start, size))
    _, shape = e.out_type()
    return [e.reshape(e.concat(pieces, axis), shape, result=e.result_name())]


@LOWERINGS.register("Expand")
def _expand(e: Emitter, node: Node) -> List[T]:
    x = e.input(0)
    _, shape = e.out_type()
    x = e.expand_rank(x, len(shape))
    if not static(shape) or not static(x.shape):
        raise Unsupported("Expand needs static shapes")
    multiples = [o if d == 1 else 1 for d, o in zip(x.shape, shape)]
    if multiples == [1] * len(shape):
        return [x]
    return [tile(e, x, multiples, shape)]


def tile(e: Emitter, x: T, multiples: Sequence[int], shape: Sequence) -> T:
    out = T(e.fresh(e.result_name()), x.dtype, tuple(shape))
    m = e.shape_value(multiples)
    e.lines.append(f"{out.ssa} = tosa.tile {x.ssa}, {m} : ({x.type}, !tosa.shape<{x.rank}>) -> {out.type}")
    return out


@LOWERINGS.register("Tile")
def _tile_op(e: Emitter, node: Node) -> List[T]:
    x = e.input(0)
    repeats = ints(need_const(e, 1, "repeats"))
    _, shape = e.out_type()
    return [tile(e, x, repeats, shape)]


@LOWERINGS.register("Pad")
def _pad(e: Emitter, node: Node) -> List[T]:
    x = e.input(0)
    mode = attr(node, "mode", "constant")
    if mode != "constant":
        raise Unsupported(f"mode '{mode}' (only constant padding)")
    if not params_are_operands(e.graph, node):
        pads, value = attr(node, "pads"), attr(node, "value", 0.0)
    else:
        pads = ints(need_const(e, 1, "pads"))
        value = float(np.asarray(e.const_input(2)).reshape(-1)[0]) if e.has_input(2) and e.const_input(2) is not None \
            else 0.0
        if e.has_input(2) and e.const_input(2) is None:
            raise Unsupported("the pad value must be a constant")
        if e.has_input(3):
            raise Unsupported("the axes operand")
    if any(p < 0 for p in pads):
        raise Unsupported("negative pads")
    n = x.rank
    _, shape = e.out_type()
    return [tosa_pad(e, x, [(pads[i], pads[i + n]) for i in range(n)], value, shape, e.result_name())]


def tosa_pad(e: Emitter, x: T, pads: Sequence[Tuple[int, int]], value: float, shape=None,
              result: Optional[str] = None) -> T:
    if all(b == 0 and a == 0 for b, a in pads) and result is None:
        return x
    if shape is None:
        shape = tuple(d + b + a if isinstance(d, int) else None for d, (b, a) in zip(x.shape, pads))
    flat = [v for pair in pads for v in pair]
    out = T(e.fresh(result), x.dtype, tuple(shape))
    pv = e.shape_value(flat)
    pc = e.shared_const(value, x.dtype, (1,))
    e.lines.append(f"{out.ssa} = tosa.pad {x.ssa}, {pv}, {pc.ssa} : ({x.type}, !tosa.shape<{2 * x.rank}>, "
                   f"{pc.type}) -> {out.type}")
    return out

