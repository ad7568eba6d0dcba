"""The targets, as records in one table: for each, the verifier profile its legal form
satisfies (a ``verifier.Profile``), the passes that make it, the ONNX opset those passes'
explicit forms need, the ``--emit`` MLIR formats written in that form and their
dialect, and the profile of the backend it feeds - the highest rank it takes, the
broadcasting it allows, the ops it refuses (with its reason), whether it needs static
shapes, and the named levels that set those limits (TOSA's). Every other module asks
this table; none spells a target's parts itself, and adding a target is adding a record
(``register_target``): ``--target``'s choices and help follow from it.

This module imports nothing heavy (``legalize --help`` reads it): passes are named, as
in an MLIR pass pipeline, and resolved in ``legalizer.passes`` when the target runs."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from importlib import import_module
from types import MappingProxyType
from typing import TYPE_CHECKING, Callable, Dict, List, Mapping, Optional, Tuple, Union

from .errors import UsageError
from .exporters.tosa_level import DEFAULT_LEVEL, LEVELS, Level
from .verifier.profiles import Profile, profile_record, register_profile

if TYPE_CHECKING:
    from .ir.graph import Node
    from .passes.base import Pass

# ONNX opset 7 brought numpy-style broadcasting; before it, broadcasting was the
# ``broadcast``/``axis`` attributes (the legacy forms ``passes.legacy_broadcast`` rewrites).
NUMPY_OPSET = 7

# What broadcasting a legal form keeps: numpy's (any), TOSA's (equal ranks, through
# size-1 dims only), or none (every broadcast explicit).
BROADCASTING = ("numpy", "size-1", "none")


@dataclass(frozen=True)
class Target:
    name: str
    # The verifier profile the legal form satisfies: a record, or the name of one in
    # ``verifier.PROFILES`` (made the record here).
    profile: Union[str, Profile]
    # The passes, in order: names of registered passes (``legalizer.passes.PASSES``), or
    # pass functions or records.
    passes: Tuple[Union[str, Callable], ...]
    help: str = ""  # what the legal form is, one phrase (``--target``'s help)
    min_opset: int = NUMPY_OPSET  # what the explicit forms need: xla's Expand (8) and Where (9)
    dialects: Tuple[str, ...] = ()  # the ``--emit`` MLIR formats written in this form (its emitters)
    dialect: Optional[str] = None  # the MLIR dialect they are in, as messages name it
    max_rank: Optional[int] = None  # the highest tensor rank the backend takes (default: the profile's; a level may set it)
    broadcasting: str = "numpy"  # one of BROADCASTING
    refuses: Mapping[str, str] = field(default_factory=dict)  # op (``Node.op``) -> the backend's reason
    static_shapes: bool = False  # the backend takes static shapes only
    levels: Mapping[str, Level] = field(default_factory=dict)  # named limits (TOSA's); empty: none
    default_level: Optional[str] = None
    # A deployment backend whose own rules (``rules/backends.toml``, read by
    # ``verifier.backend_rules``) say which ops it refuses, in its words; then they alone do.
    # Its targets take TFLite.
    backend: Optional[str] = None
    # How the backend refuses a tensor over its rank limit, in its own words.
    rank_words: Optional[str] = None
    # Where the ops it takes run ("the HTP"), for a deployment target whose refusals come
    # from its own fields rather than a backend's rules; a backend's rules name their own.
    accelerator: Optional[str] = None

    def __post_init__(self):
        object.__setattr__(self, "profile", profile_record(self.profile))

    def pipeline(self) -> Tuple["Pass", ...]:
        """The pass records, in order (from the registry that importing the passes fills)."""
        passes = import_module(".passes", __package__)
        return tuple(passes.pass_record(p) for p in self.passes)

    @property
    def explicit_broadcasts(self) -> bool:
        """Whether the legal form makes every broadcast explicit (its passes count them)."""
        return not self.profile.implicit_broadcast

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
        target's own ``max_rank``, or its profile's; None: no limit."""
        lv = self.level(level)
        if lv is not None:
            return lv.max_rank
        return self.max_rank if self.max_rank is not None else self.profile.max_rank

    def refusals(self, node: "Node", level: Optional[str] = None) -> List[str]:
        """Why the backend refuses ``node`` (empty: it takes it): its op, a tensor over
        the rank limit, a dynamic shape where static ones are needed."""
        return self._refusals(node, self.rank_limit(level), self.level(level))

    def refused_for_rank(self, node: "Node") -> bool:
        """Whether the backend refuses ``node`` at its rank and takes it at a lower one (by
        its own rules: HTP's probed table, per op and element type)."""
        if self.backend is None:
            return False
        from .verifier.backend_rules import refused_for_rank

        return refused_for_rank(node, self.backend)

    def _refusals(self, node: "Node", limit: Optional[int], lv: Optional[Level]) -> List[str]:
        from .ir.types import all_static, shape_str

        if self.backend is not None:
            from .verifier.backend_rules import backend_reasons

            return backend_reasons(node, self.backend)
        why = []
        if node.op in self.refuses:
            why.append(self.refuses[node.op])
        if limit is not None:
            for v in itertools.chain(node.inputs, node.outputs):
                s = None if v is None else v.type.shape
                if s is not None and len(s) > limit:
                    where = f"MAX_RANK of TOSA level {lv.title}" if lv is not None else \
                        self.rank_words or f"'{self.name}' takes rank <= {limit}"
                    why.append(f"'{v.name}' has rank {len(s)} > {limit} ({where})")
                    break
        if self.static_shapes:
            dyn = [v for v in node.outputs if v.type.shape is not None and not all_static(v.type.shape)]
            if dyn:
                why.append(f"'{dyn[0].name}' has a dynamic shape {shape_str(dyn[0].type.shape)}; '{self.name}' takes"
                           " static shapes only")
        return why

    def interface_refusals(self, graph, level: Optional[str] = None) -> List[str]:
        """The graph inputs and outputs over the rank limit ("input 'x' has rank 6"): no legal form
        keeps the model's interface, so legalizing cannot help them (and a fold around
        them only adds reshapes the backend refuses too). The limit is the deployment
        backend's own, or a target's own ``max_rank`` (a TOSA level's is judged on the
        emitted module; a profile's limit, as a test's rank-4 GPU has, is the profile's)."""
        if self.backend is None:  # a target of its own with a hard limit (Core ML's rank 5)
            limit = self.max_rank
        else:
            from .verifier.backend_rules import backend

            limit = backend(self.backend).max_rank
        if limit is None:
            return []
        out = []
        for kind, nodes in (("input", graph.inputs), ("output", graph.outputs)):
            for node in nodes:
                v = node.output if kind == "input" else node.inputs[0]
                s = v.type.shape if v is not None else None
                if s is not None and len(s) > limit:
                    out.append(f"{kind} '{v.name}' has rank {len(s)}")
        return out

    def refused(self, graphs, level: Optional[str] = None) -> List[dict]:
        """Every op of ``graphs`` (and their subgraphs) the backend refuses: node, op and
        reasons, for the report. Every value is some node's result: one look at each
        result's rank finds those over the limit, and only then are ops looked at."""
        from .ir.graph import OP

        if self.backend is not None:
            from .verifier.backend_rules import refused_ops

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

    @property
    def device(self) -> Optional[str]:
        """Where the ops a deployment target takes run ("the NPU"), or None for a legal
        form with no device of its own (tosa, xla). A target with a device has a verdict
        of its own: the ops it still refuses after legalizing stay on the CPU, and the run
        fails unless a partial placement is accepted (``--allow-fallback``)."""
        if self.backend is None:
            return self.accelerator
        from .verifier.backend_rules import backend

        return self.accelerator or backend(self.backend).device

    def untaken_dtypes(self, graphs) -> Optional[str]:
        """Why the backend takes none of ``graphs``' ops, when it computes in integer
        types only and no op of the model computes in one of them (a float model: it must
        be quantized first); None when it may take some."""
        if self.backend is None:
            return None
        from .ir.graph import OP
        from .verifier.backend_rules import backend

        be = backend(self.backend)
        if not be.dtypes:
            return None
        seen = set()
        for top in graphs:
            for g in top.graphs():
                for n in g.unordered_nodes():
                    if n.kind == OP:
                        seen.update(v.type.dtype for v in n.outputs if v is not None)
        if seen & set(be.dtypes):
            return None
        kinds = ", ".join(sorted(d for d in seen if d)) or "no typed op"
        return (f"{be.tool} places {'/'.join(be.dtypes)} ops on {be.device}, and this model computes in {kinds}"
                f" ({be.dtype_reason}): quantize it first (full-integer quantization)")

    def to_json(self, level: Optional[str] = None) -> dict:
        """The profile as the report writes it."""
        lv = self.level(level)
        out = {"max_rank": self.rank_limit(level), "broadcasting": self.broadcasting,
               "refuses": dict(self.refuses), "static_shapes": self.static_shapes,
               "level": lv.name if lv is not None else None}
        if self.backend is not None:
            from .verifier.backend_rules import backend

            out["backend"] = backend(self.backend).tool
        return out


