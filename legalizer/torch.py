"""PyTorch in, PyTorch out: a ``torch.export`` program legalized for a target as a
``torch.export`` program, for pipelines that hold the program in memory.

    from legalizer.torch import legalize
    legal = legalize(ep, target="coreml")      # an ExportedProgram, every tensor at rank <= 5

The program's Core ATen calls are the IR (``kinds.pt2.importer``); the target's passes run
on them (``passes.aten_ranks`` lowers each op over its rank limit) and the result is
written back with the program's signature, state dict, constants, range constraints and
source metadata (``kinds.pt2.exporter``). ``run`` gives the program with its report: what
the passes changed and what the target still refuses, naming each tensor.

``LegalizeRanks`` is the same as a pass ExecuTorch runs before lowering:
``to_edge_transform_and_lower(ep, transform_passes=[LegalizeRanks("coreml")], ...)``.
torch is the optional ``torch`` extra.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from .errors import BadInput
from .extras import install_hint


@dataclass
class TorchResult:
    """The legal program and its report: the passes' counters, the target's profile, the
    ops the target refused before and still refuses after (node, op, reasons)."""

    program: Any
    target: str
    stats: Dict[str, int] = field(default_factory=dict)
    refused_before: List[dict] = field(default_factory=list)
    refused_after: List[dict] = field(default_factory=list)
    profile: Dict[str, Any] = field(default_factory=dict)

    # The program's dynamic input dims and the fixes that make it legal
    # (``kinds.pt2.suggested_fixes``): its symbols, each named as the program names it.
    dims: List[Any] = field(default_factory=list)
    fixes: List[Any] = field(default_factory=list)

    @property
    def legal(self) -> bool:
        return not self.refused_after

    def suggested_fixes(self, dynamic_shapes=None) -> str:
        """torch.export's "Suggested fixes" for what the target still refuses (or, for a
        target that takes static shapes only, every dynamic dim static), which
        ``torch.export.dynamic_shapes.refine_dynamic_shapes_from_suggested_fixes``
        applies: each dim named as ``dynamic_shapes`` (torch.export's argument) names
        it, else by its symbol; "" when none helps."""
        from .kinds.pt2.suggested_fixes import renamed, text

        return text(self.fixes, renamed(self.dims, dynamic_shapes))

    def to_json(self) -> dict:
        out = {"target": self.target, "profile": self.profile, "stats": dict(self.stats),
               "refused_before": self.refused_before, "refused_after": self.refused_after}
        if self.fixes:
            from .kinds.pt2.suggested_fixes import to_json

            out["suggested_fixes"] = to_json(self.dims, self.fixes)
        return out


def _require_torch() -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        raise BadInput(f"legalizer.torch needs torch, which is not installed: {install_hint('torch')}") from None


def run(program, target: str = "coreml", *, level: Optional[str] = None) -> TorchResult:
    """Legalize ``program`` (an ``ExportedProgram``) for ``target``; the result holds the
    legal program (a new one: ``program`` is not changed) and the report."""
    _require_torch()
    import torch

    from .kinds.pt2.exporter import export_program
    from .kinds.pt2.importer import import_program
    from .target_passes import legalize_for as run_passes
    from .targets import target as target_named

    if not isinstance(program, torch.export.ExportedProgram):
        raise BadInput(f"legalizer.torch takes a torch.export ExportedProgram, not {type(program).__name__}")
    spec = target_named(target)
    model = import_program(program)
    before = spec.refused(model.graphs, level)
    done = run_passes(model, spec, level=level)
    after = spec.refused(model.graphs, level)
    legal = export_program(model)
    from .kinds.pt2.suggested_fixes import for_model

    static = f"target '{spec.name}' takes static shapes only" if spec.static_shapes else None
    dims, fixes = for_model(model, program, refused=after, constraints=model.constraints, static=static)
    return TorchResult(legal, spec.name, {k: int(v) for k, v in done.stats.items() if v}, before, after,
                       spec.to_json(level), dims, fixes)


def legalize(program, target: str = "coreml", *, level: Optional[str] = None, strict: bool = True):
    """The legal form of ``program`` for ``target``, an ``ExportedProgram``. ``strict``:
    BadInput naming the first tensor the target still refuses (a graph input over its
    rank limit, which no legal form can change)."""
    result = run(program, target, level=level)
    if strict and result.refused_after:
        r = result.refused_after[0]
        raise BadInput(f"node '{r['node']}' ({r['op']}): {'; '.join(r['reasons'])}")
    return result.program


class LegalizeRanks:
    """``ExportedProgram -> ExportedProgram``: the legal program, for pipelines that take
    a callable on the program (a Core ATen program, or ExecuTorch's Edge program)."""

    def __init__(self, target: str = "coreml", level: Optional[str] = None):
        self.target, self.level = target, level

    def __call__(self, program):
        return legalize(program, self.target, level=self.level)


def executorch_pass(target: str = "coreml", level: Optional[str] = None):
    """A pass ExecuTorch runs in ``to_edge_transform_and_lower(ep, transform_passes=[...],
    partitioner=[...])`` (an ``ExportedProgramPassBase``): it legalizes the Edge program
    before the partitioners see it, in the Edge dialect's ops (``view_copy``,
    ``permute_copy``, ``_clone_dim_order``). Needs the executorch extra."""
    try:
        from executorch.exir.pass_base import ExportedProgramPassBase, ExportedProgramPassResult
    except ImportError:
        raise BadInput(f"legalizer.torch.executorch_pass needs ExecuTorch, which is not installed:"
                       f" {install_hint('executorch')}") from None

    class LegalizeRanksPass(ExportedProgramPassBase):
        def call(self, exported_program):
            result = run(exported_program, target, level=level)
            if result.refused_after:
                r = result.refused_after[0]
                raise BadInput(f"node '{r['node']}' ({r['op']}): {'; '.join(r['reasons'])}")
            changed = any(k.startswith("aten_") or k in ("reshapes_inserted", "broadcasts_made_explicit")
                          for k in result.stats)
            return ExportedProgramPassResult(result.program if changed else exported_program, changed)

    return LegalizeRanksPass()
