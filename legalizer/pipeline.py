"""The main job as a driver: a short list of stages over one ``Run`` state (read ->
verify -> legalize -> verify -> emit -> write -> check -> commit), each timed by the
driver. What differs by input kind is asked of the model's ``formats.Format``; the
options were validated where they were built (``RunOptions.validate``). The CLI only
parses and prints; the library API calls the same stages."""

from __future__ import annotations

import os
import tempfile
import time
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from collections import Counter
from typing import TYPE_CHECKING, Callable, Dict, Iterator, List, Optional, Tuple

from . import emit_formats
from .numeric.user_inputs import as_arrays, dynamic_keys
from .numeric.ort import declared_shapes
from .numeric.results import CheckResult
from .errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_VIOLATIONS, BadInput, UsageError  # noqa: F401 - the exit statuses, re-exported
from .formats import FORMATS, Sides, default_output, format_of, is_output  # noqa: F401 - re-exported
from .importers.reader import read_model, sniff
from .ir.gc import paused_gc
from .ir.graph import OP
from .job import Run, RunOptions, RunResult, StageCallback  # noqa: F401 - re-exported
from .model import Model
from .report import STAT_KEYS, Report, worse_for_target
from .target_passes import legalize
from .verifier import VerifyResult, verify

if TYPE_CHECKING:
    from .numeric.golden import Golden


# -- the driver -------------------------------------------------------------------------

@dataclass(frozen=True)
class Stage:
    """One step of the job: ``name`` is what it is announced and timed as, ``when``
    whether it runs, ``size`` what is known of its size when it starts."""

    name: str
    fn: Callable[[Run], None]
    when: Callable[[Run], bool] = lambda run: True
    size: Callable[[Run], Dict[str, int]] = lambda run: {}
    announce: bool = True  # to ``on_stage``, and timed under ``name``


def run(path: Path, options: RunOptions, on_stage: Optional[StageCallback] = None) -> RunResult:
    """Load, verify, and (unless ``verify_only``) legalize, verify the output, check it
    and write it. Raises LegalizeError for bad input; violations and mismatches are in
    the result, with exit code 1, and then nothing is written. Every model runs in a
    child process under ``options.run_timeout`` and ``run_memory``."""
    from .numeric import child

    options.validate()
    job = Run(Path(path), options, on_stage, given=as_arrays(options.inputs))
    with child.limited(options.run_timeout, options.run_memory), ExitStack() as staged:
        if options.checks and child.available():
            # what the run child may read: the model's folder and the output's (where the
            # legalized model is staged for the check), --against's
            child.readable(path, options.output or path, *([options.against] if options.against else []))
            child.prewarm()  # it starts while the model loads and is legalized
        job.stack = staged  # what is written under temporary names until the commit
        _drive(job, STAGES)
    if options.reduce is not None and job.res.reduced is None and \
            not any(w.startswith("--reduce:") for w in job.report.warnings):
        job.report.warnings.append("--reduce: nothing written: no violation, and no differing output, was found")
    return job.res


def run_model(model: Model, options: RunOptions) -> RunResult:
    """The stages of ``run`` that need no file, on a model in memory (the library API's
    ``legalize``): verify, legalize in place, verify the output."""
    options.validate()
    job = Run(Path(model.source or "<memory>"), options)
    job.fmt = format_of(model)
    job.profile = options.profile or job.fmt.input_profile
    report = Report(input=str(job.path), format=job.fmt.name, target=options.target, profile=job.profile)
    report.timings_s = job.timings
    job.res = RunResult(report, model, timings=job.timings)
    _drive(job, IN_MEMORY)
    return job.res


def _drive(job: Run, stages: Tuple[Stage, ...]) -> None:
    for stage in stages:
        if job.done:
            break
        if stage.when(job):
            with _timed(job, stage):
                stage.fn(job)


@contextmanager
def _timed(job: Run, stage: Stage) -> Iterator[None]:
    """Announce and time a stage; the stages that build, walk or rewrite the IR run with
    the cyclic collector paused (``ir.gc``): the check, which runs the models, does not."""
    if stage.announce and job.on_stage is not None:
        job.on_stage(stage.name, stage.size(job))
    t0 = time.perf_counter()
    try:
        with nullcontext() if stage.name == "check" else paused_gc():
            yield
    finally:
        if stage.announce:
            job.timings[stage.name] = job.timings.get(stage.name, 0.0) + time.perf_counter() - t0


