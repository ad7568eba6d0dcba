"""Every run of a model happens in a child process, never in ``legalize`` itself: a
model is untrusted, and the runtimes (onnxruntime, LiteRT, IREE, XLA, PyTorch) run it
in native code that cannot be bounded from inside (a ``Loop`` of 1e15 trips holds the
thread; an IREE gather at index 2e9 reads outside its buffer and kills the process).

``Remote(factory, *args, **kwargs)`` builds ``factory(*args, **kwargs)`` (a runner, a
LiteRT model) in the child and calls its methods there (``call``); ``ChildRunner`` is a
``Runner`` whose model lives in the child. The child is a fresh interpreter
(``python -m legalizer.numeric.serve``, not a fork of this process), started at the first
use and kept warm for every model and binding of the run (one per process: a batch
worker has its own). Each call has a time limit and the child an address-space limit
(``Limits``; ``--run-timeout``, ``--run-memory``). A child that dies (a crash), runs out
of its memory or time, or answers what the protocol does not allow, is killed and
becomes ``RunFault``: one line naming the model, the runtime and the cause; the next
call starts a new child. Nothing is pickled either way: requests and replies are JSON
plus array bytes (``wire.py``).

A signal (^C, SIGTERM) that interrupts a call kills the child at once: the parent only
waits on a pipe, so it stops within the time Python takes to run its handler.
"""

from __future__ import annotations

import atexit
import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence

import numpy as np

from ..errors import CheckUnavailable
from . import wire
from .inputs import InputSpec
from .probes import CHUNK_BYTES
from .runner import Runner


def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 << 30


