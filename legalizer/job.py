"""One run of the main job: its options (``RunOptions``, validated once, where they are
built: ``Valid``), what is known before the model is read (``Prepared``: the target, the
input's kind, the output plan), the records its stages hand on (``Read`` -> ``Verified``
-> ``Legalized`` -> ``Rendered`` -> ``Staged`` -> ``Checked``), and what it gives back
(``RunResult``)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Tuple, Type, TypeVar

from .numeric import ATOL, BUDGET, RTOL
from .numeric.settings import CheckSettings
from .numeric.runtimes import provider_choices
from . import targets
from .errors import EXIT_OK, BadInput, LegalizeError, UsageError
from .model import Model
from .report import Report
from .targets import TARGETS, Target
from .verifier import PROFILES, VerifyResult

if TYPE_CHECKING:
    from .atomic_files import Staged as StagedFile
    from .emit_formats import OnnxForm
    from .formats import Format, Sides
    from .numeric.golden import Golden
    from .numeric.localize import Localization
    from .numeric.reduce import Reduced
    from .numeric.results import CheckResult
    from .region_pictures import Picture, Regions

# Called as each stage starts, with what is known of its size: "load" gets
# {"bytes": file size}, "verify" {"nodes": top-level node count}. The CLI draws
# progress from it; the API ignores it.
StageCallback = Callable[[str, Dict[str, int]], None]


# The golden-data options (check.golden), by field and flag.
GOLDEN_FLAGS = (("load_inputs", "--load-inputs"), ("data_loader_script", "--data-loader-script"),
                ("load_outputs", "--load-outputs"), ("save_inputs", "--save-inputs"),
                ("save_outputs", "--save-outputs"))


@dataclass
class RunOptions:
    target: str = "tosa"
    level: Optional[str] = None  # the target's level (TOSA: 8k, the default, or none)
    profile: Optional[str] = None  # default: the input format's (mlir; tosa for a TOSA MLIR input)
    verify_only: bool = False
    output: Optional[Path] = None  # default: <stem>.legal.<ext> beside the input
    force: bool = False
    check: bool = True
    provider: str = "auto"
    dims: Dict[str, int] = field(default_factory=dict)
    input_shapes: Dict[str, Tuple[int, ...]] = field(default_factory=dict)  # binds the inputs' dynamic dims
    # Make every dynamic dim static (bound ones at their size, the rest at 1) and fold the
    # shape arithmetic that becomes constant (TFLite); a static-shape target does this
    # for the dims the user binds.
    static: bool = False
    inputs: Any = field(default_factory=dict)  # arrays by input name, or an .npz path
    rtol: float = RTOL
    atol: float = ATOL
    assume_dynamic_not_one: bool = False
    debug: bool = False  # check every pass's contracts around it (``target_passes.legalize``)
    emit: List[str] = field(default_factory=list)  # formats to write (default: the input's)
    against: Optional[Path] = None  # a TOSA MLIR input: run it and compare with this model
    regions: bool = False  # record the rewritten regions (for the HTML report)
    trust_pt2: bool = False  # load a .pt2 with torch's unsafe unpickling (kinds.pt2.safety)
    require_check: bool = False  # a check that did not run, or ran in part, fails the run (exit 1)
    # A deployment target's partial placement is accepted: the ops it still refuses after
    # legalizing stay on the CPU (listed in the report) and the run exits 0.
    allow_fallback: bool = False
    # Compare intermediate values (check.divergence): True always, None when the main
    # job's check fails (and, with --against, when --reduce asks), False never.
    localize: Optional[bool] = None
    localize_budget: int = BUDGET  # IREE runs one localization may take
    reduce: Optional[Path] = None  # write the smallest subgraph that still fails here
    # A batch's --dim: binds the dims a model has and leaves out the others (with a
    # warning); alone, a --dim that binds no dim of the model is a UsageError.
    dims_where_present: bool = False
    # Golden data (check.golden): stored inputs to feed (Polygraphy's JSON or .npz), a
    # script whose FILE.py[:FUNC] yields them (it runs the user's code: only when named),
    # stored reference outputs to compare with instead of running the original, and
    # where to save what the check fed and got.
    load_inputs: Optional[Path] = None
    data_loader_script: Optional[str] = None
    load_outputs: Optional[Path] = None
    save_inputs: Optional[Path] = None
    save_outputs: Optional[Path] = None
    # Limits of the child process every model runs in (check.child): seconds per run of a
    # runtime, bytes it may allocate; None: the defaults.
    run_timeout: Optional[float] = None
    run_memory: Optional[int] = None

    @property
    def checks(self) -> bool:
        """Whether a numeric check runs: the main job's, or --against's."""
        return self.check and (not self.verify_only or self.against is not None)

    @property
    def records(self) -> bool:
        """Whether the check keeps its runs (to save them)."""
        return self.save_inputs is not None or self.save_outputs is not None

    @property
    def check_settings(self) -> CheckSettings:
        """What every check, localization and reduction of the run is told, as one record."""
        return CheckSettings(self.provider, self.rtol, self.atol, not_one=self.assume_dynamic_not_one,
                             record=self.records)

    def golden_flags(self) -> List[str]:
        return [flag for key, flag in GOLDEN_FLAGS if getattr(self, key) is not None]

    def validate(self) -> "Valid":
        """UsageError for options that contradict each other or name nothing there is,
        before any work; what needs the model is checked by its format (``formats``).
        The options with the target they name (``Valid``): a run asks this once."""
        if self.profile is not None and self.profile not in PROFILES:
            raise UsageError(f"--profile must be one of {', '.join(PROFILES)}, not '{self.profile}'")
        try:
            if not isinstance(self.target, str):  # (a name: the report's ``target`` is the name)
                raise UsageError(self.target)
            spec = targets.target(self.target)
        except UsageError:
            raise UsageError(f"--target must be one of {', '.join(TARGETS)}, not '{self.target}'") from None
        if self.level is not None:
            leveled = [t for t in TARGETS.values() if t.levels]
            (spec if spec.levels else leveled[0]).level(self.level)  # UsageError naming the levels
            if not spec.levels:
                raise UsageError(f"--tosa-level applies to --target {' or '.join(t.name for t in leveled)},"
                                 f" not --target {self.target}")
        if self.allow_fallback and (spec.device is None or self.verify_only):
            raise UsageError(f"--allow-fallback accepts a deployment target's partial placement: "
                             + ("--verify-only places nothing" if spec.device is not None else
                                f"--target {self.target} places no op on an accelerator (targets that do:"
                                f" {', '.join(t.name for t in TARGETS.values() if t.device is not None)})"))
        providers = provider_choices()  # the runtimes' table's
        if self.provider not in providers:
            raise UsageError(f"--provider must be {', '.join(providers[:-1])} or {providers[-1]}, not"
                             f" '{self.provider}'")
        if self.require_check and not self.checks:
            raise UsageError("--require-check needs a check to require: it cannot go with --no-check, nor with"
                             " --verify-only (except with --against)")
        flags = self.golden_flags()
        if flags and (not self.check or (self.verify_only and self.against is None)):
            raise UsageError(f"{flags[0]} feeds or saves the numeric check: it cannot go with --no-check, nor with"
                             " --verify-only")
        if flags and self.against is not None:
            raise UsageError(f"{flags[0]} works with the check of a legalized model, not with --against")
        return Valid(self, spec)


@dataclass(frozen=True)
class Valid:
    """Options as ``RunOptions.validate`` passed them, with the target they name resolved."""

    options: RunOptions
    target: Target


@dataclass(frozen=True)
class Outputs:
    """The output plan: where each format a run writes goes, made once before the work."""

    output: Path  # the legalized model's path (given, or <stem>.legal.<ext> beside the input)
    native: Optional[str] = None  # the format the input's legal form is written in; None: not written
    formats: Tuple[str, ...] = ()  # what is written (--emit, else the native format), the first the report's
    paths: Mapping[str, Path] = field(default_factory=dict)  # where each is written

    def planned(self) -> List[Tuple[str, Path]]:
        """(what it is, path) pairs: "the output model", "the tosa output (--emit tosa)"."""
        return [("the output model" if f == self.native else f"the {f} output (--emit {f})", p)
                for f, p in self.paths.items()]


@dataclass(frozen=True)
class Prepared:
    """A run before its model is read (``pipeline.prepare``): the options validated, the
    target resolved, the input's kind sniffed and the output plan made, each once; the
    command line's checks before the work read them here, and the run reuses them."""

    path: Path
    options: RunOptions
    target: Target
    kind: Optional[str]  # what ``kinds.registry.sniff`` found; None when it refused the file
    refused: Optional[BadInput] = None  # why it did: the run raises it where it reads the model
    outputs: Optional[Outputs] = None  # None with --verify-only, or where the plan failed
    unplanned: Optional[LegalizeError] = None  # why the plan failed (an --emit the target does not write)

    def output_plan(self) -> Outputs:
        """The output plan, or the error that made it impossible."""
        if self.unplanned is not None:
            raise self.unplanned
        return self.outputs

    def planned(self) -> List[Tuple[str, Path]]:
        """What the run writes, as (what it is, path) pairs, known before the work: empty
        with --verify-only or for a file that will not load (its run says why)."""
        return self.output_plan().planned() if not self.options.verify_only and self.refused is None else []