def stages(options: RunOptions) -> List[str]:
    """The stages ``run`` announces to ``on_stage``, in order, when nothing stops it early
    (a violation, a failed check)."""
    if options.verify_only:
        return ["load", "verify"] + (["check"] if options.against is not None else [])
    return ["load", "verify", "passes", "verify", "emit", "save"] + (["check"] if options.check else [])


# -- read and verify ---------------------------------------------------------------------

def _read(job: Run) -> None:
    """Read the model and what the options name for it, each checked against the model
    before any work: its format's abilities, the bindings, the tolerances."""
    options = job.options
    job.golden = read_golden(options, job.given)
    model = read_model(job.path, trust_pt2=options.trust_pt2)
    fmt = job.fmt = format_of(model)
    job.profile = options.profile or fmt.input_profile
    if options.trust_pt2 and fmt.name != "pt2" and not options.dims_where_present:  # (a batch's may hold .pt2s)
        raise UsageError(f"--trust-pt2 loads a .pt2 with torch's unsafe unpickling; {job.path} is {fmt.title}, not a"
                         " .pt2: leave it out")
    if fmt.written is None and not options.verify_only:
        raise UsageError(f"{job.path}: a {fmt.title} module is verified, not legalized: add --verify-only")
    if options.against is not None:
        if not options.verify_only:
            raise UsageError("--against compares MODEL with another model: add --verify-only")
        _against_format(fmt, Path(options.against))
    if options.golden_flags() and not fmt.golden:
        raise UsageError(f"{options.golden_flags()[0]}: golden data feeds the check of an ONNX, TFLite or .pt2"
                         f" model, not of a {fmt.name} model")
    if options.reduce is not None and not fmt.reduces:
        raise UsageError(f"--reduce writes ONNX or TOSA MLIR subgraphs: a {fmt.name} model is not reduced")
    names = _output_names(model)
    if options.against is not None and _per_output(options):  # the reference's outputs too
        job.reference = read_model(Path(options.against))
        names += _output_names(job.reference)
    check_tolerance_names(options, names)
    report = Report(input=str(job.path), format=fmt.name, target=options.target, profile=job.profile)
    report.warnings.extend(model.warnings)
    report.timings_s = job.timings
    job.res = RunResult(report, model, timings=job.timings)
    if options.dims_where_present:
        job.options = options = _where_present(model, options, report)
        job.given = as_arrays(options.inputs)
    job.dims = _user_dims(fmt, model, options, job.given)


def _verify_input(job: Run) -> None:
    result = verify_model(job.model, job.profile, job.options.assume_dynamic_not_one)
    job.report.add_verification(result, "input", job.model.graph)
    job.res.input_verification = result
    if result.violations:
        job.res.exit_code = EXIT_VIOLATIONS


def _reduce_violation(job: Run) -> None:
    """--reduce of an input that violates the trait: the smallest subgraph with its first violation."""
    from .numeric.reduce import NothingToReduce
    from .localize_reduce import reduce_violation as reduce_first

    try:
        job.res.reduced = reduce_first(job.model, job.fmt, job.path, job.report.violations[0], job.profile,
                                       Path(job.options.reduce), force=job.options.force, protect=[job.path])
    except NothingToReduce as e:
        job.report.warnings.append(f"--reduce: nothing written: {e}")
        return
    job.report.reduced = job.res.reduced.to_json()


def _compare(job: Run) -> None:
    """``--against``: the model compared with its reference; one that cannot run is
    never a pass (exit 2)."""
    from .numeric.child import RunFault

    against = Path(job.options.against)
    try:
        job.res.check = job.fmt.compare(job, against)
    except RunFault as e:  # a crash, or a run past its memory or time: the comparison did not run
        raise BadInput(str(e)) from None
    if not job.res.check.ran:
        e = BadInput(f"{job.path}: the comparison with {against} did not run: {job.res.check.error}")
        e.multiline = True  # MLIR's diagnostic, line by line
        raise e
    job.report.check = job.res.check.to_json()
    job.failed = not job.res.check.ok
    job.sides = Sides(job.fmt, job.path, against, job.model.graph)  # the model against its reference


