"""``--executor ray``: each model of a batch is a Ray task (docs/several-models.md).

Ray is the engine: the tasks go to the cluster that ``RAY_ADDRESS`` names, or to a local
Ray instance when it is unset (``ray.init()``, as Ray's own programs do; a caller that
already initialized Ray keeps its session), and Ray places each where its resources are
free: one CPU, and with ``--provider cuda`` one GPU. Nothing is retried: a model whose
worker dies fails alone, as a crashed process does with the local executor.

A task reads its model at the path given (the machine's own, or a filesystem that the
cluster's nodes share) and runs it as ``batch.run_one`` does, but writes every file into
a folder of its own and returns their bytes by name; the lines it prints and its report
name the paths the files will have. The command then writes each file where it computed
it goes (``output_for``, the ``--emit`` names beside it, the ``--html`` page): a name it
did not plan is refused, and every file is written atomically under the local
executor's rules (``--force``, never over the input). So the output folder need exist
only where the command runs, and a worker is never trusted with a path.

The lines, exit statuses and JSON list are those of the local executor, in the order the
models were given; only each entry's ``worker`` says where it ran. Ray's own messages
(a dead worker's notice, its logs) are not the command's: they are not printed.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import sys
import tempfile
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Dict, Iterator, List, Optional, TextIO, Tuple

from .batch import (Outcome, Settings, captured, check_output, html_for, output_for, planned_files, replay,
                    run_one)
from .console import one_line
from .extras import install_hint
from .errors import EXIT_BAD_INPUT, BadInput, LegalizeError, UsageError, first_line
from .atomic_files import atomic_output, check_output_path
from .numeric.runtimes import needs_gpu

NO_WORKER = {"executor": "ray", "node_id": None, "pid": None}  # stopped before it reached one


def require_ray():
    """The ``ray`` module, or UsageError naming the extra that brings it."""
    try:
        import ray
    except ImportError:
        raise UsageError(f"--executor ray needs Ray: install the ray extra ({install_hint('ray')})") from None
    return ray


@contextmanager
def _muted() -> Iterator[Tuple[TextIO, TextIO]]:
    """Ray writes to the driver's stdout and stderr on its own: Python threads (a worker's
    death, its log lines) and its C++ core (a cluster it cannot reach, retried once a
    second). Within this block both streams, and file descriptors 1 and 2, go nowhere;
    it yields the streams the command's own lines are written to."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    saved = [os.dup(fd) for fd in (1, 2)]
    ours = [open(fd, "w", encoding=stream.encoding, errors=stream.errors, closefd=True)
            for fd, stream in zip(saved, (sys.stdout, sys.stderr))]
    with open(os.devnull, "w") as sink:
        try:
            for fd in (1, 2):
                os.dup2(sink.fileno(), fd)
            with redirect_stdout(sink), redirect_stderr(sink):
                yield ours[0], ours[1]
        finally:
            for stream in ours:
                stream.flush()
            for fd, copy in zip((1, 2), saved):
                os.dup2(copy, fd)
            for stream in ours:
                stream.close()


def _connect(ray, settings: Settings) -> bool:
    """Join the cluster (RAY_ADDRESS, else a local instance); True if this call did, so
    that it is left again. UsageError when it cannot be reached or cannot run the tasks."""
    if ray.is_initialized():
        return False
    address = os.environ.get("RAY_ADDRESS")
    if address:
        _probe(address)
    try:
        ray.init(logging_level=logging.ERROR, log_to_driver=False)
    except Exception as e:  # noqa: BLE001 - Ray raises many kinds; each is one line here
        where = f"reach the Ray cluster at RAY_ADDRESS={address}" if address else "start a local Ray instance"
        raise UsageError(f"--executor ray: cannot {where}: {first_line(e)}") from None
    if needs_gpu(settings.options.provider) and not ray.cluster_resources().get("GPU"):
        ray.shutdown()
        raise UsageError(f"--provider {settings.options.provider} with --executor ray: the Ray cluster has no GPU for"
                         " the tasks")
    return True


def _probe(address: str) -> None:
    """A ``host:port`` that nothing answers on is one line at once, rather than minutes
    of Ray retrying in silence (``auto``, ``ray://`` and the like are left to Ray)."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or "/" in address:
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=10).close()
    except OSError as e:
        raise UsageError(f"--executor ray: cannot reach the Ray cluster at RAY_ADDRESS={address}:"
                         f" {e.strerror or e}") from None


def _task(model: Path, settings: Settings, cwd: str) -> Tuple[Outcome, Dict[str, bytes]]:
    """In a Ray worker: the model's run, with its files written into a private folder,
    and their bytes by name. It runs in the command's working folder where the worker
    has it (a shared filesystem), so that a relative path names the same file."""
    import ray

    before = os.getcwd()
    try:
        if os.path.isdir(cwd):
            os.chdir(cwd)
        with tempfile.TemporaryDirectory(prefix="legalize-ray-") as d:
            stage = Path(d)
            outcome = run_one(model, settings, stage=stage)
            files = {p.name: p.read_bytes() for p in sorted(stage.iterdir()) if p.is_file()}
    finally:
        os.chdir(before)
    outcome.worker = {"executor": "ray", "node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid()}
    return outcome, files


def _precheck(model: Path, settings: Settings) -> Optional[Outcome]:
    """What the local executor checks before a model's work (its output path), checked
    here, where the output goes: the model's error, or None."""
    if settings.options.verify_only:
        return None
    with captured(model) as outcome:
        check_output(model, output_for(model, settings.outdir), settings.options)
    if outcome.error is None:
        return None
    outcome.worker = dict(NO_WORKER)
    return outcome


