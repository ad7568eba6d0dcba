"""Several models in one command: ``legalize A.onnx B.tflite C.onnx``, ``legalize FOLDER``,
``-j N``. The CLI only decides that a command is a batch; this module finds the models,
runs each in a process of its own (a crash, a blow-up of memory, a bad file stops that
model only), prints each model's lines as a single run would, in the order given, and
aggregates the exit status: 0 only if every model passed, else the worst (2 > 1).

Semantics (README, "Several models"):

- A folder stands for the model files under it, recursively, in sorted order: ``*.onnx``
  and ``*.tflite`` (and ``*.mlir``, ``*.mlirbc`` with ``--verify-only``), skipping hidden
  files and folders and legalize's own outputs (names with ``.legal.``). A named file is
  recognized by content, as in a single run.
- Each model's output is ``<stem>.legal.<ext>`` beside it; with ``-o DIR`` (an existing
  folder) inside DIR instead. Two models that would write the same file are refused
  before any work (exit 2). ``--force`` lets every model replace its own existing output.
- ``--report PATH`` and ``--json`` give one JSON list, one element per model in the
  order run: that model's report (the single-run schema, plus ``exit_code``), or for a
  model that could not be processed ``{"schema", "tool_version", "input", "exit_code",
  "error"}``; each also says where it ran (``worker``).
- ``--executor ray`` runs each model as a Ray task instead (``ray_batch``), with the same
  lines, files and statuses.
"""

from __future__ import annotations

import io
import multiprocessing as mp
import os
import signal
import socket
import sys
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass, replace
from multiprocessing.connection import wait
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence, TextIO

from .errors import LegalizeError, UsageError
from .importers.reader import files_read, sniff
from .kinds.registry import DEFAULT, KINDS, named, of_suffix
from .atomic_files import check_distinct, check_output_path
from .pipeline import (EXIT_BAD_INPUT, EXIT_OK, EXIT_VIOLATIONS, RunOptions, default_output, file_bindables,
                       is_output)


def folder_suffixes(verify_only: bool) -> tuple:
    """The suffixes of a folder's models: of the kinds found in folders, those written,
    and with --verify-only those verified only."""
    return tuple(s for written in (True, False) if written or verify_only
                 for k in KINDS if k.in_folders and bool(k.written) == written for s in k.suffixes)


def find_models(folder: Path, verify_only: bool, skipped: Optional[List[Path]] = None) -> List[Path]:
    """The model files under ``folder`` (see the module's docstring), sorted. A file
    link whose target lies outside ``folder`` is no model of it: it goes to ``skipped``
    (a model of the folder must not make legalize read, and copy into its outputs,
    another file of the machine; links to folders are never followed)."""
    suffixes = folder_suffixes(verify_only)
    inside = os.path.realpath(folder)
    found = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if name.startswith(".") or is_output(name) or not name.endswith(suffixes):
                continue
            p = Path(root) / name
            if not p.is_file():
                continue
            if os.path.commonpath([inside, os.path.realpath(p)]) != inside:
                if skipped is not None:
                    skipped.append(p)
                continue
            found.append(p)
    return found


def expand(paths: Sequence[Path], verify_only: bool, skipped: Optional[List[Path]] = None) -> List[Path]:
    """The models that ``paths`` name: files as given, folders by their contents; each
    model once (links out of a folder go to ``skipped``). UsageError (or BadInput) for
    a folder that holds no model."""
    models: List[Path] = []
    seen = set()
    for p in paths:
        if p.is_dir() and (p / "saved_model.pb").exists():
            if len(paths) == 1:
                sniff(p)  # raises: a TensorFlow SavedModel, the one path given
            found = [p]  # among others: its own run says what it is (exit 2), the others go on
        elif p.is_dir():
            found = find_models(p, verify_only, skipped)
            if not found:
                kinds = ", ".join(f"*{s}" for s in folder_suffixes(verify_only))
                raise UsageError(f"{p}: is a directory with no model files in it ({kinds})")
        else:
            found = [p]
        for m in found:
            key = os.path.realpath(m)
            if key not in seen:
                seen.add(key)
                models.append(m)
    return models