def _against_verdict(job: Run) -> None:
    job.done = True  # --verify-only: nothing is legalized
    if job.options.require_check and unchecked(job.res.check):
        job.res.unchecked = unchecked(job.res.check).replace("the numeric check", "the comparison")
        job.res.exit_code = EXIT_VIOLATIONS
    elif not job.res.check.ok:
        job.res.exit_code = EXIT_VIOLATIONS


def _stop_unless_legalizing(job: Run) -> None:
    """A model that violates the trait is not legalized; --verify-only legalizes none."""
    job.done = True


# -- legalize, emit, write, check, commit ------------------------------------------------

def _plan(job: Run) -> None:
    """Where each format is written, each checked before the work."""
    options, fmt = job.options, job.fmt
    job.output = Path(options.output) if options.output is not None else fmt.default_output(job.path, job.model)
    job.formats = emit_formats.validate(options.emit, fmt.written, options.target)
    if fmt.written in job.formats:
        emit_formats.check_output_suffix(job.output, fmt.written)
    job.paths = emit_formats.emit_paths(job.output, job.formats, fmt.written)
    emit_formats.check_paths(job.paths, force=options.force, protect=job.path)


def _rewrite(job: Run) -> None:
    """The target's passes, with what its backend refuses before and after."""
    options, model, report = job.options, job.model, job.report
    spec = job.target
    untaken = spec.untaken_dtypes(model.graphs)
    if untaken is not None:  # before any work: no pass makes a float model integer
        raise UsageError(f"{job.path}: --target {spec.name}: {untaken}")
    job.res.ops_before = _op_counts(model)
    model.constraints = job.res.input_verification.constraints  # what the report lists, for emitters to assert
    over = spec.interface_refusals(model.graph, options.level)
    if over:  # before any work: nothing is written
        raise BadInput(f"target '{spec.name}' takes rank <= {spec.rank_limit(options.level)}, and no legal form"
                       f" keeps the model's interface: {', '.join(over)}")
    refused_before = spec.refused(model.graphs, options.level)
    if spec.static_shapes and job.fmt.name == "onnx":  # (the target's: --dim's sizes, else 1)
        if job.fmt.specialize(job) and _constraints_at_bound_sizes(job):
            return
    elif options.static or (spec.backend is not None and job.dims):  # a backend takes static shapes
        if not job.fmt.static_shapes:
            if options.static:
                raise UsageError(f"--static makes a TFLite model's shapes static; {job.path} is {job.fmt.name}")
        elif job.fmt.specialize(job) and _constraints_at_bound_sizes(job):
            return
    before = None
    if options.regions:
        from .region_pictures import snapshot

        before = snapshot(model)
    done = model.legalized = legalize(model, options.target, debug=options.debug,
                                      assume_dynamic_not_one=options.assume_dynamic_not_one, level=options.level)
    report.target_rules = {"target": spec.name, "profile": spec.to_json(options.level),
                           "refused_before": refused_before, "refused_after": spec.refused(model.graphs, options.level)}
    lowered = {k: int(v) for k, v in done.stats.items() if k.startswith("aten_") and v}
    if lowered:  # a torch.export program's ops lowered to the rank limit (passes.aten_ranks)
        report.target_rules["ranks_lowered"] = lowered
    if spec.device is not None:
        report.target_rules.update(device=spec.device, allow_fallback=options.allow_fallback)
    if before is not None:
        from .region_pictures import PICTURE_LIMIT

        job.res.regions = before.regions(model, limit=PICTURE_LIMIT)
    report.warnings.extend(done.warnings)
    report.stats.update({key: int(done.stats[key]) for key in STAT_KEYS if key in done.stats})
    job.res.ops_after = _op_counts(model)
    if model.aten is not None:  # a torch.export program: the fixes to its dynamic_shapes that make it legal
        _suggest_fixes(job, spec)
    if spec.backend is None and model.aten is not None:  # a torch.export program: what its lowering left
        report.warnings.extend(f"node '{r['node']}' ({r['op']}): target '{spec.name}' refuses it:"
                               f" {'; '.join(r['reasons'])}" for r in report.target_rules["refused_after"])
    if spec.backend is not None:  # each op the backend still refuses, in its words
        tool = report.target_rules["profile"]["backend"]
        report.warnings.extend(f"node '{r['node']}' ({r['op']}{', as ' + r['as'] if 'as' in r else ''}): {tool} refuses"
                               f" it: {'; '.join(r['reasons'])}" for r in report.target_rules["refused_after"])


