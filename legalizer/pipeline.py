"""The stages of one run, timed, feeding one Report. The CLI only parses and prints."""

from __future__ import annotations

import os
import tempfile
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from collections import Counter
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Tuple

from . import emit
from .check import ATOL, BUDGET, RTOL
from .check.given import as_arrays, check_dtypes, dynamic_keys, user_dims
from .check.ort import CheckResult, check, choices_from_constraints, declared_shapes
from .check.search import sizes_in_range
from .errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_VIOLATIONS, BadInput, UsageError  # noqa: F401 - the exit statuses, re-exported
from .exporters.onnx_form import write_model
from .importers.reader import read_model, sniff
from .ir.gc import paused_gc
from .ir.graph import OP
from .model import Model
from .report import STAT_KEYS, Report
from .targets import TARGETS
from .transform import legalize
from .verify import VerifyResult, verify

# Imported where a run needs them (docs/architecture.md, "Start-up"): the TFLite check for a TFLite
# model, the diagnosis for a localization or --reduce, the regions for --html.
if TYPE_CHECKING:
    from .check.golden import Golden
    from .check.localize import Localization
    from .check.reduce import Reduced
    from .regions import Picture, Regions

# Called as each stage starts, with what is known of its size: "load" gets
# {"bytes": file size}, "verify" {"nodes": top-level node count}. The CLI draws
# progress from it; the API ignores it.
StageCallback = Callable[[str, Dict[str, int]], None]


@dataclass
class RunOptions:
    target: str = "tosa"
    level: Optional[str] = None  # the target's level (TOSA: 8k, the default, or none)
    profile: Optional[str] = None  # default: mlir; tosa for a TOSA MLIR input
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
    emit: List[str] = field(default_factory=list)  # formats to write (default: the input's)
    against: Optional[Path] = None  # a TOSA MLIR input: run it and compare with this model
    regions: bool = False  # record the rewritten regions (for the HTML report)
    trust_pt2: bool = False  # load a .pt2 with torch's unsafe unpickling (importers.pt2_safety)
    require_check: bool = False  # a check that did not run, or ran in part, fails the run (exit 1)
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


@dataclass
class RunResult:
    report: Report
    model: Optional[Model] = None
    input_verification: Optional[VerifyResult] = None
    exit_code: int = EXIT_OK
    timings: Dict[str, float] = field(default_factory=dict)
    output_verification: Optional[VerifyResult] = None
    check: Optional[CheckResult] = None
    ops_before: Counter = field(default_factory=Counter)
    ops_after: Counter = field(default_factory=Counter)
    regions: Optional[Regions] = None  # with RunOptions.regions, once legalized
    unchecked: str = ""  # with RunOptions.require_check: why the check did not run fully (exit 1)
    localization: Optional[Localization] = None  # where the candidate starts to differ
    reduced: Optional[Reduced] = None  # --reduce: what was written
    culprit_picture: Optional[Picture] = None  # with RunOptions.regions: the localization's culprit, drawn


class _CheckFailed(Exception):
    """Raised inside the save to keep a model that computes something else unwritten."""


def is_output(path) -> bool:
    """Whether ``path`` is named as legalize names what it writes (``<stem>.legal.<ext>``,
    ``<stem>.legal.tosa.mlir``, ...): an output, not a model to legalize."""
    return ".legal." in Path(path).name


def default_output(path: Path) -> Path:
    """``model.onnx`` -> ``model.legal.onnx`` beside it; ``model.pt2`` (PyTorch, whose
    legal form is ONNX) -> ``model.legal.onnx``."""
    suffix = path.suffix if path.suffix and path.suffix != ".pt2" else ".onnx"
    return path.with_name(f"{path.stem if path.suffix else path.name}.legal{suffix}")


def planned_outputs(path: Path, options: RunOptions) -> List[Tuple[str, Path]]:
    """The files a run of ``path`` writes, as (what it is, path) pairs ("the output
    model", "the tosa output (--emit tosa)"), known before the work from the file's
    content (``importers.reader.sniff``): what the CLI checks before it starts. Empty with
    ``verify_only``, or for a file that will not load (the run says why)."""
    if options.verify_only:
        return []
    try:
        native = {"onnx": "onnx", "pt2": "onnx", "tflite": "tflite"}.get(sniff(path))
    except BadInput:
        return []
    if native is None:
        return []
    output = Path(options.output) if options.output is not None else default_output(path)
    formats = emit.validate(options.emit, native, options.target)
    if native in formats:
        emit.check_output_suffix(output, native)
    paths = emit.emit_paths(output, formats, native)
    return [("the output model" if fmt == native else f"the {fmt} output (--emit {fmt})", p)
            for fmt, p in paths.items()]


