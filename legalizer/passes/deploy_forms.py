"""Rewrites for deployment backends that take fewer TFLite ops than TFLite itself: LiteRT's
GPU delegate has no parser for ``BROADCAST_TO``, ``EXPAND_DIMS`` or ``SQUEEZE``, and Vela
never places ``BROADCAST_TO`` on the Ethos-U NPU (its legacy core also wants one operand
of a binary op to have the result's shape). Every rewrite is exact: the same elements in
the same order.

- ``broadcast_to_into_consumers``: a ``BROADCAST_TO`` read by a broadcasting op whose other
  operands already give the op its result shape is dropped there: the op broadcasts its
  operand itself.
- ``broadcast_to_as_tile``: a ``BROADCAST_TO`` still used becomes ``RESHAPE`` -> ``TILE`` at
  the lowest rank its broadcasting needs (adjacent dims that broadcast alike merge), then a
  ``RESHAPE`` to its shape, which a following ``RESHAPE`` absorbs (GQA's ``repeat_kv``:
  5-D ``BROADCAST_TO`` then a 4-D ``RESHAPE`` becomes a 3-D ``TILE``).
- ``broadcast_to_through_reshape``: ``op(o, RESHAPE(BROADCAST_TO(x)))`` with no broadcasting
  left in ``op`` runs at the ``BROADCAST_TO``'s shape, where it broadcasts ``x`` itself.
- ``broadcast_to_as_concat``, ``one_sided_broadcast`` (Vela's legacy core): copies made by
  ``CONCATENATION``; a binary op whose operands both broadcast gets its larger operand
  at the result's shape that way.
- ``reshape_forms``: ``EXPAND_DIMS``/``SQUEEZE`` become ``RESHAPE`` to a constant shape, and a
  ``RESHAPE`` of a ``RESHAPE`` reads the inner one's operand.
- ``reshape_constants_before_dequantize``: a ``RESHAPE`` of a dequantized constant becomes
  the dequantization of a reshaped constant; ``densify_constants``: a ``DENSIFY`` of a
  sparse constant, the dense constant.

TFLite graphs only (the backends read TFLite); other graphs are left as they are.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

from ..ir.graph import CONST, OP, Graph, Node, Value
from ..ir.types import TensorType, all_static
from ..oprules import RuleLookup
from ..kinds.tflite.records import TFLITE_DOMAIN
from .base import PassContext, register_pass
from .frontend_ops import ops_for
from .patterns import Const, Match, Op, Rule, Var, apply_rules, register_rules
from .rewrite import add_const, constant_array

RESHAPE_LIKE = ("tflite.EXPAND_DIMS", "tflite.SQUEEZE")


def _of_type(graph: Graph, *op_types: str) -> List[Node]:
    """The TFLite ops of ``graph`` of these types, in creation order: one look at each
    node, no topological sort (most graphs have none of them)."""
    return [n for n in graph.unordered_nodes() if n.kind == OP and n.op_type in op_types and n.domain == TFLITE_DOMAIN]


def _static(v: Optional[Value]) -> bool:
    return v is not None and v.type.shape is not None and all_static(v.type.shape)


def _numpy_binary(lookup: RuleLookup, node: Node) -> bool:
    """Whether ``node`` broadcasts all its operands numpy-style (ADD, MUL, SELECT_V2...)."""
    found = lookup(node)
    if found is None:
        return False
    rule, mode, _ = found
    return mode == "numpy" and rule.broadcast == "multidirectional" and rule.operands is None


def _broadcast_target(node: Node) -> Optional[Tuple[int, ...]]:
    """The constant shape of a ``BROADCAST_TO`` with a static operand, else None."""
    if node.op != "tflite.BROADCAST_TO" or len(node.inputs) != 2 or not _static(node.inputs[0]):
        return None
    shape = constant_array(node.inputs[1])
    if shape is None or not _static(node.outputs[0]):
        return None
    return tuple(int(d) for d in shape.reshape(-1))


@register_pass(frontends=("tflite",))
def broadcast_to_into_consumers(graph: Graph, ctx: PassContext) -> bool:
    lookup = RuleLookup(graph, ctx.rules)
    changed = False
    for node in _of_type(graph, "BROADCAST_TO"):
        if _broadcast_target(node) is None:
            continue
        src, out = node.inputs[0], node.outputs[0]
        if src.quant != out.quant:
            continue  # BROADCAST_TO does not requantize; a consumer reading src would
        for user, i in graph.users(out):
            if user.kind != OP or user.graph is not graph or not _numpy_binary(lookup, user):
                continue
            result = user.outputs[0].type.shape
            shapes = [src.type.shape if j == i else (None if v is None else v.type.shape)
                      for j, v in enumerate(user.inputs)]
            if result is None or any(s is None for s in shapes) or not all_static(result):
                continue
            try:
                if np.broadcast_shapes(*[tuple(s) for s in shapes]) != tuple(result):
                    continue
            except (ValueError, TypeError):  # not broadcastable, or a dim is not a number
                continue
            graph.set_input(user, i, src)
            ctx.stats["broadcasts_folded_into_consumer"] += 1
            changed = True
    return changed


@register_pass(frontends=("tflite",))
def broadcast_to_through_reshape(graph: Graph, ctx: PassContext) -> bool:
    """``op(o, RESHAPE(BROADCAST_TO(x)))`` where every operand of ``op`` has its result's
    shape (no broadcasting left): ``op`` commutes with the reshape, so it runs at the
    ``BROADCAST_TO``'s shape, on ``RESHAPE(o)``, and ``broadcast_to_into_consumers`` then
    lets it broadcast ``x`` itself (GQA's repeat_kv feeding a MUL or ADD)."""
    ops = ops_for(graph)
    lookup = RuleLookup(graph, ctx.rules)
    changed = False
    for node in _of_type(graph, "BROADCAST_TO"):
        if _broadcast_target(node) is None:
            continue
        dst = node.outputs[0].type
        for reshape, j in graph.users(node.outputs[0]):
            if (j != 0 or reshape.kind != OP or reshape.op != "tflite.RESHAPE" or reshape.graph is not graph
                    or not _static(reshape.outputs[0]) or reshape.outputs[0].quant != node.outputs[0].quant):
                continue
            r = reshape.outputs[0]
            for user, i in graph.users(r):
                if user.kind != OP or user.graph is not graph or not _numpy_binary(lookup, user):
                    continue
                out = user.outputs[0]
                if not all(v is not None and _static(v) and tuple(v.type.shape) == tuple(out.type.shape)
                           for v in user.inputs + [out]):
                    continue
                operands = []
                for k, v in enumerate(user.inputs):
                    if v is r:
                        operands.append(node.outputs[0])
                        continue
                    w = ops.reshape(graph, v, list(dst.shape), v.type.with_shape(dst.shape), f"{v.name}_b")
                    w.quant = v.quant
                    operands.append(w)
                inner = graph.add_op(user.op_type, operands, [out.type.with_shape(dst.shape)], domain=TFLITE_DOMAIN,
                                     attrs=dict(user.attrs), output_names=[f"{out.name}_b"]).output
                inner.quant = out.quant
                back = ops.reshape(graph, inner, list(out.type.shape), out.type, f"{out.name}_r")
                back.quant = out.quant
                graph.replace_all_uses_with(out, back)
                ctx.stats["reshapes_sunk"] += 1
                changed = True
    if changed:
        broadcast_to_into_consumers(graph, ctx)
    return changed


@register_pass(ensures=("over-rank",))
def fold_for_npu(graph: Graph, ctx: PassContext) -> bool:
    """Vela: an elementwise region whose op broadcasts or has a batch other than 1 runs at
    its lowest rank (``fold_ranks``' folding, for these regions only): the legacy core
    takes batch 1 only, and both cores broadcast folded dims in fewer cycles ([2,4,8,8] +
    [2,4,8,8]: 3,076 cycles on the U85, 426 as [512]). Regions that neither broadcast nor
    batch keep their shape: reshapes around them cost Vela its chaining of ops."""
    from .fold_ranks import _Folder  # (its region finder and folder; fold_ranks picks regions by rank only)

    folder = _Folder(graph, ctx)
    seen: set = set()
    changed = False
    for node in graph.ops():
        if node.id in seen or node.graph is not graph or len(node.outputs) != 1:
            continue
        result = node.outputs[0].type.shape
        if result is None or not _static(node.outputs[0]) or folder.rank(node) is None:
            continue
        batched = len(result) == 4 and result[0] != 1
        broadcasts = any(v is not None and _static(v) and
                         (1,) * (len(result) - len(v.type.shape)) + tuple(v.type.shape) != tuple(result)
                         for v in node.inputs)
        if batched or broadcasts:
            changed |= folder.fold(folder.region(node, seen))
    return changed


@register_pass(frontends=("tflite",))
def elementwise_at_rank4(graph: Graph, ctx: PassContext) -> bool:
    """A broadcasting op below rank 4 with a constant operand that has more than one row
    runs at rank 4 (1s in front; the constant reshaped at compile time, a runtime operand
    and the result by RESHAPE): LiteRT 2.3.0's GPU accelerator reads a constant of rank
    < 4 with a leading dim over 1 wrongly ([2,8] + const [2,8] is off by whole elements;
    at [1,1,2,8] it is exact), as the classic delegate aligns runtime operands from the
    left (LiteRT #8980)."""
    ops = ops_for(graph)
    lookup = RuleLookup(graph, ctx.rules)
    changed = False
    for node in list(graph.unordered_nodes()):  # (the loop adds nodes)
        if node.kind != OP or node.domain != TFLITE_DOMAIN or len(node.outputs) != 1:
            continue
        out = node.outputs[0]
        if out.type.shape is None or len(out.type.shape) >= 4 or not any(
                v is not None and v.producer is not None and v.producer.kind == CONST for v in node.inputs):
            continue
        if not _numpy_binary(lookup, node) or not _static(out) or not all(_static(v) for v in node.inputs):
            continue
        if not any(constant_array(v) is not None and len(v.type.shape) < 4 and any(d > 1 for d in v.type.shape[:-1])
                   for v in node.inputs):
            continue
        for i, v in enumerate(node.inputs):
            shape4 = (1,) * (4 - len(v.type.shape)) + tuple(v.type.shape)
            array = constant_array(v)
            if array is not None:
                new = add_const(graph, f"{v.name}_r4", array.reshape(shape4), v.quant)
                ctx.stats["constants_folded"] += 1
            else:
                new = _reshaped(graph, ops, v, shape4, f"{v.name}_r4")
            graph.set_input(node, i, new)
        result = out.type
        out.type = result.with_shape((1,) * (4 - len(result.shape)) + tuple(result.shape))
        out.info = None
        back = ops.reshape(graph, out, list(result.shape), result, f"{out.name}_r{len(result.shape)}")
        back.quant = out.quant
        graph.replace_all_uses_with(out, back)
        ctx.stats["reshapes_inserted"] += 1
        changed = True
    if changed:
        reshape_forms(graph, ctx)
    return changed


def _folded_broadcast(src: Sequence[int], dst: Sequence[int]) -> Tuple[List[int], List[int], List[int]]:
    """(operand shape, multiples, tiled shape) of ``src`` broadcast to ``dst`` at the
    lowest rank: dims of size 1 in ``dst`` go, adjacent dims that both broadcast (1 -> n)
    or both keep their size merge."""
    src = [1] * (len(dst) - len(src)) + list(src)
    shape: List[int] = []
    mult: List[int] = []
    last = None
    for s, d in zip(src, dst):
        if d == 1:
            continue
        kind = s == 1 and d != 1
        if kind == last:
            shape[-1] *= s
            mult[-1] *= d if kind else 1
        else:
            shape.append(s)
            mult.append(d if kind else 1)
        last = kind
    if not shape:
        shape, mult = [1], [1]
    return shape, mult, [s * m for s, m in zip(shape, mult)]


@register_pass(frontends=("tflite",))
def broadcast_to_as_tile(graph: Graph, ctx: PassContext) -> bool:
    return _lower_broadcast_to(graph, ctx, concat=False)


@register_pass(frontends=("tflite",))
def broadcast_to_as_concat(graph: Graph, ctx: PassContext) -> bool:
    """As ``broadcast_to_as_tile``, with copies made by ``CONCATENATION`` (Vela's legacy
    core runs TILE on the CPU, CONCATENATION on the NPU)."""
    return _lower_broadcast_to(graph, ctx, concat=True)


def _lower_broadcast_to(graph: Graph, ctx: PassContext, concat: bool) -> bool:
    ops = ops_for(graph)
    changed = False
    for node in _of_type(graph, "BROADCAST_TO"):
        dst = _broadcast_target(node)
        if dst is None or not graph.has_uses(node):
            continue
        src, out = node.inputs[0], node.outputs[0]
        shape, mult, tiled = _folded_broadcast(src.type.shape, dst)
        base = out.name
        if concat:
            copies = _concat_copies(graph, src, tuple(shape), tuple(tiled))
        else:
            x = src
            if list(src.type.shape) != shape:
                x = ops.reshape(graph, src, shape, src.type.with_shape(tuple(shape)), f"{base}_in")
                x.quant = src.quant
                ctx.stats["reshapes_inserted"] += 1
            multiples = add_const(graph, f"{base}_multiples", np.asarray(mult, np.int32))
            copies = graph.add_op("TILE", [x, multiples], [out.type.with_shape(tuple(tiled))], domain=TFLITE_DOMAIN,
                                  output_names=[f"{base}_tile"]).output
            copies.quant = out.quant
        result = copies
        if list(tiled) != list(dst):
            result = ops.reshape(graph, copies, list(dst), out.type, f"{base}_tiled")
            result.quant = out.quant
        graph.replace_all_uses_with(out, result)
        ctx.stats["broadcasts_made_copies"] += 1
        changed = True
    if changed:
        reshape_forms(graph, ctx)  # a RESHAPE after the copies' own RESHAPE reads the copies
    return changed


@register_pass(frontends=("tflite",))
def one_sided_broadcast(graph: Graph, ctx: PassContext) -> bool:
    """Binary ops whose operands both broadcast (``[1,4,1,8] + [1,1,8,8]``): the larger
    operand made the result's shape by a ``CONCATENATION`` of copies along each dim it
    broadcasts (Vela's legacy core places CONCATENATION on the NPU, not TILE)."""
    lookup = RuleLookup(graph, ctx.rules)
    changed = False
    for node in graph.ops():
        if len(node.inputs) != 2 or not _numpy_binary(lookup, node) or not _static(node.outputs[0]):
            continue
        result = tuple(node.outputs[0].type.shape)
        a, b = node.inputs
        if not (_static(a) and _static(b)):
            continue
        padded = [(1,) * (len(result) - len(v.type.shape)) + tuple(v.type.shape) for v in (a, b)]
        if result in padded:
            continue
        i = 0 if int(np.prod(a.type.shape)) >= int(np.prod(b.type.shape)) else 1
        graph.set_input(node, i, _concat_copies(graph, node.inputs[i], padded[i], result))
        ctx.stats["broadcasts_made_one_sided"] += 1
        changed = True
    return changed


def _concat_copies(graph: Graph, v: Value, shape: Tuple[int, ...], result: Tuple[int, ...]) -> Value:
    """``v`` (of ``shape`` padded with leading 1s) repeated to ``result``: for each dim it
    broadcasts, a ``CONCATENATION`` of copies on a 3-D view ``[before, 1, after]`` (batch
    1 whatever the dim, as Vela's legacy core needs), then a ``RESHAPE`` to ``result``."""
    ops = ops_for(graph)
    x = v
    cur = list(shape)
    for axis, (s, r) in enumerate(zip(shape, result)):
        if s == r:
            continue
        before, after = int(np.prod(cur[:axis], dtype=np.int64)), int(np.prod(cur[axis + 1:], dtype=np.int64))
        view = (before, 1, after)
        if tuple(x.type.shape) != view:
            x = _reshaped(graph, ops, x, view, f"{v.name}_v{axis}")
        x = graph.add_op("CONCATENATION", [x] * r, [v.type.with_shape((before, r, after))], domain=TFLITE_DOMAIN,
                         attrs={"axis": 1, "fused_activation_function": 0},
                         output_names=[f"{v.name}_x{axis}"]).output
        x.quant = v.quant
        cur[axis] = r
    return x if tuple(x.type.shape) == tuple(result) else _reshaped(graph, ops, x, tuple(result), f"{v.name}_b")


def _reshaped(graph: Graph, ops, x: Value, shape: Tuple[int, ...], base: str) -> Value:
    out = ops.reshape(graph, x, list(shape), x.type.with_shape(shape), base)
    out.quant = x.quant
    return out


@register_pass(frontends=("tflite",))
def reshape_forms(graph: Graph, ctx: PassContext) -> bool:
    ops = ops_for(graph)
    changed = False
    for node in _of_type(graph, "RESHAPE", "EXPAND_DIMS", "SQUEEZE"):
        if node.graph is not graph:
            continue
        out = node.outputs[0] if node.outputs else None
        if node.op in RESHAPE_LIKE and out is not None and out.type.shape is not None:
            dims = [d if isinstance(d, int) else -1 for d in out.type.shape]
            if dims.count(-1) > 1 or node.inputs[0] is None:
                continue  # two unknown dims: no constant target says it
            new = ops.reshape(graph, node.inputs[0], dims, out.type, f"{out.name}_r")
            new.quant = out.quant
            graph.replace_all_uses_with(out, new)
            ctx.stats["reshapes_made_explicit"] += 1
            changed = True
        elif node.op == "tflite.RESHAPE" and node.inputs and node.inputs[0] is not None:
            src = node.inputs[0]
            if (_static(src) and _static(out) and tuple(src.type.shape) == tuple(out.type.shape)
                    and src.quant == out.quant and not any(u.kind != OP for u, _ in graph.users(out))):
                graph.replace_all_uses_with(out, src)  # a reshape to its operand's own shape
                changed = True
                continue
            inner = src.producer
            if (inner is not None and inner.kind == OP and inner.op in ("tflite.RESHAPE",) + RESHAPE_LIKE
                    and inner.inputs and inner.inputs[0] is not None and inner.inputs[0].quant == out.quant
                    and inner.output.quant == out.quant and _constant_target(node)):
                graph.set_input(node, 0, inner.inputs[0])
                changed = True
    return changed


def _dequantized_reshaped(graph: Graph, m: Match, ctx: PassContext) -> Value:
    out, c = m.result, m["c_value"]
    shaped = add_const(graph, f"{c.name}_r{len(out.type.shape)}", m["c"].reshape(out.type.shape), c.quant)
    new = graph.add_op("DEQUANTIZE", [shaped], [out.type], domain=TFLITE_DOMAIN, attrs=dict(m["deq"].attrs),
                       output_names=[f"{out.name}_dq"]).output
    new.quant = out.quant
    return new


# ``RESHAPE(DEQUANTIZE(c))`` of a constant ``c`` (float16 or per-tensor int8 weights)
# becomes ``DEQUANTIZE(c reshaped at compile time)``: the GPU delegate takes a dequantized
# constant as a constant (a PRELU's alpha, a MUL's scale), never a RESHAPE of one
# ("Expected 1 runtime input tensor(s), but node has 0").
reshape_constants_before_dequantize = register_rules(
    "reshape_constants_before_dequantize",
    Rule(Op("tflite.RESHAPE", (Op("tflite.DEQUANTIZE", (Const("c"),), name="deq"),)), _dequantized_reshaped,
         stat="constants_folded",
         condition=lambda m, ctx: _static(m.result) and not (m["c_value"].quant is not None
                                                             and m["c_value"].quant.per_axis)),
    frontends=("tflite",))


def _dense(graph: Graph, m: Match, ctx: PassContext) -> Value:
    out = m.result
    return add_const(graph, f"{out.name}_dense", m["c"].reshape(out.type.shape), out.quant)


_DENSE = Rule(Op("tflite.DENSIFY", (Const("c", sparse=True),)), _dense, stat="constants_folded",
              condition=lambda m, ctx: _static(m.result))


@register_pass(frontends=("tflite",))
def densify_constants(graph: Graph, ctx: PassContext) -> bool:
    """Sparse constants (pruned weights) made dense at compile time, as LiteRT's DENSIFY
    makes them at run time: a ``DENSIFY`` of one becomes the dense constant (the GPU
    delegate has no DENSIFY, and takes the ``DEQUANTIZE`` of a constant after it as a
    weight), and one an op reads itself is read dense (LiteRT 2.3.0's GPU accelerator takes
    a FULLY_CONNECTED's sparse weights as they are stored, and computes wrong results)."""
    changed = apply_rules(graph, ctx, (_DENSE,))
    from ..kinds.tflite.schema import FbTable  # here: an ONNX run never imports the flatbuffer reader

    for node in graph.constants():
        v = node.outputs[0]
        sparse = isinstance(v.info, FbTable) and v.info.get("sparsity") is not None
        if not sparse or not graph.has_uses(node) or not _static(v):
            continue
        dense = np.asarray(node.data.array).reshape(v.type.shape)
        graph.replace_all_uses_with(v, add_const(graph, f"{v.name}_dense", dense, v.quant))
        ctx.stats["constants_folded"] += 1
        changed = True
    return changed


def _constant_target(node: Node) -> bool:
    """A RESHAPE whose target does not depend on its operand's shape at run time."""
    if len(node.inputs) < 2 or node.inputs[1] is None:
        return "new_shape" in node.attrs
    return constant_array(node.inputs[1]) is not None


def _gathered_as_int32(graph: Graph, m: Match, ctx: PassContext) -> Value:
    from onnx import helper

    node, data, out = m.root, m["data"], m.result
    as_int = graph.add_op("Cast", [data], [TensorType("int32", data.type.shape)], name=graph.fresh_name(f"{node.name}_to_int32"),
                          attrs={"to": helper.make_attribute("to", 6)}, output_names=[f"{data.name}_int32"]).output
    g = graph.add_op("GatherND", [as_int] + list(node.inputs[1:]), [TensorType("int32", out.type.shape)],
                     name=graph.fresh_name(f"{node.name}_int32"), attrs=dict(node.attrs),
                     output_names=[f"{out.name}_int32"]).output
    return graph.add_op("Cast", [g], [out.type], name=graph.fresh_name(f"{node.name}_to_bool"),
                        attrs={"to": helper.make_attribute("to", 9)}, output_names=[f"{out.name}_bool"]).output


# A ``GatherND`` of boolean data (an attention mask's expansion, as torch.export writes
# ``mask[:, None, None, :]``) gathers it as int32 between two ``Cast``s: HTP's GatherNd
# refuses bool and int64 data at any rank and takes int32 (rules/qnn_htp.toml probes
# float; the dtypes were tried the same way). Exact: 0 and 1 go there and back.
gather_bool_as_int32 = register_rules(
    "gather_bool_as_int32",
    Rule(Op("GatherND", (Var("data"),)), _gathered_as_int32, stat="gathers_retyped",
         condition=lambda m, ctx: m["data"].type.dtype == "bool"))


def _square(graph: Graph, m: Match, ctx: PassContext) -> Value:
    x = m["x"]
    return graph.add_op("Mul", [x, x], [m.result.type], name=graph.fresh_name(f"{m.root.name or 'pow'}_square"),
                        output_names=[f"{m.result.name}_square"]).output


def _squares(m: Match, ctx: PassContext) -> bool:
    e = m["exponent"]
    return e.size == 1 and float(e.reshape(())) == 2.0 and m["x"].type.shape == m.result.type.shape


# ``Pow(x, 2)`` as ``Mul(x, x)`` (the same correctly rounded square). onnxruntime-qnn
# 2.7.0 fuses an RMS norm written with ``Pow(x, 2)`` (Pow, ReduceMean, Add, Sqrt,
# Reciprocal, Mul, Mul by the weight: Llama's, Mistral's, Qwen's) into one HTP op whose
# graph then fails to finalize ("QNN_COMMON_ERROR_MEM_ALLOC", whatever the SoC, VTCM or
# precision); written with ``Mul`` it is not fused, and runs.
square_as_mul = register_rules("square_as_mul", Rule(Op("Pow", (Var("x"), Const("exponent"))), _square,
                                                      stat="squares_as_mul", condition=_squares))