def _suggest_fixes(job: Run, spec) -> None:
    """The report's ``suggested_fixes`` (torch.export's form) where the program's
    legality depends on its dynamic dims: what the target still refuses over them, the
    runtime constraints, a target that takes static shapes only."""
    from .importers.aten_fixes import for_model, to_json

    static = f"target '{spec.name}' takes static shapes only" if spec.static_shapes else None
    dims, fixes = for_model(job.model, job.model.aten.original, refused=job.report.target_rules["refused_after"],
                            constraints=job.model.constraints, static=static)
    if fixes:
        job.report.suggested_fixes = to_json(dims, fixes)


def _constraints_at_bound_sizes(job: Run) -> bool:
    """After the shapes were made static: the runtime constraints were on dims now static,
    so they are those at the bound sizes (none, or a broadcast the sizes break: then the
    model violates the trait, and the job ends)."""
    bound = verify_model(job.model, job.profile, job.options.assume_dynamic_not_one)
    job.model.constraints = bound.constraints
    job.report.set_constraints(bound.constraints, job.model.graph)
    if not bound.violations:
        return False
    for d in bound.violations:
        d.stage = "input"
        job.report.violations.append(d.to_json())
    job.res.exit_code = EXIT_VIOLATIONS
    job.done = True
    return True


def _verify_output(job: Run) -> None:
    result = verify_model(job.model, job.target.profile, stage="output")
    job.res.output_verification = result
    job.report.add_verification(result, "output")
    if result.violations:
        job.res.exit_code = EXIT_VIOLATIONS
        job.done = True
    elif _partly_placed(job) and not job.options.allow_fallback:  # the target's verdict: not all on its device
        job.res.exit_code = EXIT_VIOLATIONS
        job.done = True
    elif worse_for_target(job.report.target_rules or {}):  # never, --allow-fallback or not
        job.res.exit_code = EXIT_VIOLATIONS
        job.done = True


def _partly_placed(job: Run) -> bool:
    rules = job.report.target_rules or {}
    return bool(rules.get("device") and rules.get("refused_after"))


def _render(job: Run) -> None:
    """Every format but the model's own, made before anything is written; an
    out-of-level module is never written."""
    options = job.options
    # a TFLite model's ONNX-op form, legalized, made once here: the MLIR emitters read
    # it, --emit onnx writes it, the check runs it
    job.onnx_form = form = emit_formats.onnx_op_form(job.model, job.formats, options.target, options.level)
    sources = {options.target: form.model} if form is not None else \
        emit_formats.mlir_sources(job.model, job.formats, options.level)
    job.made = emit_formats.render(job.model, job.formats, job.fmt.written, job.dims, sources=sources, form=form)
    over = emit_formats.level_diagnostics(job.model, job.made, options.target, options.level)
    if over.violations:
        nodes = job.res.output_verification.nodes
        job.res.output_verification = over
        job.report.add_verification(over, "output")
        job.report.stats["nodes_out"] = nodes
        job.res.exit_code = EXIT_VIOLATIONS
        job.done = True


def _write(job: Run) -> None:
    """The model in its own format under a temporary name beside the output (in a
    temporary folder when only other formats are asked for): the check runs it there."""
    where = job.output
    if job.fmt.written not in job.formats:
        where = Path(job.stack.enter_context(tempfile.TemporaryDirectory(prefix=".legalize-",
                                                                          dir=job.output.parent))) / job.output.name
    job.staged = job.stack.enter_context(job.fmt.stage(job.model, where, force=job.options.force))
    job.written = job.staged.path


