"""Constraints back to the exporter: what would make a ``torch.export`` program legal
for a target, in torch.export's own "Suggested fixes" form, which
``torch.export.dynamic_shapes.refine_dynamic_shapes_from_suggested_fixes`` applies to a
``dynamic_shapes`` spec:

    Suggested fixes:
      s0 = 4                        # make the dim static
      s1 = s0                       # the two dims are one
      s2 = Dim('s2', min=2)         # the dim is never 0 or 1

A saved program does not keep the user's ``Dim`` names, only its symbols (``s53``) and
which user input dim each one is. The fixes name each dim by its symbol, and
``dynamic_dims`` lists the program's dynamic dims so named, with their ranges: the
``dynamic_shapes`` the fixes apply to (``Dim('s53', min=2, max=16)`` for input ``x``,
axis 2). ``renamed`` names them as a user's own ``dynamic_shapes`` does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence

HEADER = "Suggested fixes:"
_WORD = re.compile(r"[A-Za-z_]\w*")


@dataclass(frozen=True)
class DynamicDim:
    """A symbolic dim of a user input: its symbol, the input and axis it is, its range
    (``max`` None: unbounded) and its size in the program's example inputs."""

    name: str
    input: str
    axis: int
    min: int
    max: Optional[int]
    size: Optional[int]

    def dim(self) -> str:
        """As ``torch.export.Dim`` is written: ``Dim('s0', min=2, max=16)``."""
        bounds = "".join(f", {k}={v}" for k, v in (("min", self.min), ("max", self.max)) if v is not None)
        return f"Dim('{self.name}'{bounds})"


@dataclass(frozen=True)
class Fix:
    """One line of the fixes: ``name = value`` (a size, another dim's name, or a
    ``Dim(...)`` with a narrower range), and why the target needs it."""

    name: str
    value: str
    why: str

    @property
    def line(self) -> str:
        return f"{self.name} = {self.value}"


def dynamic_dims(program) -> List[DynamicDim]:
    """The program's user inputs' symbolic dims, each symbol once, in input order. A dim
    that is an expression of a symbol (a derived ``Dim``) is not one of them."""
    from torch.export.graph_signature import InputKind

    users = [s.arg.name for s in program.graph_signature.input_specs if s.kind == InputKind.USER_INPUT]
    examples = _example_shapes(program, len(users))
    ranges = {str(k): v for k, v in (getattr(program, "range_constraints", None) or {}).items()}
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    out: List[DynamicDim] = []
    for i, name in enumerate(users):
        node = placeholders.get(name)
        val = node.meta.get("val") if node is not None else None
        for axis, d in enumerate(getattr(val, "shape", ())):
            expr = getattr(getattr(d, "node", None), "expr", None)
            if expr is None or not getattr(expr, "is_Symbol", False) or any(o.name == str(expr) for o in out):
                continue
            lo, hi = _bounds(ranges.get(str(expr)))
            size = _size(d, examples[i] if i < len(examples) else None, axis)
            out.append(DynamicDim(str(expr), name, axis, lo, hi, size))
    return out


def _bounds(vr) -> tuple:
    """(min, max) of a range constraint; max None where unbounded (torch's ``int_oo``)."""
    if vr is None:
        return 0, None
    lo, hi = _finite(vr.lower), _finite(vr.upper)
    return (0 if lo is None else max(lo, 0)), hi


def _finite(x) -> Optional[int]:
    try:
        return int(x)
    except Exception:  # noqa: BLE001 - an infinity (int_oo, sympy's oo) has no int
        return None


def _example_shapes(program, count: int) -> List[Optional[tuple]]:
    """The shapes of the program's example user inputs (``torch.export.save`` keeps
    them), in flat order; None where it has none."""
    import torch

    try:
        args, kwargs = program.example_inputs or ((), {})
        leaves = torch.utils._pytree.tree_leaves((args, kwargs))
    except Exception:  # noqa: BLE001 - a program without examples: sizes from hints only
        return [None] * count
    return [tuple(x.shape) if isinstance(x, torch.Tensor) else None for x in leaves]


def _size(d, example: Optional[tuple], axis: int) -> Optional[int]:
    hint = getattr(d.node, "hint", None)
    if hint is not None:
        return int(hint)
    if example is not None and axis < len(example):
        return int(example[axis])
    return None


def symbols_in(shapes: Iterable[Optional[Sequence[Any]]]) -> set:
    """The names in the symbolic dims of ``shapes`` (``s53*s0*8``: s53 and s0)."""
    out = set()
    for shape in shapes:
        for d in shape or ():
            if isinstance(d, str):
                out.update(_WORD.findall(d))
    return out