def check_folder(folder: Path) -> None:
    """UsageError unless ``folder`` (a batch's ``-o DIR``) is a folder, or can be made one
    as ``mkdir -p`` would: its nearest existing ancestor is a folder we may write in.
    Nothing is made here (``make_folder``, once every check passed)."""
    if os.path.lexists(folder) and not folder.is_dir():
        raise UsageError(f"{folder}: exists and is not a folder; with several models, -o names the folder"
                         " to write them into")
    if folder.is_dir():
        return
    parent = folder.parent
    while not os.path.lexists(parent) and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise UsageError(f"{folder}: cannot make this folder (-o): {parent} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{folder}: cannot make this folder (-o): {parent} is not writable")


def make_folder(folder: Optional[Path]) -> None:
    """Make ``folder`` and its parents, where not there yet; UsageError if it cannot be."""
    if folder is None:
        return
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"{folder}: cannot make this folder (-o): {e.strerror or e}") from None


def check_bindings(models: List[Path], options: RunOptions) -> None:
    """A batch's ``--dim`` binds that dim in each model that has it, and ``--input-shape``
    and ``--input`` the input of each model that has it; a model without is run without
    it, with a warning (``pipeline._where_present``). One that names a dim or an input of
    no model is a UsageError, before any work, naming what the models have."""
    inputs = options.inputs if isinstance(options.inputs, dict) else {}
    if not (options.dims or options.input_shapes or inputs):
        return
    found = [f for f in (file_bindables(m, options.trust_pt2) for m in models if m.is_file()) if f is not None]
    if not found:
        return  # no model loads: each run says why
    keys = list(dict.fromkeys(k for ks, _ in found for k in ks))
    names = list(dict.fromkeys(n for _, ns in found for n in ns))
    for name, size in options.dims.items():
        if name not in keys:
            have = f"their dims are: {', '.join(keys)}" if keys else "they have none (every input dim is static)"
            raise UsageError(f"--dim {name}={size}: no model has a dynamic dim '{name}'; {have}")
    for flag, given in (("--input-shape", options.input_shapes), ("--input", inputs)):
        for name in given:
            if name not in names:
                raise UsageError(f"{flag} {name}: no model has an input '{name}' (their inputs: "
                                 f"{', '.join(repr(n) for n in names) or 'none'})")


def output_for(model: Path, outdir: Optional[Path]) -> Path:
    out = default_output(model)
    return out if outdir is None else outdir / out.name


def html_for(model: Path, html_dir: Path) -> Path:
    """``m.onnx`` -> ``DIR/m.legal.html``."""
    return html_dir / default_output(model).with_suffix(".html").name


def planned_files(model: Path, output: Path, emit: List[str]) -> List[Path]:
    """The model files a model's run may write (its external data aside), before any
    work: for the collision check, and the names a Ray task may return."""
    from . import emit_formats as emit_mod

    try:
        kind = named(sniff(model))
    except LegalizeError:  # that model's own error, when it runs: named by its suffix
        kind = of_suffix(model.suffix)
    native = kind.name if kind is not None and kind.written else DEFAULT.name
    formats = list(dict.fromkeys(emit)) or [native]
    formats = [f for f in formats if f in emit_mod.suffixes()]
    return list(emit_mod.emit_paths(output, formats, native).values()) if formats else [output]


def _written(models: List[Path], settings: Settings, report: Optional[Path]) -> List[tuple]:
    """Every file the batch writes, as (what it is, path) pairs for ``check_distinct``:
    no output (nor the report, nor a page) may be one of the models, which would then be
    overwritten by another model's run (``legalize a/q.onnx a/q.legal.onnx --force``)."""
    options = settings.options
    files = [] if options.verify_only else [
        (f"the output of {m}", f) for m in models
        for f in planned_files(m, output_for(m, settings.outdir), options.emit)]
    if report is not None:
        files.append(("the report (--report)", report))
    if settings.html_dir is not None:
        files.extend((f"the HTML report of {m}", html_for(m, settings.html_dir)) for m in models)
    return files


