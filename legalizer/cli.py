"""``legalize MODEL [OUTPUT] [options]``: parse, call the pipeline, print."""

from __future__ import annotations

import gc
import math
import os
import re
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Optional

import typer
from typer.core import TyperCommand

# Only what --help needs is imported here: the pipeline (onnx, numpy, networkx), rich
# (for a table or a progress bar) and the rest are imported when a command uses them
# (README, "Start-up").
from .numeric import ATOL, BUDGET, RTOL
from .numeric.runtimes import provider_choices
from .console import one_line
from .errors import EXIT_BAD_INPUT, LegalizeError, UsageError
from .targets import DEFAULT_TARGET, TARGETS
from .verifier import PROFILE_RECORDS, PROFILES

if TYPE_CHECKING:
    from .kinds.base import Kind
    from .pipeline import RunOptions

PROVIDERS = provider_choices()  # the runtimes' table's (numeric/runtimes.py)

HELP = """Make MODEL legal for strict compilers: no elementwise op relies on implicit
broadcasting, every elementwise node is proved legal under MLIR's Broadcastable trait,
and the result is checked against the original on onnxruntime (and LiteRT for TFLite).

\b
Examples:
  legalize model.onnx                               # writes model.legal.onnx (tosa form)
  legalize model.onnx --target xla                  # no implicit broadcasting at all
  legalize model.tflite                             # writes model.legal.tflite (RESHAPE);
                                                    # checked on LiteRT and onnxruntime
  legalize model.onnx out.onnx --force              # choose the output; replace it
  legalize model.onnx --dim N=1 --dim N=8           # bind dynamic dims for the check
  legalize model.onnx --input x=x.npy --rtol 1e-3   # check with your own data
  legalize model.onnx --input inputs.npz            # ... every array of an .npz, by name
  legalize model.onnx --input-shape x:1x16000       # bind input x's dynamic dims
  legalize model.onnx --require-check               # exit 1 unless the check ran fully
  legalize model.onnx --verify-only                 # check the trait, write nothing
  legalize model.onnx --verify-only --profile tosa  # also require equal operand ranks
  legalize model.onnx --report r.json               # machine-readable report
  legalize model.onnx --json -q | jq .check         # the report on stdout, for pipelines
  legalize model.onnx --html report.html            # a page with pictures of each rewrite
  legalize model.pt2                                # a torch.export program (torch extra):
                                                    # checked against PyTorch too
  legalize model.onnx --target xla --emit stablehlo # write model.legal.stablehlo.mlir
  legalize model.onnx --emit onnx --emit tosa       # the .onnx and model.legal.tosa.mlir
  legalize conv.tosa.mlirbc --verify-only --against model.tflite
                                                    # a TF-to-TOSA conversion, run on IREE
  legalize new.onnx --verify-only --against old.onnx --localize --reduce bug.onnx
                                                    # where they start to differ, and the
                                                    # smallest subgraph that still does
  legalize model.onnx --load-inputs i.json --load-outputs o.json
                                                    # polygraphy run's golden data, replayed
  legalize model.onnx --overlay ov/                 # Model Explorer overlays (node data)
  legalize view model.onnx                          # Model Explorer: original and legalized
                                                    # side by side (viewer extra; a model
                                                    # file named 'view' is ./view)

\b
Several models: give three or more, or a folder (its *.onnx and *.tflite files,
recursively; also *.mlir and *.mlirbc with --verify-only), or add -j N or -o DIR
(two paths alone are MODEL OUTPUT). Each model gets its own lines and its own output
(<stem>.legal.<ext> beside it, or in the folder -o DIR, made as mkdir -p would);
--report and --json give a JSON list, one report per model; the exit status is the worst of all.
  legalize models/ -j 2                             # every model in models/, 2 at a time
  legalize a.onnx b.tflite -o legal/ -q             # into the folder legal/
  legalize models/ --verify-only --report all.json  # check them all, one JSON list
  legalize models/ --executor ray --json            # each model a Ray task (RAY_ADDRESS)

\b
Exit status: 0 legal (and checked); 1 verification violations or a numeric mismatch
(nothing is written then), or with --require-check a check that did not run fully;
2 bad input or usage.
"""

EXECUTORS = ("local", "ray")


class FolderSpelled(type(Path())):
    """A path given with a trailing '/': the user named a folder (a Path drops the '/').
    Where a file is written, that is refused (``_refuse_folder_spelling``)."""


def _refuse_folder_spelling(*named) -> None:
    """UsageError for a file to write (``named``: (flag, path) pairs) spelled as a folder."""
    for flag, path in named:
        if isinstance(path, FolderSpelled):
            raise UsageError(f"{path}/: is a folder name (it ends in '/'), but {flag} names a file to write")


