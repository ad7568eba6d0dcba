"""The main job as a driver over typed records: each stage takes the record the one
before it made and returns its own (``job``: ``Prepared`` -> ``Read`` -> ``Verified`` ->
``Legalized`` -> ``Rendered`` -> ``Staged`` -> ``Checked``), each timed by the driver.
What a run knows before it reads the model (the options validated, the target, the
input's kind, the output plan) is made once, by ``prepare``: the CLI's checks before the
work read that ``Prepared`` and hand it to ``run``. What differs by input kind is asked of
the model's ``formats.Format``. The CLI only parses and prints; the library API calls
the same stages."""

from __future__ import annotations

import operator
import os
import tempfile
import time
from contextlib import ExitStack, nullcontext
from dataclasses import replace
from pathlib import Path
from collections import Counter
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Tuple, TypeVar, Union

from . import emit_formats
from .numeric.user_inputs import as_arrays, dynamic_keys
from .numeric.results import CheckResult
from .errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_VIOLATIONS, BadInput, LegalizeError, UsageError  # noqa: F401 - the exit statuses, re-exported
from .formats import Sides, Subject, default_output, format_of, is_output, of_kind  # noqa: F401 - re-exported
from .importers.reader import read_model, sniff
from .ir.gc import paused_gc
from .kinds.onnx.kind import KIND as ONNX
from .ir.graph import OP, op_name
from .job import (Checked, Compared, Legalized, Outputs, Prepared, Read, Rendered, RunOptions, RunResult, StageCallback,  # noqa: F401 - re-exported
                  Staged, Valid, Verified, advance)
from .model import Model
from .report import STAT_KEYS, Report, worse_for_target
from .target_passes import legalize_for
from .verifier import VerifyResult, verify

if TYPE_CHECKING:
    from .numeric.golden import Golden

R = TypeVar("R")


# -- the driver -------------------------------------------------------------------------

def prepare(path: Path, options: Union[RunOptions, Valid], sniffed: Union[str, BadInput, None] = None) -> Prepared:
    """What a run of ``path`` knows before it reads the model, each made once: the
    options validated (unless ``options`` is ``Valid`` already), the target they name,
    the input's kind (``sniffed``: what ``sniff`` found, or the BadInput it raised, where
    the caller asked it already) and where each format is written. A plan that fails
    (an --emit the target does not write, an output suffix of another format) keeps its
    error: the CLI raises it before the work (``Prepared.output_plan``), the run where it
    would write."""
    valid = options if isinstance(options, Valid) else options.validate()
    options = valid.options
    if sniffed is None:
        try:
            sniffed = sniff(path)
        except BadInput as e:
            sniffed = e
    kind, refused = (None, sniffed) if isinstance(sniffed, BadInput) else (sniffed, None)
    outputs, unplanned = None, None
    if not options.verify_only and refused is None:  # (a file that will not load: its read says why)
        try:
            outputs = _outputs(path, options, kind)
        except LegalizeError as e:
            unplanned = e
    return Prepared(path, options, valid.target, kind, refused, outputs, unplanned)


def _outputs(path: Path, options: RunOptions, kind: Optional[str]) -> Outputs:
    """The output plan: the legalized model's path, and where each format is written
    (none for a file that will not load, or a kind that is verified only)."""
    output = Path(options.output) if options.output is not None else default_output(path, kind)
    fmt = of_kind(kind)
    if fmt is None or fmt.written is None:
        return Outputs(output)
    native = fmt.written
    formats = emit_formats.validate(options.emit, native, options.target)
    if native in formats:
        emit_formats.check_output_suffix(output, native)
    return Outputs(output, native, tuple(formats), emit_formats.emit_paths(output, formats, native))