def _files_read(models: List[Path], outputs: List[Path]) -> List[tuple]:
    """``files_read`` model by model: one that cannot be read counts as itself alone,
    and its own run says what is wrong with it (a bad file stops only that model,
    whether or not outputs exist already)."""
    found: List[tuple] = []
    for m in models:
        try:
            found += files_read([m], outputs)
        except LegalizeError:
            found.append(("an input model", m))
    return found


def check_collisions(models: List[Path], outdir: Optional[Path], emit: List[str]) -> None:
    owner: Dict[str, Path] = {}
    for m in models:
        for f in planned_files(m, output_for(m, outdir), emit):
            key = os.path.abspath(f)
            if key in owner:
                raise UsageError(f"{owner[key]} and {m} would both be written to {f}"
                                 " (give them different names, or run them separately)")
            owner[key] = m


@dataclass
class Settings:
    """What every model's run shares."""

    options: RunOptions
    outdir: Optional[Path] = None
    quiet: bool = False
    verbose: bool = False
    json_out: bool = False
    want_report: bool = False
    html_dir: Optional[Path] = None  # --html DIR: one page per model, named like its output


@dataclass
class Outcome:
    path: str
    exit_code: int
    stdout: str = ""
    stderr: str = ""
    report: Optional[dict] = None
    error: Optional[str] = None
    # Where it ran: {"executor": "local" or "ray", "node_id": the host name (local) or
    # Ray's node id, "pid": the process}; node_id and pid are null where unknown.
    worker: Optional[dict] = None

    def report_entry(self) -> dict:
        if self.report is not None:
            entry = {**self.report, "exit_code": self.exit_code}
        else:
            from .report import error_report

            entry = error_report(self.path, self.exit_code, self.error)
        if self.worker is not None:
            entry["worker"] = self.worker
        return entry


def local_worker(pid: Optional[int]) -> dict:
    return {"executor": "local", "node_id": socket.gethostname(), "pid": pid}


@contextmanager
def captured(model: Path) -> Iterator[Outcome]:
    """Run the body with what it prints captured into the Outcome it is given, and its
    errors turned into one line each, as a single run prints them (the others go on)."""
    from .console import error_lines, one_line

    out, err = io.StringIO(), io.StringIO()
    outcome = Outcome(str(model), EXIT_BAD_INPUT)
    try:
        with redirect_stdout(out), redirect_stderr(err):
            try:
                yield outcome
            except LegalizeError as e:
                outcome.exit_code, outcome.error = e.exit_code, one_line(str(e))
                print(error_lines("legalize: error: ", e), file=sys.stderr)
            except MemoryError:
                outcome.exit_code, outcome.error = EXIT_BAD_INPUT, f"{model}: out of memory"
                print(f"legalize: error: {model}: out of memory", file=sys.stderr)
            except Exception as e:  # noqa: BLE001 - one line, never a traceback; the others go on
                outcome.exit_code = EXIT_BAD_INPUT
                outcome.error = one_line(f"internal error: {type(e).__name__}: {e}")
                print(one_line(f"legalize: internal error: {model}: {type(e).__name__}: {e} (please report this)"),
                      file=sys.stderr)
    finally:
        outcome.stdout, outcome.stderr = out.getvalue(), err.getvalue()


def check_output(model: Path, output: Path, options: RunOptions) -> None:
    """What is checked before a model's work: its output path (with --emit, the pipeline
    checks each file it will write)."""
    if not options.emit and model.exists():
        check_output_path(output, force=options.force, protect=model)


def run_one(model: Path, settings: Settings, stage: Optional[Path] = None) -> Outcome:
    """One model, as a single run would do it, with what it prints captured.

    With ``stage`` (a folder of a Ray task's own: ``ray_batch``), every file the run
    writes goes into that folder under the name it will have, and the lines and the
    report name the paths it will have where the command runs."""
    from .console import Printer
    from .pipeline import run

    with captured(model) as outcome:
        options = replace(settings.options)
        output = None
        if not options.verify_only:
            output = output_for(model, settings.outdir)
            if stage is None:
                check_output(model, output, options)
            options.output = output if stage is None else stage / output.name
        printer = Printer(settings.quiet, settings.verbose, settings.json_out, legalizing=not options.verify_only)
        if settings.html_dir is not None:
            options.regions = True
        res = run(model, options)
        if stage is not None and output is not None:
            _shown_at(res.report, stage, output.parent)
        printer.summary(res)
        if settings.html_dir is not None:
            from . import html_report

            page = html_for(model, settings.html_dir)
            html_report.write(page if stage is None else stage / page.name, res.report, res.regions,
                              protect=[model, *res.report.outputs.values()], culprit=res.culprit_picture)
        outcome.exit_code = res.exit_code
        if settings.want_report:
            outcome.report = res.report.to_json()
    return outcome