class _Plain:
    """The conversion of one command-line value of a plain type (str, bool, int with a
    minimum, Path, a list of these) with typer's results and error messages."""

    INTEGER = re.compile(r"[+-]?[0-9](?:_?[0-9])*(?:\.0*)?")

    def __init__(self, kind: type, many: bool, minimum: Optional[int]):
        self.kind, self.many, self.minimum = kind, many, minimum

    @classmethod
    def of(cls, param) -> Optional["_Plain"]:
        annotation = param.type_descriptor.annotation
        many = getattr(annotation, "__origin__", None) is list
        kind = annotation.__args__[0] if many else annotation
        return cls(kind, many, getattr(param, "min", None)) if kind in (str, bool, int, Path) else None

    def coerce(self, value, param, ctx):
        if value is None:
            return () if param.multiple or param.nargs == -1 else None
        if self.many:
            return [self.one(v, param, ctx) for v in value]
        return self.one(value, param, ctx)

    def one(self, value, param, ctx):
        if self.kind is Path and str(value) == "":  # Path("") would be ".", the current folder
            raise typer.BadParameter("an empty path names no file", ctx=ctx, param=param)
        if self.kind is Path and str(value)[-1:] in ("/", os.sep) and len(str(value).rstrip("/" + os.sep)) > 0:
            return FolderSpelled(value)
        if self.kind is not int:
            return self.kind(value)
        text = str(value).strip()
        if not self.INTEGER.fullmatch(text):
            raise typer.BadParameter("Input should be a valid integer, unable to parse string as an integer",
                                     ctx=ctx, param=param)
        number = int(text.partition(".")[0])
        if self.minimum is not None and number < self.minimum:
            raise typer.BadParameter(f"Input should be greater than or equal to {self.minimum}", ctx=ctx, param=param)
        return number


class _Command(TyperCommand):
    """typer's command, its values converted without pydantic: typer converts every
    value through a pydantic TypeAdapter, and importing pydantic is ~45 ms of every run
    (README, "Start-up"). Each parameter here is of a plain type, converted as typer
    would (``_Plain``); one of another type, or a typer whose parameters are made
    otherwise, keeps typer's own conversion."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for param in self.params:
            _plain(param)
            if param.name in _FROM_TABLES:  # made with each command: a record registered since is there
                param.metavar, param.help = _FROM_TABLES[param.name]()

    def get_help_option(self, ctx):
        return _plain(super().get_help_option(ctx))


def _listed(items) -> str:
    """``a (what a is), b (...) or c (...)``."""
    words = [f"{name} ({what})" for name, what in items]
    return " or ".join([", ".join(words[:-1]), words[-1]] if len(words) > 1 else words)


def _target_option():
    own = [(t.name, t.help) for t in TARGETS.values() if t.backend is None]
    backends = ", ".join(f"{t.name} ({t.help})" for t in TARGETS.values() if t.backend is not None)
    text = ", ".join(f"{name} ({what})" for name, what in own) + (f", or a deployment backend's: {backends}" if backends else "")
    return "|".join(TARGETS), f"Legal form: {text}."


def _profile_option():
    return "|".join(PROFILES), (f"Verifier profile the INPUT must satisfy: {_listed((p.name, p.help) for p in PROFILE_RECORDS.values())}."
                                " It judges the model as given, before any rewrite: an input that violates it is"
                                " refused, not legalized (the output is verified under --target's profile). To make a"
                                " model TOSA-legal, use --target tosa; --profile tosa with --verify-only asks whether"
                                " it is already.")


def _level_option():
    leveled = [t for t in TARGETS.values() if t.levels]
    if not leveled:
        return "LEVEL", "A target's level (no target has levels)."
    t = leveled[0]
    bound = lambda lv: f"rank <= {lv.max_rank}" if lv.max_rank is not None else "no limit"  # noqa: E731
    others = "".join(f"; {name}: {bound(lv)}" for name, lv in t.levels.items() if name != t.default_level)
    return "|".join(t.levels), (f"TOSA level the {t.name} form and its TOSA MLIR keep within (default {t.default_level},"
                                f" as the spec: {bound(t.levels[t.default_level])}{others}).")


# Options whose choices and help are the tables' (targets.TARGETS, verify.PROFILES).
_FROM_TABLES = {"target": _target_option, "profile": _profile_option, "tosa_level": _level_option}


def _plain(param):
    if getattr(param, "_runtime_param", False) is None and hasattr(param, "type_descriptor"):
        plain = _Plain.of(param)
        if plain is not None:
            param._runtime_param = plain
    return param


app = typer.Typer(add_completion=False, rich_markup_mode=None, pretty_exceptions_enable=False,
                  context_settings={"help_option_names": ["-h", "--help"]})


def parse_tolerance(flag: str, items: List[str], default: float):
    """``--rtol 1e-3`` and ``--rtol out1:1e-3`` as Polygraphy writes them: one value for
    every output, and per output (the last ':' splits, so a name may contain ':').
    A float when no output is named, else a Tolerance."""
    from .numeric.compare import Tolerance

    per: Dict[str, float] = {}
    every = False  # a value for every output was given
    for item in items:
        name, sep, value = item.rpartition(":")
        try:
            number = float(value)
        except ValueError:
            number = float("nan")
        if not number >= 0 or (sep and not name):  # (not >= 0: a NaN too)
            raise UsageError(f"{flag} expects a non-negative number or OUTPUT:NUMBER, not '{item}'")
        if math.isinf(number):
            raise UsageError(f"{flag} {item}: an infinite tolerance accepts any difference; give a finite number")
        if (name in per) if sep else every:
            raise UsageError(f"{flag}: the tolerance of {f'output {name!r}' if sep else 'every output'} is given twice")
        if sep:
            per[name] = number
        else:
            default, every = number, True
    return Tolerance(default, tuple(per.items())) if per else default


_SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(flag: str, text: Optional[str]) -> Optional[int]:
    """``4G``, ``512M``, ``1.5G``, ``1000000`` (bytes) as bytes; UsageError if not a size."""
    if text is None:
        return None
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = t[-1:] if t[-1:] in _SIZE_UNITS and t[-1:] else ""
    try:
        value = float(t[:-1] if unit else t)
    except ValueError:
        value = -1.0
    if not value > 0 or value != value or value * _SIZE_UNITS[unit] > 1 << 50:
        raise UsageError(f"{flag} must be a size such as 4G or 512M, not '{text}'")
    return int(value * _SIZE_UNITS[unit])


def _run_timeout(text: Optional[str]) -> Optional[float]:
    """``--run-timeout``'s seconds (a string: typer would convert a float through pydantic)."""
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < 1e7:
        raise UsageError(f"--run-timeout must be a number of seconds above 0, not '{text}'")
    return value


