"""``xla`` target: no implicit broadcasting at all. Every operand of a broadcasting op
whose shape is not provably the result's goes through an explicit
``BroadcastInDim(operand, result_shape) {broadcast_dimensions}`` (XLA's broadcasting
semantics, https://openxla.org/xla/broadcasting: InDim broadcasting), so every operand has exactly the result's shape.

The result shape is a constant when it is static. With dynamic dims it is computed at
run time, dim by dim (the RFC's "fully dynamic broadcasting"): a static dim is a
constant, a dim known equal to one operand's (a symbol, or the only dynamic operand
dim with the others 1) is taken from that operand's ``Shape`` directly, and only a dim
between two operands that may each be 1 at run time needs a computation,
``d = Where(a == 1, b, a)`` - a runtime broadcast check. In strict symbolic mode
(``assume_dynamic_not_one``) a dynamic dim is never 1, so dynamic operand dims must be
equal and that check is elided: the dim is taken from the first of them.

Everything the pass builds is made once per graph and shared (a common subexpression
elimination as it goes): a constant by its contents, a runtime dim by the symbol it has
(two dims of one symbol are equal), a result shape by its pieces, and a broadcast by its
operand and shape. A chain of N ops over one shared bias gets one broadcast of it, not N:
the pass's work and its output grow with the distinct broadcasts, not with their uses.

``lower_broadcast_in_dim`` then writes each BroadcastInDim as ONNX ``Unsqueeze`` +
``Expand``; StableHLO keeps it as ``broadcast_in_dim``.
"""

from __future__ import annotations

import functools
from typing import Dict, List, Optional, Sequence, Tuple

from onnx import helper

from ..ir.graph import OP, Graph, Node, Value
from ..ir.types import Dim, TensorType, all_static
from ..shapes import IncompatibleDims, infer_result_shape, same_shape
from ..oprules import RuleLookup
from .base import PassContext, register_pass
from .frontend_ops import ops_for
from .rewrite import RankExpander, index_const

DOMAIN = "ai.legalize"
BROADCAST_IN_DIM = "BroadcastInDim"


class _ShapeBuilder:
    """Builds the runtime value of one result shape from the operands' ``Shape``s; each
    value it makes is made once in its graph and shared by every node that needs it.

    The nodes are visited in topological order, so a value made for one node is
    computed from values that come before every later node: sharing it adds no cycle."""

    def __init__(self, graph: Graph, ctx: PassContext):
        self.graph, self.ctx = graph, ctx
        self.ops = ops_for(graph)
        self.index_type = TensorType(self.ops.index_dtype, (1,))
        self.made: Dict[tuple, Value] = {}  # what was built, by what it is of
        self.elided: set = set()  # the checks strict symbolic mode left out, as the default would share them

    def const(self, base: str, values: Sequence[int]) -> Value:
        """An index vector, one per contents."""
        key = ("const", tuple(values))
        hit = self.made.get(key)
        if hit is None:
            hit = self.made[key] = index_const(self.graph, base, values)
        return hit

    def shape_of(self, v: Value) -> Value:
        key = ("shape", id(v))
        hit = self.made.get(key)
        if hit is None:
            hit = self.made[key] = self.ops.shape(self.graph, v, f"{v.name}_shape")
        return hit

    @staticmethod
    def dim_key(v: Value, axis: int) -> tuple:
        """What ``dim_of`` shares a dim's value by: its symbol, else the operand and axis."""
        dim = v.type.shape[axis]
        return ("symbol", dim) if isinstance(dim, str) else ("dim", id(v), axis)

    def elide(self, dyn: List["Source"]) -> int:
        """How many of the checks ``broadcast_dims`` would make over ``dyn`` are new, as
        the default mode would share them (strict symbolic mode makes none, and reports
        each it elides once, as the default reports each it makes once)."""
        acc, new = self.dim_key(dyn[0][0], dyn[0][1]), 0
        for v, axis, _ in dyn[1:]:
            acc = ("where", acc, self.dim_key(v, axis))
            if acc not in self.elided:
                self.elided.add(acc)
                new += 1
        return new

    def dim_of(self, v: Value, axis: int) -> Value:
        """``Shape(v)[axis]`` as a 1-element vector; a symbolic dim's, once per symbol
        (the first operand met with it stands for all of them)."""
        key = self.dim_key(v, axis)
        hit = self.made.get(key)
        if hit is None:
            base = f"{v.name}_dim{axis}"
            idx = self.const(base + "_index", [axis])
            hit = self.made[key] = self.ops.gather(self.graph, self.shape_of(v), idx, base)
        return hit

    def broadcast_dims(self, a: Value, b: Value, base: str) -> Tuple[Value, bool]:
        """``Where(a == 1, b, a)``: numpy's broadcast of two runtime dims; and whether it
        was made now (False: an earlier node's is shared)."""
        key = ("where", id(a), id(b))
        hit = self.made.get(key)
        if hit is not None:
            return hit, False
        one = self.const(base + "_one", [1])
        is_one = self.ops.equal(self.graph, a, one, base + "_is1")
        hit = self.made[key] = self.ops.where(self.graph, is_one, b, a, base)
        return hit, True

    def concat(self, pieces: List[Value], base: str) -> Value:
        key = ("concat",) + tuple(id(p) for p in pieces)
        hit = self.made.get(key)
        if hit is None:
            rank = sum(p.type.shape[0] for p in pieces)
            hit = self.made[key] = self.ops.concat(self.graph, pieces, TensorType(self.ops.index_dtype, (rank,)), base)
        return hit