# Defaults that suit real models: an inference or an IREE compile of a large model takes
# seconds to a few minutes; a model may use half the machine's memory beyond what the
# child holds once its runtimes are loaded.
DEFAULT_TIMEOUT = 300.0
DEFAULT_MEMORY = max(2 << 30, _physical_memory() // 2)


@dataclass
class Limits:
    timeout: float = DEFAULT_TIMEOUT  # seconds, per call
    memory: int = DEFAULT_MEMORY  # bytes the child may map beyond what it holds, per call


_limits = Limits()


def limits() -> Limits:
    return _limits


@contextmanager
def limited(timeout: Optional[float] = None, memory: Optional[int] = None) -> Iterator[Limits]:
    """The run's limits for the block (None: the default)."""
    global _limits
    previous = _limits
    _limits = Limits(DEFAULT_TIMEOUT if timeout is None else float(timeout),
                     DEFAULT_MEMORY if memory is None else int(memory))
    try:
        yield _limits
    finally:
        _limits = previous


class RunFault(CheckUnavailable):
    """The child running a model crashed, ran out of its memory or time, or was killed:
    the check did not run. ``str(e)`` is one line naming the model, the runtime and the
    cause."""

    def __init__(self, model: str, runtime: str, cause: str, out_of_memory: bool = False):
        super().__init__(f"{model} on {runtime}: {cause}")
        self.model, self.runtime, self.cause = model, runtime, cause
        self.out_of_memory = out_of_memory


class ChildError(RuntimeError):
    """An exception the model's runtime raised in the child (its type is not one this
    process rebuilds); ``str(e)`` is its message."""


# The exceptions of the child that callers tell apart, rebuilt here by name.
_REBUILT = {
    "legalizer.numeric.iree_run.TosaError": ("legalizer.numeric.iree_run", "TosaError"),
    "legalizer.numeric.iree_run.Refused": ("legalizer.numeric.iree_run", "Refused"),
    "legalizer.numeric.litert.LiteRTError": ("legalizer.numeric.litert", "LiteRTError"),
    "legalizer.errors.CheckUnavailable": ("legalizer.errors", "CheckUnavailable"),
    "legalizer.errors.BadInput": ("legalizer.errors", "BadInput"),
    "legalizer.errors.UsageError": ("legalizer.errors", "UsageError"),
    "legalizer.numeric.search.TooBig": ("legalizer.numeric.search", "TooBig"),
    "legalizer.numeric.reduce.NothingToReduce": ("legalizer.numeric.reduce", "NothingToReduce"),
}


def _rebuild(kind: str, message: str, attrs: Mapping[str, Any]) -> BaseException:
    import importlib

    where = _REBUILT.get(kind)
    if where is None:
        return ChildError(message)
    cls = getattr(importlib.import_module(where[0]), where[1])
    e = cls.__new__(cls)
    Exception.__init__(e, message)
    for k, v in attrs.items():
        if isinstance(v, (str, int, float, bool)):
            setattr(e, k, v)
    return e


def _how(status: int) -> str:
    """How the child ended, in words."""
    if status < 0:
        try:
            name = signal.Signals(-status).name
        except ValueError:
            name = str(-status)
        return f"it crashed (signal {name})"
    return f"its process ended (exit status {status})"


# The children: "run" runs models, under the syscall filter where the platform has one
# (``sandbox.py``); "compile" compiles TOSA modules with IREE, whose compiler runs its own
# tools (iree-compile, its linker) and writes temporary files, which the filter refuses.
RUN, COMPILE = "run", "compile"


def _widen(fd: int) -> None:
    """A pipe of 1 MiB, where the system allows it (Linux's default limit for anyone):
    a model or a value of megabytes crosses in 16 times fewer turns than through 64 KiB."""
    try:
        import fcntl

        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ"), 1 << 20)
    except (ImportError, AttributeError, OSError):
        pass


class _Process:
    """One child process and its pipes."""

    def __init__(self, pool: str = RUN) -> None:
        import json

        replies_r, replies_w = os.pipe()
        _widen(replies_r)
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])  # the folder that holds ``legalizer``
        env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        env["PYTHONDONTWRITEBYTECODE"] = "1"  # it writes nothing, not even bytecode caches
        try:  # its user's name, which it cannot read from /etc/passwd under Landlock (PyTorch names its caches so)
            import getpass

            env.setdefault("USER", getpass.getuser())
        except (ImportError, KeyError, OSError):
            pass
        try:
            # -P: the working folder is not on its module path (nor, so, readable under Landlock)
            self.popen = subprocess.Popen([sys.executable, "-P", "-m", "legalizer.numeric.serve", str(replies_w),
                                           "filtered" if pool == RUN else "plain", json.dumps(sorted(_readable))],
                                          stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL, pass_fds=(replies_w,), env=env,
                                          close_fds=True, start_new_session=True)
        finally:
            os.close(replies_w)
        self.requests = self.popen.stdin.fileno()
        _widen(self.requests)
        self.replies = replies_r
        self.owner = os.getpid()
        self.readable = frozenset(_readable)  # the folders it may read (Landlock, where the kernel has it)
        # Requests whose replies nobody waits for yet, read before the next: None for a
        # warm-up (``prewarm``), or a Remote being built ahead (``ChildRunner.begin``).
        self.pending: List[Optional["Remote"]] = []

    def limit(self, memory: int) -> int:
        """Set the child's address-space limit (``RLIMIT_AS``) from here, to what it maps
        now plus ``memory``: 0, the memory the request asks the child to limit itself
        to (0: done here). The run child's filter refuses it ``setrlimit`` and
        ``prlimit64``, so that code a model reached there cannot raise its limit; where
        this process cannot set another's (no ``prlimit``), the child does it itself."""
        import resource

        if memory <= 0 or not hasattr(resource, "prlimit"):
            return memory
        try:
            with open(f"/proc/{self.popen.pid}/statm") as f:
                mapped = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
            hard = resource.prlimit(self.popen.pid, resource.RLIMIT_AS)[1]
            want = mapped + memory if hard == resource.RLIM_INFINITY else min(mapped + memory, hard)
            resource.prlimit(self.popen.pid, resource.RLIMIT_AS, (want, hard))
        except (OSError, ValueError):  # gone (the reply says so), or not this process's to set
            return memory
        return 0

    def kill(self) -> int:
        """Kill and reap it; its status as ``Popen.returncode`` gives it (-N: signal N)."""
        try:
            try:  # its group: the tools it runs (IREE's compiler and linker) go with it
                os.killpg(self.popen.pid, signal.SIGKILL)
            except OSError:
                if self.popen.poll() is None:
                    self.popen.kill()
            status = self.popen.wait()
        except OSError:
            status = -signal.SIGKILL
        for close in (self.popen.stdin.close, lambda: os.close(self.replies)):
            try:
                close()
            except OSError:
                pass
        return status


