"""The op tables of ``rules/``: which ops broadcast and how.

The tables ship inside the wheel as the package ``legalizer.rules``; users may add their
own files (custom ops) with ``load_rules(extra=[path])``. A malformed table is a loud,
named error.
"""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Iterable, Mapping, Optional

from .errors import BadInput

BROADCASTING = ("binary", "ternary", "variadic", "unidirectional")
# Ops that do not broadcast, listed (TFLite) for their options table and ONNX form.
CATEGORIES = BROADCASTING + ("unary", "other")
BROADCASTS = ("multidirectional", "unidirectional")
# Each frontend's rules file (rules/FRONTEND.toml) -> the domain its ops are keyed by
# (``Node.op``): ONNX's bare (``Add``), the others' as DOMAIN.OP (``tflite.ADD``).
FRONTEND_DOMAINS = {"onnx": "", "tflite": "tflite", "tosa": "tosa", "aten": "aten"}
FRONTENDS = tuple(FRONTEND_DOMAINS)
# The keys of an op's table that name the op in a dialect or format it is written in
# (``OpRule.targets``); its other keys are facts of the op.
TARGET_SECTIONS = ("stablehlo", "tosa", "tflite")
LEGACY = (None, "attr", "equal", "unidirectional", "channel")
DIRECTIONS = (None, "EQ", "NE", "LT", "LE", "GT", "GE")  # stablehlo.compare's
FOLDS = (None, "elementwise", "view", "permute", "reduce", "pad", "expand")  # rules/aten.toml


@dataclass(frozen=True)
class OpRule:
    op: str
    category: str
    broadcast: str
    numpy_since: int = 1
    legacy: Optional[str] = None
    broadcasts: tuple = ()
    binary: Optional[str] = None
    onto: str = "operand0"  # what unidirectional operands broadcast onto: operand0 | result
    targets: Mapping[str, str] = field(default_factory=dict)
    options: Optional[str] = None  # TFLite: the BuiltinOptions table of the op
    onnx: Optional[str] = None  # TFLite: the ONNX op computing the same, if one does
    version: int = 1  # TFLite: the opcode version a new node of this op is written with
    # The operands that broadcast, when not all do (tosa.mul's shift is not one of them).
    operands: Optional[tuple] = None
    # The op does more than compute its results (writes or reads state, calls a
    # subgraph): never dead code, and kept in its place among such ops.
    effects: bool = False
    # A comparison's direction, as stablehlo.compare names it (``LT``).
    direction: Optional[str] = None
    # ATen: how the ATen rank lowering lowers the op's rank (rules/aten.toml).
    fold: Optional[str] = None

    @property
    def broadcasting(self) -> bool:
        return self.category in BROADCASTING

    def mode_at(self, opset: int) -> str:
        """How the op broadcasts at this opset version: ``numpy`` or its legacy rule."""
        if opset >= self.numpy_since or self.legacy is None:
            return "numpy"
        return self.legacy


class RuleLookup:
    """``(rule, mode, op)`` of a node: its op's rule in ``rules``, how it broadcasts at
    the opset ``graph`` reads it at (``Graph.opset_of``), and ``Node.op``; None for an
    op with no rule.
    Looked up once per op type and domain: what it gives depends on nothing else."""

    __slots__ = ("graph", "rules", "_seen")

    def __init__(self, graph, rules: Mapping[str, OpRule]):
        self.graph, self.rules, self._seen = graph, rules, {}

    def __call__(self, node) -> Optional[tuple]:
        key = (node.op_type, node.domain)
        found = self._seen.get(key, _UNSEEN)
        if found is _UNSEEN:
            op = node.op
            rule = self.rules.get(op)
            found = self._seen[key] = None if rule is None else (rule, rule.mode_at(self.graph.opset_of(node)), op)
        return found


_UNSEEN = object()


