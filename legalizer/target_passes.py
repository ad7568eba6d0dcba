"""``legalize(model, target)``: run the target's passes over the model's IR."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Dict, List, Optional

import onnx

from .errors import BadInput
from .kinds.registry import named as kind_named
from .model import Model
from .passes import (RANK_AGNOSTIC_OPSET, Contract, PassContext, PassManager, legacy_broadcast,
                     needs_explicit_broadcast, needs_rank_agnostic)
from .targets import NUMPY_OPSET, Target, target as target_named


@dataclass
class LegalizeResult:
    model: Model
    stats: Counter
    warnings: list


def legalize(model: Model, target: str = "tosa", *, debug: bool = False,
             assume_dynamic_not_one: bool = False, level: Optional[str] = None) -> LegalizeResult:
    """``legalize_for`` the target named ``target``."""
    return legalize_for(model, target_named(target), debug=debug, assume_dynamic_not_one=assume_dynamic_not_one,
                        level=level)


def legalize_for(model: Model, spec: Target, *, debug: bool = False, assume_dynamic_not_one: bool = False,
                 level: Optional[str] = None) -> LegalizeResult:
    """Rewrite ``model`` in place into the legal form of ``spec`` (a target's record);
    return what changed. ``assume_dynamic_not_one`` is the strict symbolic mode: no
    dynamic dim is 1 at run time, so no runtime broadcast computation is emitted for one.
    ``level`` names the target's level (TOSA's ``8k``, its default, or ``none``), whose
    rank limit rank folding keeps elementwise regions within."""
    ctx = PassContext(assume_dynamic_not_one=assume_dynamic_not_one, max_rank=spec.rank_limit(level),
                      rank_refused=spec.refused_for_rank if spec.backend else None)
    contracts = _contracts() if debug else None
    kind = kind_named(model.format)
    if model.constraints is None and kind.records_constraints:  # the pipeline records its own
        from .verifier import verify

        model.constraints = verify(model.graph, "mlir", assume_dynamic_not_one=assume_dynamic_not_one).constraints
    if kind.every_subgraph:  # no opsets, no legacy forms; every subgraph
        for graph in model.graphs:
            PassManager(spec.pipeline(), contracts, ALWAYS).run(graph, ctx)
        return LegalizeResult(model, ctx.stats, [])
    # Legacy (opset < 7) broadcasts first: made explicit, then the model is raised to
    # opset 7, whose numpy rules the target's passes then work with.
    PassManager([legacy_broadcast], contracts, ALWAYS).run(model.graph, ctx)
    warnings = _raise_opset(model, NUMPY_OPSET, "numpy broadcasting") if _has_legacy_nodes(model, ctx) else []
    # xla's explicit broadcasts need Expand and Where: raise the opset only if there are any
    if model.graph.opsets.get("", spec.min_opset) < spec.min_opset and needs_explicit_broadcast(model.graph, ctx):
        warnings += _raise_opset(model, spec.min_opset, "Expand and Where")
    # tosa's rank-agnostic rewrite needs Reshape's allowzero: raised only where an operand's rank is unknown
    if "rank_agnostic" in spec.passes and model.graph.opsets.get("", RANK_AGNOSTIC_OPSET) < RANK_AGNOSTIC_OPSET \
            and needs_rank_agnostic(model.graph, ctx):
        warnings += _raise_opset(model, RANK_AGNOSTIC_OPSET, "Reshape's allowzero, for operands of unknown rank")
    PassManager(spec.pipeline(), contracts, ALWAYS).run(model.graph, ctx)
    return LegalizeResult(model, ctx.stats, warnings)


# What every pass keeps, checked under --debug: a legal graph stays legal.
ALWAYS = ("legal",)


def _contracts() -> Dict[str, Contract]:
    """The contracts the passes name (``register_pass``), as measures of a graph: each
    a list of findings in the verifier's words."""
    from .verifier import verify

    def legal(graph, ctx) -> List[str]:  # MLIR's trait, whatever the target
        return [str(d) for d in verify(graph, "mlir").violations]

    def equal_ranks(graph, ctx) -> List[str]:  # TOSA's rule for operand ranks
        return [str(d) for d in verify(graph, "tosa").violations if d.code == "operand-rank-mismatch"]

    def over_rank(graph, ctx) -> List[str]:  # tensors over the target's rank limit
        limit = ctx.max_rank
        if limit is None:
            return []
        return [f"'{v.name}' has rank {len(v.type.shape)} > {limit}" for g in graph.graphs()
                for n in g.unordered_nodes() for v in n.outputs
                if v is not None and v.type.shape is not None and len(v.type.shape) > limit]

    return {"legal": Contract("legal", legal), "equal-ranks": Contract("equal-ranks", equal_ranks, kept=False),
            "over-rank": Contract("over-rank", over_rank)}