_lock = threading.RLock()
_processes: Dict[str, _Process] = {}
_generations: Dict[str, int] = {}  # children started per pool: a handle of an earlier one is gone with it
_handles = itertools.count(1)
# Bytes of outputs each object's last run left in its pool's child (``ChildRunner.infer_held``):
# counted against --run-memory for every other call, so that the limit bounds what the
# child holds in all, not only what one call adds.
_held: Dict[str, Dict[int, int]] = {}
_readable: set = set()  # the folders of the run's models, outputs and temporaries: the run child reads there


def readable(*paths) -> None:
    """Let the run child read ``paths`` (a file's folder, or a folder), as well as the
    Python install: with Landlock (``landlock.py``) it reads nothing else. A path its
    running child may not read stops that child: the next call starts one that may.
    Name the run's folders before ``prewarm``, so that the child starts once."""
    with _lock:
        for p in paths:
            folder = _folder(p)
            if folder is not None and not _covered(folder, _readable):
                _readable.add(folder)
        proc = _live(RUN)
        if proc is not None and not _readable <= proc.readable:
            _stop(RUN)


def _folder(path) -> Optional[str]:
    """The folder to read for ``path``: itself if a folder, else its own (if it exists)."""
    try:
        p = os.path.realpath(os.fspath(path))
    except (TypeError, ValueError):
        return None
    if os.path.isdir(p):
        return p
    p = os.path.dirname(p)
    return p if os.path.isdir(p) else None


def _covered(folder: str, folders) -> bool:
    return any(folder == f or folder.startswith(f.rstrip(os.sep) + os.sep) for f in folders)


def _live(pool: str) -> Optional[_Process]:
    proc = _processes.get(pool)
    return proc if proc is not None and proc.owner == os.getpid() else None


def _current(pool: str = RUN) -> _Process:
    proc = _live(pool)
    if proc is None:
        proc = _processes[pool] = _Process(pool)
        _generations[pool] = _generations.get(pool, 0) + 1
    return proc


def _stop(pool: str = RUN) -> int:
    """Kill the pool's child (if any); its status."""
    proc = _processes.pop(pool, None)
    if proc is None or proc.owner != os.getpid():
        return 0
    _held.pop(pool, None)
    return proc.kill()


def stop_all() -> None:
    """Kill the children of this process (at exit, and when the run is stopped)."""
    with _lock:
        for pool in list(_processes):
            _stop(pool)


atexit.register(stop_all)


def available() -> bool:
    """Whether this platform can start the child (a POSIX system with /proc)."""
    return os.name == "posix" and os.path.exists("/proc/self/statm")


def prewarm(modules: Sequence[str] = ("onnxruntime",), pool: str = RUN) -> None:
    """Start the child now and have it import ``modules``, without waiting: it starts
    while this process loads and legalizes the model, so the check finds it warm."""
    with _lock:
        if _live(pool) is not None:  # started already: warm, or warming
            return
        proc = _current(pool)
        try:
            wire.send(proc.requests, _request(("import", 0, list(modules), 0)))
            proc.pending.append(None)
        except OSError:
            _stop(pool)