def run(path: Path, options: Union[RunOptions, Prepared], on_stage: Optional[StageCallback] = None) -> RunResult:
    """Load, verify, and (unless ``verify_only``) legalize, verify the output, check it
    and write it. Raises LegalizeError for bad input; violations and mismatches are in
    the result, with exit code 1, and then nothing is written. Every model runs in a
    child process under ``options.run_timeout`` and ``run_memory``. ``options`` may be
    the ``Prepared`` run ``prepare`` made of ``path`` (the CLI's, after its checks)."""
    from .numeric import child

    plan = options if isinstance(options, Prepared) else prepare(Path(path), options)
    options = plan.options
    with child.limited(options.run_timeout, options.run_memory), ExitStack() as stack:
        if options.checks and child.available():
            # what the run child may read: the model's folder and the output's (where the
            # legalized model is staged for the check), --against's
            child.readable(plan.path, options.output or plan.path, *([options.against] if options.against else []))
            child.prewarm()  # it starts while the model loads and is legalized
        res = _job(plan, _Timer(on_stage), stack)
    if options.reduce is not None and res.reduced is None and \
            not any(w.startswith("--reduce:") for w in res.report.warnings):
        res.report.warnings.append("--reduce: nothing written: no violation, and no differing output, was found")
    return res


def _job(plan: Prepared, step: "_Timer", stack: ExitStack) -> RunResult:
    """The stages, in order; each returns the next record, or None where the job ends
    (a violation, a module over its level)."""
    options = plan.options
    read = step("load", lambda _: _read(plan, step), plan, {"bytes": _file_size(plan.path)})
    verified = step("verify", _verify_input, read, _nodes_size(read))
    res = verified.res
    if verified.verification.violations:  # not legalized
        if options.reduce is not None:
            step("reduce", _reduce_violation, verified)
        return res
    if options.against is not None:  # --verify-only --against: compared, not legalized
        compared = step("check", _compare, verified)
        if _wants_localization(compared, auto=False):
            step("localize", _localize, compared)
        if _reduces(compared):
            step("reduce", _reduce, compared)
        _against_verdict(compared)
        return res
    if options.verify_only:
        return res
    outputs = plan.output_plan()  # (an --emit, an output suffix: refused where the run would write)
    emit_formats.check_paths(outputs.paths, force=options.force, protect=plan.path)
    legalized = step("passes", lambda v: _rewrite(v, outputs), verified, _nodes_size(verified))
    if legalized is None or not step("verify", _verify_output, legalized, _nodes_size(legalized)):
        return res
    rendered = step("emit", _render, legalized, _nodes_size(legalized))
    if rendered is None:
        return res
    staged = step("save", lambda r: _write(r, stack), rendered, _nodes_size(rendered))
    if options.check:
        checked = step("check", _check, staged)
        if _wants_localization(checked, auto=True):
            step("localize", _localize, checked)
        if _reduces(checked):
            step("reduce", _reduce, checked)
    else:
        checked = advance(staged, Checked, failed=False, sides=None)
    _commit(checked)
    return res


def run_model(model: Model, options: RunOptions) -> RunResult:
    """The stages of ``run`` that need no file, on a model in memory (the library API's
    ``legalize``): verify, legalize in place, verify the output."""
    valid = options.validate()
    plan = Prepared(Path(model.source or "<memory>"), options, valid.target, None)
    fmt = format_of(model)
    profile = options.profile or fmt.input_profile
    report = Report(input=str(plan.path), format=fmt.name, target=options.target, profile=profile)
    step = _Timer(None)
    report.timings_s = step.timings
    res = RunResult(report, model, timings=step.timings)
    read = Read(prepared=plan, options=options, model=model, fmt=fmt, profile=profile, golden=None,
                given={}, dims={}, res=res)
    verified = step("verify", _verify_input, read, _nodes_size(read))
    if verified.verification.violations:
        return res
    legalized = step("passes", lambda v: _rewrite(v, None), verified, _nodes_size(verified))
    if legalized is not None:
        step("verify", _verify_output, legalized, _nodes_size(legalized))
    return res


