"""The Verify of MLIR's Broadcastable trait
(https://mlir.llvm.org/docs/Traits/Broadcastable/) over a whole graph.

A profile (``profiles.Profile``, docs/profiles-and-targets.md) adds rules to the trait's
table: whether an inferred ``?`` may meet a static result dim, equal operand ranks, no
implicit broadcasting at all (the operands have one shape; a unidirectional op's
broadcasting operands, their target's), whether an operand of unknown rank passes, a
highest rank. The verifier reads the record's fields, never its name.

Each op's broadcasting rule comes from ``rules/`` and the model's opset: numpy-style
(multidirectional or unidirectional), or a legacy rule of opset < 7/8 (``attr``: the
``broadcast``/``axis`` attributes, an InDim broadcast of operand 1 into operand 0;
``equal``: no broadcasting at all; ``channel``: PRelu-6's per-channel slope).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from onnx import helper

from ..ir.graph import OP, Graph, Node
from ..ir.types import Shape, dim_str
from ..oprules import OpRule, RuleLookup, builtin_rules
from ..shapes import (IncompatibleDims, dim_labels, equality_constraint, expand_rank,
                      infer_result_shape, same_shape)
from .diagnostics import MESSAGES, ConstraintSet, Diagnostic, quoted
from .profiles import Profile, profile_record


@dataclass
class VerifyResult:
    violations: List[Diagnostic] = field(default_factory=list)
    constraints: ConstraintSet = field(default_factory=ConstraintSet)
    nodes: int = 0
    elementwise_nodes: int = 0

    @property
    def ok(self) -> bool:
        return not self.violations

    def by_code(self) -> Dict[str, int]:
        out: Dict[str, int] = {}
        for d in self.violations:
            out[d.code] = out.get(d.code, 0) + 1
        return out


class _Labels:
    """Constraint names of each operand's dims, made only when a constraint needs them
    (most nodes are static and never ask)."""

    def __init__(self, operands):
        self.operands = operands
        self.made: Dict[int, Optional[List[str]]] = {}

    def __getitem__(self, i: int) -> Optional[List[str]]:
        if i not in self.made:
            v = self.operands[i]
            self.made[i] = dim_labels(v.name, v.type.shape) if v.type.shape is not None else None
        return self.made[i]


class _NodeCheck:
    """Verification of one node: collects its diagnostics and constraints."""

    def __init__(self, node: Node, rule: OpRule, profile: Profile, result: VerifyResult,
                 graph_path: str, stage: str, not_one: bool = False):
        self.not_one = not_one
        self.node, self.rule, self.profile = node, rule, profile
        self.result, self.graph_path, self.stage = result, graph_path, stage
        self.operands = [v for i, v in enumerate(node.inputs)
                         if v is not None and (rule.operands is None or i in rule.operands)]
        self.shapes: List[Shape] = [v.type.shape for v in self.operands]
        self.result_shape: Shape = node.outputs[0].type.shape if node.outputs else None

    def labels(self) -> "_Labels":
        return _Labels(self.operands)

    def error(self, code: str, detail: str = "", dim: Optional[int] = None, **fmt) -> None:
        text = self.profile.messages.get(code, MESSAGES[code]).format(**fmt)
        if detail:
            text = f"{text}: {detail}"
        self.result.violations.append(Diagnostic(
            code, self.node.label, self.node.op, text, list(self.shapes), self.result_shape,
            dim, self.graph_path, self.stage))

    def constrain(self, constraints) -> None:
        for _, c in constraints:
            self.result.constraints.add(c, self.node.label)

    # -- the steps of Verify -----------------------------------------------------------
    def infer(self, shapes: Sequence[Shape], labels) -> Tuple[bool, Shape]:
        """InferResultShape: (False, None) after reporting operands that cannot broadcast."""
        try:
            inference = infer_result_shape(shapes, labels, self.not_one)
        except IncompatibleDims as e:
            rank = max(len(s) for s in shapes if s is not None)
            clash = " but ".join(
                f"operand #{i} {quoted(shapes[i])} has {d} at dim {e.axis - (rank - len(shapes[i]))}"
                for i, d in ((e.operand0, e.dim0), (e.operand1, e.dim1)))
            self.error("incompatible-operands", clash, dim=e.axis)
            return False, None
        self.constrain(inference.constraints)
        return True, inference.shape

    def check_result(self, inferred: Shape) -> None:
        actual = self.result_shape
        if inferred is None or actual is None or inferred == actual:
            return
        fmt = lambda: {"result": quoted(actual), "inferred": quoted(inferred)}  # noqa: E731 - on error only
        if len(inferred) != len(actual):
            self.error("result-rank-mismatch", f"rank {len(actual)} vs {len(inferred)}", **fmt())
            return
        for k, (i, a) in enumerate(zip(inferred, actual)):
            if not isinstance(a, int):
                continue
            if isinstance(i, int):
                if i != a:
                    self.error("result-incompatible", f"dim {k} is {a} in the result but {i} in the broadcast",
                               dim=k, **fmt())
            elif not self.profile.dynamic_to_static:
                self.error("result-dynamic-to-static",
                           f"dim {k} is static {a} in the result but dynamic {dim_str(i)} in the broadcast",
                           dim=k, **fmt())

    def check_rank_limit(self, limit: int) -> None:
        """The first of the operands and the result over ``limit``, once per node."""
        values = [(f"operand #{i}", s) for i, s in enumerate(self.shapes)] + [("the result", self.result_shape)]
        for value, s in values:
            if s is not None and len(s) > limit:
                self.error("rank-limit", "(" + ", ".join(quoted(s) for s in self.shapes) + f") -> {quoted(self.result_shape)}",
                           value=value, rank=len(s), limit=limit)
                return

    def _one_rank_symbol(self) -> bool:
        """Whether the operands and the result are all unranked and share one rank
        symbol (``TensorType.rank_of``): equal ranks, proved without knowing them."""
        types = [v.type for v in self.operands] + [self.node.outputs[0].type]
        first = types[0].rank_of
        return first is not None and all(t.shape is None and t.rank_of == first for t in types)

    def check_ranks(self) -> None:
        """The profile's extra rules (``profiles.Profile``): equal ranks, no implicit
        broadcast at all (each broadcasting operand has exactly its target's shape), an
        operand of unknown rank that cannot be proved legal, a highest rank."""
        if self.profile.max_rank is not None:
            self.check_rank_limit(self.profile.max_rank)
        if self.profile.implicit_broadcast and self._one_rank_symbol():
            return  # every operand and the result: unranked, of one rank (the rank-agnostic rewrite)
        types = [v.type for v in self.operands] + [self.node.outputs[0].type]
        if types[0].shape_of is not None and all(t.shape is None and t.shape_of == types[0].shape_of for t in types):
            return  # ... of one shape (its xla form): nothing is broadcast
        if not self.profile.unknown_ranks:
            for i, s in enumerate(self.shapes):
                if s is None:
                    self.error("unranked-operand",
                               "(" + ", ".join(quoted(s) for s in self.shapes) + f") -> {quoted(self.result_shape)}",
                               operand=i)
        if self.profile.equal_ranks:
            ranks = {len(s) for s in self.shapes + [self.result_shape] if s is not None}
            if len(ranks) > 1:
                self.error("operand-rank-mismatch",
                           "(" + ", ".join(quoted(s) for s in self.shapes) + f") -> {quoted(self.result_shape)}")
        if not self.profile.implicit_broadcast:
            if self.rule.broadcast == "unidirectional":
                target = self.result_shape if self.rule.onto == "result" else (self.shapes[0] if self.shapes else None)
                pairs = [(i, target) for i in self.rule.broadcasts if i < len(self.shapes)]
            else:
                pairs = [(i, self.shapes[0]) for i in range(1, len(self.shapes))]
            for i, target in pairs:
                s = self.shapes[i]
                if s is not None and target is not None and not same_shape(s, target):
                    self.error("implicit-broadcast", f"{quoted(s)} is broadcast implicitly to {quoted(target)}",
                               operand=i)


def _numpy(c: _NodeCheck) -> None:
    if c.rule.broadcast == "unidirectional":
        _unidirectional(c)
        return
    # Unranked operands are left out of the inference and the result must have its
    # rank (the spec's Verify; MLIR's C++ accepts extra leading result dims: docs/profiles-and-targets.md).
    ok, inferred = c.infer(c.shapes, c.labels())
    if ok:
        c.check_result(inferred)
    c.check_ranks()


def _target(c: _NodeCheck) -> Tuple[Shape, Optional[List[str]]]:
    """What the broadcasting operands of a unidirectional op broadcast onto: operand 0,
    or the result (Gemm's C onto A*B)."""
    if c.rule.onto == "result":
        shape = c.result_shape
        name = c.node.outputs[0].name
    else:
        shape = c.shapes[0] if c.shapes else None
        name = c.operands[0].name if c.operands else ""
    return shape, (dim_labels(name, shape) if shape is not None else None)


def _unidirectional(c: _NodeCheck, placed: Optional[Dict[int, Tuple[Shape, List[str]]]] = None) -> None:
    """Operands in ``rule.broadcasts`` broadcast onto the target, whose shape the result
    has. ``placed`` gives an operand's shape already placed at the target's rank (the
    legacy forms), with its dim labels."""
    target, target_labels = _target(c)
    if target is None:
        c.check_ranks()
        return
    labels = c.labels()
    for i in c.rule.broadcasts:
        if i >= len(c.shapes) or c.shapes[i] is None:
            continue
        if placed and i in placed:
            s, lab = placed[i]
        else:
            s = c.shapes[i]
            if len(s) > len(target):
                c.error("not-unidirectional", f"{quoted(s)} has a higher rank than {quoted(target)}", operand=i)
                continue
            lab = ["1"] * (len(target) - len(s)) + labels[i]
            s = expand_rank(s, len(target))
        for k, (t, d) in enumerate(zip(target, s)):
            if d == 1 or (d == t and d is not None):
                continue
            if isinstance(t, int) and isinstance(d, int):
                c.error("not-unidirectional", f"dim {k} is {d} in {quoted(c.shapes[i])} but {t} in {quoted(target)}",
                        dim=k, operand=i)
                continue
            eq = equality_constraint(t, d, target_labels[k], lab[k])
            if eq is not None:
                c.result.constraints.add(eq, c.node.label)
    if c.rule.onto != "result":
        c.check_result(target)
    c.check_ranks()


def _legacy_attr(c: _NodeCheck) -> None:
    """Opset < 7 ``broadcast``/``axis``: the broadcasting operand (operand 1; Gemm's C)
    goes into the target at ``axis``; ``broadcast=0`` allows no broadcasting."""
    attrs = {name: helper.get_attribute_value(a) for name, a in c.node.attrs.items()
             if name in ("broadcast", "axis")}
    i = c.rule.broadcasts[0]
    target, _ = _target(c)
    b = c.shapes[i] if i < len(c.shapes) else None
    if target is None or b is None:
        c.check_ranks()
        return
    if not attrs.get("broadcast", 0):
        if c.rule.onto == "result":  # Gemm-6 without broadcast: C is exactly (M, N)
            placed = {i: (tuple(b), c.labels()[i])} if len(b) == len(target) else None
            if placed is None:
                c.error("shape-mismatch", f"{quoted(b)} is not the result's shape {quoted(target)}", operand=i)
                return
            _unidirectional(c, placed)
            return
        _legacy_equal(c)
        return
    axis = attrs.get("axis", len(target) - len(b))
    if axis < 0 or axis + len(b) > len(target):
        c.error("legacy-axis", f"axis {axis} places {quoted(b)} outside {quoted(target)}")
        return
    after = len(target) - axis - len(b)
    placed = (1,) * axis + tuple(b) + (1,) * after
    _unidirectional(c, {i: (placed, ["1"] * axis + c.labels()[i] + ["1"] * after)})


def _legacy_channel(c: _NodeCheck) -> None:
    """PRelu-1/6: a rank-1 slope of size > 1 is per channel, axis 1 of X."""
    x, slope = (c.shapes + [None, None])[:2]
    if x is None or slope is None or len(slope) != 1 or slope[0] == 1 or len(x) < 2:
        _unidirectional(c)
        return
    after = len(x) - 2
    _unidirectional(c, {1: ((1, slope[0]) + (1,) * after, ["1"] + c.labels()[1] + ["1"] * after)})


def _legacy_equal(c: _NodeCheck) -> None:
    """No broadcasting: all operands have one shape, which is the result's."""
    ranked = [(i, s) for i, s in enumerate(c.shapes) if s is not None]
    if not ranked:
        return
    labels = c.labels()
    i0, s0 = ranked[0]
    merged = list(s0)
    for i, s in ranked[1:]:
        if len(s) != len(s0):
            c.error("shape-mismatch", f"operand #{i0} {quoted(s0)} and operand #{i} {quoted(s)} differ in rank")
            return
        for k, (d0, d1) in enumerate(zip(s0, s)):
            if isinstance(d0, int) and isinstance(d1, int):
                if d0 != d1:
                    c.error("shape-mismatch", f"dim {k} is {d0} in operand #{i0} and {d1} in operand #{i}", dim=k)
                    return
                continue
            eq = equality_constraint(d0, d1, labels[i0][k], labels[i][k])
            if eq is not None:
                c.result.constraints.add(eq, c.node.label)
            if isinstance(d1, int) or merged[k] is None:
                merged[k] = d1
    c.check_result(tuple(merged))
    c.check_ranks()


_MODES: Dict[str, Callable[[_NodeCheck], None]] = {
    "numpy": _numpy,
    "attr": _legacy_attr,
    "equal": _legacy_equal,
    "unidirectional": _unidirectional,
    "channel": _legacy_channel,
}


def verify(graph: Graph, profile: Union[str, Profile] = "mlir", rules: Optional[Mapping[str, OpRule]] = None,
           stage: str = "input", result: Optional[VerifyResult] = None, _path: str = "",
           assume_dynamic_not_one: bool = False, _clean: Optional[set] = None) -> VerifyResult:
    """Verify every broadcasting node of ``graph`` and its subgraphs. With
    ``assume_dynamic_not_one`` (strict symbolic mode) no dynamic dim is 1, so runtime
    constraints become equalities."""
    profile = profile_record(profile)
    rules = builtin_rules() if rules is None else rules
    result = VerifyResult() if result is None else result
    # Signatures (op, rule mode, operand shapes, result shape) of nodes found legal with
    # no constraint: a node with the same signature is legal too, whatever its names,
    # as these modes read nothing else (large models repeat a few signatures).
    clean = _clean if _clean is not None else set()
    lookup = RuleLookup(graph, rules)
    nodes = elementwise = 0
    for node in graph.nodes():
        if node.kind != OP:
            continue
        nodes += 1
        found = lookup(node)
        if found is not None and node.outputs:
            elementwise += 1
            rule, mode, op = found
            key = None
            if mode in _NAME_FREE:
                key = (op, mode, node.outputs[0].type.shape,
                       *[v.type.shape if v is not None else False for v in node.inputs])
                if key in clean:
                    continue
            before = (len(result.violations), result.constraints.adds)
            _MODES[mode](_NodeCheck(node, rule, profile, result, _path, stage, assume_dynamic_not_one))
            if key is not None and before == (len(result.violations), result.constraints.adds):
                clean.add(key)
        if node.attrs:
            for attr, sub in node.subgraphs():
                sub_path = f"{_path}/{node.label}.{attr}" if _path else f"{node.label}.{attr}"
                verify(sub, profile, rules, stage, result, sub_path, assume_dynamic_not_one, clean)
    result.nodes += nodes
    result.elementwise_nodes += elementwise
    return result


# The modes whose verdict depends only on the op's rule and the shapes (the legacy ones
# read attributes).
_NAME_FREE = ("numpy", "unidirectional")