Source = Tuple[Value, int, Dim]  # (operand, its axis, the dim it has there)


def _result_dims(node: Node, target: Tuple[Dim, ...], sources: List[List[Source]], exact: bool,
                 builder: _ShapeBuilder, ctx: PassContext) -> Optional[Value]:
    """The runtime value of ``target`` (None when it is static: a constant does).
    ``sources[k]`` lists the operand dims that broadcast to result dim k; with ``exact``
    each of them is known to equal it."""
    if all_static(target):
        return None
    pieces: List[Value] = []
    static_run: List[int] = []
    base = node.name or node.output.name

    def flush():
        if static_run:
            pieces.append(builder.const(f"{base}_dims", static_run))
            static_run.clear()

    for k, d in enumerate(target):
        if isinstance(d, int):
            static_run.append(d)
            continue
        flush()
        # The operands dynamic at k (the others are 1 there, or d would be static).
        dyn = [src for src in sources[k] if not isinstance(src[2], int)]
        same = [src for src in dyn if src[2] is not None and src[2] == d]
        if exact or same or len(dyn) == 1:
            v, axis, _ = (same or dyn)[0]
            pieces.append(builder.dim_of(v, axis))
            continue
        if ctx.assume_dynamic_not_one:
            # strict symbolic: no dynamic dim is 1, so all of them are equal
            v, axis, _ = dyn[0]
            pieces.append(builder.dim_of(v, axis))
            ctx.stats["runtime_broadcast_checks_elided"] += builder.elide(dyn)
            continue
        acc = builder.dim_of(dyn[0][0], dyn[0][1])
        for v, axis, _ in dyn[1:]:
            acc, made = builder.broadcast_dims(acc, builder.dim_of(v, axis), f"{base}_bcast{k}")
            ctx.stats["runtime_broadcast_checks"] += made
        pieces.append(acc)
    flush()
    if len(pieces) == 1:
        return pieces[0]
    return builder.concat(pieces, f"{base}_shape")


def _operand_sources(operands: Sequence[Value], rank: int) -> List[List[Source]]:
    out: List[List[Source]] = [[] for _ in range(rank)]
    for v in operands:
        off = rank - len(v.type.shape)
        for axis, dim in enumerate(v.type.shape):
            out[axis + off].append((v, axis, dim))
    return out


def _gemm_sources(node: Node) -> Optional[List[List[Source]]]:
    """Gemm's result (M, N): M is A's dim 0 (1 with transA), N is B's dim 1 (0 with transB)."""
    a, b = node.inputs[0], node.inputs[1]
    if a is None or b is None or a.type.shape is None or b.type.shape is None:
        return None
    trans = {k: helper.get_attribute_value(v) for k, v in node.attrs.items() if k in ("transA", "transB")}
    ma, nb = (1 if trans.get("transA") else 0), (0 if trans.get("transB") else 1)
    return [[(a, ma, a.type.shape[ma])], [(b, nb, b.type.shape[nb])]]


# Ops whose broadcasting operands go onto the result: where each result dim comes from.
RESULT_DIM_SOURCES = {"Gemm": _gemm_sources}


def _plan(node: Node, rule):
    """(operand indices to broadcast, the shape they go to, where its dims come from,
    whether each source equals its dim exactly) - or None when it cannot be known. Where
    the dims come from is a function of no arguments: asked only of a node that has an
    operand to broadcast (most nodes have none)."""
    if rule.broadcast == "unidirectional":
        idx = [i for i in rule.broadcasts if i < len(node.inputs) and node.inputs[i] is not None]
        if rule.onto == "result":
            shape = node.outputs[0].type.shape
            find = RESULT_DIM_SOURCES.get(node.op)
            sources = find(node) if find is not None else None
            if shape is None or sources is None or len(sources) != len(shape):
                return None
            return idx, tuple(shape), lambda: sources, True
        ref = node.inputs[0]
        if ref is None or ref.type.shape is None:
            return None
        shape = tuple(ref.type.shape)
        return idx, shape, lambda: _operand_sources([ref], len(shape)), True
    operands = [v for v in node.inputs if v is not None]
    if any(v.type.shape is None for v in operands):
        return None
    shape = _result_shape(tuple(tuple(v.type.shape) for v in operands))
    if shape is None:
        return None  # the input verification has said so
    return ([i for i, v in enumerate(node.inputs) if v is not None], shape,
            lambda: _operand_sources(operands, len(shape)), False)


@functools.lru_cache(maxsize=4096)
def _result_shape(shapes: Tuple[Tuple[Dim, ...], ...]) -> Optional[Tuple[Dim, ...]]:
    """The broadcast of operand shapes, None where they do not broadcast: asked once per
    distinct tuple of shapes (a graph has few; a long chain asks the same every node)."""
    try:
        return tuple(infer_result_shape(list(shapes)).shape)
    except IncompatibleDims:
        return None


