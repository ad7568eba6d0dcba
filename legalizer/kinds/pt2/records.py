"""What the IR keeps of a ``torch.export`` program's calls, for its export: each node of
domain ``aten`` (``kinds.pt2.importer``) and each node a pass makes in ATen's ops
(``passes.frontend_ops.AtenOps``) holds the call it is written back as
(``kinds.pt2.exporter``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict

DOMAIN = "aten"
ATEN_CALL = "aten_call"  # Node.attrs key: the AtenCall a node is written back as


@dataclass
class In:
    """An operand's place in a call's arguments: ``Node.inputs[index]``."""

    index: int


@dataclass
class AtenCall:
    """One call: ``target`` (the OpOverload, or another callable the graph calls:
    ``operator.getitem``, ``aten.sym_size.int``), its arguments with each tensor or
    SymInt operand an ``In``, and the metadata of the fx node it stands for (its
    ``stack_trace``, ``nn_module_stack``, ...: a node a pass makes takes the metadata of
    the node it stands for)."""

    target: Any
    args: tuple = ()
    kwargs: Dict[str, Any] = field(default_factory=dict)
    meta: Dict[str, Any] = field(default_factory=dict)


def call_of(node) -> "AtenCall | None":
    return node.attrs.get(ATEN_CALL)