def _op_counts(model: Model) -> Counter:
    return Counter(n.op for g in model.graphs for n in g.walk() if n.kind == OP)


def _nodes(model: Model) -> int:
    return sum(len(g) for g in model.graphs)


def _specialize(path: Path, model: Model, options: RunOptions, dims: Dict[str, int], report: Report) -> bool:
    """``--static``, or dims bound for a target whose backend takes static shapes only:
    the model's shapes made static (``check.static_shapes``). Whether any dim was bound."""
    wanted = options.static or (TARGETS[options.target].backend is not None and bool(dims))
    if not wanted:
        return False
    if model.format != "tflite":
        if options.static:
            raise UsageError(f"--static makes a TFLite model's shapes static; {path} is {model.format}")
        return False
    from .check.static_shapes import specialize_tflite

    done = specialize_tflite(model, path, dims)
    if done.bound:
        report.warnings.append("shapes made static at " + ", ".join(f"{k}={v}" for k, v in done.bound.items())
                               + f": {done.shapes_set} tensor shapes, {done.folded} shape values folded")
    return bool(done.bound)


def verify_model(model: Model, profile: str, assume_dynamic_not_one: bool = False,
                 stage: str = "input") -> VerifyResult:
    """Verify every top-level graph (a TFLite model's subgraphs after the first are
    named in diagnostics by their names)."""
    result = VerifyResult()
    for k, g in enumerate(model.graphs):
        verify(g, profile, stage=stage, result=result, _path=g.name if k else "",
               assume_dynamic_not_one=assume_dynamic_not_one)
    return result


@contextmanager
def _timed(timings: Dict[str, float], stage: str, on_stage: Optional[StageCallback],
           **size: int) -> Iterator[None]:
    """Time a stage; the stages that build, walk or rewrite the IR run with the cyclic
    collector paused (``ir.gc``): the check, which runs the models, does not."""
    if on_stage is not None:
        on_stage(stage, size)
    t0 = time.perf_counter()
    try:
        with nullcontext() if stage == "check" else paused_gc():
            yield
    finally:
        timings[stage] = timings.get(stage, 0.0) + time.perf_counter() - t0


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
    return ""


def _declared(model: Model):
    """``check.given.Declared`` of the inputs the user's shapes and arrays name: an ONNX
    (or .pt2's ONNX export) model's fed graph inputs, a TFLite model's first subgraph's."""
    if model.format == "tflite":
        from .check.tflite import declared_shapes as tflite_declared_shapes

        return tflite_declared_shapes(model.graph)
    return declared_shapes(model.torch.onnx if model.torch is not None else model.proto)


def _input_types(model: Model) -> Dict[str, int]:
    """The ONNX element type of each input ``_declared`` names (0 where unknown)."""
    if model.format == "tflite":
        from .ir.dtypes import elem_type

        return {n.output.name: elem_type(n.output.type.dtype) for n in model.graph.inputs}
    proto = model.torch.onnx if model.torch is not None else model.proto
    return {vi.name: vi.type.tensor_type.elem_type for vi in proto.graph.input if vi.type.HasField("tensor_type")}


def dim_keys(model: Model) -> Optional[List[str]]:
    """The dynamic dims a ``--dim`` may bind in ``model``: a symbol, or ``input[axis]``
    for an anonymous dim (a TFLite model's, of every subgraph); None for a TOSA MLIR
    module, whose dims are its reference's (``--against``: checked where it is read)."""
    if model.format == "mlir":
        return None
    if model.format == "tflite":
        from .check.tflite import declared_shapes as tflite_declared_shapes

        return dynamic_keys([d for g in model.graphs for d in tflite_declared_shapes(g)])
    return dynamic_keys(_declared(model))