def _check(job: Run) -> None:
    """The legalized model, as written, against the input; and the TOSA module written
    beside it (``--emit tosa``), run itself (``_check_module``)."""
    res, report = job.res, job.report
    res.check = job.fmt.check(job, job.written)
    if res.check.ok and isinstance(job.made.get("tosa"), str):
        res.check.module = _check_module(job, job.made["tosa"])
    report.check = res.check.to_json()
    report.warnings.extend(res.check.notes + job.golden.notes)
    _save_golden(job)
    job.failed = res.check.ran and not res.check.ok
    job.sides = job.fmt.sides(job, job.written)
    job.given = job.golden.failing_feeds(res.check) or job.given  # what localization feeds


def _check_module(job: Run, text: str) -> CheckResult:
    """The TOSA module ``--emit tosa`` writes, run on IREE against the original model as
    ``--against`` runs one, at the dims the check binds: not run (and the verdict says
    so) where IREE is not installed or does not run the original's format."""
    from .errors import CheckUnavailable
    from .numeric.against import check_against
    from .numeric.child import RunFault

    settings = replace(job.options.check_settings, record=False)
    # A quantized model's module computes its quantized ops as TOSA rescales them: a float
    # output downstream agrees within one step of the coarsest quantization (as the ONNX
    # form's, on onnxruntime, does).
    step = max((max(v.quant.scale) for g in job.model.graphs for n in g.nodes() for v in n.outputs
                if v.quant is not None and v.quant.scale), default=0.0)
    if step and isinstance(settings.atol, (int, float)):
        settings = replace(settings, atol=max(float(settings.atol), float(step)))
    from .extras import importable, install_hint

    if not importable("iree.compiler", "iree.runtime"):
        return CheckResult(False, "IREE", error=f"IREE is not installed: {install_hint('iree')}")
    with tempfile.TemporaryDirectory(prefix=".legalize-module-") as tmp:
        module = Path(tmp) / "module.tosa.mlir"
        module.write_text(text)
        try:
            result = check_against(module, job.path, settings, given=job.given, dims=job.dims)
        except CheckUnavailable as e:
            return CheckResult(False, "IREE", error=str(e))
        except RunFault as e:  # a crash, or a run past its memory or time: it did not run
            return CheckResult(False, "IREE", error=str(e))
    result.provider = f"the TOSA module on {result.provider}"
    return result


def _commit(job: Run) -> None:
    """Give the written files their names, unless the check failed (exit 1, nothing
    written) or, with --require-check, did not run fully."""
    res, report = job.res, job.report
    if res.check is not None:
        if job.failed or (job.options.require_check and unchecked(res.check)):
            res.unchecked = "" if job.failed else unchecked(res.check)
            res.exit_code = EXIT_VIOLATIONS
            return
        report.warnings.extend(_unchecked_warnings(res.check))
    if job.fmt.written in job.formats:
        job.staged.accept()
    job.stack.close()  # the model takes its name (or its temporary folder goes)
    emit_formats.write_extra(job.paths, job.made, job.fmt.written, force=job.options.force, protect=job.path)
    report.outputs = {f: str(p) for f, p in job.paths.items()}
    report.output = str(job.paths[job.formats[0]])


def _unchecked_warnings(result: CheckResult) -> List[str]:
    out = []
    if not result.ran:
        out.append(f"the numeric check did not run: {result.error}")
    elif result.error:
        out.append(f"the numeric check ran in part: {result.error}")
    if result.torch is not None and not result.torch.ran:
        out.append(f"the check against PyTorch did not run: {result.torch.error}")
    if result.module is not None and not result.module.ran:
        out.append(f"the TOSA module written was not run: {result.module.error}")
    return out


# -- after a check that failed: localize, reduce -----------------------------------------

def _wants_localization(job: Run, auto: bool) -> bool:
    """``options.localize``; by default when the check failed, in the main job or for --reduce."""
    options = job.options
    return bool(options.localize or (options.localize is None and job.failed and
                                     (auto or options.reduce is not None)))


def _localize(job: Run) -> None:
    from .localize_reduce import localize as localize_sides

    options, res = job.options, job.res
    loc = localize_sides(job.sides, res.check, options.check_settings, given=job.given, budget=options.localize_budget,
                         forced=bool(options.localize))
    if loc is None:
        return
    res.localization = loc
    job.report.check["divergence"] = [d.to_json() for d in loc.divergence]
    job.report.check["localize"] = loc.to_json()
    if options.regions and loc.culprit is not None:
        from .region_pictures import culprit_picture

        res.culprit_picture = culprit_picture(loc.graph or job.model.graph, loc.culprit.node,
                                              [s.node for s in loc.region])
    if options.reduce is not None and loc.culprit is None:
        job.report.warnings.append(f"--reduce: nothing written: no value differs ({loc.note or 'all agree'})")