def _parse_dims(items: List[str]) -> Dict[str, int]:
    """``--dim NAME=SIZE``, each NAME once; a size of 0 is refused (``given.refuse_zero_dim``).
    Whether NAME is a dim of the model is checked once the model is read."""
    from .numeric.user_inputs import refuse_zero_dim

    dims: Dict[str, int] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name or not value.strip().isdigit():
            raise UsageError(f"--dim expects NAME=SIZE with SIZE a positive integer, not '{item}'")
        if name in dims:
            raise UsageError(f"--dim: dim '{name}' is given twice")
        refuse_zero_dim(name, int(value))
        dims[name] = int(value)
    return dims


def _parse_inputs(items: List[str]) -> Dict[str, object]:
    """``--input NAME=FILE.npy`` (one array) and ``--input FILE.npz`` (each array of
    the archive, by name); an input given twice is a usage error."""
    from .numeric.user_inputs import read_npy, read_npz

    arrays: Dict[str, object] = {}
    for item in items:
        name, sep, file = item.partition("=")
        if sep and (not name or not file):
            raise UsageError(f"--input expects NAME=FILE.npy or FILE.npz, not '{item}'")
        given = {name: read_npy(name, file)} if sep else read_npz(item)
        for key, array in given.items():
            if key in arrays:
                raise UsageError(f"--input: input '{key}' is given twice")
            arrays[key] = array
    return arrays


def _input_files(items: List[str]) -> List[Path]:
    """The files ``--input`` items name (``NAME=FILE.npy`` or ``FILE.npz``)."""
    return [Path(item.partition("=")[2] or item) for item in items]


def _parse_input_shapes(items: List[str]) -> Dict[str, tuple]:
    from .numeric.user_inputs import parse_input_shape

    shapes: Dict[str, tuple] = {}
    for item in items:
        name, shape = parse_input_shape(item)
        if name in shapes:
            raise UsageError(f"--input-shape: input '{name}' is given twice")
        shapes[name] = shape
    return shapes


# The options that set up the numeric check, and what each does for it. Where no check
# runs (--verify-only without --against; --no-check), a run that left them unused would
# read as if they had been applied: they are refused instead. (--dim and --input-shape
# still bind the dims of an --emit tosa without a check.)
CHECK_OPTIONS = {"--dim": "binds dims for", "--input-shape": "binds dims for", "--input": "feeds",
                 "--rtol": "sets a tolerance of", "--atol": "sets a tolerance of",
                 "--localize": "compares intermediate values in"}
UNUSED_WITHOUT_CHECK = ("--input", "--rtol", "--atol", "--localize")


def refuse_unused(given: Dict[str, bool], *, verify_only: bool, check: bool, against: bool) -> None:
    """UsageError for an option the run would leave unused: ``given`` says which options
    were given (by their flags). One place, before any work, for one model or several."""
    if verify_only and given.get("--emit"):
        raise UsageError("--emit chooses the formats of the legalized model: it cannot go with --verify-only,"
                         " which writes none")
    if verify_only and against and not check:
        raise UsageError("--against compares MODEL with another model: it cannot go with --no-check")
    for flag, what in CHECK_OPTIONS.items():
        if not given.get(flag):
            continue
        if verify_only and not against:
            raise UsageError(f"{flag} {what} the numeric check: it cannot go with --verify-only"
                             " (except with --against)")
        if not verify_only and not check and flag in UNUSED_WITHOUT_CHECK:
            raise UsageError(f"{flag} {what} the numeric check: it cannot go with --no-check")
    for flag in ("--run-timeout", "--run-memory"):  # they bound the runs of a model on a runtime
        if given.get(flag) and (not check or (verify_only and not against)):
            raise UsageError(f"{flag} limits each run of a model on a runtime, and none runs: it cannot go with"
                             f" {'--no-check' if not check else '--verify-only (except with --against)'}")


def _print_and_exit(what: str):
    """The callback of an eager option that prints ``what`` (the version, the report's
    schema) and ends the command, whatever else is given."""
    def callback(value: bool) -> None:
        if not value:
            return
        if what == "version":
            from .version import __version__

            print(f"legalize {__version__}")
        else:
            from .report import schema_text

            sys.stdout.write(schema_text())
        raise typer.Exit(0)
    return callback