def bindables(model: Model) -> Optional[Tuple[List[str], List[str]]]:
    """What the user's bindings may name in ``model``: its dynamic dims (``dim_keys``)
    and its inputs (by ``--input-shape`` and ``--input``); None for a TOSA MLIR module."""
    keys = dim_keys(model)
    return None if keys is None else (keys, [name for name, _ in _declared(model)])


def file_bindables(path: Path, trust_pt2: bool = False) -> Optional[Tuple[List[str], List[str]]]:
    """``bindables`` of the model at ``path`` (an ONNX file's read from its graph inputs
    alone, its weights left where they are), or None when it does not load (its run
    says why)."""
    try:
        if sniff(path) == "onnx":
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
    found = bindables(model) if options.dims_where_present else None
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


def _user_dims(model: Model, options: RunOptions, given: Dict[str, Any]) -> Dict[str, int]:
    """The dims the user binds (``--dim``, ``--input-shape``, ``--input``), checked
    against the model's inputs before any work (UsageError). A TOSA MLIR module's dims
    are its reference's (``--against``), checked where the comparison reads them. In the
    strict symbolic mode no dynamic dim is 1: a binding to 1 contradicts it."""
    if model.format == "mlir":
        if options.input_shapes:
            raise UsageError("--input-shape binds the inputs of an ONNX, TFLite or .pt2 model; a TOSA MLIR"
                             " module's comparison (--against) takes arrays with --input")
        bound = dict(options.dims)
    else:
        bound = user_dims(_declared(model), options.dims, options.input_shapes, given, dim_keys(model))
        check_dtypes(_input_types(model), given)
    ones = [k for k, v in bound.items() if v == 1]
    if options.assume_dynamic_not_one and ones:
        raise UsageError(f"--assume-dynamic-not-one: no dynamic dim is 1 at run time, but the check would bind"
                         f" '{ones[0]}' to 1")
    return bound


def range_hints(source) -> Dict[str, List[int]]:
    """Per dim, the sizes at the bounds of its range (a PyTorch program's range
    constraints; ``source`` a ``TorchSource`` or None), for the check's search."""
    if source is None:
        return {}
    from .importers.pytorch import dim_ranges

    return {key: sizes_in_range(lo, hi) for key, (lo, hi) in dim_ranges(source).items()}


def _against_kind(model: Model, against: Path) -> str:
    """Which comparison ``--against`` makes (the candidate's format), or UsageError:
    ONNX with ONNX, TFLite with TFLite, TOSA MLIR with TFLite or ONNX."""
    ref = sniff(Path(against))
    if model.format == "mlir" and ref in ("tflite", "onnx"):
        return "mlir"
    if model.format == ref and model.format in ("onnx", "tflite") and model.torch is None:
        return model.format
    raise UsageError(f"--against compares ONNX with ONNX, TFLite with TFLite, or TOSA MLIR with TFLite or ONNX;"
                     f" not {model.format} with {ref}")


def _check_against(path: Path, model: Model, options: RunOptions, res: RunResult, timings, on_stage, given,
                   dims) -> None:
    from .check.against import check_against
    from .check.child import RunFault
    from .check.iree_run import Refused

    against = Path(options.against)
    kind = _against_kind(model, against)
    with _timed(timings, "check", on_stage):
        if kind == "mlir":
            try:
                res.check = check_against(path, against, provider=options.provider, rtol=options.rtol,
                                          atol=options.atol, given=given, dims=options.dims)
            except Refused as e:  # nothing was compiled: an op, a top-level op or an attribute IREE must not see
                raise BadInput(f"{path}: {e}") from None
            except RunFault as e:  # a crash, or a run past its memory or time: the comparison did not run
                raise BadInput(str(e)) from None
        elif kind == "onnx":
            try:
                res.check = check(against, path, provider=options.provider, dims=dims, inputs=given,
                                  rtol=options.rtol, atol=options.atol, not_one=options.assume_dynamic_not_one,
                                  raise_faults=True)
            except RunFault as e:
                raise BadInput(str(e)) from None
        else:
            from .check.tflite import check_tflite

            try:
                res.check = check_tflite(against, path, model, provider=options.provider, dims=dims, inputs=given,
                                         rtol=options.rtol, atol=options.atol, litert_only=True)
            except RunFault as e:
                raise BadInput(str(e)) from None
    if not res.check.ran:  # --against asks for a comparison: one that cannot run is never a pass
        raise BadInput(f"{path}: the comparison with {against} did not run: {res.check.error}")
    res.report.check = res.check.to_json()
    failed = not res.check.ok
    _diagnose((kind, path, against, model.graph), res, options, given, failed, auto=False, on_stage=on_stage,
              protect=[path, against])
    if options.require_check and unchecked(res.check):
        res.unchecked = unchecked(res.check).replace("the numeric check", "the comparison")
        res.exit_code = EXIT_VIOLATIONS
    elif not res.check.ok:
        res.exit_code = EXIT_VIOLATIONS