def _reduce(job: Run) -> None:
    from .numeric.child import RunFault
    from .numeric.reduce import NothingToReduce
    from .localize_reduce import reduce_divergence

    options = job.options
    protect = [job.path, Path(options.against)] if options.against is not None else [job.path, job.output]
    try:
        job.res.reduced = reduce_divergence(job.sides, job.res.localization, Path(options.reduce),
                                            options.check_settings, given=job.given, force=options.force,
                                            protect=protect)
    except (NothingToReduce, RunFault) as e:  # (a fault: the child crashed or ran past its limits)
        job.report.warnings.append(f"--reduce: nothing written: {e}")
        return
    job.report.reduced = job.res.reduced.to_json()


def _reduces(job: Run) -> bool:
    loc = job.res.localization
    return job.options.reduce is not None and loc is not None and loc.culprit is not None


def _violates(job: Run) -> bool:
    return bool(job.res.input_verification.violations)


def _nodes_size(job: Run) -> Dict[str, int]:
    return {"nodes": sum(len(g) for g in job.model.graphs)}


def _against(job: Run) -> bool:
    return job.options.against is not None


# The job, in order. A stage that sets ``done`` ends it.
STAGES: Tuple[Stage, ...] = (
    Stage("load", _read, size=lambda job: {"bytes": _file_size(job.path)}),
    Stage("verify", _verify_input, size=_nodes_size),
    Stage("reduce", _reduce_violation, when=lambda job: _violates(job) and job.options.reduce is not None),
    Stage("check", _compare, when=lambda job: _against(job) and not _violates(job)),
    Stage("localize", _localize, when=lambda job: _against(job) and not _violates(job) and
          _wants_localization(job, auto=False)),
    Stage("reduce", _reduce, when=lambda job: _against(job) and _reduces(job)),
    Stage("verdict", _against_verdict, when=lambda job: _against(job) and not _violates(job), announce=False),
    Stage("stop", _stop_unless_legalizing, when=lambda job: job.options.verify_only or _violates(job),
          announce=False),
    Stage("plan", _plan, announce=False),
    Stage("passes", _rewrite, size=_nodes_size),
    Stage("verify", _verify_output, size=_nodes_size),
    Stage("emit", _render, size=_nodes_size),
    Stage("save", _write, size=_nodes_size),
    Stage("check", _check, when=lambda job: job.options.check),
    Stage("localize", _localize, when=lambda job: job.options.check and _wants_localization(job, auto=True)),
    Stage("reduce", _reduce, when=lambda job: job.options.check and _reduces(job)),
    Stage("save", _commit, announce=False),
)
# A model in memory (``run_model``): nothing read, written or run.
IN_MEMORY: Tuple[Stage, ...] = (
    Stage("verify", _verify_input, size=_nodes_size),
    Stage("stop", _stop_unless_legalizing, when=_violates, announce=False),
    Stage("passes", _rewrite, size=_nodes_size),
    Stage("verify", _verify_output, size=_nodes_size),
)


# -- what the stages share ---------------------------------------------------------------

def verify_model(model: Model, profile: str, assume_dynamic_not_one: bool = False,
                 stage: str = "input") -> VerifyResult:
    """Verify every top-level graph (a TFLite model's subgraphs after the first are
    named in diagnostics by their names)."""
    result = VerifyResult()
    for k, g in enumerate(model.graphs):
        verify(g, profile, stage=stage, result=result, _path=g.name if k else "",
               assume_dynamic_not_one=assume_dynamic_not_one)
    return result


