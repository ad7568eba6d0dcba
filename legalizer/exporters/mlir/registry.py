"""Per-op lowering tables: ONNX op type -> a small function that lowers one node.

Each dialect has one ``LoweringTable``; lowering modules register into it with
``@TABLE.register("Add", "Sub")``. Where an ONNX op is one dialect op, the dialect op's
name comes from the rules (``stablehlo =`` / ``tosa =`` in ``rules/onnx.toml``; a
comparison's direction from ``direction =``), not from a second table here.
"""

from __future__ import annotations

from typing import Callable, Dict, Iterable, Iterator, Optional, TypeVar

from ...oprules import frontend_rules

F = TypeVar("F", bound=Callable)

# The frontend whose ops the lowering tables are keyed by: a graph of another
# frontend's ops (TFLite's) is emitted from its ONNX form.
FRONTEND = "onnx"


class Unsupported(Exception):
    """Raised by a lowering: this node cannot be emitted (the reason, or "" for none)."""


class LoweringTable:
    """ONNX op type -> lowering function, for one dialect."""

    def __init__(self, dialect: str):
        self.dialect = dialect
        self._fns: Dict[str, Callable] = {}

    def register(self, *ops: str) -> Callable[[F], F]:
        def deco(fn: F) -> F:
            for op in ops:
                self._fns[op] = fn
            return fn
        return deco

    def get(self, op: str) -> Optional[Callable]:
        return self._fns.get(op)

    def __contains__(self, op: object) -> bool:
        return op in self._fns

    def __iter__(self) -> Iterator[str]:
        return iter(self._fns)

    def __len__(self) -> int:
        return len(self._fns)


def rule_op_names(dialect: str, ops: Iterable[str]) -> Dict[str, str]:
    """The ``dialect`` op each ONNX op of ``ops`` lowers to, as its rule names it
    (``rules/onnx.toml``); a rule that names none is an error in the table."""
    rules = frontend_rules(FRONTEND)
    names = {}
    for op in ops:
        name = rules[op].targets.get(dialect) if op in rules else None
        if name is None:
            raise KeyError(f"rules/onnx.toml: op '{op}' names no {dialect} op")
        names[op] = name
    return names


def rule_directions(ops: Iterable[str]) -> Dict[str, str]:
    """The ``stablehlo.compare`` direction of each comparison of ``ops``, as its rule
    names it (``direction =`` in ``rules/onnx.toml``)."""
    rules = frontend_rules(FRONTEND)
    directions = {}
    for op in ops:
        direction = rules[op].direction if op in rules else None
        if direction is None:
            raise KeyError(f"rules/onnx.toml: op '{op}' names no comparison direction")
        directions[op] = direction
    return directions