@app.command(help=HELP, no_args_is_help=True, cls=_Command)
def legalize(
    ctx: typer.Context,
    paths: List[Path] = typer.Argument(..., metavar="MODEL", show_default=False,
                                       help="Model file (ONNX, TFLite, TOSA MLIR, torch.export .pt2), recognized by content, and "
                                            "its output path (default <stem>.legal.<ext>); or several models "
                                            "and folders of models (see above)."),
    out_opt: Optional[Path] = typer.Option(None, "-o", "--output", metavar="PATH", help="Output path; with several models, a "
                                           "folder to write them into (made if need be).", show_default=False),
    jobs: Optional[int] = typer.Option(None, "-j", "--jobs", min=1, metavar="N", help="Process several models N at a time "
                                       "(default 1; with --executor ray, as many as Ray runs); with two paths,"
                                       " makes both of them models.", show_default=False),
    executor: str = typer.Option("local", "--executor", metavar="local|ray", help="Where several models run: local"
                                 " processes, or Ray tasks on the cluster that RAY_ADDRESS names (else a local Ray"
                                 " instance; the ray extra). Makes even one MODEL a batch."),
    # --target's, --tosa-level's and --profile's choices and help: the tables' (_FROM_TABLES)
    target: str = typer.Option(DEFAULT_TARGET, "--target"),
    tosa_level: Optional[str] = typer.Option(None, "--tosa-level", show_default=False),
    profile: Optional[str] = typer.Option(None, "--profile", show_default=False),
    verify_only: bool = typer.Option(False, "--verify-only", help="Verify the input and report; write nothing."),
    do_check: bool = typer.Option(True, "--check/--no-check", help="Compare original and result on onnxruntime."),
    provider: str = typer.Option("auto", "--provider", metavar="|".join(PROVIDERS), help="Execution provider for the check:"
                                 f" {', '.join(PROVIDERS[:-1])} or {PROVIDERS[-1]}."),
    dim: List[str] = typer.Option([], "--dim", metavar="NAME=SIZE", help="Bind a dynamic input dim for the check (repeatable).",
                                  show_default=False),
    input_: List[str] = typer.Option([], "--input", metavar="NAME=FILE.npy|FILE.npz", help="Feed this array to the check, or"
                                     " every array of an .npz by name (repeatable).", show_default=False),
    input_shape: List[str] = typer.Option([], "--input-shape", metavar="NAME:DIMxDIM", help="Bind input NAME's dynamic"
                                          " dims for the check, as Polygraphy does: x:1x512 (repeatable).",
                                          show_default=False),
    static: bool = typer.Option(False, "--static", help="Make every dynamic dim of a TFLite model static: the size"
                                " --dim/--input-shape bind, else 1; the shape arithmetic that becomes constant is"
                                " folded (a static-shape --target does this for the dims you bind)."),
    require_check: bool = typer.Option(False, "--require-check", help="Exit 1 (nothing written) when the numeric"
                                       " check did not run, or ran in part."),
    allow_fallback: bool = typer.Option(False, "--allow-fallback", help="With a deployment target (litert-gpu, ethos-u,"
                                        " ...): accept a partial placement. The ops the target still refuses stay on"
                                        " the CPU (the report lists them) and the run exits 0; without it, exit 1."),
    not_one: bool = typer.Option(False, "--assume-dynamic-not-one",
                                 help="Strict symbolic mode: no dynamic dim is 1 at run time, so no runtime "
                                      "broadcast check is emitted (the check binds dynamic dims > 1 only)."),
    rtol: List[str] = typer.Option([], "--rtol", metavar="[OUTPUT:]FLOAT", help="Relative tolerance of the check"
                                   f" (default {RTOL:g}); OUTPUT:FLOAT for one output (repeatable).",
                                   show_default=False),
    atol: List[str] = typer.Option([], "--atol", metavar="[OUTPUT:]FLOAT", help="Absolute tolerance of the check"
                                   f" (default {ATOL:g}); OUTPUT:FLOAT for one output (repeatable).",
                                   show_default=False),
    localize: Optional[bool] = typer.Option(None, "--localize/--no-localize", help="Compare intermediate values too"
                                            " and name the first that differs (default: when the check fails;"
                                            " with --against, only when asked).", show_default=False),
    localize_budget: int = typer.Option(BUDGET, "--localize-budget", min=1, metavar="N", help="Runs of a TOSA module"
                                        " on IREE one localization may take (each a compile)."),
    run_timeout: Optional[str] = typer.Option(None, "--run-timeout", metavar="SECONDS", help="Time one run of a"
                                                " model on a runtime may take (each runs in a child process;"
                                                " default 300).", show_default=False),
    run_memory: Optional[str] = typer.Option(None, "--run-memory", metavar="SIZE", help="Memory a model's run may"
                                             " allocate in its child process, e.g. 4G or 512M (default: half the"
                                             " machine's).", show_default=False),
    reduce: Optional[Path] = typer.Option(None, "--reduce", metavar="PATH", help="Write the smallest subgraph that"
                                          " still differs (or still violates the trait) here, with its inputs.",
                                          show_default=False),
    emit: List[str] = typer.Option([], "--emit", metavar="FORMAT", help="Format to write: onnx, tflite, pt2, stablehlo or stablehlo-bytecode "
                                   "(with --target xla) or tosa (MLIR, with --target tosa); repeatable. Default: the "
                                   "input's. Each is written beside the output's stem (.onnx, .tflite, .pt2, "
                                   ".stablehlo.mlir, .stablehlo.mlirbc, .tosa.mlir).",
                                   show_default=False),
    against: Optional[Path] = typer.Option(None, "--against", metavar="MODEL", help="With --verify-only: compare MODEL"
                                           " with this reference: ONNX with ONNX (onnxruntime), TFLite with TFLite"
                                           " (LiteRT), TOSA MLIR (on IREE) with .tflite or .onnx.",
                                           show_default=False),
    load_inputs: Optional[Path] = typer.Option(None, "--load-inputs", metavar="PATH", help="Feed the check these stored"
                                               " samples: Polygraphy's JSON (polygraphy run --save-inputs) or .npz.",
                                               show_default=False),
    load_outputs: Optional[Path] = typer.Option(None, "--load-outputs", metavar="PATH", help="Compare the legalized model"
                                                " with these stored reference outputs (Polygraphy's JSON or .npz; another"
                                                " runtime's, the device's) instead of running the original; with"
                                                " --load-inputs.", show_default=False),
    data_loader_script: Optional[str] = typer.Option(None, "--data-loader-script", metavar="FILE.py[:FUNC]",
                                                     help="Feed the check the dicts FUNC (default load_data) yields, as"
                                                          " Polygraphy does. This RUNS the script's code: only for a"
                                                          " script you trust.", show_default=False),
    save_inputs: Optional[Path] = typer.Option(None, "--save-inputs", metavar="PATH", help="Save what the check fed,"
                                               " per binding (Polygraphy's JSON, or .npz by the suffix).",
                                               show_default=False),
    save_outputs: Optional[Path] = typer.Option(None, "--save-outputs", metavar="PATH", help="Save what the check got,"
                                                " per binding: the reference's and the legalized model's outputs"
                                                " (Polygraphy's RunResults JSON, or .npz: the reference's).",
                                                show_default=False),
    overlay: Optional[Path] = typer.Option(None, "--overlay", metavar="DIR", help="Write Model Explorer overlays (node"
                                           " data: verdicts, rewrites, constraints, errors) for the input and the"
                                           " legalized model into DIR (made if missing).", show_default=False),
    report: Optional[Path] = typer.Option(None, "--report", metavar="PATH", help="Write the JSON report here.", show_default=False),
    html: Optional[Path] = typer.Option(None, "--html", metavar="PATH", help="Write a self-contained HTML report here, with pictures "
                                        "of the rewritten regions (several models: a folder, one "
                                        "<stem>.legal.html page each).", show_default=False),
    json_out: bool = typer.Option(False, "--json", help="Print the JSON report to stdout."),
    force: bool = typer.Option(False, "--force", help="Replace an existing output file."),
    trust_pt2: bool = typer.Option(False, "--trust-pt2", help="Load a .pt2 with torch.export.load as it is, unsafe "
                                   "unpickling included (it can run code): only for a file you trust."),
    quiet: bool = typer.Option(False, "-q", "--quiet", help="Only errors and the final line."),
    _version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_and_exit("version"),
                                  help="Print legalize's version and exit.", expose_value=False),
    _schema: bool = typer.Option(False, "--schema", is_eager=True, callback=_print_and_exit("schema"),
                                 help="Print the report's JSON Schema (what --report and --json write) and exit.",
                                 expose_value=False),
    verbose: bool = typer.Option(False, "-v", "--verbose", help="Also print the IR and the runtime constraints."),
) -> None:
    # what the warm-up sniffed of the command line's files (``main``), or none yet
    sniffs = ctx.obj if isinstance(ctx.obj, Sniffs) else Sniffs()
    if not _is_batch(paths, out_opt, jobs, executor) and _infers_onnx_shapes(paths[0], emit, sniffs):
        from . import bounded_helper
        from .kinds.onnx.kind import INFER_PRELOAD

        # The helper (a fresh interpreter) imports what shape inference needs while
        # this process imports the pipeline's libraries.
        bounded_helper.start(INFER_PRELOAD)
    from .api import RunOptions
    from .pipeline import prepare

    _loaded()
    if executor not in EXECUTORS:
        raise UsageError(f"--executor must be local or ray, not '{executor}'")
    refuse_unused({"--emit": bool(emit), "--dim": bool(dim), "--input-shape": bool(input_shape),
                   "--input": bool(input_), "--rtol": bool(rtol), "--atol": bool(atol), "--localize": bool(localize),
                   "--run-timeout": run_timeout is not None, "--run-memory": run_memory is not None},
                  verify_only=verify_only, check=do_check, against=against is not None)
    golden = dict(load_inputs=load_inputs, load_outputs=load_outputs, data_loader_script=data_loader_script,
                  save_inputs=save_inputs, save_outputs=save_outputs)
    batch = _is_batch(paths, out_opt, jobs, executor)
    if batch and against is not None:
        raise UsageError("--against compares one TOSA MLIR module with its source model: give one MODEL")
    if batch and reduce is not None:
        raise UsageError("--reduce writes one model's subgraph: give one MODEL")
    if batch and (any(v is not None for v in golden.values()) or overlay is not None):
        raise UsageError("golden data (--load-*, --save-*, --data-loader-script) and --overlay are one model's:"
                         " give one MODEL")
    valid = RunOptions(target=target, level=tosa_level, profile=profile, verify_only=verify_only, force=force,
                         check=do_check, provider=provider, dims=_parse_dims(dim), inputs=_parse_inputs(input_),
                         input_shapes=_parse_input_shapes(input_shape), rtol=parse_tolerance("--rtol", rtol, RTOL),
                         atol=parse_tolerance("--atol", atol, ATOL), assume_dynamic_not_one=not_one,
                         emit=list(emit), against=against, require_check=require_check,
                         allow_fallback=allow_fallback, trust_pt2=trust_pt2, localize=localize, localize_budget=localize_budget, reduce=reduce,
                         static=static, **golden, run_timeout=_run_timeout(run_timeout),
                         run_memory=parse_size("--run-memory", run_memory)).validate()
    options = valid.options
    if batch:
        raise typer.Exit(_batch(paths, out_opt, jobs, executor, report, json_out, quiet, verbose, html,
                                options))
    model = paths[0]
    output = paths[1] if len(paths) > 1 else None
    if output is not None and out_opt is not None:
        raise UsageError("give the output path once: OUTPUT or -o, not both")
    output = output if output is not None else out_opt
    _refuse_folder_spelling(("OUTPUT" if out_opt is None else "-o", output), ("--report", report), ("--html", html),
                            ("--reduce", reduce))
    model = Path(model)  # (no FolderSpelled goes on: the paths derived from it would be one)
    if verify_only and output is not None:
        raise UsageError("--verify-only writes no model: leave out OUTPUT and -o")
    if quiet and verbose:
        raise UsageError("-q and -v cannot be used together")
    if not verify_only:
        options.output = output
    # the options validated, the target resolved, the file sniffed (by the warm-up, if it
    # ran) and the output plan made, once: the checks below and the run read them here
    plan = prepare(model, valid, sniffed=sniffs(model))
    _check_writes(plan, report, html, overlay, _input_files(input_))
    raise typer.Exit(_run_one(plan, report, html, overlay, json_out, quiet, verbose))


