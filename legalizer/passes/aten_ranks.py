"""ATen rank lowering: each Core ATen op of a ``torch.export`` program that has a tensor
over the target's rank limit runs at a lower rank, on views of its operands.

An op's dims that it treats alike merge (``rules/aten.toml``'s ``fold``): an
elementwise op's adjacent dims where every operand broadcasts alike; a permute's dims
that stay adjacent and in order; a reduction's adjacent dims all reduced or all kept; a
padded dim with the unpadded dims inside it (padding a dim by p is padding the merged
dim by p times their size); an expand's adjacent dims expanded alike. Dims of size 1
go. The op reads its operands viewed to the merged shape and its result is viewed back;
then each chain of views becomes one view, so that a rank-6 value that only views and
lowered ops touched is gone. (A view reads a contiguous tensor: a permute's or expand's
result is copied first, as ``contiguous()`` does.)

Where merging is not enough:
- a permute still over the limit is a series of swaps of two adjacent blocks of dims,
  each a rank-4 permute;
- an elementwise op that broadcasts both ways (``[2,1,3,1] * [1,5,1,6]``) has its
  operands expanded explicitly, one dim at a time on rank-3 views, and runs on them
  flat: a two-sided broadcast becomes none.

Sizes are static, or one symbolic dim per view (its ``-1``); an op that would need more
is left as it is, and the target's refusals name it. Every node made takes the source
metadata of the op it stands for.
"""

from __future__ import annotations

import math
from typing import List, Sequence, Tuple

from ..kinds.pt2.records import In, call_of
from ..ir.graph import OP, Graph, Node, Value
from ..ir.types import TensorType
from ..oprules import frontend_rules
from ..shapes.broadcast import ones_pattern_groups
from .base import PassContext, register_pass
from .frontend_ops import AtenOps

VIEWS = ("aten.view.default", "aten._unsafe_view.default", "aten.view_copy.default")


def _prod(dims: Sequence) -> object:
    ints = [d for d in dims if isinstance(d, int)]
    syms = [d for d in dims if not isinstance(d, int)]
    n = math.prod(ints) if ints else 1
    if not syms:
        return n
    if any(d is None for d in syms):
        return None
    return "*".join(syms + ([str(n)] if n != 1 else []))


def _static_enough(shape: Sequence) -> bool:
    return sum(1 for d in shape if not isinstance(d, int)) <= 1


def _merge(shape: Sequence, groups: List[List[int]]) -> Tuple:
    return tuple(_prod([shape[k] for k in g]) for g in groups)


