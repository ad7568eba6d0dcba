"""Work on untrusted input that a library does in native code and cannot bound itself
(ONNX shape inference with data propagation, MLIR's printer), done in a helper process
under a memory and a time limit, so that a model that makes it allocate without end or
crash costs the helper, not the run.

The helper is a fresh interpreter (``python -c``, started by ``posix_spawn``: never a
fork of this process, whose onnxruntime, JAX or torch may hold threads that a fork
would leave with their locks held), started by ``start`` or at the first ``call``, and
it serves every call after it, so that the imports the work needs are paid once;
``start`` it early, naming the modules the work will import, and it imports them while
the caller does its own work. Before each call the helper sets its own address-space
limit (``RLIMIT_AS``) is set from here to what it maps plus the call's ``memory``, so the work fails with
``MemoryError`` (a C++ ``bad_alloc``) instead of growing until the machine's
out-of-memory killer chooses a victim. A helper that dies (a crash) or overruns its
time is killed and replaced by the next call.

The helper works on untrusted input in native code, so it is a child like the one that
runs models (``numeric/serve.py``): before its first request it loads the same syscall
filter, and reads nothing outside the Python install (``sandbox.py``, ``landlock.py``;
its input comes down the pipe), which is why its limit is set from outside (the filter
refuses it ``setrlimit``). Its messages are JSON plus bytes, never a pickle: a request
names a function (module and name), its keyword arguments as JSON and its argument
(bytes, or a JSON value); a reply is its bytes, text or JSON value. The reply's size is
checked against the call's memory before it is read, and read as it arrives; a reply
the protocol does not allow stops the helper and is ``Failed``, saying so. ``call`` and ``start`` use one shared
helper; ``Helper`` makes another, for work to keep apart. Where there is no ``/proc``
to measure the helper by, nor ``RLIMIT_AS``, the work runs in the calling process,
unbounded.
"""

from __future__ import annotations

import atexit
import functools
import importlib
import json
import os
import select
import signal
import struct
import sys
import threading
import time
import weakref
from typing import Any, Callable, Optional, Sequence, Tuple

_HEADER = struct.Struct("<Q")  # the length of each message on the pipes

# The helper's first lines: the caller's module search path (so that it finds the work's
# functions as the caller does; -P keeps the working folder off it), then its loop.
_BOOT = ("import sys; sys.path[:] = sys.argv[2:]; "
         "from legalizer.bounded_helper import _serve_stdio; _serve_stdio(sys.argv[1])")


class Failed(Exception):
    """The work did not finish: it ran out of its memory or its time, it raised, or the
    helper died. ``str(e)`` says which, in a few words."""


class _Process:
    """A running helper: its process id and the two pipes to it, and the process that
    started it (a fork of that process does not own it)."""

    def __init__(self, pid: int, to_helper: int, from_helper: int):
        self.pid, self.to_helper, self.from_helper = pid, to_helper, from_helper
        self.owner = os.getpid()
        self.sandbox: Optional[str] = None  # its filter, in words, once it said it is ready

    def close(self) -> None:
        for fd in (self.to_helper, self.from_helper):
            try:
                os.close(fd)
            except OSError:
                pass