def _check_writes(plan, report: Optional[Path], html: Optional[Path], overlay: Optional[Path],
                  input_files: List[Path]) -> None:
    """Fail on a bad output, report or page path before the work, not after it: each can
    be written, and each is a file of its own, never an input."""
    from .importers.reader import files_read
    from .atomic_files import check_distinct, check_output_path
    from .pipeline import golden_paths

    model, options = plan.path, plan.options
    force = options.force
    outputs = plan.planned()
    output = plan.outputs.output if plan.outputs is not None else None
    models = [model, output, *(p for _, p in outputs)]
    for _, path in outputs:
        check_output_path(path, force=force, protect=model)
    if report is not None:
        check_output_path(report, force=True, protect=model)
        outputs.append(("the report (--report)", report))
    if options.reduce is not None:
        from .numeric.reduce import reduce_files

        for what, path in reduce_files(options.reduce):
            check_output_path(path, force=force, protect=model)
            outputs.append((what, path))
    golden_writes, golden_reads = golden_paths(options)
    for _, path in golden_writes:
        check_output_path(path, force=force, protect=model)
    outputs += golden_writes
    if html is not None:
        from . import html_report

        html_report.check_path(html, protect=models)
        outputs.append(("the HTML report (--html)", html))
        options.regions = True
    if overlay is not None:
        from . import overlay as overlays

        overlays.check_folder(overlay, model, output, force)
        outputs += overlays.planned(overlay, model, output)
    against = options.against
    read = files_read([model, *([against] if against is not None else [])], [p for _, p in outputs],
                      kinds={model: plan.kind} if plan.kind is not None else None)
    check_distinct(outputs, read + [("an input array (--input)", f) for f in input_files] + golden_reads)


