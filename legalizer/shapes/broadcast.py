"""Dim algebra of MLIR's Broadcastable trait
(https://mlir.llvm.org/docs/Traits/Broadcastable/), with symbols.

``infer_dim`` is the spec's InferDim table: ``?`` is any dynamic dim (a symbol or
``None``); a static dim other than 1 plays the role of ">1" (0 broadcasts like any
size other than 1, as numpy does). Symbols refine the ``(?, ?)`` row: two equal
symbols are the same size, so the result is that symbol; otherwise the result is an
anonymous ``?``. A dynamic dim met by a static 1 stays what it was (symbol kept).

Dims that cannot be decided at compile time yield runtime ``Constraint``s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from ..ir.types import Dim, Shape


class IncompatibleDims(Exception):
    """Two static dims, neither 1, that differ."""

    def __init__(self, axis: int, dim0: int, dim1: int, operand0: int, operand1: int):
        super().__init__(f"dim {axis}: {dim0} vs {dim1}")
        self.axis, self.dim0, self.dim1 = axis, dim0, dim1
        self.operand0, self.operand1 = operand0, operand1


@dataclass(frozen=True)
class Constraint:
    """A runtime condition for a broadcast to be defined: ``text`` is what the report
    shows; ``key`` identifies it regardless of operand order (for deduplication)."""

    text: str
    key: Tuple


def infer_dim(d0: Dim, d1: Dim) -> Dim:
    """The spec's InferDim; raises ``ValueError`` for static dims that cannot broadcast."""
    s0, s1 = isinstance(d0, int), isinstance(d1, int)
    if s0 and s1:
        if d0 == d1 or d1 == 1:
            return d0
        if d0 == 1:
            return d1
        raise ValueError(f"{d0} vs {d1}")
    if s0:  # (static, ?)
        return d1 if d0 == 1 else d0
    if s1:  # (?, static)
        return d0 if d1 == 1 else d1
    # (?, ?): the same symbol is the same size; anything else is unknown.
    return d0 if (d0 is not None and d0 == d1) else None


def broadcast_constraint(d0: Dim, d1: Dim, label0: str, label1: str, not_one: bool = False) -> Optional[Constraint]:
    """The condition under which ``d0`` and ``d1`` broadcast, if it is not known at
    compile time (``None`` when it is). With ``not_one`` (strict symbolic mode) a dynamic
    dim is never 1, so it must equal the other dim."""
    s0, s1 = isinstance(d0, int), isinstance(d1, int)
    if s0 and s1:
        return None
    if s0 or s1:
        (dyn, k) = (label1, d0) if s0 else (label0, d1)
        if k == 1:
            return None
        if not_one:
            return Constraint(f"{dyn} == {k}", ("eq", dyn, str(k)))
        return Constraint(f"{dyn} == {k} or {dyn} == 1", ("bcast", dyn, k))
    if d0 is not None and d0 == d1:
        return None
    a, b = sorted((label0, label1))
    if not_one:
        return Constraint(f"{a} == {b}", ("eq", a, b))
    return Constraint(f"{a} == {b} or {a} == 1 or {b} == 1", ("bcast", a, b))


def equality_constraint(d0: Dim, d1: Dim, label0: str, label1: str) -> Optional[Constraint]:
    """The condition for two dims to be equal (no broadcasting allowed), if not known."""
    if isinstance(d0, int) and isinstance(d1, int):
        return None
    if d0 is not None and d0 == d1:
        return None
    a, b = sorted((label0, label1))
    return Constraint(f"{a} == {b}", ("eq", a, b))


def same_shape(a: Shape, b: Shape) -> bool:
    """Provably the same shape: equal ranks, each dim an equal static size or the same
    symbol (an anonymous ``?`` is never known to equal anything)."""
    if a is None or b is None or len(a) != len(b):
        return False
    if type(a) is not type(b):
        a, b = tuple(a), tuple(b)
    # (compared in C: asked of every operand of every node by explicit_broadcast)
    return a == b and None not in a


def expand_rank(shape: Sequence[Dim], rank: int) -> Tuple[Dim, ...]:
    """The spec's ExpandRank: prepend 1s up to ``rank``."""
    return (1,) * (rank - len(shape)) + tuple(shape)


def dim_labels(value_name: str, shape: Sequence[Dim]) -> List[str]:
    """How constraints name each dim: its size or symbol, or ``name[axis]`` if anonymous."""
    return [f"{value_name}[{i}]" if d is None else str(d) for i, d in enumerate(shape)]


@dataclass
class Inference:
    """Result of ``infer_result_shape``: the inferred shape (``None`` when no operand is
    ranked), and the runtime constraints as (result axis, constraint) pairs."""

    shape: Shape
    constraints: List[Tuple[int, Constraint]]


def infer_result_shape(shapes: Sequence[Shape], labels: Optional[Sequence[Optional[List[str]]]] = None,
                       not_one: bool = False) -> Inference:
    """The spec's InferResultShape over any number of operands, unranked ones skipped.

    ``labels[i]`` names operand i's dims in constraints. Raises ``IncompatibleDims`` with
    the result axis and the two operand indices whose static dims clash.
    """
    ranked = [(i, s) for i, s in enumerate(shapes) if s is not None]
    if not ranked:
        return Inference(None, [])
    rank = max(len(s) for _, s in ranked)
    if all(type(d) is int for _, s in ranked for d in s):
        return Inference(_static_broadcast(ranked, rank), [])
    # Most dynamic nodes need no constraint (N against 1, N against N): infer without
    # naming dims first, and name them only if a constraint turns up.
    try:
        return _infer(ranked, rank, None, not_one)
    except _NeedLabels:
        return _infer(ranked, rank, labels if labels is not None else [None] * (ranked[-1][0] + 1), not_one)