def planned_outputs(path: Path, options: RunOptions) -> List[Tuple[str, Path]]:
    """The files a run of ``path`` writes, as (what it is, path) pairs ("the output
    model", "the tosa output (--emit tosa)"), known before the work from the file's
    content (``importers.reader.sniff``): what the CLI checks before it starts. Empty with
    ``verify_only``, or for a file that will not load (the run says why)."""
    if options.verify_only:
        return []
    try:
        fmt = FORMATS.get(sniff(path))
    except BadInput:
        return []
    if fmt is None or fmt.written is None:
        return []
    native = fmt.written
    output = Path(options.output) if options.output is not None else default_output(path)
    formats = emit_formats.validate(options.emit, native, options.target)
    if native in formats:
        emit_formats.check_output_suffix(output, native)
    paths = emit_formats.emit_paths(output, formats, native)
    return [("the output model" if f == native else f"the {f} output (--emit {f})", p) for f, p in paths.items()]


def _op_counts(model: Model) -> Counter:
    return Counter(n.op for g in model.graphs for n in g.walk() if n.kind == OP)


def _file_size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0  # read_model() says what is wrong with it


def unchecked(result: CheckResult) -> str:
    """Why ``result`` is not a full check (it did not run, or ran in part), or ""."""
    if not result.ran:
        return f"the numeric check did not run: {result.error}"
    if result.error:
        return f"the numeric check ran in part: {result.error}"
    if result.torch is not None and not result.torch.ran:
        return f"the check against PyTorch did not run: {result.torch.error}"
    if result.module is not None and not result.module.ran:
        return f"the TOSA module written was not run: {result.module.error}"
    return ""


def dim_keys(model: Model) -> Optional[List[str]]:
    """The dynamic dims a ``--dim`` may bind in ``model``: a symbol, or ``input[axis]``
    for an anonymous dim (a TFLite model's, of every subgraph); None for a TOSA MLIR
    module, whose dims are its reference's (``--against``: checked where it is read)."""
    return format_of(model).dim_keys(model)


def bindables(model: Model) -> Optional[Tuple[List[str], List[str]]]:
    """What the user's bindings may name in ``model``: its dynamic dims (``dim_keys``)
    and its inputs (by ``--input-shape`` and ``--input``); None for a TOSA MLIR module."""
    keys = dim_keys(model)
    return None if keys is None else (keys, [name for name, _ in format_of(model).declared(model)])


def file_bindables(path: Path, trust_pt2: bool = False) -> Optional[Tuple[List[str], List[str]]]:
    """``bindables`` of the model at ``path`` (an ONNX file's read from its graph inputs
    alone, its weights left where they are), or None when it does not load (its run
    says why)."""
    try:
        if FORMATS.get(sniff(path)) is FORMATS["onnx"]:
            import onnx

            declared = declared_shapes(onnx.load_model(str(path), load_external_data=False))
            return dynamic_keys(declared), [name for name, _ in declared]
        return bindables(read_model(path, trust_pt2=trust_pt2))
    except Exception:  # noqa: BLE001 - that model's own run reports it
        return None


def _where_present(model: Model, options: RunOptions, report: Report) -> RunOptions:
    """A batch's options for ``model``: each --dim, --input-shape and --input that names
    no dim or input of this model left out, and said (``batch.check_bindings`` made sure
    each names one of some model's)."""
    found = bindables(model)
    if found is None:
        return options
    keys, names = found
    inputs = options.inputs if isinstance(options.inputs, dict) else as_arrays(options.inputs)

    for k in (k for k in options.dims if k not in keys):
        report.warnings.append(f"--dim {k}={options.dims[k]}: the model has no dynamic dim '{k}'"
                               f" ({'its dims are: ' + ', '.join(keys) if keys else 'it has none'}): not used here")
    for name in (n for n in [*options.input_shapes, *inputs] if n not in names):
        flag = "--input-shape" if name in options.input_shapes else "--input"
        report.warnings.append(f"{flag} {name}: the model has no input '{name}' (its inputs: "
                               f"{', '.join(repr(n) for n in names) or 'none'}): not used here")
    return replace(options, dims={k: v for k, v in options.dims.items() if k in keys},
                   input_shapes={n: v for n, v in options.input_shapes.items() if n in names},
                   inputs={n: v for n, v in inputs.items() if n in names})


