"""The targets, as records: for each, the verifier profile its legal form satisfies, the
passes that make it, the ONNX opset those passes' explicit forms need, the MLIR dialect
written in that form, and the profile of the backend it feeds - the highest rank it
takes, the broadcasting it allows, the ops it refuses (with its reason), whether it
needs static shapes, and the named levels that set those limits (TOSA's). Every other
module asks this table; none spells a target's parts itself, and adding a target is
adding a record."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Dict, Iterator, List, Mapping, Optional, Tuple

from .errors import UsageError
from .exporters.tosa_level import DEFAULT_LEVEL, LEVELS, Level
from .ir.graph import OP, Node
from .ir.types import all_static, shape_str
from .passes import ETHOS_U55_PIPELINE, ETHOS_U_PIPELINE, LITERT_GPU_PIPELINE, TOSA_PIPELINE, XLA_PIPELINE
from .passes.base import PassFn

# ONNX opset 7 brought numpy-style broadcasting; before it, broadcasting was the
# ``broadcast``/``axis`` attributes (the legacy forms ``passes.legacy_broadcast`` rewrites).
NUMPY_OPSET = 7

# What broadcasting a legal form keeps: numpy's (any), TOSA's (equal ranks, through
# size-1 dims only), or none (every broadcast explicit).
BROADCASTING = ("numpy", "size-1", "none")


@dataclass(frozen=True)
class Target:
    name: str
    profile: str  # the verifier profile (``verify.PROFILES``) the legal form satisfies
    passes: Tuple[PassFn, ...]
    min_opset: int  # what the explicit forms need: xla's Expand (8) and Where (9)
    dialects: Tuple[str, ...]  # the ``--emit`` MLIR formats written in this form
    max_rank: Optional[int] = None  # the highest tensor rank the backend takes (a level may set it)
    broadcasting: str = "numpy"  # one of BROADCASTING
    refuses: Mapping[str, str] = field(default_factory=dict)  # op (``Node.op``) -> the backend's reason
    static_shapes: bool = False  # the backend takes static shapes only
    levels: Mapping[str, Level] = field(default_factory=dict)  # named limits (TOSA's); empty: none
    default_level: Optional[str] = None
    # A deployment backend whose own rules (``rules/backends.toml``, read by
    # ``verify.backend_rules``) say which ops it refuses, in its words; then they alone do.
    backend: Optional[str] = None

    def level(self, name: Optional[str] = None) -> Optional[Level]:
        """The level called ``name`` (default: the target's default), None for a target
        without levels; UsageError naming the levels there are."""
        if not self.levels:
            return None
        name = name or self.default_level
        try:
            return self.levels[name]
        except KeyError:
            raise UsageError(f"unknown level '{name}' of target '{self.name}'; expected one of"
                             f" {', '.join(self.levels)}") from None

    def rank_limit(self, level: Optional[str] = None) -> Optional[int]:
        """The highest rank the backend takes at ``level``: the level's MAX_RANK, or the
        target's own ``max_rank``; None: no limit."""
        lv = self.level(level)
        return lv.max_rank if lv is not None else self.max_rank

    def refusals(self, node: Node, level: Optional[str] = None) -> List[str]:
        """Why the backend refuses ``node`` (empty: it takes it): its op, a tensor over
        the rank limit, a dynamic shape where static ones are needed."""
        return self._refusals(node, self.rank_limit(level), self.level(level))

    def _refusals(self, node: Node, limit: Optional[int], lv: Optional[Level]) -> List[str]:
        if self.backend is not None:
            from .verify.backend_rules import backend_reasons

            return backend_reasons(node, self.backend)
        why = []
        if node.op in self.refuses:
            why.append(self.refuses[node.op])
        if limit is not None:
            for v in itertools.chain(node.inputs, node.outputs):
                s = None if v is None else v.type.shape
                if s is not None and len(s) > limit:
                    where = f"MAX_RANK of TOSA level {lv.title}" if lv is not None else f"'{self.name}' takes rank <= {limit}"
                    why.append(f"'{v.name}' has rank {len(s)} > {limit} ({where})")
                    break
        if self.static_shapes:
            dyn = [v for v in node.outputs if v.type.shape is not None and not all_static(v.type.shape)]
            if dyn:
                why.append(f"'{dyn[0].name}' has a dynamic shape {shape_str(dyn[0].type.shape)}; '{self.name}' takes"
                           " static shapes only")
        return why

    def refused(self, graphs, level: Optional[str] = None) -> List[dict]:
        """Every op of ``graphs`` (and their subgraphs) the backend refuses: node, op and
        reasons, for the report. Every value is some node's result: one look at each
        result's rank finds those over the limit, and only then are ops looked at."""
        if self.backend is not None:
            from .verify.backend_rules import refused_ops

            return refused_ops(graphs, self.backend)
        limit, lv = self.rank_limit(level), self.level(level)
        refuses, static = self.refuses, self.static_shapes
        if limit is None and not refuses and not static:
            return []
        every = [g for top in graphs for g in top.graphs()]
        over = set() if limit is None else \
            {id(v) for g in every for n in g.unordered_nodes() for v in n.outputs
             if (s := v.type.shape) is not None and len(s) > limit}
        if not over and not refuses and not static:
            return []  # most models: nothing over the limit, nothing refused
        out = []
        for node in (n for g in every for n in g.nodes()):
            if node.kind != OP:
                continue
            if static or node.op in refuses or any(id(v) in over for v in itertools.chain(node.inputs, node.outputs)
                                                   if v is not None):
                why = self._refusals(node, limit, lv)
                if why:
                    out.append({"node": node.label, "op": node.op, "reasons": why})
        return out

    def to_json(self, level: Optional[str] = None) -> dict:
        """The profile as the report writes it."""
        lv = self.level(level)
        out = {"max_rank": self.rank_limit(level), "broadcasting": self.broadcasting,
               "refuses": dict(self.refuses), "static_shapes": self.static_shapes,
               "level": lv.name if lv is not None else None}
        if self.backend is not None:
            from .verify.backend_rules import backend

            out["backend"] = backend(self.backend).tool
        return out


def _ops(graphs) -> Iterator[Node]:
    for g in graphs:
        for n in g.walk():
            if n.kind == OP:
                yield n


TARGETS: Dict[str, Target] = {
    "tosa": Target("tosa", "tosa", TOSA_PIPELINE, NUMPY_OPSET, ("tosa",), broadcasting="size-1",
                   levels=MappingProxyType(LEVELS), default_level=DEFAULT_LEVEL),
    "xla": Target("xla", "xla", XLA_PIPELINE, 9, ("stablehlo", "stablehlo-bytecode"), broadcasting="none"),
    # Backends that take TFLite (rules/backends.toml): every tensor at rank <= 4, operands
    # of equal rank (the GPU delegate aligns a lower-rank operand from the left, LiteRT #8980).
    "litert-gpu": Target("litert-gpu", "tosa", LITERT_GPU_PIPELINE, NUMPY_OPSET, (), max_rank=4, backend="litert-gpu"),
    "ethos-u": Target("ethos-u", "tosa", ETHOS_U_PIPELINE, NUMPY_OPSET, (), max_rank=4, backend="ethos-u"),
    "ethos-u55": Target("ethos-u55", "tosa", ETHOS_U55_PIPELINE, NUMPY_OPSET, (), max_rank=4, backend="ethos-u55"),
}
# ``--emit`` format -> the target whose legal form it is written in.
TARGET_OF_DIALECT = {d: t.name for t in TARGETS.values() for d in t.dialects}


def target(name: str) -> Target:
    """The target called ``name``, or UsageError naming the ones there are."""
    try:
        return TARGETS[name]
    except KeyError:
        raise UsageError(f"unknown target '{name}'; expected one of {', '.join(TARGETS)}") from None