def _run_one(plan, report: Optional[Path], html: Optional[Path], overlay: Optional[Path],
             json_out: bool, quiet: bool, verbose: bool) -> int:
    """Run the job on one model (its ``pipeline.Prepared``), print what it found and write
    the report, page and overlays; the exit code."""
    from .api import run
    from .console import Printer, Progress
    from .pipeline import stages

    model, options = plan.path, plan.options
    output = plan.outputs.output if plan.outputs is not None else None
    printer = Printer(quiet, verbose, json_out, legalizing=not options.verify_only)
    progress = Progress(sys.stderr.isatty() and not quiet and not json_out, model.name,
                        stages=len(stages(options)))
    try:
        res = run(model, plan, on_stage=progress)
    except LegalizeError as e:  # bad input: the error line, and a report that says so
        _error_report(model, e, report, json_out)
        raise
    finally:
        progress.close()
    printer.summary(res)
    if report is not None:
        res.report.write(report, protect=model)
    if html is not None:
        from . import html_report

        html_report.write(html, res.report, res.regions, protect=[model, output, *res.report.outputs.values()],
                          culprit=res.culprit_picture)
    if overlay is not None:
        from . import overlay as overlays

        overlays.for_run(overlay, res, model, force=options.force)
    if json_out:
        _print_json(res.report.dumps())
    return res.exit_code