def sandbox() -> str:
    """The run child's syscall filter: "seccomp, landlock", "seccomp; <why no Landlock>", or why there is none."""
    with _lock:
        proc = _current(RUN)
        return str(Remote.__new__(Remote)._status(proc).get("sandbox", ""))


class Remote:
    """``factory(*args, **kwargs)`` built in the child; ``call`` runs its methods there.
    ``model`` and ``runtime`` name it in a ``RunFault``. ``fetch``: attributes read once
    it is built (and activated, with ``activate``), kept in ``fetched``."""

    def __init__(self, factory, *args, model: str = "the model", runtime: str = "", fetch: Sequence[str] = (),
                 activate: bool = False, pool: str = RUN, wait: bool = True, **kwargs):
        self.model, self.runtime = model, runtime or getattr(factory, "runtime", "") or getattr(factory, "name", "")
        self.pool = pool
        self.fetched: Dict[str, Any] = {}
        self.built: Any = None  # without ``wait``: the reply to its building, once read
        if pool == RUN and args and _names_file(args[0]):
            readable(args[0])  # a model file: its folder (its external data) is read too
        with _lock:
            proc = _current(pool)
            self.generation, self.handle = _generations[pool], next(_handles)
            request = ("new", self.handle, factory.__module__, factory.__qualname__, _model_path(list(args)),
                       dict(kwargs), list(fetch), activate)
            if wait:
                self.fetched = self._ask(request)
                return
            try:  # built while this process goes on; ``ready`` waits for it
                wire.send(proc.requests, _request(request + (proc.limit(_limits.memory),)))
                proc.pending.append(self)
            except OSError:
                _stop(pool)

    def ready(self) -> "Remote":
        """Wait until a Remote made without ``wait`` is built (the child's own error if
        it could not be)."""
        with _lock:
            proc = _live(self.pool)
            if self.built is None and proc is not None and self.generation == _generations.get(self.pool) \
                    and self in proc.pending:
                self._ask(("status", 0))  # reads the replies ahead of it
            if self.built is None:
                raise RunFault(self.model, self.runtime, "its process was stopped by an earlier fault")
            built, self.built = self.built, {"ok": None}
        if not isinstance(built, dict) or "ok" not in built:
            self._raise(built)
        self.fetched = built["ok"] if isinstance(built["ok"], dict) else {}
        return self

    def call(self, method: str, *args, keep: bool = True, memory: Optional[int] = None,
             timeout: Optional[float] = None, **kwargs):
        """``obj.method(*args, **kwargs)`` in the child (``keep=False``: its value is not
        sent back). ``memory``/``timeout``: tighter limits for this call."""
        return self._ask(("call", self.handle, method, list(args), dict(kwargs), keep), memory, timeout)

    def refuse(self, what: str) -> RunFault:
        """Stop the child that answered ``what`` the protocol does not allow: the fault."""
        with _lock:
            if self.generation == _generations.get(self.pool):
                _stop(self.pool)
        return RunFault(self.model, self.runtime, f"its process answered what the protocol does not allow ({what})")

    def _status(self, proc: _Process) -> dict:
        self.model, self.runtime, self.pool = "the child", "", RUN
        self.generation, self.handle = _generations[RUN], 0
        return self._ask(("status", 0))

    def close(self) -> None:
        """Let the object go in the child, without waiting: a session takes a while to
        free (0.1 s for a large model), and its reply is read before the next request's."""
        with _lock:
            proc = _live(self.pool)
            if proc is not None and self.generation == _generations.get(self.pool):
                _held.get(self.pool, {}).pop(self.handle, None)
                try:
                    wire.send(proc.requests, _request(("drop", self.handle, 0)))
                    proc.pending.append(None)
                except OSError:  # gone: the next request says so
                    pass

    def _ask(self, request: tuple, memory: Optional[int] = None, timeout: Optional[float] = None):
        lim = _limits
        memory = lim.memory if memory is None else min(memory, lim.memory)
        timeout = lim.timeout if timeout is None else min(timeout, lim.timeout)
        limit = memory  # as a fault names it
        held = sum(n for h, n in _held.get(self.pool, {}).items() if h != self.handle)
        memory = max(memory - held, 1 << 20)  # what the others' outputs held there leave
        with _lock:
            proc = _live(self.pool)
            if proc is None or self.generation != _generations.get(self.pool):
                raise RunFault(self.model, self.runtime, "its process was stopped by an earlier fault")
            try:
                while proc.pending:  # a warm-up's or a model's built ahead (not this call's time)
                    ahead = wire.receive(proc.replies, time.monotonic() + max(timeout, 120.0), _reply_limit(lim.memory))
                    waiting = proc.pending.pop(0)
                    if waiting is not None:
                        waiting.built = wire.decode(ahead)
                wire.send(proc.requests, _request(request + (proc.limit(memory),)))
                data = wire.receive(proc.replies, time.monotonic() + timeout, _reply_limit(memory))
                reply = wire.decode(data)
                del data
            except wire.Timeout:
                _stop(self.pool)
                raise RunFault(self.model, self.runtime, f"it did not finish within its time limit of {timeout:g} s"
                                                         " (--run-timeout)") from None
            except (OSError, EOFError):
                status = _stop(self.pool)
                raise RunFault(self.model, self.runtime, _how(status)) from None
            except wire.BadReply as e:
                _stop(self.pool)
                raise RunFault(self.model, self.runtime, f"its process answered what the protocol does not allow"
                                                         f" ({e})") from None
            except MemoryError:  # its reply does not fit here: this process's limit, not the model's failure
                _stop(self.pool)
                raise RunFault(self.model, self.runtime, "its reply does not fit in this process's memory",
                               out_of_memory=True) from None
            except BaseException:  # ^C, SIGTERM: the child is mid-call; it goes at once
                _stop(self.pool)
                raise
        if isinstance(reply, dict) and "ok" in reply:
            return reply["ok"]
        self._raise(reply, limit)

    def _raise(self, reply, memory: Optional[int] = None):
        """The exception of an error reply (a fault for one of neither form)."""
        memory = _limits.memory if memory is None else memory
        error = reply.get("error") if isinstance(reply, dict) else None
        if not (isinstance(error, list) and len(error) == 4):
            raise self.refuse("a reply of neither form")
        kind, message, out_of_memory, attrs = error
        if out_of_memory:
            raise RunFault(self.model, self.runtime, f"it ran out of its memory ({memory / 2**30:.3g} GiB,"
                                                     " --run-memory)", out_of_memory=True)
        raise _rebuild(str(kind), str(message), attrs if isinstance(attrs, dict) else {})