def _targets(model: Path, settings: Settings, names) -> Dict[str, Path]:
    """The path here of each of ``names`` (the files a task returned) that the model's
    run may write: its model files, their external data (``<output name>.<16 hex
    digits>.data``, a new name each write, beside the output) and its page."""
    targets: Dict[str, Path] = {}
    if not settings.options.verify_only:
        output = output_for(model, settings.outdir)
        for path in planned_files(model, output, settings.options.emit):
            targets[path.name] = path
        data = re.compile(re.escape(output.name) + r"\.[0-9a-f]{16}\.data")
        targets.update((n, output.with_name(n)) for n in names if data.fullmatch(n))
    if settings.html_dir is not None:
        page = html_for(model, settings.html_dir)
        targets[page.name] = page
    return targets


def _deliver(model: Path, outcome: Outcome, files: Dict[str, bytes], settings: Settings) -> Outcome:
    """The outcome once the task's files are written where they go, under the local
    executor's rules; a file that cannot be written is the model's error, as it is
    locally: a model file's before anything is printed (every path is checked before any
    is written; data before the model), the HTML page's after the model's lines."""
    from . import html_report

    if not files:
        return outcome
    page = html_for(model, settings.html_dir).name if settings.html_dir is not None else None
    written: List[Path] = []
    try:
        targets = _targets(model, settings, files)
        unplanned = sorted(set(files) - set(targets))
        if unplanned:
            raise BadInput(f"{model}: the Ray task returned a file this run does not write ('{unplanned[0]}');"
                           " nothing written")
        names = sorted((n for n in files if n != page), key=lambda n: not n.endswith(".data"))
        for name in names:
            check_output_path(targets[name], force=settings.options.force, protect=model)
        for name in names:
            with atomic_output(targets[name], force=settings.options.force, protect=model) as tmp:
                tmp.write_bytes(files[name])
            written.append(targets[name])
    except LegalizeError as e:
        return _failed(outcome, e, keep_lines=False)
    if page in files:
        try:
            html_report.check_path(targets[page], protect=[model, *written])
            with atomic_output(targets[page], force=True) as tmp:
                tmp.write_bytes(files[page])
        except LegalizeError as e:
            return _failed(outcome, e, keep_lines=True)
    return outcome


def _failed(outcome: Outcome, e: LegalizeError, keep_lines: bool) -> Outcome:
    line = one_line(f"legalize: error: {e}") + "\n"
    return Outcome(outcome.path, e.exit_code, stdout=outcome.stdout if keep_lines else "",
                   stderr=(outcome.stderr if keep_lines else "") + line, error=one_line(str(e)),
                   worker=outcome.worker)


def _lost(ray, model: Path, e: Exception) -> Outcome:
    """A task that gave no result: its worker or node died, Ray killed it, or the task
    could not run (legalize is not installed on the worker, say)."""
    if isinstance(e, ray.exceptions.TaskCancelledError):
        return Outcome(str(model), 130, error="interrupted", worker=dict(NO_WORKER))
    if isinstance(e, ray.exceptions.RayTaskError):
        cause = getattr(e, "cause", None) or e
        why = f"the Ray task legalizing it failed: {type(cause).__name__}: {first_line(cause)}"
    elif isinstance(e, ray.exceptions.OutOfMemoryError):
        why = "Ray killed the worker legalizing it (out of memory)"
    else:
        why = f"the Ray worker legalizing it died ({type(e).__name__})"
    msg = one_line(f"{model}: {why}")
    return Outcome(str(model), EXIT_BAD_INPUT, stderr=f"legalize: error: {msg}\n", error=msg, worker=dict(NO_WORKER))


def _collect(ray, ref, model: Path, settings: Settings) -> Outcome:
    try:
        outcome, files = ray.get(ref)
    except ray.exceptions.RayError as e:
        return _lost(ray, model, e)
    return _deliver(model, outcome, files, settings)


def run_all(models: List[Path], settings: Settings, jobs: Optional[int]) -> List[Outcome]:
    """Run every model as a Ray task (``jobs`` at most at a time, else all at once) and
    print each model's lines in the order given, as soon as it and those before it are
    done and written."""
    ray = require_ray()
    outcomes: List[Optional[Outcome]] = [None] * len(models)
    in_flight: Dict[object, int] = {}  # ObjectRef -> index
    with _muted() as (out, err):
        joined = _connect(ray, settings)
        try:
            task = ray.remote(_task).options(num_cpus=1, num_gpus=1 if needs_gpu(settings.options.provider) else 0,
                                             max_retries=0)
            refs: Dict[int, object] = {}
            done = set()
            cap = jobs or len(models)
            next_start = next_print = 0
            while next_print < len(models):
                while next_start < len(models) and len(in_flight) < cap:
                    i, next_start = next_start, next_start + 1
                    outcomes[i] = _precheck(models[i], settings)
                    if outcomes[i] is None:
                        refs[i] = task.remote(models[i], settings, os.getcwd())
                        in_flight[refs[i]] = i
                while next_print < len(models) and (outcomes[next_print] is not None or next_print in done):
                    if outcomes[next_print] is None:
                        outcomes[next_print] = _collect(ray, refs.pop(next_print), models[next_print], settings)
                    replay(outcomes[next_print], out, err)
                    next_print += 1
                if in_flight:  # wait for one task, then take every other that is done too
                    ready, rest = ray.wait(list(in_flight), num_returns=1)
                    if rest:
                        ready += ray.wait(rest, num_returns=len(rest), timeout=0)[0]
                    done.update(in_flight.pop(ref) for ref in ready)
        finally:
            for ref in in_flight:  # ^C, SIGTERM: the tasks still running stop too
                ray.cancel(ref, force=True)
            if joined:
                ray.shutdown()
    return outcomes  # type: ignore[return-value]