def _shown_at(report, stage: Path, dest: Path) -> None:
    """The report's output paths where the files will be: ``dest`` for ``stage``."""
    def moved(path: str) -> str:
        return str(dest / Path(path).name) if Path(path).parent == stage else path

    report.outputs = {f: moved(p) for f, p in report.outputs.items()}
    if report.output is not None:
        report.output = moved(report.output)


def _terminate_gracefully(signum, frame):  # pragma: no cover - runs in a worker on SIGTERM
    raise KeyboardInterrupt


def _worker(model: Path, settings: Settings, conn) -> None:  # pragma: no cover - in a child
    # SIGTERM (the parent stopping early) unwinds like ^C, so that temporary files go.
    signal.signal(signal.SIGTERM, _terminate_gracefully)
    try:
        outcome = run_one(model, settings)
    except KeyboardInterrupt:
        outcome = Outcome(str(model), 130, error="interrupted")
    outcome.worker = local_worker(os.getpid())
    try:
        conn.send(outcome)
    finally:
        conn.close()


def _context(preload: List[str]):
    """Workers fork from a fork server: a fresh interpreter that imports ``preload`` and
    runs nothing else, so a fork of it starts warm and holds no runtime's threads (a
    fork of this process, whose onnxruntime, JAX or torch may have started threads,
    could inherit their locks held). Where there is none, each worker is spawned."""
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    # Taken by the server's first start only (one per process, then reused); the
    # caller's __main__ once there, rather than in each worker.
    ctx.set_forkserver_preload(["__main__", *preload])
    return ctx


def _crashed(model: Path, exitcode: Optional[int], pid: Optional[int]) -> Outcome:
    if exitcode is not None and exitcode < 0:
        try:
            how = f"signal {signal.Signals(-exitcode).name}"
        except ValueError:
            how = f"signal {-exitcode}"
    else:
        how = f"exit status {exitcode}"
    msg = f"{model}: the process legalizing it died ({how})"
    if exitcode == -signal.SIGKILL:
        msg += "; out of memory?"
    return Outcome(str(model), EXIT_BAD_INPUT, stderr=f"legalize: error: {msg}\n", error=msg,
                   worker=local_worker(pid))


# What a run imports on first use (the check's runtimes above all): imported once by the
# fork server, each model's process starts warm rather than importing them again. A
# kind's own modules are its record's (``Kind.warm``).
WARM = {"any": ["legalizer.console", "legalizer.kinds.onnx.importer", "numpy.random"],
        "check": ["onnxruntime"],
        "tables": ["rich.console", "rich.table", "rich.text"]}


def _warm(models: List[Path], settings: Settings) -> List[str]:
    """The modules the workers of this batch start with (``WARM``, and those of the
    kinds its models' suffixes name)."""
    options = settings.options
    kinds = ["any"] + (["check"] if options.check and not options.verify_only else [])
    kinds += [] if settings.quiet else ["tables"]
    named_kinds = [k for k in KINDS if any(m.suffix in k.suffixes for m in models)]
    return [n for k in kinds for n in WARM[k]] + [n for k in named_kinds for n in k.warm]