def _user_dims(fmt, model: Model, options: RunOptions, given) -> Dict[str, int]:
    """The dims the user binds (``--dim``, ``--input-shape``, ``--input``), checked
    against the model's inputs before any work (UsageError; a TOSA MLIR module's dims
    are its reference's, checked where the comparison reads them). In the strict
    symbolic mode no dynamic dim is 1: a binding to 1 contradicts it."""
    bound = fmt.user_dims(model, options, given)
    ones = [k for k, v in bound.items() if v == 1]
    if options.assume_dynamic_not_one and ones:
        raise UsageError(f"--assume-dynamic-not-one: no dynamic dim is 1 at run time, but the check would bind"
                         f" '{ones[0]}' to 1")
    return bound


def range_hints(source) -> Dict[str, List[int]]:
    """Per dim, the sizes at the bounds of its range (a PyTorch program's range
    constraints; ``source`` a ``TorchSource`` or None), for the check's search."""
    from .formats.onnx import range_hints as hints

    return hints(source)


def _against_format(fmt, against: Path) -> None:
    """UsageError unless ``--against`` names a reference ``fmt`` is compared with:
    ONNX with ONNX, TFLite with TFLite, TOSA MLIR with TFLite or ONNX."""
    ref = sniff(against)
    if ref not in fmt.against:
        raise UsageError(f"--against compares ONNX with ONNX, TFLite with TFLite, or TOSA MLIR with TFLite or ONNX;"
                         f" not {fmt.name} with {ref}")


def check_tolerance_names(options: RunOptions, names) -> None:
    """UsageError when a per-output tolerance names no output of the model."""
    known = set(names)
    for flag, tol in (("--rtol", options.rtol), ("--atol", options.atol)):
        for name, _ in getattr(tol, "per_output", ()):
            if name not in known:
                raise UsageError(f"{flag} {name}:...: the model has no output '{name}' (its outputs: "
                                 f"{', '.join(sorted(known)) or 'none'})")


def _output_names(model: Model) -> List[str]:
    """The output names of every graph of ``model``: what a per-output tolerance may name."""
    return [n.inputs[0].name for g in model.graphs for n in g.outputs if n.inputs and n.inputs[0] is not None]


def _per_output(options: RunOptions) -> bool:
    return any(getattr(t, "per_output", ()) for t in (options.rtol, options.atol))


def read_golden(options: RunOptions, given) -> "Golden":
    """The stored inputs and reference outputs the options name (the combinations were
    validated with the options)."""
    from .numeric.golden import Golden

    if not options.golden_flags():
        return Golden()
    if given and (options.load_inputs is not None or options.data_loader_script is not None):
        raise UsageError("--input and --load-inputs (or --data-loader-script) both give the inputs: give one")
    return Golden.read(options.load_inputs, options.load_outputs, options.data_loader_script)


def golden_paths(options: RunOptions) -> Tuple[List[Tuple[str, Path]], List[Tuple[str, Path]]]:
    """The golden files a run writes and those it reads, as (what, path) pairs: for the
    CLI's checks before the work (each written file its own, never an input)."""
    writes = [(f"the {what} ({flag})", Path(p)) for what, flag, p in
              (("saved inputs", "--save-inputs", options.save_inputs),
               ("saved outputs", "--save-outputs", options.save_outputs)) if p is not None]
    reads = [(f"the {what} ({flag})", Path(p)) for what, flag, p in
             (("loaded inputs", "--load-inputs", options.load_inputs),
              ("loaded outputs", "--load-outputs", options.load_outputs)) if p is not None]
    if options.data_loader_script is not None:
        from .numeric.golden import parse_script

        reads.append(("the data loader script (--data-loader-script)", parse_script(options.data_loader_script)[0]))
    return writes, reads


def _save_golden(job: Run) -> None:
    """--save-inputs / --save-outputs: what the check fed and got (even when it failed:
    that is what is replayed elsewhere)."""
    options, res = job.options, job.res
    if not options.records:
        return
    from .numeric.golden import REFERENCE_RUN, save_runs

    if not res.check.runs:
        job.report.warnings.append("--save-inputs/--save-outputs: nothing written: the check compared nothing")
        return
    on = job.fmt.runtime  # the runtime the runs came from
    written = save_runs(res.check.runs, job.golden.runner or REFERENCE_RUN.replace("onnxrt", on), options.save_inputs,
                        options.save_outputs, force=options.force, protect=job.path, candidate=f"legalized-{on}")
    job.report.check["saved"] = written