R = TypeVar("R")


def advance(record: Any, to: Type[R], **new: Any) -> R:
    """The next stage's record: every field of ``record`` carried over, ``new`` added
    (or in place of the one carried)."""
    return to(**{**{f.name: getattr(record, f.name) for f in fields(record)}, **new})


# -- what the stages hand on: each record is the one before it and what its stage made --

@dataclass(frozen=True, kw_only=True)
class Read:
    """The model read, with what the options name for it, checked against it."""

    prepared: Prepared
    options: RunOptions  # the plan's, less a batch's bindings this model has no use for
    model: Model
    fmt: "Format"  # the input's record (``formats.Format``)
    profile: str  # the input's verifier profile
    golden: Optional["Golden"]  # None for a model in memory: nothing is checked
    given: Mapping[str, Any]  # the arrays the check is fed (--input)
    dims: Mapping[str, int]  # the dims the user binds
    reference: Optional[Model] = None  # --against's model, as read for its output names, or None
    res: "RunResult"  # the report and the verdict, filled in as the stages go

    @property
    def path(self) -> Path:
        return self.prepared.path

    @property
    def target(self) -> Target:
        return self.prepared.target

    @property
    def report(self) -> Report:
        return self.res.report


@dataclass(frozen=True, kw_only=True)
class Verified(Read):
    """The model verified under its profile (the verdict: ``res.input_verification``)."""

    @property
    def verification(self) -> VerifyResult:
        return self.res.input_verification