class Helper:
    """One helper process: started by ``start`` or at the first ``call``, reused by every
    call after it, one call at a time, replaced after a crash or an overrun, stopped at
    exit. ``preload``: the modules it imports before it waits for work. The module's
    ``call`` and ``start`` use one shared helper; a caller that wants work of its own
    kept apart (a runtime whose crash should not cost another's warm state) makes
    another."""

    def __init__(self, preload: Sequence[str] = ()):
        self.preload = tuple(preload)
        self._lock = threading.Lock()
        self._process: Optional[_Process] = None
        _HELPERS.add(self)

    def start(self, preload: Sequence[str] = ()) -> None:
        """Start the process now, if it is not running, importing ``preload`` too (in
        parallel with the caller); a no-op where the work runs unbounded."""
        if available():
            with self._lock:
                self._running(preload)

    def call(self, fn: Callable[[Any], Any], arg: Any, *, memory: int, timeout: float) -> Any:
        """``fn(arg)`` in the helper, whose address space may grow by ``memory`` bytes
        for it, within ``timeout`` seconds; ``Failed`` if it does not finish. ``fn`` is
        a module-level function, or a ``functools.partial`` of one with keyword
        arguments of JSON values (it is named to the helper, which imports its module);
        ``arg`` and the result are bytes, text or JSON values."""
        if not available():
            return fn(arg)
        request = _request(fn, arg, memory)
        with self._lock:
            process = self._running(())
            try:
                if process.sandbox is None:  # its first words: ready, under its filter (it imported its preload first)
                    head, words = _decode(_receive(process.from_helper, time.monotonic() + max(timeout, 120.0),
                                                   limit=1 << 16))
                    if head != "ready" or not isinstance(words, str):
                        raise _BadReply("a first message that is not its readiness")
                    process.sandbox = words
                ask = _limit_from_outside(process.pid, memory)
                if ask:
                    request = _request(fn, arg, memory, limit_self=True)
                _send(process.to_helper, request)
                reply = _receive(process.from_helper, time.monotonic() + timeout, limit=max(memory, 1 << 20))
                kind, value = _decode(reply)
            except _Timeout:
                self._stop()
                raise Failed(f"it did not finish in {timeout:.0f} s") from None
            except _BadReply as e:
                self._stop()
                raise Failed(f"its process answered what the protocol does not allow ({e})") from None
            except (OSError, EOFError):
                raise Failed(f"the process doing it died ({self._stop()})") from None
            except BaseException:  # ^C, SIGTERM: the helper is mid-call; it goes too
                self._stop()
                raise
        if kind == "ok":
            return value
        if kind == "error" and isinstance(value, str):
            raise Failed(value)
        self.stop()
        raise Failed("its process answered what the protocol does not allow (a reply of neither form)")

    def sandbox(self) -> str:
        """The running helper's filter, in words ("seccomp, landlock"; starts it)."""
        self.call(_echo, b"", memory=1 << 26, timeout=120)
        return self._process.sandbox or ""

    @property
    def pid(self) -> Optional[int]:
        """The running process's id, or None."""
        p = self._process
        return p.pid if p is not None and p.owner == os.getpid() else None

    def stop(self) -> None:
        """Stop the process, if one runs (the next call starts another)."""
        with self._lock:
            if self.pid is not None:
                self._stop()

    def _running(self, preload: Sequence[str]) -> _Process:
        if self._process is not None and self._process.owner == os.getpid():
            return self._process
        to_r, to_w = os.pipe()
        from_r, from_w = os.pipe()
        # posix_spawn: a new interpreter, and no fork of this process as Python's
        # os.fork would make one. Only the helper's own pipes pass (Python's files are
        # not inherited); its stderr goes nowhere: nothing of the helper reaches the
        # run's output, and a crash is told by the caller, in one line.
        modules = ",".join(dict.fromkeys((*self.preload, *preload)))
        try:
            pid = os.posix_spawn(sys.executable, [sys.executable, "-P", "-c", _BOOT, modules, *sys.path],
                                 os.environ, file_actions=[(os.POSIX_SPAWN_DUP2, to_r, 0),
                                                           (os.POSIX_SPAWN_DUP2, from_w, 1),
                                                           (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0)])
        finally:
            os.close(to_r)
            os.close(from_w)
        self._process = _Process(pid, to_w, from_r)
        return self._process

    def _stop(self) -> str:
        """Kill and reap the process; how it ended ("signal SIGSEGV", "exit status 1")."""
        process, self._process = self._process, None
        process.close()
        try:
            os.kill(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            _, status = os.waitpid(process.pid, 0)
        except ChildProcessError:
            status = 0
        if os.WIFSIGNALED(status) and os.WTERMSIG(status) != signal.SIGKILL:
            return f"signal {signal.Signals(os.WTERMSIG(status)).name}"
        if os.WIFEXITED(status):
            return f"exit status {os.WEXITSTATUS(status)}"
        return "killed"

    def _forget(self) -> None:
        """In a forked child: the parent's process is not ours; close our copies of its
        pipes, so that it sees the parent go."""
        if self._process is not None:
            self._process.close()
        self._process = None
        self._lock = threading.Lock()  # another thread of the parent may have held it


_HELPERS: "weakref.WeakSet[Helper]" = weakref.WeakSet()
_shared = Helper()


def available() -> bool:
    try:
        import resource  # noqa: F401 - POSIX only
    except ImportError:
        return False
    return os.path.exists("/proc/self/statm")


def start(preload: Sequence[str] = ()) -> None:
    """``Helper.start`` of the shared helper."""
    _shared.start(preload)


def call(fn: Callable[[Any], Any], arg: Any, *, memory: int, timeout: float) -> Any:
    """``Helper.call`` of the shared helper."""
    return _shared.call(fn, arg, memory=memory, timeout=timeout)


def sandbox() -> str:
    """``Helper.sandbox`` of the shared helper."""
    return _shared.sandbox()


def _echo(data: bytes) -> bytes:
    return data


def helper_pid() -> Optional[int]:
    """The shared helper's process id, or None."""
    return _shared.pid


def _forget_in_child() -> None:
    for helper in list(_HELPERS):
        helper._forget()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


@atexit.register
def _shut_down() -> None:
    """At exit, the helpers go too (they hold nothing between calls), and are reaped."""
    for helper in list(_HELPERS):
        if helper.pid is not None:
            helper._stop()


# ---- the helper's side ----------------------------------------------------------------

def _serve_stdio(preload: str) -> None:  # pragma: no cover - in the helper
    """The helper's loop: requests on stdin, replies on a copy of stdout, whose own fd
    then goes to /dev/null, as does stderr (what a library prints must not enter the
    replies, nor the run's output)."""
    import faulthandler
    import importlib

    # ^C reaches the whole process group: the caller handles it (and stops the helper).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    faulthandler.disable()
    replies = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.close(devnull)
    for name in filter(None, preload.split(",")):
        try:
            importlib.import_module(name)
        except ImportError:  # the call that needs it says so
            pass
    _serve(0, replies)


def _serve(requests: int, replies: int) -> None:  # pragma: no cover - in the helper
    import resource

    from .sandbox import install

    _send(replies, _pack("ready", install(())[1]))  # it reads nothing but the Python install: its work comes down the pipe
    while True:
        try:
            request = _receive(requests, None, limit=1 << 62)
        except EOFError:  # the caller has gone
            return
        memory = 0
        try:
            fn, arg, memory, limit_self = _task(request)
            if limit_self:  # where the caller cannot set it from outside (no prlimit)
                resource.setrlimit(resource.RLIMIT_AS, (_limit(memory), resource.getrlimit(resource.RLIMIT_AS)[1]))
            reply = _encode("ok", fn(arg))
        except MemoryError:
            reply = _encode("error", f"it ran out of its memory ({memory / 2**30:.1f} GiB)")
        except BaseException as e:  # noqa: BLE001 - told to the caller, in words
            reply = _encode("error", f"{type(e).__name__}: {e}")
        _send(replies, reply)


def _task(request: bytes):
    """The function, argument, memory and whether to limit itself, of a request."""
    head, arg = _decode(request)
    module, name = head["fn"]
    fn = importlib.import_module(module)
    for part in name.split("."):
        fn = getattr(fn, part)
    if head["kwargs"]:
        fn = functools.partial(fn, **head["kwargs"])
    return fn, arg, int(head["memory"]), bool(head["limit_self"])


def _limit(memory: int) -> int:
    """The address-space limit for a call: what the process maps now plus ``memory``."""
    with open("/proc/self/statm") as f:
        mapped = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    return mapped + memory


def _limit_from_outside(pid: int, memory: int) -> bool:
    """Set the helper's address-space limit from here, to what it maps now plus
    ``memory`` (never above its hard limit); True where this process cannot, and the
    helper is to do it itself."""
    import resource

    if not hasattr(resource, "prlimit"):
        return True
    try:
        with open(f"/proc/{pid}/statm") as f:
            mapped = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        hard = resource.prlimit(pid, resource.RLIMIT_AS)[1]
        want = mapped + memory if hard == resource.RLIM_INFINITY else min(mapped + memory, hard)
        resource.prlimit(pid, resource.RLIMIT_AS, (want, hard))
    except (OSError, ValueError):  # gone (the call says so), or not ours to set
        return True
    return False


# ---- requests and replies: JSON, then bytes --------------------------------------------

class _BadReply(Exception):
    pass


def _name(fn) -> Tuple[str, str, dict]:
    kwargs = {}
    if isinstance(fn, functools.partial):
        if fn.args:
            raise TypeError("a partial with positional arguments: name them")
        fn, kwargs = fn.func, dict(fn.keywords)
    module, name = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not module or "<" in name:
        raise TypeError(f"{fn!r} is not a module-level function")
    return module, name, kwargs


def _request(fn, arg, memory: int, limit_self: bool = False) -> bytes:
    module, name, kwargs = _name(fn)
    return _pack({"fn": [module, name], "kwargs": kwargs, "memory": int(memory), "limit_self": limit_self}, arg)


def _encode(kind: str, value) -> bytes:
    try:
        return _pack(kind, value)
    except (TypeError, ValueError) as e:  # a result that is none of bytes, text, JSON
        return _pack("error", f"{type(e).__name__}: {e}")


def _pack(head, value) -> bytes:
    """``head`` (JSON) and ``value``: bytes as they are, text as UTF-8, else JSON."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        how, body = "bytes", bytes(value)
    elif isinstance(value, str):
        how, body = "text", value.encode("utf-8", "surrogatepass")
    else:
        how, body = "json", json.dumps(value, allow_nan=True).encode()
    doc = json.dumps([head, how]).encode()
    return _HEADER.pack(len(doc)) + doc + body


def _decode(data: bytes):
    """(head, value) of a message; ``_BadReply`` if it is not one."""
    try:
        (n,) = _HEADER.unpack_from(data, 0)
        if n > len(data) - _HEADER.size:
            raise ValueError("a header past the message's end")
        head, how = json.loads(data[_HEADER.size:_HEADER.size + n])
        body = data[_HEADER.size + n:]
        if how == "bytes":
            return head, bytes(body)
        if how == "text":
            return head, body.decode("utf-8", "surrogatepass")
        if how == "json":
            return head, json.loads(body)
        raise ValueError(f"a value of kind {how!r}")
    except (struct.error, ValueError, TypeError, UnicodeDecodeError) as e:
        raise _BadReply(str(e) or type(e).__name__) from None


# ---- messages: a length, then the bytes -------------------------------------------------

class _Timeout(Exception):
    pass


def _send(fd: int, data: bytes) -> None:
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


def _receive(fd: int, deadline: Optional[float], limit: int) -> bytes:
    """A message of at most ``limit`` bytes (the call's memory: the helper cannot have
    made more), checked before any of it is read; ``_BadReply`` past it."""
    (n,) = _HEADER.unpack(_read(fd, _HEADER.size, deadline))
    if n > limit:
        raise _BadReply(f"a reply of {n} bytes, more than its memory limit of {limit} bytes")
    return _read(fd, n, deadline)


def _read(fd: int, n: int, deadline: Optional[float]) -> bytes:
    chunks, left = [], n
    while left:
        if deadline is not None:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                raise _Timeout
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
