"""The child process that runs models for ``legalize`` (``child.py`` starts it as
``python -m legalizer.numeric.serve``): it builds the runners it is asked for, calls
their methods, and answers with plain values (``wire.py``). It reads requests on fd 0
and answers on the fd ``child.py`` names; everything a runtime prints goes to
/dev/null, so that nothing of a model reaches the run's output.

Before each request the parent sets its address-space limit (``RLIMIT_AS``) to what it
maps plus the request's memory (``child._Process.limit``; where the parent cannot, the
request asks the child to), so that a model that allocates without end fails with
``MemoryError`` (a C++ ``bad_alloc``) here instead of growing until the machine's
out-of-memory killer picks a victim. It dies with its parent (``PR_SET_PDEATHSIG``).

An output larger than a chunk stays here (``infer_kept``), and the parent asks for it a
piece at a time (``piece``) to compare it: ``legalize`` never holds it whole."""

from __future__ import annotations

import importlib
import itertools
import os
import signal
import sys
from typing import Dict, Sequence

import numpy as np


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
    return {"error": [f"{kind.__module__}.{kind.__qualname__}", str(e), _out_of_memory(e), attrs]}


# How the runtimes word an allocation that failed under the limit (onnxruntime's arena;
# a C++ bad_alloc that a binding passes on as text), besides Python's MemoryError.
_ALLOCATION_FAILED = ("Failed to allocate memory", "std::bad_alloc")


def _out_of_memory(e: BaseException) -> bool:
    return isinstance(e, MemoryError) or any(w in str(e) for w in _ALLOCATION_FAILED)


def _silence() -> None:
    """Whatever a runtime prints goes to /dev/null."""
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.close(devnull)


def _sandbox(mode: str, readable: Sequence[str] = ()) -> str:
    """The syscall filter (``mode`` "filtered"), installed, reading limited to
    ``readable`` (the run's folders) and the Python install; what it is, in words."""
    if mode != "filtered":
        return "no syscall filter (asked for none)"
    import tempfile

    from ..sandbox import install

    tempfile.gettempdir()  # found while a file can be made there (PyTorch asks for it)
    _CUDA.append(_start_cuda())
    return install(readable)[1]


# What ``_start_cuda`` did (in words), and its session, kept open for the child's life.
_CUDA: list = []


def _start_cuda() -> str:
    """CUDA opens its device files (``/dev/nvidia*``) read-write, which the filter
    refuses: where the machine has an NVIDIA GPU and onnxruntime its CUDA provider, the
    child starts CUDA (a one-op session, kept) before the filter is installed, and the
    sessions of the check then use the context and the files it opened. Seen on an H200:
    without this, CUDA does not start in the filtered child."""
    if not os.path.exists("/dev/nvidiactl"):
        return ""
    try:
        import numpy as np
        import onnxruntime as ort
        from onnx import TensorProto, helper

        if "CUDAExecutionProvider" not in ort.get_available_providers():
            return ""
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
        model = helper.make_model(helper.make_graph([helper.make_node("Neg", ["x"], ["y"])], "cuda", [x], [y]),
                                  ir_version=7, opset_imports=[helper.make_opsetid("", 13)])  # any onnxruntime takes
        quiet = ort.SessionOptions()
        quiet.log_severity_level = 4
        session = ort.InferenceSession(model.SerializeToString(), quiet, providers=["CUDAExecutionProvider"])
        session.run(None, {"x": np.zeros(1, np.float32)})
        _CUDA.append(session)
        return "started before the filter"
    except Exception as e:  # noqa: BLE001 - the check then runs on the CPU, and says so
        return f"did not start before the filter ({str(e).splitlines()[0] if str(e) else type(e).__name__})"


# The outputs of each object's last ``infer_kept`` above the threshold: (its serial, by name).
_KEPT: Dict[int, tuple] = {}
_SERIALS = itertools.count(1)


def _answer(op: str, handle: int, rest: list, objects: Dict[int, object], sandbox: str):
    """The value that answers request ``op`` on the object ``handle``."""
    if op == "new":
        module, qualname, args, kwargs, fetch, activate = rest[:-1]
        obj = _resolve(importlib.import_module(module), qualname)(*args, **kwargs)
        if activate:
            obj.activate()
        objects[handle] = obj
        return {name: _resolve(obj, name) for name in fetch}
    if op == "call":
        method, args, kwargs, keep = rest[:-1]
        value = _resolve(objects[handle], method)(*args, **kwargs)
        return value if keep else None
    if op == "import":  # warm up: the runtimes' modules, while the parent works
        for module in rest[0]:
            try:
                importlib.import_module(module)
            except ImportError:
                pass
        return None
    if op == "infer_kept":  # outputs above ``threshold`` bytes stay here, asked for a piece at a time
        feed, threshold = rest[:-1]
        _KEPT.pop(handle, None)  # its last run's outputs go before this one makes its own
        outputs = objects[handle].infer(feed)
        serial = next(_SERIALS)
        _KEPT[handle] = (serial, {})
        small, held = {}, {}
        for name, value in outputs.items():
            value = np.asarray(value)
            if value.nbytes > threshold and value.dtype.kind not in "OV":
                _KEPT[handle][1][name] = value
                held[name] = [value.dtype.str, list(value.shape)]
            else:
                small[name] = value
        return {"serial": serial, "small": small, "held": held, "order": list(outputs)}
    if op == "piece":  # elements [start, stop) of a kept output, flat
        serial, name, start, stop = rest[:-1]
        kept_serial, kept = _KEPT.get(handle, (0, {}))
        if kept_serial != serial or name not in kept:
            raise ValueError(f"no output {name!r} of that run is kept")
        return np.ascontiguousarray(kept[name].reshape(-1)[int(start):int(stop)])
    if op == "status":
        return {"sandbox": sandbox, "pid": os.getpid(), "cuda": next((c for c in _CUDA if isinstance(c, str)), "")}
    if op == "drop":
        objects.pop(handle, None)
        _KEPT.pop(handle, None)
        return None
    raise ValueError(f"no request {op!r}")


def main() -> None:  # pragma: no cover - runs in the child
    from . import wire

    replies = int(sys.argv[1])
    _die_with_parent()
    # ^C reaches the whole process group: the parent handles it and stops this child.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _silence()
    import json

    sandbox = _sandbox(sys.argv[2] if len(sys.argv) > 2 else "", json.loads(sys.argv[3]) if len(sys.argv) > 3 else [])
    objects: Dict[int, object] = {}
    while True:
        try:
            request = wire.receive(0, None, limit=1 << 62)
        except EOFError:  # the parent has gone
            return
        op, handle, *rest = wire.decode(request, request=True)
        memory = rest[-1]
        try:
            _limit_memory(memory)
            reply = wire.encode({"ok": _answer(op, handle, rest, objects, sandbox)})
        except BaseException as e:  # noqa: BLE001 - told to the parent, in words
            reply = wire.encode(_error(e))
        wire.send(replies, reply)


if __name__ == "__main__":
    main()