class _Timer:
    """Runs a stage: announces it to ``on_stage`` with what is known of its size, and
    adds its seconds to ``timings`` under its name. The stages that build, walk or
    rewrite the IR run with the cyclic collector paused (``ir.gc``): the check, which
    runs the models, does not."""

    def __init__(self, on_stage: Optional[StageCallback]):
        self.on_stage = on_stage
        self.timings: Dict[str, float] = {}

    def __call__(self, name: str, fn: Callable[..., R], record, size: Optional[Dict[str, int]] = None) -> R:
        if self.on_stage is not None:
            self.on_stage(name, size or {})
        t0 = time.perf_counter()
        try:
            with nullcontext() if name == "check" else paused_gc():
                return fn(record)
        finally:
            self.timings[name] = self.timings.get(name, 0.0) + time.perf_counter() - t0


def stages(options: RunOptions) -> List[str]:
    """The stages ``run`` announces to ``on_stage``, in order, when nothing stops it early
    (a violation, a failed check)."""
    if options.verify_only:
        return ["load", "verify"] + (["check"] if options.against is not None else [])
    return ["load", "verify", "passes", "verify", "emit", "save"] + (["check"] if options.check else [])


# -- read and verify ---------------------------------------------------------------------

def _read(plan: Prepared, step: _Timer) -> Read:
    """Read the model and what the options name for it, each checked against the model
    before any work: its format's abilities, the bindings, the tolerances."""
    options, path = plan.options, plan.path
    given = as_arrays(options.inputs)
    golden = read_golden(options, given)
    if plan.refused is not None:  # what sniff said of the file, when the plan was made
        raise plan.refused
    model = read_model(path, trust_pt2=options.trust_pt2, kind=plan.kind)
    fmt = format_of(model)
    profile = options.profile or fmt.input_profile
    if options.trust_pt2 and not fmt.unpickled and not options.dims_where_present:  # (a batch's may hold .pt2s)
        raise UsageError(f"--trust-pt2 loads a .pt2 with torch's unsafe unpickling; {path} is {fmt.title}, not a"
                         " .pt2: leave it out")
    if fmt.written is None and not options.verify_only:
        raise UsageError(f"{path}: a {fmt.title} module is verified, not legalized: add --verify-only")
    against_kind = None
    if options.against is not None:
        if not options.verify_only:
            raise UsageError("--against compares MODEL with another model: add --verify-only")
        against_kind = _against_format(fmt, Path(options.against))
    if options.golden_flags() and not fmt.golden:
        raise UsageError(f"{options.golden_flags()[0]}: golden data feeds the check of an ONNX, TFLite or .pt2"
                         f" model, not of a {fmt.name} model")
    if options.reduce is not None and not fmt.reduces:
        raise UsageError(f"--reduce writes ONNX or TOSA MLIR subgraphs: a {fmt.name} model is not reduced")
    names = _output_names(model)
    reference = None
    if options.against is not None and _per_output(options):  # the reference's outputs too
        reference = read_model(Path(options.against), kind=against_kind)
        names += _output_names(reference)
    check_tolerance_names(options, names)
    report = Report(input=str(path), format=fmt.name, target=options.target, profile=profile)
    report.warnings.extend(model.warnings)
    report.timings_s = step.timings
    res = RunResult(report, model, timings=step.timings)
    if options.dims_where_present:
        options = _where_present(model, options, report)
        given = as_arrays(options.inputs)
    return Read(prepared=plan, options=options, model=model, fmt=fmt, profile=profile,
                golden=golden, given=given, dims=_user_dims(fmt, model, options, given), reference=reference, res=res)


def _verify_input(read: Read) -> Verified:
    result = verify_model(read.model, read.profile, read.options.assume_dynamic_not_one)
    read.report.add_verification(result, "input", read.model.graph)
    read.res.input_verification = result
    if result.violations:
        read.res.exit_code = EXIT_VIOLATIONS
    return advance(read, Verified)


def _reduce_violation(verified: Verified) -> None:
    """--reduce of an input that violates the trait: the smallest subgraph with its first violation."""
    from .numeric.reduce import NothingToReduce
    from .localize_reduce import reduce_violation as reduce_first

    res, options = verified.res, verified.options
    try:
        res.reduced = reduce_first(verified.model, verified.fmt, verified.path, verified.report.violations[0],
                                   verified.profile, Path(options.reduce), force=options.force,
                                   protect=[verified.path])
    except NothingToReduce as e:
        verified.report.warnings.append(f"--reduce: nothing written: {e}")
        return
    verified.report.reduced = res.reduced.to_json()