def suggest(dims: Sequence[DynamicDim], *, refused: Mapping[str, str], constraints: Iterable[tuple] = (),
            static: Optional[str] = None) -> List[Fix]:
    """The fixes that make the program legal for the target.

    ``static``: why the target takes static shapes only (then every dynamic dim is made
    static at its example size). ``refused``: per symbol in a tensor the target still
    refuses, why; the rank lowering takes one symbolic dim per merged view, so each of
    them but the first (in input order) is made static. ``constraints``: the keys of the
    runtime constraints legality depends on (``("eq", a, b)``: a == b; ``("bcast", a,
    b)``: a == b or either is 1), each made to hold: ``b = a``, ``a = 4``, and for a
    broadcast of two dims, the first made ``Dim(..., min=2)`` where its range holds 1."""
    by_name = {d.name: d for d in dims}
    fixes: Dict[str, Fix] = {}

    def put(fix: Fix) -> None:
        fixes.setdefault(fix.name, fix)

    def static_fix(d: DynamicDim, why: str) -> None:
        if d.size is not None:
            put(Fix(d.name, str(d.size), why))

    if static is not None:
        for d in dims:
            static_fix(d, static)
        return list(fixes.values())
    kept = False
    for d in dims:
        if d.name in refused:
            if kept:
                static_fix(d, refused[d.name])
            kept = True
    for key in constraints:
        kind, a, b = (tuple(key) + (None, None, None))[:3]
        a, b = str(a), str(b)
        why = f"legality depends on the runtime constraint {a} == {b}" + (" or either is 1" if kind == "bcast" else "")
        da, db = by_name.get(a), by_name.get(b)
        if da is None and db is None:
            continue
        if da is None or db is None:  # a dim against a size
            d, other = (da, b) if da is not None else (db, a)
            if other.isdigit():
                put(Fix(d.name, other, why))
            continue
        first, second = sorted((da, db), key=dims.index)
        if kind == "bcast" and first.min < 2:  # neither is 1: then they are equal (the second is the first)
            put(Fix(first.name, DynamicDim(first.name, first.input, first.axis, 2, first.max, first.size).dim(), why))
        put(Fix(second.name, first.name, why))
    return list(fixes.values())


def text(fixes: Sequence[Fix], names: Optional[Mapping[str, str]] = None) -> str:
    """The fixes as torch.export prints them, each dim named by ``names`` (symbol ->
    the user's ``Dim`` name) where it has one; "" without fixes."""
    if not fixes:
        return ""
    names = dict(names or {})

    def name(s: str) -> str:
        return names.get(s, s)

    lines = []
    for f in fixes:
        value = f.value
        if value.startswith("Dim('"):
            value = value.replace(f"Dim('{f.name}'", f"Dim('{name(f.name)}'", 1)
        elif not value.isdigit():
            value = name(value)
        lines.append(f"  {name(f.name)} = {value}")
    return HEADER + "\n" + "\n".join(dict.fromkeys(lines))


def renamed(dims: Sequence[DynamicDim], dynamic_shapes) -> Dict[str, str]:
    """Symbol -> the name ``dynamic_shapes`` (torch.export's argument, keyed by input
    name, or in input order) gives that input dim's ``Dim``."""
    out = {}
    if dynamic_shapes is None:
        return out
    order: List[str] = list(dict.fromkeys(d.input for d in dims))
    for d in dims:
        if isinstance(dynamic_shapes, dict):
            spec = dynamic_shapes.get(d.input)
        elif isinstance(dynamic_shapes, (list, tuple)) and order.index(d.input) < len(dynamic_shapes):
            spec = dynamic_shapes[order.index(d.input)]
        else:
            spec = None
        if isinstance(spec, dict):
            dim = spec.get(d.axis)
        elif isinstance(spec, (list, tuple)) and d.axis < len(spec):
            dim = spec[d.axis]
        else:
            dim = None
        name = getattr(dim, "__name__", None)
        if isinstance(name, str):
            out[d.name] = name
    return out


def to_json(dims: Sequence[DynamicDim], fixes: Sequence[Fix]) -> dict:
    """The report's ``suggested_fixes``: the text torch.export's helper takes, each fix
    with the input dim it names, and the program's dynamic dims as a ``dynamic_shapes``
    (input -> axis -> ``Dim``) named as the fixes name them."""
    where = {d.name: d for d in dims}
    shapes: Dict[str, Dict[str, dict]] = {}
    for d in dims:
        shapes.setdefault(d.input, {})[str(d.axis)] = {"name": d.name, "min": d.min, "max": d.max, "size": d.size}
    return {"text": text(fixes),
            "fixes": [{"fix": f.line, "dim": f.name, "input": where[f.name].input, "axis": where[f.name].axis,
                       "why": f.why} for f in fixes],
            "dynamic_shapes": shapes}


def refused_symbols(model, refused: Sequence[dict]) -> Dict[str, str]:
    """Per symbol in the tensors of the nodes the target still refuses (``refused``:
    ``Target.refused``'s records), the first reason."""
    why = {r["node"]: "; ".join(r.get("reasons") or ()) for r in refused}
    out: Dict[str, str] = {}
    for node in model.graph.nodes():
        if node.label in why:
            values = [v for v in list(node.inputs) + list(node.outputs) if v is not None]
            for s in sorted(symbols_in(v.type.shape for v in values)):
                out.setdefault(s, f"node '{node.label}' is still refused: {why[node.label]}")
    return out


def for_model(model, program, *, refused: Sequence[dict] = (), constraints=None,
              static: Optional[str] = None) -> tuple:
    """(the program's dynamic dims, the fixes) for ``model`` (the program's IR after
    the target's passes; ``program`` the ``ExportedProgram`` it was read from), given
    what the target still refuses, the runtime constraints (a ``ConstraintSet``) and
    whether it takes static shapes only (``static``: why)."""
    dims = dynamic_dims(program)
    if not dims:
        return dims, []
    keys = [c.key for c in constraints] if constraints is not None else []
    return dims, suggest(dims, refused=refused_symbols(model, refused), constraints=keys, static=static)