def _todo(node: Node, rule):
    """(plan, operand indices to broadcast) of one node, or None if it needs nothing."""
    plan = _plan(node, rule)
    if plan is None:
        return None
    idx, target = plan[0], plan[1]
    if any(node.inputs[i].type.shape is None or len(node.inputs[i].type.shape) > len(target) for i in idx):
        return None
    todo = [i for i in idx if not same_shape(node.inputs[i].type.shape, target)]
    return (plan, todo) if todo else None


def needs_explicit_broadcast(graph: Graph, ctx: PassContext) -> bool:
    """Whether ``explicit_broadcast`` would rewrite anything in ``graph`` or its subgraphs
    (it needs opset 9's Expand and Where; a model below that is raised only then)."""
    for node in graph.walk():
        rule = ctx.rules.get(node.op)
        if rule is not None and node.kind == OP and \
                rule.mode_at(node.graph.opset_of(node)) == "numpy" and _todo(node, rule):
            return True
    return False


@register_pass()
def explicit_broadcast(graph: Graph, ctx: PassContext) -> bool:
    changed = False
    builder = _ShapeBuilder(graph, ctx)
    made = builder.made
    lookup = RuleLookup(graph, ctx.rules)
    for node in graph.ops():
        ruled = lookup(node)
        if ruled is None or ruled[1] != "numpy":
            continue
        found = _todo(node, ruled[0])
        if found is None:
            continue
        (idx, target, sources, exact), todo = found
        # A target of static dims and symbols has one value whichever node asks for it
        # (a symbol's dim is the same value everywhere): made once, found again by it.
        key = ("target", target) if not exact and None not in target else None
        dims_value = made.get(key) if key is not None else None
        if dims_value is None:
            dims_value = _result_dims(node, target, sources(), exact, builder, ctx)
        if dims_value is None:
            dims_value = builder.const(f"{node.name or node.output.name}_shape", [int(d) for d in target])
        # A dim computed at run time gets a symbol of its own, so the broadcast operands
        # are visibly one shape, in the IR and in the value_info of the written model:
        # one per shape value (the first node's name), as its broadcasts are shared.
        if key is not None:
            made[key] = dims_value
        target = made.setdefault(("symbols", id(dims_value)),
                                 tuple(f"{node.label}_bcast{k}" if d is None else d for k, d in enumerate(target)))
        for i in todo:
            v = node.inputs[i]
            key = ("bcast", id(v), id(dims_value))
            out = made.get(key)
            if out is None:
                r = len(v.type.shape)
                bcast = graph.add_op(
                    BROADCAST_IN_DIM, [v, dims_value], [v.type.with_shape(target)], domain=DOMAIN,
                    name=graph.fresh_name(f"{v.name}_bcast"), output_names=[f"{v.name}_bcast"],
                    attrs={"broadcast_dimensions": _dims_attr(graph, list(range(len(target) - r, len(target))))})
                bcast.output.quant = v.quant
                out = made[key] = bcast.output
                ctx.stats["broadcasts_made_explicit"] += 1
            graph.set_input(node, i, out)
        changed = True
    return changed


def _dims_attr(graph: Graph, dims: List[int]):
    """``broadcast_dimensions`` as the graph's nodes hold attributes: an ONNX
    AttributeProto (a rank-0 operand's is empty), or a list in a TFLite graph."""
    return ops_for(graph).ints_attr("broadcast_dimensions", dims)


def _read_dims_attr(attr) -> List[int]:
    return list(attr) if isinstance(attr, list) else list(helper.get_attribute_value(attr))


@register_pass()
def lower_broadcast_in_dim(graph: Graph, ctx: PassContext) -> bool:
    """BroadcastInDim -> ``Unsqueeze`` (the dims not in broadcast_dimensions; folded for
    constants) + ``Expand``; in TFLite, ``RESHAPE`` + ``BROADCAST_TO``."""
    expander = RankExpander(graph, ctx)
    changed = False
    for node in graph.ops():
        if node.domain != DOMAIN or node.op_type != BROADCAST_IN_DIM:
            continue
        v, shape_value = node.inputs
        out_shape = node.output.type.shape
        dims = _read_dims_attr(node.attrs["broadcast_dimensions"])
        if len(dims) < len(out_shape):
            missing = tuple(k for k in range(len(out_shape)) if k not in dims)
            placed = [1] * len(out_shape)
            for src, dst in enumerate(dims):
                placed[dst] = v.type.shape[src]
            before = ctx.stats["reshapes_inserted"]
            v = expander.expand(v, missing, tuple(placed))
            ctx.stats["reshapes_inserted"] = before  # counted as part of the broadcast
        expanded = ops_for(graph).broadcast_to(graph, v, shape_value, node.output.type, node.name,
                                               node.output.name + "_x")
        name = node.output.name
        graph.replace_all_uses_with(node.output, expanded)
        graph.remove_node(node)
        graph.rename(expanded, name)
        changed = True
    return changed