TARGETS: Dict[str, Target] = {}
# ``--emit`` format -> the target whose legal form it is written in.
TARGET_OF_DIALECT: Dict[str, str] = {}


def register_target(spec: Target) -> Target:
    """Add ``spec`` to the table, and its profile to the profiles' (the same record
    again is a no-op); ValueError for another record under a name already taken."""
    have = TARGETS.setdefault(spec.name, spec)
    if have != spec:
        raise ValueError(f"target '{spec.name}' is already registered, as another record")
    register_profile(spec.profile)
    for d in spec.dialects:
        if TARGET_OF_DIALECT.setdefault(d, spec.name) != spec.name:
            raise ValueError(f"--emit {d} is already the form of target '{TARGET_OF_DIALECT[d]}'")
    return spec


# legacy_broadcast runs before these, in legalizer.target_passes (it may raise the opset).
_DEPLOY_HEAD = ("split_variadic", "densify_constants", "reshape_forms", "broadcast_to_into_consumers",
                "broadcast_to_through_reshape", "fold_ranks")
for _t in (
    Target("tosa", "tosa", ("aten_ranks", "split_variadic", "fold_ranks", "equalize_ranks", "rank_agnostic", "dead_code_elimination"),
           "equal ranks, size-1 broadcasts", dialects=("tosa",), dialect="TOSA", broadcasting="size-1",
           levels=MappingProxyType(LEVELS), default_level=DEFAULT_LEVEL),
    Target("xla", "xla", ("aten_ranks", "aten_explicit_broadcast", "split_variadic", "fold_ranks", "rank_agnostic_expand", "explicit_broadcast",
                          "lower_broadcast_in_dim", "dead_code_elimination"),
           "every broadcast explicit: Unsqueeze + Expand", min_opset=9, dialects=("stablehlo", "stablehlo-bytecode"),
           dialect="StableHLO", broadcasting="none"),
    # Backends that take TFLite (rules/backends.toml): every tensor at rank <= 4, operands
    # of equal rank (the GPU delegate aligns a lower-rank operand from the left, LiteRT #8980).
    # BROADCAST_TO is folded into its consumers before the ranks fold (the consumer's
    # region then folds with it), the rest copied at the folded rank after.
    Target("litert-gpu", "tosa", _DEPLOY_HEAD + ("fold_axis_ops", "broadcast_to_as_tile", "equalize_ranks", "elementwise_at_rank4",
                                                 "reshape_forms", "reshape_constants_before_dequantize",
                                                 "dead_code_elimination"),
           "LiteRT's GPU delegate", max_rank=4, backend="litert-gpu"),
    # Vela: regions that broadcast or batch fold to their lowest rank too (fold_for_npu).
    Target("ethos-u", "tosa", _DEPLOY_HEAD + ("broadcast_to_as_tile", "fold_for_npu", "equalize_ranks", "reshape_forms",
                                              "dead_code_elimination"),
           "Arm Vela, Ethos-U85", max_rank=4, backend="ethos-u"),
    # Vela's deprecated core (U55/U65) also wants one operand of a binary op at the result's
    # shape; the default core broadcasts both at fewer cycles than any copy costs.
    Target("ethos-u55", "tosa", _DEPLOY_HEAD + ("broadcast_to_as_concat", "fold_for_npu", "one_sided_broadcast",
                                                "equalize_ranks", "reshape_forms", "dead_code_elimination"),
           "Vela's legacy core, U55/U65", max_rank=4, backend="ethos-u55"),
    # Qualcomm's HTP through onnxruntime's QNN execution provider (its rules in
    # rules/backends.toml and rules/qnn_htp.toml, found by scripts/qnn_htp_probe.py): every
    # tensor at rank <= 5 (transposes and broadcasts folded), static shapes.
    Target("qnn-htp", "mlir", ("split_variadic", "fold_transposes", "fold_matmuls", "fold_axis_ops",
                               "fold_gather_indices", "gather_bool_as_int32", "square_as_mul", "fold_ranks",
                               "fold_ranks_for_rank4_ops", "dead_code_elimination"),
           "Qualcomm HTP, onnxruntime's QNN EP", max_rank=5, static_shapes=True, backend="qnn-htp"),
    # Apple Core ML (coremltools 9.0): every tensor at rank <= 5, in its words; numpy
    # broadcasting. Judged by coremltools.convert (which converts on Linux).
    Target("coreml", "mlir", ("aten_ranks", "split_variadic", "fold_ranks", "dead_code_elimination"),
           "Apple Core ML: rank <= 5", max_rank=5, rank_words="Core ML only supports tensors with rank <= 5"),
):
    register_target(_t)
DEFAULT_TARGET = "tosa"


def target(name: str) -> Target:
    """The target called ``name``, or UsageError naming the ones there are (a caller
    that holds a ``Target`` uses it: it is not looked up again)."""
    if not isinstance(name, str):
        raise UsageError(f"a target is given by its name, one of {', '.join(TARGETS)}, not a {type(name).__name__}")
    try:
        return TARGETS[name]
    except KeyError:
        raise UsageError(f"unknown target '{name}'; expected one of {', '.join(TARGETS)}") from None
