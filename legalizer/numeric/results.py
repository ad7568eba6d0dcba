"""What a check reports: per binding of the dynamic input dims, per output, whether
the candidate agrees with its reference (``to_json`` gives the report's fields)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Dict, List, Optional

if TYPE_CHECKING:
    from .runtime_shapes import RuntimeShapes
    from .search import SearchResult


@dataclass
class OutputResult:
    name: str
    ok: bool
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    detail: str = ""
    # error_stats of the comparison: elements outside the tolerances, mean, percentiles,
    # histogram (None when the values were not compared: shape, dtype, a failed run)
    stats: Optional[dict] = None

    def to_json(self) -> dict:
        out = {"name": self.name, "max_abs_err": self.max_abs_err, "max_rel_err": self.max_rel_err, "ok": self.ok}
        if self.detail:
            out["detail"] = self.detail
        if self.stats is not None:
            out["stats"] = self.stats
        return out


@dataclass
class BindingResult:
    dims: Dict[str, int]
    ok: bool
    outputs: List[OutputResult] = field(default_factory=list)
    skipped: str = ""  # why this binding was not compared (the original rejects it)
    # Where its dim sizes came from: "synthesized" (3 and 1, or the runtime constraints'),
    # "search" (found by the search, when the original rejects every synthesized one),
    # "user" (every dynamic dim bound by --dim, --input-shape or a given array).
    source: str = "synthesized"
    sample: Optional[int] = None  # the stored sample it fed (--load-inputs, --data-loader-script)

    def to_json(self) -> dict:
        out = {"dims": self.dims, "ok": self.ok, "source": self.source,
               "outputs": [o.to_json() for o in self.outputs]}
        if self.sample is not None:
            out["sample"] = self.sample
        if self.skipped:
            out["skipped"] = self.skipped
        return out


@dataclass
class CheckResult:
    ran: bool
    provider: str
    bindings: List[BindingResult] = field(default_factory=list)
    error: str = ""  # the check could not compare (e.g. the original does not run)
    # For a model exported from PyTorch: the legalized model against PyTorch running the
    # program (provider "torch"), besides this one against the original ONNX export.
    torch: Optional["CheckResult"] = None
    # The search for bindings the original accepts, when it rejected every synthesized one.
    search: Optional["SearchResult"] = None
    # The legal form verified on the run-time shapes of the first compared binding.
    runtime: Optional["RuntimeShapes"] = None
    # With stored samples: per output, the statistics across them (``samples.across``).
    samples: Optional[dict] = None
    # What the reference was: "" (the original, run), else where its outputs came from.
    reference: str = ""
    # The compared runs, when asked for (--save-inputs / --save-outputs): per binding
    # (feeds, expected, got), and the names of the two runs.
    runs: Optional[List[tuple]] = field(default=None, repr=False)
    notes: List[str] = field(default_factory=list)  # what the run should warn of (stored outputs left out)
    # An MLIR module the run writes (--emit tosa), itself run against the original: what
    # is written is what was checked (None: no module written, or the check did not run).
    module: Optional["CheckResult"] = None
    # A .pt2's legal program lowered to ExecuTorch (XNNPACK) and its .pte run against the
    # original program in PyTorch (``executorch_run``; not run without the extra).
    executorch: Optional["CheckResult"] = None

    @property
    def ok(self) -> bool:
        """Every compared binding matches, against each reference that ran, and the
        run-time shapes are legal."""
        compared = [b for b in self.bindings if not b.skipped]
        own = (self.ran and bool(compared) and all(b.ok for b in compared)
               and (self.runtime is None or self.runtime.ok))
        return own and all(other is None or not other.ran or other.ok for other in (self.torch, self.module,
                                                                                      self.executorch))

    @property
    def compared(self) -> bool:
        """Whether any binding was compared (not skipped)."""
        return any(not b.skipped for b in self.bindings)

    def to_json(self) -> dict:
        # "ok" has one meaning: whether the compared outputs match; null when it did not run
        out = {"ran": self.ran, "provider": self.provider, "ok": self.ok if self.ran else None,
               "bindings": [b.to_json() for b in self.bindings]}
        if self.error:
            out["error"] = self.error
        if self.reference:
            out["reference"] = self.reference
        if self.samples is not None:
            out["samples"] = self.samples
        if self.search is not None:
            out["search"] = self.search.to_json()
        if self.runtime is not None:
            out["runtime_shapes"] = self.runtime.to_json()
        if self.torch is not None:
            out["torch"] = self.torch.to_json()
        if self.module is not None:
            out["module"] = self.module.to_json()
        if self.executorch is not None:
            out["executorch"] = self.executorch.to_json()
        return out