def _rule_from_table(op: str, table: dict, source: str) -> OpRule:
    def bad(why: str) -> BadInput:
        return BadInput(f"{source}: op '{op}': {why}")

    category = table.get("category")
    if category not in CATEGORIES:
        raise bad(f"category must be one of {', '.join(CATEGORIES)}, not {category!r}")
    broadcast = table.get("broadcast", "multidirectional")
    if broadcast not in BROADCASTS:
        raise bad(f"broadcast must be one of {', '.join(BROADCASTS)}, not {broadcast!r}")
    legacy = table.get("legacy")
    if legacy not in LEGACY:
        raise bad(f"legacy must be one of {', '.join(str(x) for x in LEGACY if x)}, not {legacy!r}")
    broadcasts = tuple(table.get("broadcasts", (1,) if legacy == "attr" else ()))
    onto = table.get("onto", "operand0")
    if onto not in ("operand0", "result"):
        raise bad(f"onto must be operand0 or result, not {onto!r}")
    if broadcast == "unidirectional" and not broadcasts:
        raise bad("a unidirectional op must list the operands that broadcast (`broadcasts`)")
    targets = {k: v for k, v in table.items() if k in TARGET_SECTIONS}
    effects = table.get("effects", False)
    if not isinstance(effects, bool):
        raise bad(f"effects must be true or false, not {effects!r}")
    direction = table.get("direction")
    if direction not in DIRECTIONS:
        raise bad(f"direction must be one of {', '.join(str(x) for x in DIRECTIONS if x)}, not {direction!r}")
    fold = table.get("fold")
    if fold not in FOLDS:
        raise bad(f"fold must be one of {', '.join(str(x) for x in FOLDS if x)}, not {fold!r}")
    return OpRule(op, category, broadcast, int(table.get("numpy_since", 1)), legacy,
                  broadcasts, table.get("binary"), onto, targets, table.get("options"), table.get("onnx"),
                  int(table.get("version", 1)),
                  tuple(table["operands"]) if "operands" in table else None, effects, direction, fold)


def parse_rules(text: str, source: str, domain: str = "") -> dict:
    """The tables of ``text``, keyed as ``Node.op`` names the ops: ``ADD`` of domain
    ``tflite`` is ``tflite.ADD``."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise BadInput(f"{source}: not a valid TOML rules table: {e}") from None
    prefix = f"{domain}." if domain else ""
    return {prefix + op: _rule_from_table(prefix + op, t, source) for op, t in data.items()}


def _builtin_text(name: str) -> str:
    try:
        return (resources.files("legalizer.rules") / name).read_text()
    except (ModuleNotFoundError, FileNotFoundError):
        # Running from a source tree that was not installed: rules/ is beside the package.
        return (Path(__file__).resolve().parent.parent / "rules" / name).read_text()


def table_text(name: str) -> str:
    """The text of the shipped table ``rules/NAME`` (``backends.toml`` too)."""
    return _builtin_text(name)


@functools.lru_cache(maxsize=None)
def frontend_rules(frontend: str) -> Mapping[str, OpRule]:
    """Every table of one frontend's file, broadcasting or not."""
    return parse_rules(_builtin_text(f"{frontend}.toml"), f"rules/{frontend}.toml",
                       FRONTEND_DOMAINS.get(frontend, frontend))


@functools.lru_cache(maxsize=None)
def builtin_rules(frontend: Optional[str] = None) -> Mapping[str, OpRule]:
    """The broadcasting ops of one frontend, or (by default) of all of them: what the
    verifier and the passes look ops up in, by ``Node.op``."""
    out = {}
    for f in ((frontend,) if frontend else FRONTENDS):
        out.update((k, r) for k, r in frontend_rules(f).items() if r.broadcasting)
    return out


# Domains of ops legalize knows nothing about (TFLite custom ops): what they do besides
# computing their results is unknown, so they are taken to have effects.
OPAQUE_DOMAINS = ("tflite.custom",)
_OPAQUE_PREFIXES = tuple(d + "." for d in OPAQUE_DOMAINS)


@functools.lru_cache(maxsize=None)
def _effectful_ops() -> frozenset:
    return frozenset(k for f in FRONTENDS for k, r in frontend_rules(f).items() if r.effects)


def has_effects(op: str) -> bool:
    """Whether the op ``op`` (``Node.op``) has effects: its table says so, or its
    domain is opaque."""
    return op in _effectful_ops() or op.startswith(_OPAQUE_PREFIXES)


def load_rules(frontend: Optional[str] = None, extra: Iterable[str | Path] = ()) -> dict:
    rules = dict(builtin_rules(frontend))
    for path in extra:
        path = Path(path)
        try:
            text = path.read_text()
        except OSError as e:
            raise BadInput(f"{path}: cannot read rules table: {e.strerror}") from None
        rules.update((k, r) for k, r in parse_rules(text, str(path)).items() if r.broadcasting)
    return rules
