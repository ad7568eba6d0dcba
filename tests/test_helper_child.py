"""The helper that runs ONNX shape inference (and MLIR's printer) on untrusted input is
a child like the one that runs models (legalizer/bounded_helper.py): under the same
syscall filter and Landlock, its messages JSON plus bytes, never a pickle; and the
parent checks every size a child claims before it allocates (numeric/wire.py)."""

from __future__ import annotations

import os
import resource
import time
from pathlib import Path

import pytest

from legalizer import bounded_helper
from legalizer.landlock import abi
from legalizer.numeric import child

import sandbox_probe as probe

HERE = Path(__file__).resolve().parent


@pytest.fixture
def helper(monkeypatch):
    """A helper of its own, able to import the probes (on its module path)."""
    monkeypatch.syspath_prepend(str(HERE))
    own = bounded_helper.Helper()
    yield own
    own.stop()


@pytest.mark.needs("sandbox")
def test_the_helper_runs_under_the_filter(helper, tmp_path):
    helper.call(probe.helper_read, str(HERE / "sandbox_probe.py"), memory=1 << 28, timeout=120)  # its module path
    assert helper.sandbox() == ("seccomp, landlock" if abi() >= 1 else helper.sandbox())
    assert helper.sandbox().startswith("seccomp")
    with pytest.raises(bounded_helper.Failed, match=r"^PermissionError: \[Errno 1\] Operation not permitted"):
        helper.call(probe.helper_write, str(tmp_path / "made.txt"), memory=1 << 28, timeout=60)
    assert list(tmp_path.iterdir()) == []
    if abi() >= 1:
        secret = tmp_path / "secret.txt"
        secret.write_text("secret")
        for path in (secret, "/etc/passwd"):
            with pytest.raises(bounded_helper.Failed, match=r"^PermissionError: \[Errno 13\] Permission denied"):
                helper.call(probe.helper_read, str(path), memory=1 << 28, timeout=60)


def test_the_helper_takes_no_pickle():
    """A request names its function; an argument that is not bytes, text or JSON is
    refused here, before anything is sent."""
    with pytest.raises(TypeError):
        bounded_helper.call(probe.helper_read, object(), memory=1 << 28, timeout=60)
    with pytest.raises(TypeError, match="module-level"):
        bounded_helper.call(lambda b: b, b"", memory=1 << 28, timeout=60)
    assert b"pickle" not in Path(bounded_helper.__file__).read_bytes().replace(b"never a pickle", b"")


def test_a_helper_reply_past_its_memory_is_refused_before_it_is_read(helper):
    t0 = time.monotonic()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(bounded_helper.Failed, match=r"^its process answered what the protocol does not allow \(a reply"
                                                    r" of 64424509440 bytes, more than its memory limit of 268435456"
                                                    r" bytes\)$"):
        helper.call(probe.helper_forge, 60 << 30, memory=256 << 20, timeout=60)
    assert time.monotonic() - t0 < 30
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < 100 << 10  # KiB: nothing of 60 GiB
    assert helper.pid is None  # stopped; the next call starts another
    assert helper.call(probe.helper_read, str(HERE / "sandbox_probe.py"), memory=1 << 28, timeout=120)


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p))
    child.stop_all()
    yield
    child.stop_all()


def test_a_run_child_reply_claiming_60_gib_is_a_broken_child_at_once(fresh):
    """The header is checked against the call's memory before anything is allocated or
    waited for (it was allocated, then waited on until --run-timeout)."""
    t0 = time.monotonic()
    with child.limited(timeout=60, memory=1 << 30):
        with pytest.raises(child.RunFault) as e:
            child.Remote(probe.ForgedHeader, 60 << 30, model="m.onnx", runtime="onnxruntime")
    assert str(e.value) == ("m.onnx on onnxruntime: its process answered what the protocol does not allow (a reply of"
                            " 64424509440 bytes, more than the 1073741824 bytes its memory allows)")
    assert time.monotonic() - t0 < 30


def test_outputs_that_are_not_arrays_are_a_broken_child(fresh):
    """Not the model's outputs, nor the original failing: the child broke the protocol."""
    runner = child.ChildRunner(probe.NotArrays, model="m.onnx")
    runner.name = "forged"
    with runner:
        with pytest.raises(child.RunFault, match=r"^m\.onnx on forged: its process answered what the protocol does"
                                                 r" not allow \(outputs that are not arrays by name\)$"):
            runner.infer({})


def test_nothing_crossing_to_a_child_is_a_pickle():
    """Requests too are JSON plus bytes (a ModelProto as its serialized bytes); the
    modules on either side of the pipes import no pickle."""
    import ast

    import numpy as np
    from onnx import helper

    from legalizer.numeric import wire

    proto = helper.make_model(helper.make_graph([], "g", [], []))
    request = ["new", 3, "m", "f", [Path("/x/m.onnx"), proto, (1, 2)], {"k": np.arange(3, dtype=np.int64)}, [], False,
               0]
    back = wire.decode(bytearray(wire.encode(request, request=True)), request=True)
    assert back[:4] == ["new", 3, "m", "f"]
    assert back[4][0] == "/x/m.onnx" and back[4][1] == proto and back[4][2] == (1, 2)
    np.testing.assert_array_equal(back[5]["k"], np.arange(3))
    with pytest.raises(TypeError):  # a reply carries no ModelProto
        wire.encode({"ok": proto})
    forged = bytearray(wire.encode([proto], request=True))
    with pytest.raises(wire.BadReply):  # nor is one read from a reply
        wire.decode(forged)
    import legalizer.numeric.serve as serve

    for module in (serve, child, wire, bounded_helper):
        tree = ast.parse(Path(module.__file__).read_text())
        imported = {a.name for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                    for a in n.names} | {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not {"pickle", "cPickle", "dill", "cloudpickle"} & imported, module.__name__


def test_the_children_may_read_this_package_wherever_it_is_imported_from():
    """An editable install imports ``legalizer`` through a finder, from a folder that is not on
    the module search path: the helper, under Landlock, must still read the package (it could
    not, and ONNX shape inference silently ran without it: the conformance suite's light
    models lost their shapes)."""
    import legalizer
    from legalizer.landlock import python_install

    package = str(Path(legalizer.__file__).resolve().parent)
    assert package in python_install()