def run_all(models: List[Path], settings: Settings, jobs: int) -> List[Outcome]:
    """Run every model in a process of its own, ``jobs`` at a time; print each model's
    lines in the order given, as soon as it and those before it are done."""
    ctx = _context(_warm(models, settings))
    results: Dict[int, Outcome] = {}
    running: Dict[object, tuple] = {}  # connection -> (index, process)
    next_start, next_print = 0, 0
    try:
        while next_print < len(models):
            while next_start < len(models) and len(running) < jobs:
                recv, send = ctx.Pipe(duplex=False)
                p = ctx.Process(target=_worker, args=(models[next_start], settings, send), daemon=True)
                p.start()
                send.close()
                running[recv] = (next_start, p)
                next_start += 1
            for conn in wait(list(running)):
                i, p = running.pop(conn)
                try:
                    results[i] = conn.recv()
                except (EOFError, OSError):
                    p.join()
                    results[i] = _crashed(models[i], p.exitcode, p.pid)
                conn.close()
                p.join()
            while next_print in results:
                replay(results[next_print])
                next_print += 1
    finally:
        for conn, (_, p) in running.items():
            if p.is_alive():
                p.terminate()
        for conn, (_, p) in running.items():
            p.join(10)
            conn.close()
    return [results[i] for i in range(len(models))]


def replay(o: Outcome, out: Optional[TextIO] = None, err: Optional[TextIO] = None) -> None:
    out, err = out or sys.stdout, err or sys.stderr
    if o.stdout:
        out.write(o.stdout)
        out.flush()
    if o.stderr:
        err.write(o.stderr)
        err.flush()


def aggregate(codes: Sequence[int]) -> int:
    """0 only if every model passed, else the worst: 2 (bad input, a crash) over 1."""
    worst = EXIT_OK
    for c in codes:
        c = c if c in (EXIT_OK, EXIT_VIOLATIONS) else EXIT_BAD_INPUT
        worst = max(worst, c)
    return worst


def summary_line(outcomes: List[Outcome], verify_only: bool) -> str:
    n = len(outcomes)
    ok = sum(o.exit_code == EXIT_OK for o in outcomes)
    failed = sum(o.exit_code == EXIT_VIOLATIONS for o in outcomes)
    bad = n - ok - failed
    passed = "legal" if verify_only else "legalized"
    return (f"legalize: {n} model{'s' if n != 1 else ''}: {ok} {passed}, {failed} with violations or a "
            f"mismatch (exit 1), {bad} not processed (exit 2)")


def run_batch(paths: Sequence[Path], settings: Settings, jobs: Optional[int], report: Optional[Path],
              execute: Optional[Callable[[List[Path], Settings, Optional[int]], List[Outcome]]] = None) -> int:
    """The batch command: returns the aggregated exit status. ``execute`` runs the
    models elsewhere (``ray_batch.run_all``); by default, local processes."""
    options = settings.options
    skipped: List[Path] = []
    models = expand(paths, options.verify_only, skipped)
    from .console import one_line

    for link in skipped:
        print(one_line(f"legalize: warning: {link}: links to a file outside the folder given; skipped"),
              file=sys.stderr)
    if settings.outdir is not None:
        check_collisions(models, settings.outdir, options.emit)
    elif not options.verify_only:
        check_collisions(models, None, options.emit)
    if settings.html_dir is not None:
        pages = [html_for(m, settings.html_dir) for m in models]
        twice = sorted({p.name for p in pages if pages.count(p) > 1})
        if twice:
            raise UsageError(f"--html: two models would write the same page ({', '.join(twice)}):"
                             " run them separately")
        for page in pages:  # each can be written (a regular file, or none yet, in a folder that takes files)
            check_output_path(page, force=True)
    if report is not None:
        for m in models:
            if m.exists():
                check_output_path(report, force=True, protect=m)
    written = _written(models, settings, report)
    check_distinct(written, _files_read(models, [p for _, p in written]))
    check_bindings(models, options)
    settings = replace(settings, want_report=report is not None or settings.json_out,
                       options=replace(options, dims_where_present=True))
    make_folder(settings.outdir)  # every check passed: -o DIR/ as mkdir -p would
    outcomes = (execute(models, settings, jobs) if execute is not None
                else run_all(models, settings, max(1, jobs or 1)))
    code = aggregate([o.exit_code for o in outcomes])
    line = summary_line(outcomes, options.verify_only)
    print(line, file=sys.stderr if settings.json_out else sys.stdout, flush=True)
    if report is not None or settings.json_out:
        entries = [o.report_entry() for o in outcomes]
        if report is not None:
            from .report import write_json

            write_json(report, entries)
        if settings.json_out:
            from .report import dumps

            sys.stdout.write(dumps(entries) + "\n")
    return code