def _request(request: tuple) -> bytes:
    """A request as the child reads it: JSON plus array bytes (``wire``), never a pickle."""
    return wire.encode(list(request), request=True)


def _reply_limit(memory: int) -> int:
    """The most a reply may claim: what the child may allocate for the call (it cannot
    have made more), and never more than the protocol's bound."""
    return min(wire.MAX_REPLY, max(memory, 1 << 20))


def _names_file(arg) -> bool:
    if not isinstance(arg, (str, os.PathLike)):
        return False
    name = os.fspath(arg)
    return isinstance(name, str) and len(name) < 4096 and "\n" not in name and os.path.isfile(name)


def _model_path(args: list) -> list:
    """``args`` with its first, the model, made absolute where it names a file: the child
    was started in the folder this process was in then, which may since have changed."""
    if args and _names_file(args[0]):
        first = os.path.abspath(os.fspath(args[0]))
        args[0] = first if isinstance(args[0], str) else Path(first)
    return args


class ChildRunner(Runner):
    """A runner (``factory(*args, **kwargs)``, a ``Runner`` class) whose model is loaded
    and run in the child. ``name`` is the runner's; attributes named in ``fetch`` (e.g.
    onnxruntime's ``provider``) are read once it is loaded. Its intermediate values
    (``values``, ``all_names``, ``sizes``, ``sketches``) are asked of the runner in the
    child, which need not be activated for them (nor is it, for them alone)."""

    def __init__(self, factory, *args, model: str = "the model", fetch: Sequence[str] = (), **kwargs):
        super().__init__()
        self.factory, self.args, self.kwargs = factory, args, kwargs
        self.name = factory.name
        self.model_label = model
        self.fetch = tuple(fetch)
        self.remote: Optional[Remote] = None
        self._built_unloaded = False  # the remote was built for values alone, its runner not activated
        self._begun = False  # its loading was begun without waiting (``begin``)
        self._provider = ""

    @property
    def provider(self) -> str:
        """The runner's ``provider``, when ``fetch`` names it, else its name."""
        return self._provider or self.name

    @provider.setter
    def provider(self, value: str) -> None:
        self._provider = value

    def activate_impl(self) -> None:
        if self._built_unloaded:  # built for values: built anew, loaded, with what it fetches
            self.close()
        if self.remote is not None:
            self.remote.ready()
        else:
            self.remote = Remote(self.factory, *self.args, model=self.model_label, runtime=self.name,
                                 fetch=self.fetch, activate=True, **self.kwargs)
        for k, v in self.remote.fetched.items():
            setattr(self, k.replace(".", "_"), v)

    def begin(self) -> "ChildRunner":
        """Have the child start loading the model now, while this process goes on (it
        makes the next model, or its feeds); ``activate`` waits for it, and raises what
        loading it raised."""
        if self.remote is None and not self.is_active:
            self.remote = Remote(self.factory, *self.args, model=self.model_label, runtime=self.name,
                                 fetch=self.fetch, activate=True, wait=False, **self.kwargs)
            self._begun = True
        return self

    def deactivate(self) -> None:
        if self._begun and not self.is_active:  # begun, never waited for: let it go all the same
            self.close()
        super().deactivate()

    def deactivate_impl(self) -> None:
        if self.remote is not None:
            self.remote.close()
        self.remote = None

    def close(self) -> None:
        """Let the runner in the child go, loaded or not."""
        if self.remote is not None:
            self.remote.close()
        self.remote, self._built_unloaded, self._begun, self.is_active = None, False, False, False

    def _remote(self) -> Remote:
        """The runner in the child, built (not activated) if it is not yet."""
        if self.remote is None:
            self.remote = Remote(self.factory, *self.args, model=self.model_label, runtime=self.name,
                                 **self.kwargs)
            self._built_unloaded = True
        return self.remote

    def input_specs(self) -> List[InputSpec]:
        specs = self.remote.call("input_specs")
        if not isinstance(specs, list) or not all(isinstance(s, InputSpec) for s in specs):
            raise self.remote.refuse("input specs that are not")
        return specs

    def infer_impl(self, feed: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
        out = self.remote.call("infer", dict(feed))
        if not isinstance(out, dict) or not all(isinstance(k, str) and isinstance(v, np.ndarray) for k, v in out.items()):
            raise self.remote.refuse("outputs that are not arrays by name")
        return out

    def infer_held(self, feed: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """The outputs: those of a chunk or less as arrays, larger ones ``Held`` in the
        child (compared a chunk at a time: this process never holds them whole)."""
        if not self.is_active:
            raise RuntimeError(f"{self.name} runner: activate it before infer")
        remote = self.remote
        _held.get(remote.pool, {}).pop(remote.handle, None)  # its last run's outputs go as this one starts
        out = remote._ask(("infer_kept", remote.handle, dict(feed), CHUNK_BYTES))  # noqa: SLF001
        try:
            serial, small, held, order = out["serial"], out["small"], out["held"], out["order"]
            if not (isinstance(small, dict) and isinstance(held, dict) and isinstance(order, list)
                    and all(isinstance(k, str) and isinstance(v, np.ndarray) for k, v in small.items())
                    and set(order) == set(small) | set(held) and len(order) == len(small) + len(held)):
                raise TypeError
            outputs = {name: small[name] if name in small else Held(remote, int(serial), name, *held[name])
                       for name in order}
        except (TypeError, KeyError, ValueError):
            raise remote.refuse("outputs that are not arrays by name") from None
        with _lock:
            _held.setdefault(remote.pool, {})[remote.handle] = sum(v.nbytes for v in outputs.values()
                                                                   if isinstance(v, Held))
        return outputs

    def values(self, feed, names=None) -> Dict[str, np.ndarray]:
        self.runs += 1
        return dict(self._remote().call("values", dict(feed), None if names is None else list(names)))

    def all_names(self) -> List[str]:
        return self._remote().call("all_names")

    def sizes(self, feed, names) -> Dict[str, int]:
        return self._remote().call("sizes", dict(feed), list(names))

    def sketches(self, feed, names, sizes, budget: int = CHUNK_BYTES) -> Dict[str, list]:
        return self._remote().call("sketches", dict(feed), list(names), dict(sizes), budget)

    def call(self, method: str, *args, **kwargs):
        return self._remote().call(method, *args, **kwargs)

    def attempt(self, feed: Mapping[str, np.ndarray], memory: Optional[int] = None) -> Optional[str]:
        """None if the model runs on ``feed``, else the runtime's error (its outputs are
        not sent back; ``memory``: a ceiling for this run)."""
        try:
            self.remote.call("infer", dict(feed), keep=False, memory=memory)
        except RunFault as e:
            if e.out_of_memory and memory is not None:  # too big for the ceiling asked: the caller's answer
                return "out of memory"
            raise
        except Exception as e:  # noqa: BLE001 - the runtime's words
            return str(e)
        return None


class Held:
    """An output that stays in the child (``ChildRunner.infer_impl``): its dtype and
    shape here, its elements asked for a piece at a time (``piece``), or all at once
    where a caller needs an array (``np.asarray``). Valid until its runner runs again."""

    def __init__(self, remote: Remote, serial: int, name: str, dtype, shape):
        self.remote, self.serial, self.name = remote, serial, name
        try:
            self.dtype, self.shape = np.dtype(str(dtype)), tuple(int(d) for d in shape)
        except (TypeError, ValueError):
            raise remote.refuse("a held output's type") from None
        if self.dtype.kind in "OV" or any(d < 0 for d in self.shape):
            raise remote.refuse("a held output's type")
        self.size = int(np.prod(self.shape, dtype=object)) if self.shape else 1
        self.ndim, self.nbytes = len(self.shape), self.size * self.dtype.itemsize

    def piece(self, start: int, stop: int) -> np.ndarray:
        """Elements [start, stop) of the flat output."""
        part = self.remote._ask(("piece", self.remote.handle, self.serial, self.name, int(start), int(stop)))  # noqa: SLF001
        if not isinstance(part, np.ndarray) or part.dtype != self.dtype or part.size != stop - start:
            raise self.remote.refuse("a piece of an output that is not the one asked for")
        return part.reshape(-1)

    def __array__(self, dtype=None, copy=None):
        whole = np.empty(self.size, self.dtype)
        step = max(1, CHUNK_BYTES // max(self.dtype.itemsize, 1))
        for start in range(0, self.size, step):
            stop = min(self.size, start + step)
            whole[start:stop] = self.piece(start, stop)
        whole = whole.reshape(self.shape)
        return whole if dtype is None else whole.astype(dtype)

    def __len__(self) -> int:
        return self.shape[0] if self.shape else 0


def label(model) -> str:
    """How a RunFault names a model given as a path or as a ModelProto."""
    if isinstance(model, (str, os.PathLike)):
        return str(model)
    return ""