def _has_legacy_nodes(model: Model, ctx: PassContext) -> bool:
    """Whether a broadcasting op still follows a pre-opset-7 rule (its form is legal
    now, but only the opset-7 reading of it is what strict compilers and onnxruntime
    take)."""
    opset = model.graph.opsets.get("", NUMPY_OPSET)
    if opset >= NUMPY_OPSET:
        return False
    for node in model.graph.walk():
        rule = ctx.rules.get(node.op)
        if rule is not None and rule.mode_at(opset) != "numpy":
            return True
    return False


def _raise_opset(model: Model, version: int, needs: str) -> list:
    """Convert the model to ``version`` with onnx's version converter (the other ops'
    changes between versions are its job), after the legacy broadcasts are explicit,
    and import the result."""
    from .exporters.as_onnx import to_onnx
    from .kinds.onnx.importer import import_model, weightless

    proto = to_onnx(model)
    old = model.graph.opsets.get("", 1)
    # The converter reads the model's bytes: it is given the model without its large
    # weights, which go back into its result as they were (not serialized and parsed).
    # An adapter that reads a tensor reads axes, pads, scales or a shape: a few numbers,
    # never one of these (as for shape inference: kinds.onnx.importer._INFER_DATA_LIMIT).
    stub = weightless(proto)
    try:
        try:
            converted = onnx.version_converter.convert_version(stub, version)
        except Exception:  # noqa: BLE001 - an adapter that needed a weight: the whole model, below
            if stub is proto:
                raise
            converted = None
        if converted is None or (stub is not proto and not _weights_back(converted, proto, stub)):
            converted = onnx.version_converter.convert_version(proto, version)  # (an adapter read or changed one)
    except Exception as e:  # noqa: BLE001 - the converter's own words are the reason
        from .version_steps import why_not_raised

        raise BadInput(f"the legal form needs opset {version} ({needs}), and onnx's version converter cannot raise"
                       f" this opset-{old} model to it: {why_not_raised(proto, old, version, e)}") from None
    if list(converted.graph.input) != list(proto.graph.input):
        # e.g. Scan-8 -> Scan-9 drops the batch axis of the inputs: not the same model
        raise BadInput(f"the legal form needs opset {version}, and onnx's version converter changes this"
                       f" opset-{old} model's inputs when raising it; convert the model yourself first")
    # The converter runs shape inference, which renames anonymous dims of the graph
    # outputs (and may refine them); the outputs keep their declarations.
    for out, declared in zip(converted.graph.output, proto.graph.output):
        out.CopyFrom(declared)
    new = import_model(converted, model.base_dir)
    model.graph, model.proto = new.graph, new.proto
    return [f"opset raised from {old} to {version} by onnx's version converter: the legal form needs"
            f" opset {version} ({needs})"]


def _weights_back(converted: onnx.ModelProto, proto: onnx.ModelProto, stub: onnx.ModelProto) -> bool:
    """Put the data of the initializers of ``proto`` that the converter was given
    without (in ``stub``: their name, type and dims) back into ``converted``; False if
    one of them is not in it as it was given (an adapter rewrote or dropped it: the
    whole model is converted then)."""
    full = {t.name: t for t in proto.graph.initializer}
    blank = {t.name: t for t in stub.graph.initializer if t != full[t.name]}
    found = 0
    for t in converted.graph.initializer:
        b = blank.get(t.name)
        if b is None:
            continue
        if t != b:
            return False
        t.CopyFrom(full[t.name])
        found += 1
    return found == len(blank)
