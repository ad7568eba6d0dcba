"""Rank folding: an elementwise region runs at the lowest rank its broadcasting needs.

A region is a connected set of elementwise ops (``rules/``: the broadcasting ops of
numpy rules, and the unary ones) whose results have one rank R. Over the region, each
dim k has one size S[k] (every value has S[k] or 1 there). Adjacent dims that every
value of the region has alike - all S or all 1 - merge into one dim of their product,
and dims where S is 1 go: each value becomes a row-major reshape of itself, the same
elements in the same order, and each op computes the same elements. A dim whose size
is not provably one (two different symbols, a ``?`` that may be 1 at run time) stays a
dim of its own, merged with nothing.

At the region's edges: a constant operand is reshaped at compile time; another operand
goes through a reshape to its folded shape, taken from before the reshape that made it
(``Reshape``/``Unsqueeze``/``Squeeze``/``Flatten``, TFLite's ``RESHAPE``/``EXPAND_DIMS``/
``SQUEEZE``: that one is absorbed); a result used outside the region is reshaped back,
except by a ``Reshape`` to a constant shape, which then reads the folded value itself.
Reshape targets are constants (one unknown dim is ``-1``): a region that would need
more than one unknown dim in a target is left as it is.

``fold_ranks(graph, ctx)`` folds the regions of rank above ``ctx.max_rank`` (None: no
region; 0: every region that can lose a dim). The verifier proves the result as any
other: the folded ops are ordinary broadcasts.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Set, Tuple

import numpy as np

from ..ir.graph import CONST, OP, Graph, Node, Value
from ..ir.types import Dim
from ..oprules import RuleLookup, frontend_rules
from ..shapes.broadcast import ones_pattern_groups
from .base import PassContext, register_pass
from .frontend_ops import ops_for
from .rewrite import add_const, constant_array

# Ops that only reinterpret their operand's elements in another shape (row-major): a
# region may read their operand instead of their result.
RESHAPES = frozenset({"Reshape", "Unsqueeze", "Squeeze", "Flatten",
                      "tflite.RESHAPE", "tflite.EXPAND_DIMS", "tflite.SQUEEZE"})
_CONFLICT = object()  # a dim whose size differs among the region's values (kept alone)


@functools.lru_cache(maxsize=None)
def unary_ops(frontend: str) -> frozenset:
    """The elementwise ops of one frontend that do not broadcast (``Node.op`` names)."""
    return frozenset(op for op, r in frontend_rules(frontend).items() if r.category == "unary")


def _product(dims: Sequence[Dim]) -> Dim:
    """The size of merged dims: a number, a symbol naming the product of symbols (equal
    products of equal symbols are equal sizes), or None when a dim is ``?``."""
    if any(d is None for d in dims):
        return None
    ints = [d for d in dims if isinstance(d, int)]
    syms = [d for d in dims if isinstance(d, str)]
    n = int(np.prod(ints)) if ints else 1
    if not syms:
        return n
    return "*".join(syms + ([str(n)] if n != 1 else []))


def _target_dims(shape: Tuple) -> Optional[List[int]]:
    """A reshape's constant target for ``shape``: -1 for its one unknown dim; None when
    more than one dim is unknown."""
    unknown = [d for d in shape if not isinstance(d, int)]
    if len(unknown) > 1:
        return None
    return [d if isinstance(d, int) else -1 for d in shape]


def _dim_groups(shapes: List[Tuple], R: int) -> Tuple[List, List[List[int]]]:
    """Each dim's size over the region (1, one size, or _CONFLICT), and the groups of
    dims that fold: a conflicting dim alone; otherwise adjacent dims where every value
    is alike (all S or all 1) merge; dims of size 1 everywhere go."""
    size: List = []
    for k in range(R):
        big = {s[k] for s in shapes if s[k] != 1}
        size.append(1 if not big else next(iter(big)) if len(big) == 1 and None not in big else _CONFLICT)
    return size, ones_pattern_groups(shapes, [k for k in range(R) if size[k] != 1], R,
                                     alone=[k for k in range(R) if size[k] is _CONFLICT])


def _folded(s: Tuple, groups: List[List[int]], size: List) -> Tuple:
    """Shape ``s`` (at the region's rank) folded by ``groups``."""
    out = []
    for g in groups:
        if size[g[0]] is _CONFLICT:
            out.append(s[g[0]])
        elif s[g[0]] == 1:
            out.append(1)
        else:
            out.append(_product([size[k] for k in g]))
    return tuple(out)


@dataclass
class _Region:
    rank: int
    nodes: List[Node] = field(default_factory=list)
    ids: Set[int] = field(default_factory=set)


class _Folder:
    def __init__(self, graph: Graph, ctx: PassContext):
        self.graph, self.ctx = graph, ctx
        self.lookup = RuleLookup(graph, ctx.rules)
        self.unary = unary_ops(graph.frontend)
        self.ops = ops_for(graph)
        self._member: Dict[int, Optional[int]] = {}
        self.cache: Dict[Tuple[int, Tuple], Value] = {}

    # -- which nodes take part ---------------------------------------------------------
    def rank(self, node: Node) -> Optional[int]:
        """The result rank of an elementwise op that may join a region, else None."""
        hit = self._member.get(node.id, False)
        if hit is not False:
            return hit
        self._member[node.id] = r = self._rank(node)
        return r

    def _rank(self, node: Node) -> Optional[int]:
        if node.kind != OP or len(node.outputs) != 1 or node.attrs and any(True for _ in node.subgraphs()):
            return None
        if node.op == "Expand":  # a broadcast of operand 0 to a constant shape (rewritten with the fold)
            if len(node.inputs) != 2 or node.inputs[1] is None or constant_array(node.inputs[1]) is None:
                return None
        elif node.op not in self.unary:
            found = self.lookup(node)
            if found is None:
                return None
            rule, mode, _ = found
            if mode != "numpy" or rule.operands is not None or rule.onto != "operand0":
                return None
        shape = node.outputs[0].type.shape
        if shape is None:
            return None
        values = [v for v in node.inputs[:1 if node.op == "Expand" else None] if v is not None] + [node.outputs[0]]
        for v in values:
            s = v.type.shape
            if s is None or len(s) > len(shape) or 0 in s or (v.quant is not None and v.quant.per_axis):
                return None
        if node.op in self.unary and len(node.inputs) == 1 and len(node.inputs[0].type.shape) != len(shape):
            return None
        return len(shape)

    def region(self, start: Node, seen: Set[int]) -> _Region:
        r = _Region(self.rank(start))
        stack = [start]
        seen.add(start.id)
        while stack:
            node = stack.pop()
            r.nodes.append(node)
            r.ids.add(node.id)
            near = [v.producer for v in node.inputs if v is not None and v.producer is not None
                    and v.producer.graph is self.graph]
            near += [u for u, _ in self.graph.users(node.outputs[0]) if u.graph is self.graph]
            for n in near:
                if n.id not in seen and self.rank(n) == r.rank:
                    seen.add(n.id)
                    stack.append(n)
        return r

    # -- the folding ---------------------------------------------------------------------
    def fold(self, region: _Region) -> bool:
        R = region.rank
        outs = [n.outputs[0] for n in region.nodes]
        edge = self._edge_operands(region)
        values = outs + list(edge.values())
        shapes = [(1,) * (R - len(v.type.shape)) + tuple(v.type.shape) for v in values]
        size, groups = _dim_groups(shapes, R)
        limit = self.ctx.max_rank
        if limit and len(groups) > limit and self._expand_operands(region, edge, shapes[len(outs):], size, limit):
            return self.fold(region)  # at the shapes the copies made
        if len(groups) >= R:
            return False
        new_out = [_folded(s, groups, size) for s in shapes[:len(outs)]]
        new_edge = {id(v): _folded(s, groups, size) for v, s in zip(edge.values(), shapes[len(outs):])}
        # Every reshape the fold needs must have a constant target, before anything changes.
        for v in edge.values():
            if constant_array(v) is None and _target_dims(new_edge[id(v)]) is None:
                return False
        back = self._reshapes_back(region, outs)
        if back is None:
            return False
        self._rewrite(region, edge, new_edge, list(zip(outs, new_out)), back)
        self.ctx.stats["regions_folded"] += 1
        self.ctx.stats["ranks_folded"] += R - len(groups)
        return True

    def _expand_operands(self, region: _Region, edge: Dict[int, Value], shapes: List[Tuple], size: List,
                         limit: int) -> bool:
        """Where the region's broadcasts keep it above ``limit`` even folded (operands
        broadcast along alternate dims): operands copied to the region's full shape, the
        smallest first, until it folds within the limit. Each copy is made at rank 3 at
        most (a run of broadcast dims between the dims before and after it, merged), so the
        copies stay within the limit themselves. Static shapes only; False: none made."""
        if any(d is _CONFLICT or not isinstance(d, int) for d in size):
            return False
        full = tuple(size)
        cands = sorted(((v, s) for v, s in zip(edge.values(), shapes) if s != full),
                       key=lambda vs: int(np.prod(vs[1])))
        chosen, left = [], [s for s in shapes]
        outs = [tuple(n.outputs[0].type.shape) for n in region.nodes]
        for v, s in cands:
            chosen.append(v)
            left = [full if x is s else x for x in left]
            if len(_dim_groups(outs + left, len(full))[1]) <= limit:
                break
        else:
            if len(_dim_groups(outs + left, len(full))[1]) > limit:
                return False
        for v, s in zip(edge.values(), shapes):
            if v in chosen:
                copy = self._copied(v, s, full)
                for n in region.nodes:
                    for i, u in enumerate(n.inputs):
                        if u is v:
                            self.graph.set_input(n, i, copy)
        return True

    def _copied(self, v: Value, shape: Tuple, full: Tuple) -> Value:
        """``v`` (at ``shape``, the region's rank) copied to ``full``: at compile time for a
        constant; else an ``Expand`` for each run of broadcast dims, at rank 3."""
        self.ctx.stats["operands_copied"] += 1
        array = constant_array(v)
        if array is not None:
            copied = np.ascontiguousarray(np.broadcast_to(array.reshape(shape), full))
            return add_const(self.graph, f"{v.name}_full", copied)
        src, cur = v, list(shape)
        k = 0
        while k < len(full):
            if cur[k] == full[k]:
                k += 1
                continue
            end = k
            while end < len(full) and cur[end] != full[end]:
                end += 1
            before, after = int(np.prod(cur[:k])), int(np.prod(cur[end:]))
            run = int(np.prod(full[k:end]))
            x = self._operand_view(src, [before, 1, after], v)
            to = add_const(self.graph, f"{v.name}_x{k}_shape", np.asarray([before, run, after], np.int64))
            src = self.graph.add_op("Expand", [x, to], [v.type.with_shape((before, run, after))],
                                    name=self.graph.fresh_name(f"{v.name}_copy{k}"),
                                    output_names=[f"{v.name}_x{k}"]).output
            cur[k:end] = full[k:end]
            k = end
        return self._reshape(src, list(full), v.type.with_shape(full), f"{v.name}_full", v)

    def _operand_view(self, v: Value, dims: List[int], like: Value) -> Value:
        src = v
        prod = v.producer
        if prod is not None and prod.kind == OP and prod.op in RESHAPES and prod.inputs \
                and prod.inputs[0] is not None and prod.inputs[0].quant == v.quant:
            src = prod.inputs[0]
        if src.type.shape is not None and list(src.type.shape) == dims:
            return src
        return self._reshape(src, dims, like.type.with_shape(tuple(dims)), f"{like.name}_f{len(dims)}", like)

    def _outside(self, region: _Region, u: Node) -> bool:
        return u.id not in region.ids or u.graph is not self.graph

    def _edge_operands(self, region: _Region) -> Dict[int, Value]:
        """Operands of the region made outside it, by id."""
        edge: Dict[int, Value] = {}
        for n in region.nodes:
            for v in n.inputs[:1] if n.op == "Expand" else n.inputs:
                if v is not None and (v.producer is None or v.producer.graph is not self.graph
                                      or v.producer.id not in region.ids):
                    edge[id(v)] = v
        return edge

    def _reshapes_back(self, region: _Region, outs: List[Value]) -> Optional[List[Tuple[Value, List]]]:
        """The results used outside the region by more than a reshape that absorbs the
        fold, with their reshape-back target; None where a target is not constant."""
        back: List[Tuple[Value, List]] = []
        for v in outs:
            outside = [(u, i) for u, i in self.graph.users(v) if self._outside(region, u)]
            if outside and not all(self._absorbs(u, i) for u, i in outside):
                dims = _target_dims(tuple(v.type.shape))
                if dims is None:
                    return None
                back.append((v, dims))
        return back

    def _rewrite(self, region: _Region, edge: Dict[int, Value], new_edge: Dict[int, Tuple],
                 results: List[Tuple[Value, Tuple]], back: List[Tuple[Value, List]]) -> None:
        """The fold itself: operands at the edge folded, results given their folded
        shapes, and reshaped back for the users outside that do not absorb them."""
        for n in region.nodes:
            for i, v in enumerate(n.inputs[:1] if n.op == "Expand" else n.inputs):
                if v is not None and id(v) in edge:
                    self.graph.set_input(n, i, self._operand(v, new_edge[id(v)]))
        folded = dict((id(v), s) for v, s in results)
        for n in region.nodes:
            if n.op == "Expand":  # its shape: the result's, folded
                shape = np.asarray(folded[id(n.outputs[0])], np.int64)
                self.graph.set_input(n, 1, add_const(self.graph, f"{n.outputs[0].name}_shape", shape))
        old_types = {id(v): v.type for v, _ in results}
        for v, s in results:
            v.type = v.type.with_shape(s)
            v.info = None  # its declared ValueInfoProto has the old shape
        absorbed: Set[int] = set()
        for v, _ in results:
            for u, i in self.graph.users(v):
                if self._outside(region, u) and self._absorbs(u, i):
                    absorbed.add(id(u))
        for v, dims in back:
            restored = self._reshape(v, dims, old_types[id(v)], f"{v.name}_unfolded")
            self.graph.replace_all_uses_with(v, restored, keep=lambda u: not self._outside(region, u)
                                             or id(u) in absorbed)

    def _absorbs(self, user: Node, index: int) -> bool:
        """Whether ``user`` reads its operand ``index`` as elements only (a reshape to a
        constant shape), so it may read the folded value itself."""
        if index != 0 or user.kind != OP:
            return False
        if user.op == "Reshape":
            if len(user.inputs) < 2 or user.inputs[1] is None:
                return False
            target = constant_array(user.inputs[1])
            allowzero = user.attrs.get("allowzero")
            zero_copies = allowzero is None or getattr(allowzero, "i", 0) == 0
            return target is not None and not (zero_copies and 0 in target.tolist())
        if user.op == "tflite.RESHAPE":
            return len(user.inputs) < 2 or user.inputs[1] is None or constant_array(user.inputs[1]) is not None
        return False

    def _operand(self, v: Value, shape: Tuple) -> Value:
        """``v`` reshaped to ``shape``: folded at compile time for a constant, else a
        reshape of what ``v`` was reshaped from."""
        key = (id(v), shape)
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        if tuple(v.type.shape) == shape:
            out = v
        else:
            array = constant_array(v)
            if array is not None:
                prod = v.producer
                data = prod.data.reshaped(shape) if prod.kind == CONST else None
                out = add_const(self.graph, f"{v.name}_f{len(shape)}", array.reshape(shape), v.quant, data)
                self.ctx.stats["constants_folded"] += 1
            else:
                src = v
                prod = v.producer
                if prod is not None and prod.kind == OP and prod.op in RESHAPES and prod.inputs \
                        and prod.inputs[0] is not None and prod.inputs[0].quant == v.quant:
                    src = prod.inputs[0]
                out = src if src.type.shape is not None and tuple(src.type.shape) == shape else \
                    self._reshape(src, _target_dims(shape), v.type.with_shape(shape), f"{v.name}_f{len(shape)}", v)
        self.cache[key] = out
        return out

    def _reshape(self, src: Value, dims: List[int], out_type, base: str, like: Optional[Value] = None) -> Value:
        out = self.ops.reshape(self.graph, src, dims, out_type, base)
        out.quant = (like or src).quant
        self.ctx.stats["reshapes_inserted"] += 1
        return out


@register_pass(ensures=("over-rank",))
def fold_ranks(graph: Graph, ctx: PassContext) -> bool:
    """Fold every elementwise region of ``graph`` whose rank is above ``ctx.max_rank``
    to the lowest rank its broadcasting needs (module docstring). None: nothing."""
    limit = ctx.max_rank
    if limit is None:
        return False
    folder = _Folder(graph, ctx)
    seen: Set[int] = set()
    changed = False
    # Most graphs have no region over the limit: one look at each op's result rank.
    starts = sorted((n for n in graph.unordered_nodes() if n.kind == OP and len(n.outputs) == 1
                     and (s := n.outputs[0].type.shape) is not None and len(s) > limit), key=lambda n: n.id)
    for node in starts:
        if node.id in seen or folder.rank(node) is None:
            continue
        changed |= folder.fold(folder.region(node, seen))
    return changed


# -- transposes --------------------------------------------------------------------------

def _transpose_groups(shape: Sequence[int], perm: Sequence[int]) -> Tuple[List[List[int]], List[int]]:
    """A transpose's input dims in groups that stay adjacent and in order through it
    (size-1 dims dropped: a reshape removes them), in input order, and the permutation of
    the groups (output position -> group)."""
    kept = [k for k in range(len(shape)) if shape[k] != 1]
    place = {k: i for i, k in enumerate(kept)}
    by_out: List[List[int]] = []
    for p in (p for p in perm if shape[p] != 1):
        if by_out and place[p] == place[by_out[-1][-1]] + 1:
            by_out[-1].append(p)
        else:
            by_out.append([p])
    groups = sorted(by_out, key=lambda g: g[0])
    return groups, [groups.index(g) for g in by_out]


def _block_swaps(perm: Sequence[int], limit: int) -> List[Tuple[List[int], List[int]]]:
    """``perm`` (of groups, output position -> input position) as transposes of at most
    ``limit`` dims each: each step brings the next wanted group forward past the block
    before it (dims: before, block, group, after - rank 4 at most). Each step is (the
    current order of groups, the step's permutation of those groups) after merging."""
    if len(perm) <= limit:
        return [(list(range(len(perm))), list(perm))]
    cur = list(range(len(perm)))
    steps = []
    for i, want in enumerate(perm):
        j = cur.index(want)
        if j == i:
            continue
        steps.append((list(cur), list(range(i)) + [j] + list(range(i, j)) + list(range(j + 1, len(cur)))))
        cur = cur[:i] + [want] + cur[i:j] + cur[j + 1:]
    return steps


class _TransposeFolder:
    def __init__(self, graph: Graph, ctx: PassContext):
        self.graph, self.ctx = graph, ctx
        self.ops = ops_for(graph)
        self.folder = _Folder(graph, ctx)

    def _source(self, v: Value) -> Value:
        """What ``v`` is a row-major reshape of (through reshapes), or ``v``."""
        while v.producer is not None and v.producer.kind == OP and v.producer.op in RESHAPES \
                and v.producer.inputs and v.producer.inputs[0] is not None and v.producer.inputs[0].quant == v.quant:
            v = v.producer.inputs[0]
        return v

    def hand_over(self, out: Value, value: Value, shape: Sequence) -> None:
        """``out``'s users read the folded ``value`` instead: a reshape to a constant shape
        reads the fold itself; the rest, and a graph output (which keeps its name), read
        ``value`` reshaped back to ``shape``, the shape ``out`` had."""
        for u, i in self.graph.users(out):
            if self.folder._absorbs(u, i):
                self.graph.set_input(u, i, value)
        if self.graph.users(out):
            self.graph.replace_all_uses_with(out, self.folder._reshape(value, list(shape), out.type,
                                                                       f"{out.name}_unfolded"))

    def _view(self, v: Value, shape: Sequence[int], base: str) -> Value:
        array = constant_array(v)
        if array is not None and array.size == int(np.prod(shape)):  # at compile time
            self.ctx.stats["constants_folded"] += 1
            return add_const(self.graph, base, array.reshape(tuple(shape)), v.quant)
        src = self._source(v)
        if src.type.shape is not None and tuple(src.type.shape) == tuple(shape):
            return src
        return self.folder._reshape(src, list(shape), v.type.with_shape(tuple(shape)), base, v)

    def fold(self, node: Node, limit: int) -> bool:
        x, out = node.inputs[0], node.outputs[0]
        shape, result = x.type.shape, out.type.shape
        if shape is None or result is None or not all(isinstance(d, int) for d in shape) or \
                len(shape) <= limit or 0 in shape:
            return False
        perm_attr = node.attrs.get("perm")
        perm = list(perm_attr.ints) if perm_attr is not None else list(range(len(shape)))[::-1]
        groups, gperm = _transpose_groups(shape, perm)
        sizes = [int(np.prod([shape[k] for k in g])) for g in groups] or [1]
        if not groups:
            gperm = [0]
        value = x
        steps = _block_swaps(gperm, limit)
        for k, (order, step) in enumerate(steps):
            # merge the groups the step keeps adjacent and in order
            merged, mperm = _transpose_groups([sizes[g] for g in order], step)
            dims = [int(np.prod([sizes[order[k]] for k in m])) for m in merged]
            value = self._view(value, dims, f"{x.name}_f{len(dims)}")
            t = self.graph.add_op("Transpose", [value], [out.type.with_shape(tuple(dims[k] for k in mperm))],
                                  name=self.graph.fresh_name((node.name or "transpose")
                                                             + (f"_{k}" if len(steps) > 1 else "")),
                                  attrs={"perm": self.ops.ints_attr("perm", mperm)},
                                  output_names=[f"{out.name}_f{len(dims)}"])
            value = t.output
        self.hand_over(out, value, result)
        self.ctx.stats["transposes_folded"] += 1
        return True


@register_pass(ensures=("over-rank",))
def fold_transposes(graph: Graph, ctx: PassContext) -> bool:
    """Each ``Transpose`` above ``ctx.max_rank`` at the lowest rank its permutation needs:
    the dims it keeps adjacent and in order merge, size-1 dims go; one that still needs
    more dims becomes a chain of transposes of at most 4 (each brings one group of dims
    forward past the block before it). Reshapes in and out are absorbed as rank folding
    absorbs them. Static shapes only."""
    limit = ctx.max_rank
    if limit is None:
        return False
    folder = _TransposeFolder(graph, ctx)
    changed = False
    for node in [n for n in graph.nodes() if n.kind == OP and n.op == "Transpose"]:
        changed |= folder.fold(node, limit)
    return changed


# -- matrix products ---------------------------------------------------------------------

# The highest rank of the activation a MatMul by a constant matrix may have on the backends
# that make it a fully connected layer (HTP's FullyConnected: rank <= 4, onnxruntime-qnn
# #377; rules/qnn_htp.toml's MatMul:weights row).
FULLY_CONNECTED_RANK = 4


@register_pass(ensures=("over-rank",))
def fold_matmuls(graph: Graph, ctx: PassContext) -> bool:
    """Each ``MatMul`` of static shapes at a rank its backend refuses, at rank 2 or 3: by a
    constant matrix ([..., M, K] x [K, N]) above rank ``FULLY_CONNECTED_RANK``, the leading
    dims merge into the rows ([P*M, K] x [K, N]); of two activations above
    ``ctx.max_rank``, the batch dims that both operands have alike merge (as rank folding
    merges dims). The result is reshaped back, or read folded by a reshape after it."""
    limit = ctx.max_rank
    if limit is None:
        return False
    folder = _TransposeFolder(graph, ctx)
    changed = False
    for node in [n for n in graph.nodes() if n.kind == OP and n.op == "MatMul"]:
        a, b, out = node.inputs[0], node.inputs[1], node.outputs[0]
        shapes = [v.type.shape for v in (a, b, out)]
        if any(s is None or not all(isinstance(d, int) for d in s) or 0 in s for s in shapes):
            continue
        sa, sb, so = (tuple(s) for s in shapes)
        if len(sb) == 2 and constant_array(b) is not None and len(sa) > FULLY_CONNECTED_RANK:
            rows = int(np.prod(sa[:-1]))
            new_a, new_b, new_out = (rows, sa[-1]), sb, (rows, sb[-1])
        elif len(so) > limit and len(sa) == len(sb) == len(so):
            size, groups = _dim_groups([sa[:-2], sb[:-2], so[:-2]], len(so) - 2)
            if len(groups) + 2 > limit or any(size[g[0]] is _CONFLICT for g in groups):
                continue
            fold = lambda s: tuple(_folded(s[:-2], groups, size)) + tuple(s[-2:])  # noqa: E731
            new_a, new_b, new_out = fold(sa), fold(sb), fold(so)
        else:
            continue
        fa = folder._view(a, new_a, f"{a.name}_f{len(new_a)}")
        fb = b if new_b == sb else folder._view(b, new_b, f"{b.name}_f{len(new_b)}")
        mm = graph.add_op("MatMul", [fa, fb], [out.type.with_shape(new_out)], name=graph.fresh_name(node.name or "matmul"),
                          output_names=[f"{out.name}_f{len(new_out)}"]).output
        folder.hand_over(out, mm, so)
        ctx.stats["matmuls_folded"] += 1
        changed = True
    return changed


# -- gathers -----------------------------------------------------------------------------

# The highest rank of a GatherND's indices HTP takes (rules/qnn_htp.toml's GatherND row).
INDEX_RANK = 4


@register_pass(ensures=("over-rank",))
def fold_gather_indices(graph: Graph, ctx: PassContext) -> bool:
    """Each ``GatherND`` (``batch_dims`` 0) whose indices are over ``INDEX_RANK``, with the
    indices' leading dims merged: [..., K] -> [N, K] (a constant at compile time), the
    result [N, ...] reshaped back (or read folded by a reshape after it). An attention
    mask's expansion exported as a rank-5 GatherND (``mask[:, None, None, :]``) is one."""
    if ctx.max_rank is None:
        return False
    folder = _TransposeFolder(graph, ctx)
    changed = False
    for node in [n for n in graph.nodes() if n.kind == OP and n.op == "GatherND"]:
        bd = node.attrs.get("batch_dims")
        data, idx, out = node.inputs[0], node.inputs[1], node.outputs[0]
        shapes = [v.type.shape for v in (data, idx, out)]
        if (bd is not None and bd.i != 0) or any(s is None or not all(isinstance(d, int) for d in s) for s in shapes) \
                or len(shapes[1]) <= INDEX_RANK:
            continue
        lead = int(np.prod(shapes[1][:-1]))
        k = shapes[1][-1]
        new_out = (lead,) + tuple(shapes[0][k:])
        fi = folder._view(idx, (lead, k), f"{idx.name}_f2")
        g = graph.add_op("GatherND", [data, fi], [out.type.with_shape(new_out)], name=graph.fresh_name(node.name or "gathernd"),
                         output_names=[f"{out.name}_f{len(new_out)}"]).output
        folder.hand_over(out, g, shapes[2])
        ctx.stats["gathers_folded"] += 1
        changed = True
    return changed


# -- ops along axes ------------------------------------------------------------------------

_SOFTMAX = frozenset({"Softmax", "LogSoftmax"})
_REDUCE = frozenset({"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                     "ReduceLogSumExp", "ReduceSumSquare"})


def _axis_view(shape: Sequence[int], first: int, last: int) -> Tuple[Tuple[int, ...], int]:
    """``shape`` as [the dims before], [first..last], [the dims after], each merged (an
    empty side left out), and where the acted-on dim lands."""
    pre, mid, post = shape[:first], shape[first:last + 1], shape[last + 1:]
    out = ([int(np.prod(pre))] if pre else []) + [int(np.prod(mid))] + ([int(np.prod(post))] if post else [])
    return tuple(out), 1 if pre else 0


def _strided_axes(node: Node, shape: Sequence[int]) -> Optional[List[int]]:
    """The dims a TFLite ``STRIDED_SLICE`` does not take whole (constant bounds, no
    ellipsis, new or shrunk axes), None otherwise."""
    a = node.attrs
    if any(a.get(k) for k in ("ellipsis_mask", "new_axis_mask", "shrink_axis_mask", "offset")):
        return None
    bounds = [constant_array(v) if v is not None else None for v in node.inputs[1:4]]
    if len(bounds) != 3 or any(b is None for b in bounds):
        return None
    begin, end, stride = (b.reshape(-1).tolist() for b in bounds)
    if not len(begin) == len(end) == len(stride) == len(shape):
        return None
    acted = []
    for k, d in enumerate(shape):
        b = 0 if a.get("begin_mask", 0) >> k & 1 else begin[k]
        e = d if a.get("end_mask", 0) >> k & 1 else end[k]
        if not (stride[k] == 1 and b in (0, -d) and (e >= d or e == 0 and a.get("end_mask", 0) >> k & 1)):
            acted.append(k)
    return acted or [len(shape) - 1]


def _axes_of(node: Node, rank: int) -> Optional[List[int]]:
    """The axes ``node`` acts along (normalized, sorted), None when not constant or known."""
    op, opset = node.op, node.graph.opsets.get("", 13) if node.graph is not None else 13
    if op == "tflite.SOFTMAX":
        return [rank - 1]
    if op == "tflite.STRIDED_SLICE":
        return _strided_axes(node, node.inputs[0].type.shape)
    if op in _SOFTMAX:
        if opset < 13:
            return None  # (before 13: the input coerced to 2-D at the axis, not one axis)
        a = node.attrs.get("axis")
        axes = [a.i if a is not None else -1]
    elif op == "Concat":
        axes = [node.attrs["axis"].i]
    elif op == "Slice":
        if len(node.inputs) < 4 or node.inputs[3] is None:
            return None
        got = constant_array(node.inputs[3])
        axes = None if got is None else got.reshape(-1).tolist()
    else:  # a reduction: axes as its input (ReduceSum 13+, all 18+) or attribute
        if len(node.inputs) > 1 and node.inputs[1] is not None:
            got = constant_array(node.inputs[1])
            axes = None if got is None else got.reshape(-1).tolist()
        else:
            a = node.attrs.get("axes")
            axes = list(a.ints) if a is not None else None
        if axes is None or not axes:
            return None
    if axes is None:
        return None
    return sorted(a % rank for a in axes)


@register_pass(ensures=("over-rank",))
def fold_axis_ops(graph: Graph, ctx: PassContext) -> bool:
    """Each op that acts along some axes (``Softmax``, ``LogSoftmax``, ``Concat``, ``Slice``
    along one axis, a reduction along adjacent axes; TFLite's ``SOFTMAX`` and a
    ``STRIDED_SLICE`` along one axis) above ``ctx.max_rank``, at rank 3 at most: the dims
    before the axes merge, the axes merge, the dims after merge, and the op acts along the
    one merged axis. Static shapes, constant axes and slice bounds only."""
    limit = ctx.max_rank
    if limit is None:
        return False
    folder = _TransposeFolder(graph, ctx)
    changed = False
    ops = _SOFTMAX | _REDUCE | {"Concat", "Slice", "tflite.SOFTMAX", "tflite.STRIDED_SLICE"}
    for node in [n for n in graph.nodes() if n.kind == OP and n.op in ops]:
        x, out = node.inputs[0], node.outputs[0]
        s, so = x.type.shape, out.type.shape
        if s is None or so is None or len(s) <= limit or not all(isinstance(d, int) for d in s) or \
                not all(isinstance(d, int) for d in so):
            continue
        axes = _axes_of(node, len(s))
        if axes is None or axes != list(range(axes[0], axes[-1] + 1)) or (node.op == "Slice" and len(axes) != 1):
            continue
        first, last = axes[0], axes[-1]
        if node.op in _REDUCE and len(so) != len(s):
            continue  # keepdims 0: the result's dims are not the operand's
        if node.op == "tflite.STRIDED_SLICE":
            if len(axes) != 1:
                continue
            view, at = _axis_view(s, first, last)
            k = first
            a = node.attrs
            b = 0 if a.get("begin_mask", 0) >> k & 1 else int(constant_array(node.inputs[1]).reshape(-1)[k])
            e = s[k] if a.get("end_mask", 0) >> k & 1 else int(constant_array(node.inputs[2]).reshape(-1)[k])
            st = int(constant_array(node.inputs[3]).reshape(-1)[k])
            begin = [0] * len(view)
            end, stride = list(view), [1] * len(view)
            begin[at], end[at], stride[at] = b, e, st
            dtype = constant_array(node.inputs[1]).dtype
            bounds = [add_const(graph, f"{node.name}_{what}", np.asarray(vals, dtype))
                      for what, vals in (("begin", begin), ("end", end), ("strides", stride))]
            folded_ins = [folder._view(x, view, f"{x.name}_f{len(view)}")] + bounds
            new_out, _ = _axis_view(so, first, last)
            attrs = dict(node.attrs, begin_mask=0, end_mask=0)
        elif node.op == "tflite.SOFTMAX":
            view, _ = _axis_view(s, first, last)
            folded_ins = [folder._view(x, view, f"{x.name}_f{len(view)}")]
            new_out, attrs = view, dict(node.attrs)
        elif node.op == "Concat":
            ins = [v for v in node.inputs]
            if any(v is None or v.type.shape is None or not all(isinstance(d, int) for d in v.type.shape) for v in ins):
                continue
            views = [_axis_view(v.type.shape, first, last) for v in ins]
            folded_ins = [folder._view(v, view, f"{v.name}_f{len(view)}") for v, (view, _) in zip(ins, views)]
            new_out, at = _axis_view(so, first, last)
            attrs = {"axis": _int_attr("axis", at)}
        else:
            view, at = _axis_view(s, first, last)
            new_out, _ = _axis_view(so, first, last)
            folded_ins = [folder._view(x, view, f"{x.name}_f{len(view)}")]
            attrs = {k: v for k, v in node.attrs.items() if k not in ("axis", "axes")}
            if node.op in _SOFTMAX:
                attrs["axis"] = _int_attr("axis", at)
                rest = []
            elif node.op == "Slice":
                rest = list(node.inputs[1:3]) + [add_const(graph, f"{node.name}_axes", np.asarray([at], np.int64))] + \
                    list(node.inputs[4:])
            elif len(node.inputs) > 1:  # axes as an input
                rest = [add_const(graph, f"{node.name}_axes", np.asarray([at], np.int64))]
            else:
                attrs["axes"] = folder.ops.ints_attr("axes", [at])
                rest = []
            folded_ins += rest
        new = graph.add_op(node.op_type, folded_ins, [out.type.with_shape(new_out)], domain=node.domain,
                           name=graph.fresh_name(node.name or node.op_type.lower()), attrs=attrs,
                           output_names=[f"{out.name}_f{len(new_out)}"]).output
        new.quant = out.quant
        folder.hand_over(out, new, so)
        ctx.stats["axis_ops_folded"] += 1
        changed = True
    return changed


def _int_attr(key: str, value: int):
    from onnx import helper

    return helper.make_attribute(key, value)


@register_pass(ensures=("over-rank",))
def fold_ranks_for_rank4_ops(graph: Graph, ctx: PassContext) -> bool:
    """The elementwise regions at ``ctx.max_rank`` with an op in them that the target's
    backend refuses there and takes lower (``ctx.rank_refused``: HTP's probed table, by op
    and element type: float Max, Tanh or Sqrt, int64 Add...), folded as regions above the
    limit are, to a rank below it."""
    limit = ctx.max_rank
    if not limit or ctx.rank_refused is None:
        return False
    below = PassContext(rules=ctx.rules, stats=ctx.stats, assume_dynamic_not_one=ctx.assume_dynamic_not_one,
                        max_rank=limit - 1)
    folder = _Folder(graph, below)
    seen: Set[int] = set()
    changed = False
    for node in [n for n in graph.nodes() if n.kind == OP and len(n.outputs) == 1
                 and n.outputs[0].type.shape is not None and len(n.outputs[0].type.shape) == limit]:
        if node.id in seen or folder.rank(node) is None or not ctx.rank_refused(node):
            continue
        changed |= folder.fold(folder.region(node, seen))
    return changed