def _diagnose(sides: tuple, res: RunResult, options: RunOptions, given, failed: bool, *, auto: bool, on_stage,
              protect) -> None:
    """Localize (``options.localize``; by default when the check failed, in the main
    job or for --reduce) and reduce (``options.reduce``), into the result and report.
    ``sides`` are the fields of ``diagnose.Sides``: what the check compared."""
    want = options.localize or (options.localize is None and failed and (auto or options.reduce is not None))
    if not want:
        return
    from .check.child import RunFault
    from .check.reduce import NothingToReduce
    from .diagnose import Sides, localize as localize_sides, reduce_divergence

    sides = Sides(*sides)
    timings = res.report.timings_s
    with _timed(timings, "localize", on_stage):
        loc = localize_sides(sides, res.check, given=given, rtol=options.rtol, atol=options.atol,
                             provider=options.provider, budget=options.localize_budget,
                             forced=bool(options.localize))
    if loc is None:
        return
    res.localization = loc
    res.report.check["divergence"] = [d.to_json() for d in loc.divergence]
    res.report.check["localize"] = loc.to_json()
    if options.regions and loc.culprit is not None:
        from .regions import culprit_picture

        res.culprit_picture = culprit_picture(loc.graph or res.model.graph, loc.culprit.node,
                                              [s.node for s in loc.region])
    if options.reduce is None:
        return
    if loc.culprit is None:
        res.report.warnings.append(f"--reduce: nothing written: no value differs ({loc.note or 'all agree'})")
        return
    with _timed(timings, "reduce", on_stage):
        try:
            res.reduced = reduce_divergence(sides, loc, Path(options.reduce), given=given, rtol=options.rtol,
                                            atol=options.atol, provider=options.provider, force=options.force,
                                            protect=protect)
        except (NothingToReduce, RunFault) as e:  # (a fault: the child crashed or ran past its limits)
            res.report.warnings.append(f"--reduce: nothing written: {e}")
            return
    res.report.reduced = res.reduced.to_json()


def _reduce_violation(path: Path, model: Model, options: RunOptions, res: RunResult, profile: str) -> None:
    """--reduce of an input that violates the trait: the smallest subgraph with its first violation."""
    from .check.reduce import NothingToReduce
    from .diagnose import reduce_violation

    try:
        res.reduced = reduce_violation(model, path, res.report.violations[0], profile, Path(options.reduce),
                                       force=options.force, protect=[path])
    except NothingToReduce as e:
        res.report.warnings.append(f"--reduce: nothing written: {e}")
        return
    res.report.reduced = res.reduced.to_json()


def check_tolerance_names(options: RunOptions, names) -> None:
    """UsageError when a per-output tolerance names no output of the model."""
    known = set(names)
    for flag, tol in (("--rtol", options.rtol), ("--atol", options.atol)):
        for name, _ in getattr(tol, "per_output", ()):
            if name not in known:
                raise UsageError(f"{flag} {name}:...: the model has no output '{name}' (its outputs: "
                                 f"{', '.join(sorted(known)) or 'none'})")


def _output_names(model: Model, options: RunOptions) -> List[str]:
    """The output names a per-output tolerance may name: the model's (every graph's),
    and with --against the reference's."""
    names = [n.inputs[0].name for g in model.graphs for n in g.outputs if n.inputs and n.inputs[0] is not None]
    if options.against is not None and any(getattr(t, "per_output", ()) for t in (options.rtol, options.atol)):
        names += [n.inputs[0].name for g in read_model(Path(options.against)).graphs for n in g.outputs
                  if n.inputs and n.inputs[0] is not None]
    return names