# Whether this command printed its JSON: with --json, an error before any model's report
# (usage, an unreadable option) still prints one JSON object on stdout.
_json_printed = False


def _print_json(text: str) -> None:
    global _json_printed
    _json_printed = True
    sys.stdout.write(text + "\n")


def _json_error(args: List[str], code: int, message: str) -> None:
    """With --json and nothing printed yet: the error as the report of no model."""
    if "--json" not in args or _json_printed:
        return
    from .report import dumps, error_report

    _print_json(dumps(error_report(None, code, message)))


def _error_report(model: Path, e: LegalizeError, report: Optional[Path], json_out: bool) -> None:
    from .report import dumps, error_report, write_json

    entry = error_report(str(model), e.exit_code, one_line(str(e)))
    if report is not None:
        write_json(report, entry, protect=model)
    if json_out:
        _print_json(dumps(entry))


def _is_batch(paths: List[Path], out_opt: Optional[Path], jobs: Optional[int], executor: str = "local") -> bool:
    """Several models: three or more paths, a folder first, or two paths with -j or -o
    (two paths alone keep meaning MODEL OUTPUT); with --executor ray, any paths (a
    batch of one model is still run on Ray)."""
    return (executor != "local" or len(paths) > 2 or _is_dir(paths[0])
            or (len(paths) == 2 and (jobs is not None or out_opt is not None)))


def _is_dir(p: Path) -> bool:
    try:
        return p.is_dir()
    except OSError:  # (a name too long: no folder; reading it says so in one line)
        return False


def _batch(paths, out_opt, jobs, executor, report, json_out, quiet, verbose, html,
           options: RunOptions) -> int:
    from .batch import Settings, check_folder, run_batch
    from .atomic_files import check_output_path

    if quiet and verbose:
        raise UsageError("-q and -v cannot be used together")
    if out_opt is not None:
        if options.verify_only:
            raise UsageError("--verify-only writes no model: leave out -o")
        check_folder(out_opt)  # made, as mkdir -p would, once every check passed
    _refuse_folder_spelling(("--report", report))
    out_opt, html = (Path(p) if p is not None else None for p in (out_opt, html))
    if report is not None:
        check_output_path(report, force=True)
    if html is not None and not html.is_dir():
        raise UsageError(f"{html}: with several models, --html must name an existing folder (one page per model)")
    execute = None
    if executor == "ray":
        from .ray_batch import require_ray, run_all as execute

        require_ray()  # without the extra: one line, before any work
    settings = Settings(options, outdir=out_opt, quiet=quiet, verbose=verbose, json_out=json_out, html_dir=html)
    return run_batch(paths, settings, jobs, report, execute=execute)


def _is_usage_error(e: BaseException) -> bool:
    # typer's click (vendored in new typer, the click package in old) raises these;
    # both have format_message() and an exit_code.
    return hasattr(e, "format_message") and hasattr(e, "exit_code")


def _interrupted(signum, frame):
    from . import atomic_files

    atomic_files.stop_requested = True  # (in case the exception is lost: see outputs)
    raise KeyboardInterrupt


def _unraisable(info) -> None:
    """A ^C that landed in a destructor is not a traceback for the user: the run stops
    at its next commit (``atomic_files.stop_requested``)."""
    if not issubclass(info.exc_type, KeyboardInterrupt):
        sys.__unraisablehook__(info)


def _will_check(argv: List[str]) -> bool:
    """Whether a run of ``argv`` looks like one that runs models (a guess from the
    words alone, before they are parsed: it only decides whether the child starts
    early)."""
    words = set(argv)
    if not argv or words & {"--help", "-h", "--no-check", "--version"}:
        return False
    return "--verify-only" not in words or "--against" in words or any(w.startswith("--against=") for w in argv)


class Sniffs:
    """What ``kinds.registry.sniff`` found of each file of one command line (or the
    BadInput it raised), by absolute path: each file is sniffed once, by the first that
    asks (the warm-up in ``main``, then the run's plan, which the command is handed it as
    its context's object)."""

    def __init__(self) -> None:
        self._found: Dict[str, object] = {}

    def __call__(self, path) -> object:
        """``sniff`` of ``path``'s file: its kind's name, or the BadInput it raised."""
        key = os.path.abspath(path)
        if key not in self._found:
            from .kinds.registry import sniff

            try:
                self._found[key] = sniff(Path(path))
            except LegalizeError as e:
                self._found[key] = e
        return self._found[key]

    def kind(self, word: str) -> Optional[Kind]:
        """The model kind (``kinds.base.Kind``) of the file ``word`` names, or None."""
        from .kinds.registry import named

        if not os.path.isfile(word):
            return None
        found = self(word)
        return named(found) if isinstance(found, str) else None