@dataclass(frozen=True, kw_only=True)
class Compared(Verified):
    """``--verify-only --against``: the model compared with its reference (the result:
    ``res.check``)."""

    failed: bool  # the comparison ran and found different outputs
    sides: "Sides"


@dataclass(frozen=True, kw_only=True)
class Legalized(Verified):
    """The model rewritten in place by the target's passes; ``dims`` now holds the
    sizes a static-shape target bound."""

    outputs: Optional[Outputs]  # None for a model in memory (``pipeline.run_model``): nothing is written


@dataclass(frozen=True, kw_only=True)
class Rendered(Legalized):
    made: Mapping[str, object]  # every format but the model's own, made
    onnx_form: Optional["OnnxForm"]  # a TFLite model's legalized ONNX-op form, made once: the check runs it


@dataclass(frozen=True, kw_only=True)
class Staged(Rendered):
    stack: Any  # the files written under temporary names until the commit (an ExitStack)
    staged: "StagedFile"  # the model in its own format, so written
    written: Path  # its temporary path: what the check runs


@dataclass(frozen=True, kw_only=True)
class Checked(Staged):
    """The legalized model as written, checked (the result: ``res.check``, None with
    --no-check)."""

    failed: bool  # the check ran and found different outputs
    sides: Optional["Sides"]  # what it compared (for localization and reduction)


@dataclass
class RunResult:
    report: Report
    model: Optional[Model] = None
    input_verification: Optional[VerifyResult] = None
    exit_code: int = EXIT_OK
    timings: Dict[str, float] = field(default_factory=dict)
    output_verification: Optional[VerifyResult] = None
    check: Optional["CheckResult"] = None
    ops_before: Counter = field(default_factory=Counter)
    ops_after: Counter = field(default_factory=Counter)
    regions: Optional["Regions"] = None  # with RunOptions.regions, once legalized
    unchecked: str = ""  # with RunOptions.require_check: why the check did not run fully (exit 1)
    localization: Optional["Localization"] = None  # where the candidate starts to differ
    reduced: Optional["Reduced"] = None  # --reduce: what was written
    culprit_picture: Optional["Picture"] = None  # with RunOptions.regions: the localization's culprit, drawn
