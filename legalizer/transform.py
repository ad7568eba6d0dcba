"""``legalize(model, target)``: run the target's passes over the model's IR."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Optional

import onnx

from .errors import BadInput, UsageError
from .model import Model
from .passes import TOSA_PIPELINE, XLA_PIPELINE, PassContext, PassManager, legacy_broadcast

TARGETS = ("tosa", "xla")
PIPELINES = {"tosa": TOSA_PIPELINE, "xla": XLA_PIPELINE}
# Opset 7 is the first with numpy-style broadcasting; legacy models are raised to it.
NUMPY_OPSET = 7
# The lowest opset each target's output needs: xla's uses Expand (8) and Where (9).
MIN_OPSET = {"tosa": NUMPY_OPSET, "xla": 9}


@dataclass
class LegalizeResult:
    model: Model
    stats: Counter
    warnings: list


def legalize(model: Model, target: str = "tosa", *, debug: bool = False,
             assume_dynamic_not_one: bool = False) -> LegalizeResult:
    """Rewrite ``model`` in place into ``target``'s legal form; return what changed.
    ``assume_dynamic_not_one`` is the strict symbolic mode: no dynamic dim is 1 at run
    time, so no runtime broadcast computation is emitted for one."""
    if target not in TARGETS:
        raise UsageError(f"unknown target '{target}'; expected one of {', '.join(TARGETS)}")
    if target not in PIPELINES:
        raise UsageError(f"target '{target}' is not implemented in this version of legalize (use --target tosa)")
    ctx = PassContext(target=target, assume_dynamic_not_one=assume_dynamic_not_one)
    check = None
    if debug:
        from .verify import verify

        def check(graph, pass_name):  # noqa: F811 - the debug hook of PassManager
            bad = verify(graph, "mlir").violations
            if bad:
                raise AssertionError(f"after pass {pass_name}: {bad[0]}")
    # Legacy (opset < 7) broadcasts first: made explicit, then the model is raised to
    # opset 7, whose numpy rules the target's passes then work with.
    PassManager([legacy_broadcast], debug=debug, check=check).run(model.graph, ctx)
    opset = model.graph.opsets.get("", MIN_OPSET[target])
    needed = MIN_OPSET[target] if _has_legacy_nodes(model, ctx) or _has_broadcasting_ops(model, ctx) else opset
    warnings = _raise_opset(model, needed) if opset < needed else []
    PassManager(PIPELINES[target], debug=debug, check=check).run(model.graph, ctx)
    return LegalizeResult(model, ctx.stats, warnings)


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


def _has_broadcasting_ops(model: Model, ctx: PassContext) -> bool:
    return any(ctx.rules.get(n.op) is not None for n in model.graph.walk())


def _raise_opset(model: Model, version: int) -> list:
    """Convert the model to ``version`` with onnx's version converter (the other ops'
    changes between versions are its job), after the legacy broadcasts are explicit,
    and import the result."""
    from .api import to_onnx
    from .importers.onnx import import_model

    proto = to_onnx(model)
    try:
        converted = onnx.version_converter.convert_version(proto, version)
    except Exception as e:  # noqa: BLE001 - the converter's own words are the reason
        return [f"the model stays at opset {model.graph.opsets.get('', 1)}: onnx's version converter"
                f" cannot raise it to {version} ({str(e).splitlines()[0] if str(e) else type(e).__name__})"]
    # The converter runs shape inference, which renames anonymous dims of the graph
    # outputs (and may refine them); the outputs keep their declarations.
    for out, declared in zip(converted.graph.output, proto.graph.output):
        out.CopyFrom(declared)
    new = import_model(converted, model.base_dir)
    model.graph, model.proto = new.graph, new.proto
    old = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), "?")
    return [f"opset raised from {old} to {version} by onnx's version converter: the legal form needs"
            f" opset {version} ({'numpy broadcasting' if version == NUMPY_OPSET else 'Expand and Where'})"]