def _subject(rec: Verified, **made) -> Subject:
    """What the format's check or comparison reads of the run."""
    return Subject(rec.path, rec.model, rec.options.check_settings, dims=rec.dims, given=rec.given, golden=rec.golden,
                   constraints=rec.verification.constraints, profile=rec.target.profile.name,
                   reference=rec.reference, **made)


def _compare(verified: Verified) -> "Compared":
    """``--against``: the model compared with its reference; one that cannot run is
    never a pass (exit 2)."""
    from .numeric.child import RunFault

    res, against = verified.res, Path(verified.options.against)
    try:
        res.check = verified.fmt.compare(_subject(verified), against)
    except RunFault as e:  # a crash, or a run past its memory or time: the comparison did not run
        raise BadInput(str(e)) from None
    if not res.check.ran:
        e = BadInput(f"{verified.path}: the comparison with {against} did not run: {res.check.error}")
        e.multiline = True  # MLIR's diagnostic, line by line
        raise e
    verified.report.check = res.check.to_json()
    # the model against its reference
    return advance(verified, Compared, failed=not res.check.ok,
                   sides=Sides(verified.fmt, verified.path, against, verified.model.graph))


def _against_verdict(compared: "Compared") -> None:
    res = compared.res
    if compared.options.require_check and unchecked(res.check):
        res.unchecked = unchecked(res.check).replace("the numeric check", "the comparison")
        res.exit_code = EXIT_VIOLATIONS
    elif not res.check.ok:
        res.exit_code = EXIT_VIOLATIONS


# -- legalize, emit, write, check, commit ------------------------------------------------

