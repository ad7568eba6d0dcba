"""The child process that runs models for ``legalize`` (``child.py`` starts it as
``python -m legalizer.check.serve``): it builds the runners it is asked for, calls
their methods, and answers with plain values (``wire.py``). It reads requests on fd 0
and answers on the fd ``child.py`` names; everything a runtime prints goes to
/dev/null, so that nothing of a model reaches the run's output.

Before each request the parent sets its address-space limit (``RLIMIT_AS``) to what it
maps plus the request's memory (``child._Process.limit``; where the parent cannot, the
request asks the child to), so that a model that allocates without end fails with
``MemoryError`` (a C++ ``bad_alloc``) here instead of growing until the machine's
out-of-memory killer picks a victim. It dies with its parent (``PR_SET_PDEATHSIG``)."""

from __future__ import annotations

import importlib
import os
import pickle
import signal
import sys
from typing import Dict


def _die_with_parent() -> None:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _mapped() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _limit_memory(memory: int) -> None:
    import resource

    if memory <= 0 or not os.path.exists("/proc/self/statm"):
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    want = _mapped() + memory
    if hard != resource.RLIM_INFINITY:
        want = min(want, hard)
    resource.setrlimit(resource.RLIMIT_AS, (want, hard))


def _resolve(obj, path: str):
    for part in path.split("."):
        if part.startswith("_"):
            raise AttributeError(part)
        obj = getattr(obj, part)
    return obj


def _error(e: BaseException) -> dict:
    attrs = {k: v for k, v in vars(e).items() if isinstance(v, (str, int, float, bool))} if hasattr(e, "__dict__") \
        else {}
    kind = type(e)
    return {"error": [f"{kind.__module__}.{kind.__qualname__}", str(e), isinstance(e, MemoryError), attrs]}


def main() -> None:  # pragma: no cover - runs in the child
    from . import wire

    replies = int(sys.argv[1])
    _die_with_parent()
    # ^C reaches the whole process group: the parent handles it and stops this child.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.close(devnull)
    import numpy  # noqa: F401 - every reply needs it

    sandbox = "no syscall filter (asked for none)"
    if len(sys.argv) > 2 and sys.argv[2] == "filtered":
        import tempfile

        from .sandbox import install

        tempfile.gettempdir()  # found while a file can be made there (PyTorch asks for it)

        sandbox = install()[1]
    objects: Dict[int, object] = {}
    while True:
        try:
            request = wire.receive(0, None, limit=1 << 62)
        except EOFError:  # the parent has gone
            return
        op, handle, *rest = pickle.loads(request)
        memory = rest[-1]
        try:
            _limit_memory(memory)
            if op == "new":
                module, qualname, args, kwargs, fetch, activate = rest[:-1]
                obj = _resolve(importlib.import_module(module), qualname)(*args, **kwargs)
                if activate:
                    obj.activate()
                objects[handle] = obj
                value = {name: _resolve(obj, name) for name in fetch}
            elif op == "call":
                method, args, kwargs, keep = rest[:-1]
                value = _resolve(objects[handle], method)(*args, **kwargs)
                if not keep:
                    value = None
            elif op == "import":  # warm up: the runtimes' modules, while the parent works
                for module in rest[0]:
                    try:
                        importlib.import_module(module)
                    except ImportError:
                        pass
                value = None
            elif op == "status":
                value = {"sandbox": sandbox, "pid": os.getpid()}
            elif op == "drop":
                objects.pop(handle, None)
                value = None
            else:
                raise ValueError(f"no request {op!r}")
            reply = wire.encode({"ok": value})
        except BaseException as e:  # noqa: BLE001 - told to the parent, in words
            reply = wire.encode(_error(e))
        wire.send(replies, reply)


if __name__ == "__main__":
    main()