GOLDEN_FLAGS = (("load_inputs", "--load-inputs"), ("data_loader_script", "--data-loader-script"),
                ("load_outputs", "--load-outputs"), ("save_inputs", "--save-inputs"),
                ("save_outputs", "--save-outputs"))


def _golden_flags(options: RunOptions) -> List[str]:
    return [flag for key, flag in GOLDEN_FLAGS if getattr(options, key) is not None]


def read_golden(options: RunOptions, given) -> "Golden":
    """The stored inputs and reference outputs the options name (UsageError for a
    combination that has no check to feed)."""
    from .check.golden import Golden

    flags = _golden_flags(options)
    if not flags:
        return Golden()
    if not options.check or (options.verify_only and options.against is None):
        raise UsageError(f"{flags[0]} feeds or saves the numeric check: it cannot go with --no-check, nor with"
                         " --verify-only")
    if options.against is not None:
        raise UsageError(f"{flags[0]} works with the check of a legalized model, not with --against")
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
        from .check.golden import parse_script

        reads.append(("the data loader script (--data-loader-script)", parse_script(options.data_loader_script)[0]))
    return writes, reads


def _save_golden(res: RunResult, options: RunOptions, golden, protect: Path) -> None:
    """--save-inputs / --save-outputs: what the check fed and got (even when it failed:
    that is what is replayed elsewhere)."""
    if options.save_inputs is None and options.save_outputs is None:
        return
    from .check.golden import REFERENCE_RUN, save_runs

    if not res.check.runs:
        res.report.warnings.append("--save-inputs/--save-outputs: nothing written: the check compared nothing")
        return
    on = "litert" if res.report.format == "tflite" else "onnxrt"  # the runtime the runs came from
    written = save_runs(res.check.runs, golden.runner or REFERENCE_RUN.replace("onnxrt", on), options.save_inputs,
                        options.save_outputs, force=options.force, protect=protect, candidate=f"legalized-{on}")
    res.report.check["saved"] = written


def stages(options: RunOptions) -> List[str]:
    """The stages ``run`` announces to ``on_stage``, in order, when nothing stops it early
    (a violation, a failed check)."""
    if options.verify_only:
        return ["load", "verify"] + (["check"] if options.against is not None else [])
    return ["load", "verify", "passes", "verify", "emit", "save"] + (["check"] if options.check else [])


def run(path: Path, options: RunOptions, on_stage: Optional[StageCallback] = None) -> RunResult:
    """Load, verify, and (unless ``verify_only``) legalize, verify the output, check it on
    onnxruntime and write it. Raises LegalizeError for bad input; violations and
    mismatches are in the result, with exit code 1, and then nothing is written. A
    ``reduce`` that found nothing to reduce says so (a warning), rather than nothing.
    Every model runs in a child process under ``options.run_timeout`` and ``run_memory``."""
    from .check import child

    with child.limited(options.run_timeout, options.run_memory):
        if options.check and (not options.verify_only or options.against is not None) and child.available():
            child.prewarm()  # it starts while the model loads and is legalized
        res = _run(path, options, on_stage)
    if options.reduce is not None and res.reduced is None and \
            not any(w.startswith("--reduce:") for w in res.report.warnings):
        res.report.warnings.append("--reduce: nothing written: no violation, and no differing output, was found")
    return res