def _rewrite(verified: Verified, outputs: Optional[Outputs]) -> Optional[Legalized]:
    """The target's passes, with what its backend refuses before and after; None where
    the shapes made static break a runtime constraint (the model violates the trait)."""
    options, model, report, fmt = verified.options, verified.model, verified.report, verified.fmt
    spec, dims = verified.target, verified.dims
    untaken = spec.untaken_dtypes(model.graphs)
    if untaken is not None:  # before any work: no pass makes a float model integer
        raise UsageError(f"{verified.path}: --target {spec.name}: {untaken}")
    verified.res.ops_before = _op_counts(model)
    model.constraints = verified.verification.constraints  # what the report lists, for emitters to assert
    over = spec.interface_refusals(model.graph, options.level)
    if over:  # before any work: nothing is written
        raise BadInput(f"target '{spec.name}' takes rank <= {spec.rank_limit(options.level)}, and no legal form"
                       f" keeps the model's interface: {', '.join(over)}")
    refused_before = spec.refused(model.graphs, options.level)
    specialize = False
    if spec.static_shapes and fmt.static_for_target:
        specialize = True
    elif options.static or (spec.backend is not None and dims):  # a backend takes static shapes
        if not fmt.static_shapes:
            if options.static:
                raise UsageError(f"--static makes a TFLite model's shapes static; {verified.path} is {fmt.name}")
        else:
            specialize = True
    if specialize:
        dims, said = fmt.specialize(model, verified.path, dims)
        if said is not None:
            report.warnings.append(said)
            if _constraints_at_bound_sizes(verified):
                return None
    before = None
    if options.regions:
        from .region_pictures import snapshot

        before = snapshot(model)
    done = model.legalized = legalize_for(model, spec, debug=options.debug,
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

        verified.res.regions = before.regions(model, limit=PICTURE_LIMIT)
    report.warnings.extend(done.warnings)
    report.stats.update({key: int(done.stats[key]) for key in STAT_KEYS if key in done.stats})
    verified.res.ops_after = _op_counts(model)
    if model.aten is not None:  # a torch.export program: the fixes to its dynamic_shapes that make it legal
        _suggest_fixes(verified, spec)
    if spec.backend is None and model.aten is not None:  # a torch.export program: what its lowering left
        report.warnings.extend(f"node '{r['node']}' ({r['op']}): target '{spec.name}' refuses it:"
                               f" {'; '.join(r['reasons'])}" for r in report.target_rules["refused_after"])
    if spec.backend is not None:  # each op the backend still refuses, in its words
        tool = report.target_rules["profile"]["backend"]
        report.warnings.extend(f"node '{r['node']}' ({r['op']}{', as ' + r['as'] if 'as' in r else ''}): {tool} refuses"
                               f" it: {'; '.join(r['reasons'])}" for r in report.target_rules["refused_after"])
    return advance(verified, Legalized, dims=dims, outputs=outputs)


def _suggest_fixes(verified: Verified, spec) -> None:
    """The report's ``suggested_fixes`` (torch.export's form) where the program's
    legality depends on its dynamic dims: what the target still refuses over them, the
    runtime constraints, a target that takes static shapes only."""
    from .kinds.pt2.suggested_fixes import for_model, to_json

    model, report = verified.model, verified.report
    static = f"target '{spec.name}' takes static shapes only" if spec.static_shapes else None
    dims, fixes = for_model(model, model.aten.original, refused=report.target_rules["refused_after"],
                            constraints=model.constraints, static=static)
    if fixes:
        report.suggested_fixes = to_json(dims, fixes)


def _constraints_at_bound_sizes(verified: Verified) -> bool:
    """After the shapes were made static: the runtime constraints were on dims now static,
    so they are those at the bound sizes (none, or a broadcast the sizes break: then the
    model violates the trait, and the job ends)."""
    model, report = verified.model, verified.report
    bound = verify_model(model, verified.profile, verified.options.assume_dynamic_not_one)
    model.constraints = bound.constraints
    report.set_constraints(bound.constraints, model.graph)
    if not bound.violations:
        return False
    for d in bound.violations:
        d.stage = "input"
        report.violations.append(d.to_json())
    verified.res.exit_code = EXIT_VIOLATIONS
    return True


def _verify_output(legalized: Legalized) -> bool:
    """The output under the target's profile, and the target's verdict; whether the job goes on."""
    res, report = legalized.res, legalized.report
    result = verify_model(legalized.model, legalized.target.profile, stage="output")
    res.output_verification = result
    report.add_verification(result, "output")
    rules = report.target_rules or {}
    partly_placed = bool(rules.get("device") and rules.get("refused_after"))  # not all on the target's device
    if result.violations or (partly_placed and not legalized.options.allow_fallback) or worse_for_target(rules):
        res.exit_code = EXIT_VIOLATIONS  # (worse for the target: never, --allow-fallback or not)
        return False
    return True


def _render(legalized: Legalized) -> Optional[Rendered]:
    """Every format but the model's own, made before anything is written; an
    out-of-level module is never written (None)."""
    options, model, spec, formats = legalized.options, legalized.model, legalized.target, legalized.outputs.formats
    # a TFLite model's ONNX-op form, legalized, made once here: the MLIR emitters read
    # it, --emit onnx writes it, the check runs it
    form = emit_formats.onnx_op_form(model, list(formats), spec, options.level)
    sources = {options.target: form.model} if form is not None else \
        emit_formats.mlir_sources(model, list(formats), options.level)
    made = emit_formats.render(model, list(formats), legalized.fmt.written, legalized.dims, sources=sources, form=form)
    over = emit_formats.level_diagnostics(model, made, spec, options.level)
    if over.violations:
        res = legalized.res
        nodes = res.output_verification.nodes
        res.output_verification = over
        legalized.report.add_verification(over, "output")
        legalized.report.stats["nodes_out"] = nodes
        res.exit_code = EXIT_VIOLATIONS
        return None
    return advance(legalized, Rendered, made=made, onnx_form=form)


def _write(rendered: Rendered, stack: ExitStack) -> Staged:
    """The model in its own format under a temporary name beside the output (in a
    temporary folder when only other formats are asked for): the check runs it there."""
    fmt, where = rendered.fmt, rendered.outputs.output
    if fmt.written not in rendered.outputs.formats:
        where = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=".legalize-", dir=where.parent))) / where.name
    staged = stack.enter_context(fmt.stage(rendered.model, where, force=rendered.options.force))
    return advance(rendered, Staged, stack=stack, staged=staged, written=staged.path)


