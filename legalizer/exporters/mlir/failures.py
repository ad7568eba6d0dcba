"""The one error an emitter raises: every op it cannot emit, on one line, after the
whole graph was walked (no partial module is ever returned)."""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

from ...errors import BadInput


def node_names(labels: Sequence[str], limit: int = 5) -> str:
    """``node 'a'`` / ``nodes 'a', 'b'``; past ``limit`` names, how many more."""
    if not labels:
        return ""
    shown = ", ".join(f"'{x}'" for x in labels[:limit])
    more = f" and {len(labels) - limit} more" if len(labels) > limit else ""
    return f"node{'s' if len(labels) > 1 else ''} {shown}{more}"


class Failures:
    """What could not be emitted: (what, reason, node label) - ``what`` an op type, with
    its node's label; or an input or initializer, described, with no label."""

    def __init__(self, dialect: str):
        self.dialect = dialect
        self.items: List[Tuple[str, str, Optional[str]]] = []

    def __bool__(self) -> bool:
        return bool(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def add(self, what: str, reason: str = "", label: Optional[str] = None) -> None:
        self.items.append((what, reason, label))

    def _message(self, body: str) -> str:
        n = len(self.items)
        text = f"cannot emit {self.dialect} for {n} op{'s' if n != 1 else ''}: {body}"
        return " ".join(text.splitlines())

    def by_op(self) -> BadInput:
        """Grouped by op and reason, in the order first met: ``LSTM (nodes 'a', 'b')``."""
        groups: Dict[Tuple[str, str], List[str]] = {}
        for what, reason, label in self.items:
            names = groups.setdefault((what, reason), [])
            if label is not None:
                names.append(label)
        parts = []
        for (what, reason), labels in groups.items():
            inner = ": ".join(x for x in (node_names(labels), reason) if x)
            parts.append(f"{what} ({inner})" if inner else what)
        return BadInput(self._message(", ".join(parts)))

    def by_node(self) -> BadInput:
        """One entry per node, in graph order: ``'a' (TopK: no TOSA lowering)``."""
        parts = [f"'{label}' ({what}: {reason})" if label is not None else f"{what} ({reason})"
                 for what, reason, label in self.items]
        return BadInput(self._message("; ".join(parts)))