def _run(path: Path, options: RunOptions, on_stage: Optional[StageCallback]) -> RunResult:
    if options.require_check and (not options.check or (options.verify_only and options.against is None)):
        raise UsageError("--require-check needs a check to require: it cannot go with --no-check, nor with"
                         " --verify-only (except with --against)")
    given = as_arrays(options.inputs)
    golden = read_golden(options, given)
    timings: Dict[str, float] = {}
    with _timed(timings, "load", on_stage, bytes=_file_size(path)):
        model = read_model(path, trust_pt2=options.trust_pt2)
    profile = options.profile or ("tosa" if model.format == "mlir" else "mlir")
    if model.format == "mlir" and not options.verify_only:
        raise UsageError(f"{path}: a TOSA MLIR module is verified, not legalized: add --verify-only")
    if options.against is not None:
        if not options.verify_only:
            raise UsageError("--against compares MODEL with another model: add --verify-only")
        _against_kind(model, Path(options.against))
    if _golden_flags(options) and model.format not in ("onnx", "tflite"):
        raise UsageError(f"{_golden_flags(options)[0]}: golden data feeds the check of an ONNX, TFLite or .pt2"
                         f" model, not of a {model.format} model")
    if options.reduce is not None and model.format not in ("onnx", "mlir"):
        raise UsageError(f"--reduce writes ONNX or TOSA MLIR subgraphs: a {model.format} model is not reduced")
    check_tolerance_names(options, _output_names(model, options))
    report = Report(input=str(path), format="pt2" if model.torch is not None else model.format,
                    target=options.target, profile=profile)
    report.warnings.extend(model.warnings)
    report.timings_s = timings
    if options.dims_where_present:
        options = _where_present(model, options, report)
        given = as_arrays(options.inputs)
    dims = _user_dims(model, options, given)
    with _timed(timings, "verify", on_stage, nodes=_nodes(model)):
        result = verify_model(model, profile, options.assume_dynamic_not_one)
    report.add_verification(result, "input")
    res = RunResult(report, model, result, EXIT_VIOLATIONS if result.violations else EXIT_OK, timings)
    if result.violations and options.reduce is not None:
        with _timed(timings, "reduce", on_stage):
            _reduce_violation(path, model, options, res, profile)
    if options.against is not None and not result.violations:
        _check_against(path, model, options, res, timings, on_stage, given, dims)
    if options.verify_only or result.violations:
        return res  # a model that violates the trait is not legalized

    output = Path(options.output) if options.output is not None else \
        default_output(path if model.torch is None else path.with_suffix(".pt2"))
    formats = emit.validate(options.emit, model.format, options.target)
    if model.format in formats:
        emit.check_output_suffix(output, model.format)
    paths = emit.emit_paths(output, formats, model.format)
    emit.check_paths(paths, force=options.force, protect=path)
    res.ops_before = _op_counts(model)
    spec = TARGETS[options.target]
    model.constraints = result.constraints  # what the report lists, for emitters to assert
    with _timed(timings, "passes", on_stage, nodes=_nodes(model)):
        refused_before = spec.refused(model.graphs, options.level)
        if _specialize(path, model, options, dims, report):
            # the runtime constraints were on dims now static: those at the bound sizes
            # (none, or a broadcast the sizes break)
            bound = verify_model(model, profile, options.assume_dynamic_not_one)
            model.constraints = bound.constraints
            report.constraints = bound.constraints.to_json()
            if bound.violations:
                for d in bound.violations:
                    d.stage = "input"
                    report.violations.append(d.to_json())
                res.exit_code = EXIT_VIOLATIONS
                return res
        before = None
        if options.regions:
            from .regions import snapshot

            before = snapshot(model)
        done = legalize(model, options.target, assume_dynamic_not_one=options.assume_dynamic_not_one,
                        level=options.level)
        report.target_rules = {"target": spec.name, "profile": spec.to_json(options.level),
                               "refused_before": refused_before,
                               "refused_after": spec.refused(model.graphs, options.level)}
        if before is not None:
            from .regions import PICTURE_LIMIT

            res.regions = before.regions(model, limit=PICTURE_LIMIT)
    report.warnings.extend(done.warnings)
    for key in STAT_KEYS:
        if key in done.stats:
            report.stats[key] = int(done.stats[key])
    res.ops_after = _op_counts(model)
    if spec.backend is not None:  # each op the backend still refuses, in its words
        tool = report.target_rules["profile"]["backend"]
        report.warnings.extend(f"node '{r['node']}' ({r['op']}{', as ' + r['as'] if 'as' in r else ''}): {tool} refuses"
                               f" it: {'; '.join(r['reasons'])}"
                               for r in report.target_rules["refused_after"])
    with _timed(timings, "verify", on_stage, nodes=_nodes(model)):
        out_result = verify_model(model, TARGETS[options.target].profile, stage="output")
    res.output_verification = out_result
    report.add_verification(out_result, "output")
    if out_result.violations:
        res.exit_code = EXIT_VIOLATIONS
        return res

    def run_check(written: Path) -> None:
        with _timed(timings, "check", on_stage):
            if model.format == "tflite":
                from .check.tflite import check_tflite

                res.check = check_tflite(path, written, model, provider=options.provider, dims=dims,
                                         inputs=given, rtol=options.rtol, atol=options.atol,
                                         samples=golden.samples, expected=golden.expected,
                                         reference=golden.reference,
                                         record=options.save_inputs is not None or options.save_outputs is not None)
                if len(model.graphs) == 1:  # its bindings are named as the user names them
                    for b in res.check.bindings:
                        b.source = "user" if b.dims and set(b.dims) <= set(dims) else b.source
            else:
                # A PyTorch input: against its original ONNX export, and against PyTorch
                choices = choices_from_constraints([c["text"] for c in report.constraints])
                original = path if model.torch is None else model.torch.onnx
                record = options.save_inputs is not None or options.save_outputs is not None
                if golden.samples is not None:
                    from .check.samples import check_samples

                    res.check = check_samples(original, written, golden.samples, expected=golden.expected,
                                              reference=golden.reference, provider=options.provider, dims=dims,
                                              rtol=options.rtol, atol=options.atol, record=record)
                else:
                    res.check = check(original, written, provider=options.provider, dims=dims, inputs=given,
                                      rtol=options.rtol, atol=options.atol, not_one=options.assume_dynamic_not_one,
                                      choices=choices, hints=range_hints(model.torch),
                                      profile=TARGETS[options.target].profile, record=record)
                if model.torch is not None:
                    from .check.torch_ref import check_torch

                    found = res.check.search is not None and res.check.search.found is not None
                    res.check.torch = check_torch(model.torch, written, provider=options.provider,
                                                  dims=dims, inputs=given, rtol=options.rtol,
                                                  atol=options.atol, not_one=options.assume_dynamic_not_one,
                                                  choices=res.check.search.choices if found else choices,
                                                  searched=found, path=model.source, trust=options.trust_pt2)
        report.check = res.check.to_json()
        report.warnings.extend(res.check.notes + golden.notes)
        _save_golden(res, options, golden, protect=path)
        failed = res.check.ran and not res.check.ok
        if model.format == "tflite":
            sides = ("tflite", written, path, model.graph)
        else:
            sides = ("onnx", written, path if model.torch is None else model.torch.onnx)
        _diagnose(sides, res, options, golden.failing_feeds(res.check) or given, failed, auto=True,
                  on_stage=on_stage, protect=[path, output])
        if failed:
            raise _CheckFailed
        if options.require_check and unchecked(res.check):
            res.unchecked = unchecked(res.check)
            raise _CheckFailed
        if not res.check.ran:
            report.warnings.append(f"the numeric check did not run: {res.check.error}")
        elif res.check.error:
            report.warnings.append(f"the numeric check ran in part: {res.check.error}")
        if res.check.torch is not None and not res.check.torch.ran:
            report.warnings.append(f"the check against PyTorch did not run: {res.check.torch.error}")

    with _timed(timings, "emit", on_stage, nodes=_nodes(model)):
        made = emit.render(model, formats, dims, level=options.level)  # before anything is written
        over = emit.level_diagnostics(model, made, options.target, options.level)
    if over.violations:  # an out-of-level module is never written
        res.output_verification = over
        report.add_verification(over, "output")
        report.stats["nodes_out"] = out_result.nodes
        res.exit_code = EXIT_VIOLATIONS
        return res
    t0 = time.perf_counter()
    if on_stage is not None:
        on_stage("save", {"nodes": _nodes(model)})
    try:
        inspect = run_check if options.check else None
        if model.format in formats:
            write_model(model, output, force=options.force, inspect=inspect)
        else:  # the check still runs on the model's own format, written aside
            with tempfile.TemporaryDirectory(prefix=".legalize-", dir=output.parent) as d:
                write_model(model, Path(d) / output.name, inspect=inspect)
        emit.write_extra(paths, made, model.format, force=options.force, protect=path)
    except _CheckFailed:
        res.exit_code = EXIT_VIOLATIONS
        return res
    finally:
        timings["save"] = time.perf_counter() - t0 - sum(timings.get(k, 0.0) for k in ("check", "localize", "reduce"))
    report.outputs = {f: str(p) for f, p in paths.items()}
    report.output = str(paths[formats[0]])
    return res
