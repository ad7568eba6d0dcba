"""Rewrites written as rules, as onnxscript's rewriter writes them: a pattern of ops
rooted at the node whose result is replaced, a condition over what the pattern bound
(the op facts of ``rules/*.toml`` reach it through ``ctx.rules``), and a replacement
that builds the new value. One driver matches the rules of a pass, in topological
order, points the root's users at the replacement and counts each rewrite under its
rule's stat; a rule is a record, not a loop of its own."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, Optional, Sequence, Tuple, Union

import numpy as np

from ..ir.graph import CONST, OP, Graph, Node, Value
from .base import PassContext, PassFn, register_pass
from .rewrite import constant_array


@dataclass(frozen=True)
class Var:
    """Any value (not an absent operand), bound under ``name``."""

    name: str


@dataclass(frozen=True)
class Const:
    """A value known at compile time (``rewrite.constant_array``); its array is bound
    under ``name``, the value itself under ``name + "_value"``. ``sparse``: a sparse
    initializer matches too (its array is then its dense form)."""

    name: str
    sparse: bool = False


@dataclass(frozen=True)
class Op:
    """A node of op ``op`` (the IR's name: ``"Pow"``, ``"tflite.RESHAPE"``) whose first
    operands match ``inputs`` (later operands are not looked at), bound under ``name``
    if one is given."""

    op: str
    inputs: Tuple["Pattern", ...] = ()
    name: str = ""


Pattern = Union[Op, Var, Const]


class Match(Dict[str, object]):
    """What a pattern bound, by name, and the node it matched at (``root``)."""

    def __init__(self, root: Node):
        super().__init__()
        self.root = root

    @property
    def result(self) -> Value:
        """The root's result: the value the rule replaces."""
        return self.root.outputs[0]


def _always(m: Match, ctx: PassContext) -> bool:
    return True


@dataclass(frozen=True)
class Rule:
    """``pattern`` where ``condition`` holds becomes what ``replace`` builds (the new
    value of the root's result), counted in the report's stats as ``stat``."""

    pattern: Op
    replace: Callable[[Graph, Match, PassContext], Value]
    stat: str
    condition: Callable[[Match, PassContext], bool] = _always


def _bind(pattern: Pattern, value: Optional[Value], m: Match) -> bool:
    if value is None:
        return False
    if isinstance(pattern, Var):
        m[pattern.name] = value
        return True
    if isinstance(pattern, Const):
        array = constant_array(value)
        prod = value.producer
        if array is None and pattern.sparse and prod is not None and prod.kind == CONST and prod.data is not None:
            array = np.asarray(prod.data.array)
        if array is None:
            return False
        m[pattern.name], m[pattern.name + "_value"] = array, value
        return True
    prod = value.producer
    return prod is not None and _match(pattern, prod, m)


def _match(pattern: Op, node: Node, m: Match) -> bool:
    if node.kind != OP or node.op != pattern.op or len(node.inputs) < len(pattern.inputs) or not node.outputs:
        return False
    if pattern.name:
        m[pattern.name] = node
    return all(_bind(p, v, m) for p, v in zip(pattern.inputs, node.inputs))


def match(rule: Rule, node: Node, ctx: PassContext) -> Optional[Match]:
    """What ``rule`` binds at ``node``, if its pattern matches there and its condition holds."""
    m = Match(node)
    if not _match(rule.pattern, node, m) or node.outputs[0] is None or not rule.condition(m, ctx):
        return None
    return m


def apply_rules(graph: Graph, ctx: PassContext, rules: Sequence[Rule]) -> bool:
    """Each node of ``graph``, in topological order, rewritten by the first rule that
    matches it; whether any was."""
    roots = {r.pattern.op for r in rules}
    changed = False
    for node in [n for n in graph.nodes() if n.kind == OP and n.op in roots]:
        for rule in rules:
            if rule.pattern.op != node.op:
                continue
            m = match(rule, node, ctx)
            if m is None:
                continue
            graph.replace_all_uses_with(m.result, rule.replace(graph, m, ctx))
            ctx.stats[rule.stat] += 1
            changed = True
            break
    return changed


def register_rules(name: str, *rules: Rule, frontends: Tuple[str, ...] = ()) -> PassFn:
    """The pass ``name`` that applies ``rules`` (``register_pass``'s record: targets name
    it as any pass)."""
    def run(graph: Graph, ctx: PassContext) -> bool:
        return apply_rules(graph, ctx, rules)

    run.__name__ = run.__qualname__ = name
    run.rules = rules  # type: ignore[attr-defined]
    return register_pass(name, frontends=frontends)(run)