class _Lowering:
    def __init__(self, graph: Graph, ctx: PassContext):
        self.graph, self.ctx, self.limit = graph, ctx, ctx.max_rank
        self.rules = frontend_rules("aten")

    def over(self, node: Node) -> bool:
        return any(v is not None and v.type.shape is not None and len(v.type.shape) > self.limit
                   for v in list(node.inputs) + list(node.outputs))

    # -- building ------------------------------------------------------------------
    def view(self, v: Value, shape: Sequence, meta) -> Value:
        if v.type.shape is not None and tuple(v.type.shape) == tuple(shape):
            return v
        self.ctx.stats["aten_views_inserted"] += 1
        return _made(AtenOps.view(self.graph, v, shape, f"{v.name}_r{len(shape)}", meta))

    def call(self, node: Node, name: str, inputs, args, out_shape, meta, kwargs=None, base=None, target=None) -> Value:
        return _made(AtenOps.call(self.graph, name, inputs, args, node.outputs[0].type.with_shape(tuple(out_shape)),
                                  base or f"{node.outputs[0].name}_r{len(out_shape)}", meta, kwargs, target))

    def finish(self, node: Node, folded: Value, meta, strided: bool = False) -> None:
        """``node``'s result is ``folded`` viewed back; ``node`` goes."""
        out = node.outputs[0]
        if strided:
            folded = _made(AtenOps.contiguous(self.graph, folded, meta))
        back = self.view(folded, out.type.shape, meta)
        self.graph.replace_all_uses_with(out, back)
        self.graph.remove_node(node)
        self.ctx.stats["aten_ops_lowered"] += 1

    # -- the ops ---------------------------------------------------------------------
    def lower(self, node: Node) -> bool:
        rule = self.rules.get(node.op)
        call = call_of(node)
        if rule is None or rule.fold in (None, "view") or call is None or len(node.outputs) != 1:
            return False
        shapes = [v.type.shape for v in node.inputs] + [node.outputs[0].type.shape]
        if any(s is None for s in shapes):
            return False
        return getattr(self, "_" + rule.fold)(node, call)

    def _elementwise(self, node: Node, call) -> bool:
        out = node.outputs[0].type.shape
        R = len(out)
        ins = [(1,) * (R - len(v.type.shape)) + tuple(v.type.shape) for v in node.inputs]
        if any(len(s) > R for s in ins):
            return False
        keep = [k for k in range(R) if out[k] != 1]
        if any(s[k] != 1 and s[k] != out[k] for k in keep for s in ins):
            return False  # a size that is not provably the result's (a symbol that may be 1)
        groups = ones_pattern_groups(ins, keep, R)
        meta = call.meta
        if len(groups) > self.limit:
            return self._both_ways(node, call, ins, out)
        new_out = _merge(out, groups)
        inputs = []
        for v, s in zip(node.inputs, ins):
            folded = tuple(1 if all(s[k] == 1 for k in g) else _prod([s[k] for k in g]) for g in groups)
            if not _static_enough(folded):
                return False
            inputs.append(v if tuple(v.type.shape) == folded else self.view(v, folded, meta))
        if not _static_enough(new_out) or not _static_enough(out):
            return False
        res = self.call(node, node.op[len("aten."):], inputs, call.args, new_out, meta, call.kwargs, target=call.target)
        self.finish(node, res, meta)
        return True

    def _both_ways(self, node: Node, call, ins: List[Tuple], out: Tuple) -> bool:
        """Each operand expanded to the result's shape (flat, rank-3 steps), the op on them."""
        if not all(isinstance(d, int) for s in ins + [out] for d in s):
            return False
        meta = call.meta
        total = math.prod(out)
        flat = []
        for v, s in zip(node.inputs, ins):
            cur, shape = v, list(s)
            for k in reversed(range(len(out))):
                if shape[k] == 1 and out[k] != 1:
                    pre, post = math.prod(shape[:k]), math.prod(shape[k + 1:])
                    cur = self.view(cur, (pre, 1, post), meta)
                    cur = self.call(node, "expand.default", [cur], (In(0), [pre, out[k], post]), (pre, out[k], post),
                                    meta, base=f"{v.name}_x{k}")
                    shape[k] = out[k]
                    self.ctx.stats["aten_broadcasts_made_explicit"] += 1
            flat.append(self.view(cur, (total,), meta))
        res = self.call(node, node.op[len("aten."):], flat, call.args, (total,), meta, call.kwargs, target=call.target)
        self.finish(node, res, meta)
        return True

    def _permute(self, node: Node, call) -> bool:
        x = node.inputs[0]
        shape = tuple(x.type.shape)
        R = len(shape)
        perm = [p % R for p in call.args[1]]
        # Size-1 dims go; then runs that stay adjacent and in order merge.
        kept = [p for p in perm if shape[p] != 1]
        runs: List[List[int]] = []
        for p in kept:
            if runs and p > runs[-1][-1] and all(shape[j] == 1 for j in range(runs[-1][-1] + 1, p)):
                runs[-1].append(p)
            else:
                runs.append([p])
        in_order = sorted(runs, key=lambda r: r[0])
        sizes = [_prod([shape[k] for k in r]) for r in in_order]
        if not _static_enough(sizes) or not _static_enough(node.outputs[0].type.shape):
            return False
        meta = call.meta
        cur = self.view(x, tuple(sizes), meta) if sizes else x
        order = list(range(len(in_order)))  # current position -> group
        want = [in_order.index(r) for r in runs]
        if len(order) <= self.limit:
            if want != order:
                cur = self.call(node, "permute.default", [cur], (In(0), want), tuple(sizes[g] for g in want), meta)
                self.finish(node, cur, meta, strided=True)
            else:
                self.finish(node, cur, meta)
            return True
        if self.limit < 4:
            return False
        for i, g in enumerate(want):  # insertion: move group g from position j to i (a block swap)
            j = order.index(g)
            if j == i:
                continue
            cur_sizes = [sizes[h] for h in order]
            blocks = (_prod(cur_sizes[:i]), _prod(cur_sizes[i:j]), cur_sizes[j], _prod(cur_sizes[j + 1:]))
            if not _static_enough(blocks):
                return False
            cur = _made(AtenOps.contiguous(self.graph, cur, meta))
            cur = self.view(cur, blocks, meta)
            cur = self.call(node, "permute.default", [cur], (In(0), [0, 2, 1, 3]),
                            (blocks[0], blocks[2], blocks[1], blocks[3]), meta)
            order = order[:i] + [g] + order[i:j] + order[j + 1:]
            self.ctx.stats["aten_block_swaps"] += 1
        self.finish(node, cur, meta, strided=True)
        return True

    def _reduce(self, node: Node, call) -> bool:
        x = node.inputs[0]
        shape = tuple(x.type.shape)
        R = len(shape)
        dims = call.args[1] if len(call.args) > 1 else None
        dims = list(range(R)) if dims is None or dims == [] else [d % R for d in dims]
        groups: List[List[int]] = []
        flags: List[bool] = []
        for k in range(R):
            if shape[k] == 1 and groups:  # a 1 goes with its neighbour, whichever it is
                groups[-1].append(k)
                continue
            flag = k in dims
            if groups and flags[-1] == flag:
                groups[-1].append(k)
            else:
                groups.append([k])
                flags.append(flag)
        if len(groups) == R:
            return False
        folded = _merge(shape, groups)
        out_shape = node.outputs[0].type.shape
        keepdim = len(out_shape) == R
        new_dims = [i for i, f in enumerate(flags) if f]
        new_out = tuple(1 if f else s for f, s in zip(flags, folded)) if keepdim else \
            tuple(s for f, s in zip(flags, folded) if not f)
        if not (_static_enough(folded) and _static_enough(new_out) and _static_enough(out_shape)):
            return False
        meta = call.meta
        args = (In(0), new_dims) + tuple(call.args[2:])
        res = self.call(node, node.op[len("aten."):], [self.view(x, folded, meta)], args, new_out, meta,
                        call.kwargs, target=call.target)
        self.finish(node, res, meta)
        return True

    def _pad(self, node: Node, call) -> bool:
        x = node.inputs[0]
        shape = tuple(x.type.shape)
        R = len(shape)
        pads = list(call.args[1])
        lo = [0] * R
        hi = [0] * R
        for i in range(len(pads) // 2):
            lo[R - 1 - i], hi[R - 1 - i] = pads[2 * i], pads[2 * i + 1]
        groups: List[List[int]] = []
        for k in range(R):
            if (lo[k] or hi[k]) or not groups:
                groups.append([k])
            else:
                groups[-1].append(k)
        if len(groups) == R:
            return False
        new_pads: List[int] = []
        folded_out = []
        for g in reversed(groups):
            inner = _prod([shape[k] for k in g[1:]])
            if not isinstance(inner, int):
                return False
            new_pads += [lo[g[0]] * inner, hi[g[0]] * inner]
        for g in groups:
            inner = _prod([shape[k] for k in g[1:]])
            outer = shape[g[0]]
            folded_out.append(_prod([outer + lo[g[0]] + hi[g[0]]] + [inner]) if isinstance(outer, int)
                              else (outer if not (lo[g[0]] or hi[g[0]]) else None))
        folded = _merge(shape, groups)
        if None in folded_out or not _static_enough(folded) or not _static_enough(node.outputs[0].type.shape):
            return False
        meta = call.meta
        res = self.call(node, "constant_pad_nd.default", [self.view(x, folded, meta)],
                        (In(0), new_pads) + tuple(call.args[2:]), tuple(folded_out), meta, call.kwargs)
        self.finish(node, res, meta)
        return True

    def _expand(self, node: Node, call) -> bool:
        x = node.inputs[0]
        out = tuple(node.outputs[0].type.shape)
        R = len(out)
        s = (1,) * (R - len(x.type.shape)) + tuple(x.type.shape)
        if not all(isinstance(d, int) for d in s + out):
            return False
        groups: List[List[int]] = []
        last = None
        for k in range(R):
            if out[k] == 1:
                continue
            pattern = s[k] == 1
            if groups and pattern == last:
                groups[-1].append(k)
            else:
                groups.append([k])
            last = pattern
        if not groups or len(groups) > self.limit:
            return False
        src = tuple(1 if all(s[k] == 1 for k in g) else _prod([s[k] for k in g]) for g in groups)
        dst = _merge(out, groups)
        meta = call.meta
        res = self.call(node, "expand.default", [self.view(x, src, meta)], (In(0), list(dst)), dst, meta)
        self.finish(node, res, meta, strided=True)
        return True


MADE = "aten_lowering"  # Node.attrs key: made by the lowering (its views may merge)


def _made(v: Value) -> Value:
    if v.producer is not None and v.producer.kind == OP:
        v.producer.attrs[MADE] = True
    return v


def _mergeable(node: Node, limit: int) -> bool:
    """A view the collapse may merge away: one the lowering made, or one whose result is
    over the limit. The program's other views stay as they are (a backend's patterns,
    as XNNPACK's linear, match them)."""
    out = node.outputs[0].type.shape
    return bool(node.attrs.get(MADE)) or (out is not None and len(out) > limit)


def _collapse_views(graph: Graph, ctx: PassContext) -> bool:
    """Each chain of views becomes one view of the chain's source; a view to the shape it
    reads goes; a copy of a fresh copy (``clone`` of a view of a ``clone``) goes."""
    changed = False
    for _ in range(4):  # a copy gone may make a chain of views
        step = _collapse_once(graph, ctx)
        changed |= step
        if not step:
            break
    return changed


def _collapse_once(graph: Graph, ctx: PassContext) -> bool:
    changed = False
    for node in graph.ops():
        if node.graph is None or node.op not in VIEWS:
            continue
        # A view's target names its sizes (a list, or SymInt operands): it reads any view
        # of the same elements, unless that view's source is strided (it may not view).
        src = node.inputs[0]
        prod = src.producer
        if not (_mergeable(node, ctx.max_rank) or (prod is not None and prod.kind == OP and
                                                   _mergeable(prod, ctx.max_rank))):
            continue
        while prod is not None and prod.kind == OP and prod.op in VIEWS and not _strided(prod.inputs[0]) \
                and _mergeable(prod, ctx.max_rank):
            src = prod.inputs[0]
            prod = src.producer
        if src is not node.inputs[0]:
            graph.set_input(node, 0, src)
            changed = True
        if src.type.shape is not None and tuple(src.type.shape) == tuple(node.outputs[0].type.shape):
            graph.replace_all_uses_with(node.outputs[0], src)
            ctx.stats["aten_views_removed"] += 1
            changed = True
    for node in graph.ops():
        if node.graph is None or node.op != "aten.clone.default":
            continue
        p = node.inputs[0].producer
        if p is not None and p.kind == OP and p.op in VIEWS and (node.attrs.get(MADE) or p.attrs.get(MADE)):
            q = p.inputs[0].producer
            if q is not None and q.kind == OP and q.op not in AtenOps.STRIDED and q.op not in VIEWS:
                graph.replace_all_uses_with(node.outputs[0], node.inputs[0])
                changed = True
    return changed


def _strided(v: Value) -> bool:
    return v.producer is not None and v.producer.kind == OP and v.producer.op in AtenOps.STRIDED


@register_pass(frontends=("aten",), ensures=("over-rank",))
def aten_ranks(graph: Graph, ctx: PassContext) -> bool:
    """Lower every ATen op over ``ctx.max_rank`` (module docstring); no-op when the
    target has no rank limit (the pass manager runs it on ATen graphs only)."""
    if ctx.max_rank is None:
        return False
    lowering = _Lowering(graph, ctx)
    changed = False
    for node in graph.ops():
        if node.graph is not None and lowering.over(node):
            changed |= lowering.lower(node)
    if changed:
        _collapse_views(graph, ctx)
    return changed


@register_pass(frontends=("aten",))
def aten_explicit_broadcast(graph: Graph, ctx: PassContext) -> bool:
    """The ``xla`` form of a torch.export program: every operand of a broadcasting ATen op
    that differs from the result's shape is made the result's shape explicitly,
    ``unsqueeze`` to its rank then ``expand``. A traced program's broadcasts are fixed
    by its shapes (a symbolic dim is never 1 where another operand has its size), so
    each is structural: an ``expand`` size is -1 where the operand has the dim, the
    result's size where it is a number, and ``sym_size`` of the operand that has it
    where it is a symbol. (The pass manager runs it on ATen graphs only.)"""
    rules = frontend_rules("aten")
    changed = False
    for node in graph.ops():
        rule = rules.get(node.op)
        if rule is None or not rule.broadcasting or len(node.outputs) != 1:
            continue
        out = node.outputs[0].type.shape
        if out is None or any(v.type.shape is None for v in node.inputs):
            continue
        for i, v in enumerate(list(node.inputs)):
            shape = tuple(v.type.shape)
            if shape == tuple(out) or v.type.dtype is None or not shape and len(node.inputs) == 1:
                continue
            sizes: List = []
            extra: List[Value] = []
            aligned = (1,) * (len(out) - len(shape)) + shape
            for k, (d, want) in enumerate(zip(aligned, out)):
                if d == want:
                    sizes.append(-1)
                elif isinstance(want, int):
                    sizes.append(want)
                else:
                    donor = next((u for u in node.inputs if u.type.shape is not None and len(u.type.shape) == len(out)
                                  and u.type.shape[k] == want), None)
                    if donor is None:
                        break
                    size = AtenOps.call(graph, "sym_size.int", [donor], (In(0), k), TensorType("int64", ()),
                                        f"{donor.name}_size{k}", dict(call_of(node).meta))
                    extra.append(size)
                    sizes.append(In(len(extra)))
            else:
                meta = dict(call_of(node).meta)
                x = v if len(shape) == len(out) else AtenOps.expand_rank(
                    graph, v, tuple(range(len(out) - len(shape))), aligned, f"{v.name}_r{len(out)}")
                expanded = AtenOps.call(graph, "expand.default", [x] + extra, (In(0), sizes),
                                        v.type.with_shape(tuple(out)), f"{v.name}_bcast", meta)
                graph.set_input(node, i, expanded)
                ctx.stats["broadcasts_made_explicit"] += 1
                changed = True
    return changed