def _runtimes(argv: List[str], sniffs: Optional[Sniffs] = None) -> tuple:
    """The runtimes the check of the models ``argv`` names will run (``Kind.runtimes``:
    of its content, as the run reads it: a TFLite file named .bin is run on LiteRT;
    onnxruntime where it names none: a folder's models are several kinds)."""
    sniffs = sniffs if sniffs is not None else Sniffs()
    mods: List[str] = []
    for w in argv:
        kind = sniffs.kind(w)
        for mod in kind.runtimes if kind is not None else ():
            if mod not in mods:
                mods.append(mod)
    return tuple(mods) or ("onnxruntime",)


def _infers_onnx_shapes(model: Path, emit: List[str], sniffs: Sniffs) -> bool:
    """Whether reading ``model`` runs ONNX shape inference (an ONNX model), or the run will
    on its ONNX form (a TFLite model emitted as MLIR): the helper that does it is started
    ahead only then (a .pt2 is read, checked and written as its ATen graph: never)."""
    kind = sniffs.kind(str(model))
    if kind is None:
        return False
    # a translated kind's form is inferred when an MLIR format (not ONNX, not its own) is emitted
    return kind.infers_onnx_shapes or (kind.translation is not None and any(f not in ("onnx", kind.name) for f in emit))


def _names_place(word: str) -> bool:
    """Whether a word of the command line is a file, or a file to be made in a folder."""
    p = Path(word)
    try:
        return p.exists() or bool(p.suffix) and p.parent.is_dir()
    except OSError:  # (a name too long: not a place; the run says so in one line)
        return False


def main(argv: Optional[List[str]] = None) -> None:
    """Console entry point: user errors are one line on stderr, never a traceback.
    SIGTERM unwinds as ^C does, so that a killed run removes its temporary files."""
    from . import atomic_files

    atomic_files.stop_requested = False  # (a run in a process that ran one before)
    sniffs = Sniffs()  # (this command line's: a run before in this process may have seen other files)
    if _will_check(sys.argv[1:] if argv is None else list(argv)):
        from .numeric import child

        if child.available():  # the child that runs models starts while this process loads them
            words = sys.argv[1:] if argv is None else list(argv)
            # the folders of the files it names (models, --against, outputs): the child reads there
            child.readable(*(w for w in words if not w.startswith("-") and _names_place(w)))
            child.prewarm(_runtimes(words, sniffs))
    signals = (signal.SIGINT, signal.SIGTERM)
    try:
        previous = {s: signal.signal(s, _interrupted) for s in signals}
    except ValueError:  # not the main thread (an embedding): leave signals alone
        previous = {}
    hook, sys.unraisablehook = sys.unraisablehook, _unraisable
    try:
        _main(argv, sniffs)
    finally:
        sys.unraisablehook = hook
        for s, handler in previous.items():
            signal.signal(s, handler)


def _main(argv: Optional[List[str]], sniffs: Optional[Sniffs] = None) -> None:
    global _json_printed
    _json_printed = False
    args, command, prog = list(sys.argv[1:] if argv is None else argv), app, "legalize"
    if args[:1] == ["view"]:  # the one subcommand (a model file named 'view' is ./view)
        from .view import app as command

        args, prog = args[1:], "legalize view"
    try:
        # Without standalone mode, typer.Exit inside the command becomes the return value.
        code = command(args=args, standalone_mode=False, prog_name=prog, obj=sniffs)
    except LegalizeError as e:
        from .console import error_lines

        print(error_lines("legalize: error: ", e), file=sys.stderr)
        _json_error(args, e.exit_code, one_line(str(e)))
        sys.exit(e.exit_code)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except BrokenPipeError:  # `legalize ... | head`: the reader has gone; so do we
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(EXIT_BAD_INPUT)
    except (typer.Abort, KeyboardInterrupt):
        print("legalize: interrupted", file=sys.stderr)
        sys.exit(130)
    except MemoryError:
        print("legalize: error: out of memory", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    except Exception as e:  # noqa: BLE001 - the contract: one line, never a traceback
        if type(e).__name__ == "NoArgsIsHelpError":
            command(args=["--help"], standalone_mode=False, prog_name=prog)
            sys.exit(EXIT_BAD_INPUT)
        if _is_usage_error(e):
            print(one_line(f"legalize: error: {e.format_message()} (see legalize --help)"), file=sys.stderr)
            _json_error(args, EXIT_BAD_INPUT, one_line(e.format_message()))
            sys.exit(EXIT_BAD_INPUT)
        print(one_line(f"legalize: internal error: {type(e).__name__}: {e} (please report this)"), file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    from . import atomic_files

    if code == 130 or atomic_files.stop_requested:  # ^C (typer's rendering of it), SIGTERM
        print("legalize: interrupted", file=sys.stderr)
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)


# Set by ``console``: this process is the command's own.
_OWN_PROCESS = False


def console() -> None:
    """The ``legalize`` command's entry point: ``main``, in a process of its own, so
    that it may tune the garbage collector. It is off while the modules load, and leaves
    what they made alone afterwards (``gc.freeze``: it lives as long as the process):
    collecting among them, during the imports and again at exit, was a fifth of a small
    model's run (README, "Start-up")."""
    global _OWN_PROCESS
    _OWN_PROCESS = True
    gc.disable()
    main()


def _loaded() -> None:
    """The command's modules are imported: the collector runs again, for the work."""
    if _OWN_PROCESS and not gc.isenabled():
        gc.freeze()
        gc.enable()


if __name__ == "__main__":
    console()