def _check(staged: Staged) -> Checked:
    """The legalized model, as written, against the input; and the TOSA module written
    beside it (``--emit tosa``), run itself (``_check_module``)."""
    res, report, golden = staged.res, staged.report, staged.golden
    subject = _subject(staged, onnx_form=staged.onnx_form)
    res.check = staged.fmt.check(subject, staged.written)
    if res.check.ok and isinstance(staged.made.get("tosa"), str):
        res.check.module = _check_module(staged, staged.made["tosa"])
    report.check = res.check.to_json()
    report.warnings.extend(res.check.notes + golden.notes)
    _save_golden(staged)
    return advance(staged, Checked, failed=res.check.ran and not res.check.ok,
                   sides=staged.fmt.sides(subject, staged.written),
                   given=golden.failing_feeds(res.check) or staged.given)  # what localization feeds


def _check_module(staged: Staged, text: str) -> CheckResult:
    """The TOSA module ``--emit tosa`` writes, run on IREE against the original model as
    ``--against`` runs one, at the dims the check binds: not run (and the verdict says
    so) where IREE is not installed or does not run the original's format."""
    from .errors import CheckUnavailable
    from .numeric.against import check_against
    from .numeric.child import RunFault

    settings = replace(staged.options.check_settings, record=False)
    # A quantized model's module computes its quantized ops as TOSA rescales them: a float
    # output downstream agrees within one step of the coarsest quantization (as the ONNX
    # form's, on onnxruntime, does).
    step = max((max(v.quant.scale) for g in staged.model.graphs for n in g.nodes() for v in n.outputs
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
            result = check_against(module, staged.path, settings, given=staged.given, dims=staged.dims)
        except CheckUnavailable as e:
            return CheckResult(False, "IREE", error=str(e))
        except RunFault as e:  # a crash, or a run past its memory or time: it did not run
            return CheckResult(False, "IREE", error=str(e))
    result.provider = f"the TOSA module on {result.provider}"
    return result


def _commit(checked: Checked) -> None:
    """Give the written files their names, unless the check failed (exit 1, nothing
    written) or, with --require-check, did not run fully."""
    res, report, outputs, native = checked.res, checked.report, checked.outputs, checked.fmt.written
    if res.check is not None:
        if checked.failed or (checked.options.require_check and unchecked(res.check)):
            res.unchecked = "" if checked.failed else unchecked(res.check)
            res.exit_code = EXIT_VIOLATIONS
            return
        report.warnings.extend(_unchecked_warnings(res.check))
    if native in outputs.formats:
        checked.staged.accept()
    checked.stack.close()  # the model takes its name (or its temporary folder goes)
    emit_formats.write_extra(dict(outputs.paths), checked.made, native, force=checked.options.force,
                             protect=checked.path)
    report.outputs = {f: str(p) for f, p in outputs.paths.items()}
    report.output = str(outputs.paths[outputs.formats[0]])


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

def _wants_localization(rec: Union[Checked, "Compared"], auto: bool) -> bool:
    """``options.localize``; by default when the check failed, in the main job or for --reduce."""
    options = rec.options
    return bool(options.localize or (options.localize is None and rec.failed and
                                     (auto or options.reduce is not None)))


def _localize(rec: Union[Checked, "Compared"]) -> None:
    from .localize_reduce import localize as localize_sides

    options, res = rec.options, rec.res
    loc = localize_sides(rec.sides, res.check, options.check_settings, given=rec.given, budget=options.localize_budget,
                         forced=bool(options.localize))
    if loc is None:
        return
    res.localization = loc
    rec.report.check["divergence"] = [d.to_json() for d in loc.divergence]
    rec.report.check["localize"] = loc.to_json()
    if options.regions and loc.culprit is not None:
        from .region_pictures import culprit_picture

        res.culprit_picture = culprit_picture(loc.graph or rec.model.graph, loc.culprit.node,
                                              [s.node for s in loc.region])
    if options.reduce is not None and loc.culprit is None:
        rec.report.warnings.append(f"--reduce: nothing written: no value differs ({loc.note or 'all agree'})")


def _reduce(rec: Union[Checked, "Compared"]) -> None:
    from .numeric.child import RunFault
    from .numeric.reduce import NothingToReduce
    from .localize_reduce import reduce_divergence

    options = rec.options
    protect = [rec.path, Path(options.against)] if options.against is not None else [rec.path, rec.outputs.output]
    try:
        rec.res.reduced = reduce_divergence(rec.sides, rec.res.localization, Path(options.reduce),
                                            options.check_settings, given=rec.given, force=options.force,
                                            protect=protect)
    except (NothingToReduce, RunFault) as e:  # (a fault: the child crashed or ran past its limits)
        rec.report.warnings.append(f"--reduce: nothing written: {e}")
        return
    rec.report.reduced = rec.res.reduced.to_json()


def _reduces(rec: Union[Checked, "Compared"]) -> bool:
    loc = rec.res.localization
    return rec.options.reduce is not None and loc is not None and loc.culprit is not None


def _nodes_size(rec: Read) -> Dict[str, int]:
    return {"nodes": sum(len(g) for g in rec.model.graphs)}


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


def _op_counts(model: Model) -> Counter:
    """How many nodes of each op (``Node.op``) the model's graphs and subgraphs hold:
    counted by (kind, domain, op type) in C, named afterwards (one Python step a node
    was 4% of a long chain's run)."""
    keyed: Counter = Counter()
    for top in model.graphs:
        for g in top.graphs():
            keyed.update(map(_OP_KEY, g.unordered_nodes()))
    out: Counter = Counter()
    for (kind, domain, op_type), k in keyed.items():
        if kind == OP:
            out[op_name(domain, op_type)] += k
    return out


_OP_KEY = operator.attrgetter("kind", "domain", "op_type")


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
        if sniff(path) == ONNX.name:  # (read from its graph inputs alone)
            import onnx

            from .numeric.user_inputs import declared_shapes

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
    bound = fmt.user_dims(model, options.dims, options.input_shapes, given)
    ones = [k for k, v in bound.items() if v == 1]
    if options.assume_dynamic_not_one and ones:
        raise UsageError(f"--assume-dynamic-not-one: no dynamic dim is 1 at run time, but the check would bind"
                         f" '{ones[0]}' to 1")
    return bound


def range_hints(source) -> Dict[str, List[int]]:
    """Per dim, the sizes at the bounds of its range (a PyTorch program's range
    constraints; ``source`` a ``TorchSource`` or None), for the check's search."""
    from .kinds.onnx.format import range_hints as hints

    return hints(source)


def _against_format(fmt, against: Path) -> str:
    """The kind of the reference ``--against`` names (``sniff``'s), or UsageError unless
    ``fmt`` is compared with it: ONNX with ONNX, TFLite with TFLite, TOSA MLIR with
    TFLite or ONNX."""
    ref = sniff(against)
    if ref not in fmt.against:
        raise UsageError(f"--against compares ONNX with ONNX, TFLite with TFLite, or TOSA MLIR with TFLite or ONNX;"
                         f" not {fmt.name} with {ref}")
    return ref


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


def _save_golden(staged: Staged) -> None:
    """--save-inputs / --save-outputs: what the check fed and got (even when it failed:
    that is what is replayed elsewhere)."""
    options, res = staged.options, staged.res
    if not options.records:
        return
    from .numeric.golden import REFERENCE_RUN, save_runs

    if not res.check.runs:
        staged.report.warnings.append("--save-inputs/--save-outputs: nothing written: the check compared nothing")
        return
    on = staged.fmt.runtime  # the runtime the runs came from
    written = save_runs(res.check.runs, staged.golden.runner or REFERENCE_RUN.replace("onnxrt", on),
                        options.save_inputs, options.save_outputs, force=options.force, protect=staged.path,
                        candidate=f"legalized-{on}")
    staged.report.check["saved"] = written