class _NeedLabels(Exception):
    pass


def _infer(ranked, rank: int, labels, not_one: bool = False) -> Inference:
    named = labels is not None
    first_i, first = ranked[0]
    acc = list(expand_rank(first, rank))
    # For each result axis: which operand the accumulated dim comes from and its label.
    origin = [first_i] * rank
    acc_labels = _expanded_labels(labels, first_i, first, rank) if named else None
    constraints: List[Tuple[int, Constraint]] = []
    for i, s in ranked[1:]:
        dims = expand_rank(s, rank)
        lab = _expanded_labels(labels, i, s, rank) if named else None
        for ax in range(rank):
            d0, d1 = acc[ax], dims[ax]
            if d0 == d1 and d0 is not None:
                continue
            try:
                d = infer_dim(d0, d1)
            except ValueError:
                raise IncompatibleDims(ax, d0, d1, origin[ax], i) from None
            if not_one and d is None:  # two dynamic dims, neither 1: they are equal
                d = d0 if d0 is not None else d1
            if isinstance(d1, int) and d1 != 1:
                origin[ax] = i
            acc[ax] = d
            if not named:
                if _constrained(d0, d1):
                    raise _NeedLabels
                continue
            c = broadcast_constraint(d0, d1, acc_labels[ax], lab[ax], not_one)
            if c is not None:
                constraints.append((ax, c))
            acc_labels[ax] = _label_after(d, d0, d1, acc_labels[ax], lab[ax])
    return Inference(tuple(acc), constraints)


def _constrained(d0: Dim, d1: Dim) -> bool:
    """Whether ``broadcast_constraint`` would give a constraint for these dims."""
    s0, s1 = isinstance(d0, int), isinstance(d1, int)
    if s0 and s1:
        return False
    if s0 or s1:
        return (d0 if s0 else d1) != 1
    return d0 is None or d0 != d1


def _static_broadcast(ranked, rank: int) -> Tuple[int, ...]:
    """InferResultShape when every dim is static (the common case): no labels, no
    constraints."""
    acc = [1] * rank
    origin = [ranked[0][0]] * rank
    for i, s in ranked:
        off = rank - len(s)
        for k, d in enumerate(s):
            ax = k + off
            a = acc[ax]
            if d == a or d == 1:
                continue
            if a == 1:
                acc[ax], origin[ax] = d, i
            else:
                raise IncompatibleDims(ax, a, d, origin[ax], i)
    return tuple(acc)


def _label_after(d: Dim, d0: Dim, d1: Dim, label0: str, label1: str) -> str:
    if d is not None:
        return str(d)
    if d1 == 1:
        return label0
    if d0 == 1:
        return label1
    return broadcast_label(label0, label1)


def broadcast_label(label0: str, label1: str) -> str:
    """How constraints name the numpy broadcast of two dynamic dims."""
    return f"broadcast({label0}, {label1})"


def broadcast_label_operands(label: str) -> Optional[Tuple[str, str]]:
    """The two labels of a ``broadcast_label``, or None if ``label`` is not one (split at
    the first ", " outside brackets)."""
    if not (label.startswith("broadcast(") and label.endswith(")")):
        return None
    inner, depth = label[len("broadcast("):-1], 0
    for i, ch in enumerate(inner):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif depth == 0 and inner.startswith(", ", i):
            return inner[:i], inner[i + 2:]
    return None


def alternatives(c: Constraint) -> List[Tuple[str, str]]:
    """``c`` as equalities of dim labels, any one of which makes it hold. A label is a
    symbol, ``name[axis]`` (``dim_labels``), a ``broadcast_label`` or a number."""
    kind, a, b = c.key
    if kind == "eq":
        return [(a, b)]
    if isinstance(b, int):  # a dynamic dim against a static size
        return [(a, str(b)), (a, "1")]
    return [(a, b), (a, "1"), (b, "1")]


def _expanded_labels(labels, i: int, shape: Sequence[Dim], rank: int) -> List[str]:
    own = labels[i] if labels is not None and labels[i] is not None else dim_labels(f"#{i}", shape)
    return ["1"] * (rank - len(shape)) + list(own)


def ones_pattern_groups(shapes: Sequence[Sequence[Dim]], dims: Sequence[int], rank: int,
                        alone: Sequence[int] = ()) -> List[List[int]]:
    """The groups of ``dims`` (ascending, of ``shapes`` at one rank) that fold into one:
    neighbours in ``dims`` where every shape is 1 at the same places merge (the dims
    between them, left out of ``dims``, are 1 everywhere); a dim of ``alone`` stays by
    itself. No dims at all: the last one (rank 1, since rank 0 reads ambiguously in
    TFLite's RESHAPE)."""
    groups: List[List[int]] = []
    last = None
    for k in dims:
        if k in alone:
            groups.append([k])
            last = None
            continue
        pattern = tuple(s[k] == 1 for s in shapes)
        if last is not None and pattern == last:
            groups[-1].append(k)
        else:
            groups.append([k])
        last = pattern
    return groups or [[rank - 1]]

