"""Diagnostics are data: a code, the node and op, MLIR-worded text, the shapes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

from ..ir.types import Shape, shape_str, shape_strs
from ..shapes import Constraint

# code -> MLIR's own wording of the failure
MESSAGES = {
    "incompatible-operands": "operands don't have broadcast-compatible shapes",
    "result-rank-mismatch": "result type {result} not broadcast compatible with broadcasted operands's shapes {inferred}",
    "result-incompatible": "result type {result} not broadcast compatible with broadcasted operands's shapes {inferred}",
    "result-dynamic-to-static": "result type {result} not broadcast compatible with broadcasted operands's shapes {inferred}",
    "operand-rank-mismatch": "operands don't have matching ranks",
    "not-unidirectional": "operand #{operand} is not unidirectionally broadcastable to operand #0",
    "shape-mismatch": "operands don't have the same shape",
    "legacy-axis": "broadcast axis out of range",
    "implicit-broadcast": "operand #{operand} is not the shape of the operation",
    "unranked-operand": "operand #{operand} of unknown rank cannot be proved to have the result's rank",
    "rank-limit": "{value} has rank {rank}, over the maximum rank {limit}",
    "tosa-level": "failed level check",
}


def quoted(shape: Shape) -> str:
    return f"'{shape_str(shape)}'"


@dataclass
class Diagnostic:
    code: str
    node: str
    op: str
    message: str
    operand_shapes: List[Shape]
    result_shape: Shape
    dim: Optional[int] = None
    graph: str = ""
    stage: str = "input"

    def __str__(self) -> str:
        where = f"graph '{self.graph}', " if self.graph else ""
        return f"error: {where}node '{self.node}': '{self.op}' op {self.message}"

    def to_json(self) -> dict:
        return {
            "code": self.code, "node": self.node, "op": self.op, "message": self.message,
            "operand_shapes": [shape_strs(s) for s in self.operand_shapes],
            "result_shape": shape_strs(self.result_shape), "dim": self.dim,
            "graph": self.graph, "stage": self.stage,
        }


@dataclass
class ConstraintSet:
    """Runtime constraints, deduplicated across the graph, with the nodes needing each."""

    items: Dict[tuple, Constraint] = field(default_factory=dict)
    nodes: Dict[tuple, List[str]] = field(default_factory=dict)

    # (constraint key, node) pairs already listed: a constraint many nodes share
    # (a model-wide symbol) is not searched for each of them.
    _seen: set = field(default_factory=set, repr=False, compare=False)
    # Calls of ``add``: the verifier tells from it whether a node needed a constraint.
    adds: int = field(default=0, repr=False, compare=False)

    def add(self, c: Constraint, node: str) -> None:
        self.adds += 1
        if c.key not in self.items:
            self.items[c.key] = c
            self.nodes[c.key] = []
        if (c.key, node) not in self._seen:
            self._seen.add((c.key, node))
            self.nodes[c.key].append(node)

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self):
        return iter(self.items.values())

    def to_json(self) -> list:
        return [{"text": c.text, "nodes": self.nodes[k]} for k, c in self.items.items()]
