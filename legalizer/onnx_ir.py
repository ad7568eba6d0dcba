"""legalize as an ``onnx_ir`` pass, for onnxscript / ``onnx_ir`` pass pipelines::

    import onnx_ir
    from legalizer.onnx_ir import LegalizePass

    result = onnx_ir.passes.PassManager([LegalizePass("tosa")])(model)  # an onnx_ir.Model

This module is named after the package it serves; inside it ``onnx_ir`` is always the
real ``onnx_ir`` package (absolute imports), never this module.
"""

from __future__ import annotations

import onnx_ir
import onnx_ir.passes

__all__ = ["LegalizePass"]

# Stats of a run that mean the graph was rewritten.
_UNCHANGED_STATS = {"runtime_broadcast_checks_elided"}


class LegalizePass(onnx_ir.passes.InPlacePass):
    """Rewrite the model into ``target``'s legal form (``tosa`` or ``xla``), as
    ``legalizer.legalize`` does: the input is verified under the Broadcastable trait
    first (``legalizer.NotLegal`` if it violates it), the output under the target's
    profile.

    In place: the ``onnx_ir.Model`` object passed in is the one returned, and it is
    changed (its ``graph``, ``functions`` and opset imports are replaced by the
    legalized ones, so references to the old graph's nodes and values go stale);
    ``PassResult.modified`` says whether anything was rewritten. ``stats`` holds the
    counts of the last run (reshapes inserted, constants folded, ...)."""

    def __init__(self, target: str = "tosa", *, assume_dynamic_not_one: bool = False, debug: bool = False):
        super().__init__()
        from .targets import TARGETS

        if target not in TARGETS:
            raise ValueError(f"unknown target {target!r}; expected one of {', '.join(TARGETS)}")
        self.target = target
        self.assume_dynamic_not_one = assume_dynamic_not_one
        self.debug = debug
        self.stats: dict = {}

    def call(self, model: onnx_ir.Model) -> onnx_ir.passes.PassResult:
        # One conversion each way, each an ONNX ModelProto object (onnx_ir's serde; no
        # bytes): the model into legalize's IR, and the result back only if rewritten.
        from .api import legalize
        from .exporters.as_onnx import to_onnx
        from .kinds.onnx.importer import import_model

        ours = import_model(onnx_ir.serde.serialize_model(model), None)
        done = legalize(ours, self.target, debug=self.debug, assume_dynamic_not_one=self.assume_dynamic_not_one).legalized
        self.stats = {k: int(v) for k, v in done.stats.items()}
        modified = bool(done.warnings) or any(v for k, v in self.stats.items() if k not in _UNCHANGED_STATS)
        if modified:
            new = onnx_ir.serde.deserialize_model(to_onnx(ours))
            model.graph = new.graph
            model.functions.clear()
            model.functions.update(new.functions)
            model.ir_version = new.ir_version
        return onnx_ir.passes.PassResult(model, modified)
