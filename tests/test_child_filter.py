"""The run child's filter is an allow-list of what the runtimes use
(legalizer/sandbox.py, legalizer/landlock.py): no ioctl but the requests they issue
(TIOCSTI no more types into another terminal), no lock or lease, and, with Landlock,
nothing read outside the Python install, the run's folders and /proc/self."""

from __future__ import annotations

import os
import select
import termios
from pathlib import Path

import pytest

from legalizer.numeric import child
from legalizer.landlock import abi

import sandbox_probe as probe

HERE = Path(__file__).resolve().parent
needs_landlock = pytest.mark.skipif(abi() < 1, reason="the kernel has no Landlock (Linux 5.13+, enabled at boot)")


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """A run child started anew, able to import the probes, that may read ``tmp_path``."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p))
    monkeypatch.setattr(child, "_readable", set())
    child.stop_all()
    child.readable(tmp_path)
    yield
    child.stop_all()


def _remote(factory, *args, **kwargs):
    return child.Remote(factory, *args, model="a test", runtime="python", **kwargs)


@pytest.mark.needs("sandbox")
def test_tiocsti_into_another_terminal_is_refused(fresh):
    """The attack: open another process's terminal read-only, push a command into its
    input with TIOCSTI. Nothing reaches the terminal."""
    master, slave = os.openpty()
    try:
        tty = os.ttyname(slave)
        with pytest.raises(child.ChildError, match=r"Permission denied|Operation not permitted"):
            _remote(probe.tiocsti, tty, "echo INJECTED\n")
        assert select.select([master, slave], [], [], 0.5)[0] == []
    finally:
        os.close(master)
        os.close(slave)


@pytest.mark.needs("sandbox")
@pytest.mark.parametrize("request_", [termios.TIOCSTI, getattr(termios, "TIOCLINUX", 0x541C), termios.FIONREAD,
                                      termios.TIOCGWINSZ])
def test_ioctl_outside_the_runtimes_requests_is_eperm(fresh, request_):
    """On a descriptor the child holds (its request pipe), the filter answers EPERM
    before the kernel looks at the descriptor (it would be ENOTTY or done)."""
    with pytest.raises(child.ChildError, match=r"^\[Errno 1\] Operation not permitted$"):
        _remote(probe.ioctl, 0, request_)
    # TCGETS, which Python's isatty issues, still reaches the kernel (ENOTTY on a pipe)
    with pytest.raises(child.ChildError, match=r"^\[Errno 25\] Inappropriate ioctl for device$"):
        _remote(probe.ioctl, 0, termios.TCGETS)


@pytest.mark.needs("sandbox")
@pytest.mark.parametrize("how", [probe.flock, probe.lease, probe.fcntl_lock])
def test_no_lock_or_lease_on_a_readable_file(fresh, tmp_path, how):
    target = tmp_path / "shared.txt"
    target.write_text("data")
    with pytest.raises(child.ChildError, match=r"^\[Errno 1\] Operation not permitted$"):
        _remote(how, str(target))
    assert _remote(probe.Read, path=str(target), fetch=("data",)).fetched["data"] == b"data"


@pytest.mark.needs("sandbox")
@needs_landlock
def test_reading_is_limited_to_the_runs_folders(fresh, tmp_path, tmp_path_factory):
    assert child.sandbox() == "seccomp, landlock"
    inside = tmp_path / "model.onnx"
    inside.write_bytes(b"model")
    outside = tmp_path_factory.mktemp("elsewhere") / "secret.txt"
    outside.write_text("secret")
    assert _remote(probe.Read, path=str(inside), fetch=("data",)).fetched["data"] == b"model"
    for path in (outside, Path("/etc/passwd"), Path("/etc/shadow"), Path(os.path.expanduser("~/.bash_history"))):
        if path.exists():
            with pytest.raises(child.ChildError, match=r"^\[Errno 13\] Permission denied"):
                _remote(probe.Read, path=str(path))
    with pytest.raises(child.ChildError, match=r"^\[Errno 13\] Permission denied"):
        _remote(probe.Listing, path="/")
    # its own /proc entries, and the Python install, stay readable
    assert b"VmSize" in _remote(probe.Read, path="/proc/self/status", fetch=("data",)).fetched["data"]
    assert "numpy" in _remote(probe.Listing, path=str(Path(os.__file__).parent.parent / "site-packages")
                              if (Path(os.__file__).parent.parent / "site-packages" / "numpy").exists()
                              else str(Path(__import__("numpy").__file__).parent.parent),
                              fetch=("names",)).fetched["names"]


@pytest.mark.needs("sandbox")
@needs_landlock
def test_a_model_in_another_folder_starts_a_child_that_may_read_it(fresh, tmp_path_factory):
    """A Remote built on a model file outside the folders named so far: its folder is
    added, and the child that could not read it is replaced by one that can."""
    other = tmp_path_factory.mktemp("models") / "m.bin"
    other.write_bytes(b"weights")
    first = child._live(child.RUN) or (child.sandbox() and child._live(child.RUN))  # noqa: SLF001
    r = _remote(Path, str(other))
    assert r.call("read_bytes") == b"weights"
    assert child._live(child.RUN) is not first  # noqa: SLF001
