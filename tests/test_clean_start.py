"""The bounded helper and batch workers start from a clean interpreter, never from a
fork of the run's own process, whose onnxruntime, JAX or torch may hold threads
(``legalizer.bounded_helper``, ``legalizer.batch``); and the helper keeps its limits and is
reused across calls."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from legalizer import bounded_helper

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "models" / "mlp_bias.onnx"

# A run's paths in one process, under warnings as errors: the helper (shape inference,
# twice), a single run with the check (onnxruntime's threads), and a batch of two models
# with -j 2. An at-fork hook of this process records every os.fork() it makes, as JAX's
# does to warn ("os.fork() was called ... JAX is multithreaded"); with jax installed,
# its backend is started first, so that its own hook is live too (an exception in an
# at-fork hook is only printed, hence both the record and the test of stderr).
SCRIPT = r"""
import os, sys, warnings
forks = []
os.register_at_fork(before=lambda: forks.append(sys._getframe(1).f_code.co_filename))
try:
    import jax
    jax.devices()
except ImportError:
    pass
from legalizer import bounded_helper
from legalizer.cli import main
from legalizer.kinds.onnx.infer import infer_here

model, out, folder = sys.argv[1:4]
data = open(model, "rb").read()
pids = set()
for _ in range(2):
    assert bounded_helper.call(infer_here, data, memory=1 << 30, timeout=120)[:1] == b"+"
    pids.add(bounded_helper.helper_pid())
assert len(pids) == 1, pids  # one helper, reused
for args in ([model, out, "-q"], [folder, "-j", "2", "-q"]):
    try:
        main(args)
    except SystemExit as e:
        assert e.code in (0, None), (args, e.code)
print("forks:", forks)
sys.exit(1 if forks else 0)
"""


def test_no_run_path_forks_its_own_process(tmp_path):
    folder = tmp_path / "batch"
    folder.mkdir()
    for name in ("a.onnx", "b.onnx"):
        shutil.copy(MODEL, folder / name)
    p = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-W", "error::DeprecationWarning",
                        "-c", SCRIPT, str(MODEL), str(tmp_path / "m.legal.onnx"), str(folder)],
                       capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "forks: []" in p.stdout
    assert "fork()" not in p.stderr and "Exception ignored" not in p.stderr, p.stderr
    assert (tmp_path / "m.legal.onnx").is_file()
    assert sorted(f.name for f in folder.iterdir()) == ["a.legal.onnx", "a.onnx", "b.legal.onnx", "b.onnx"]


def _cmdline(pid: int) -> list:
    return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")


def _echo(arg: bytes) -> bytes:
    return arg[::-1]


def _sleep(arg: float) -> float:
    time.sleep(arg)
    return arg


def _grow(n: int) -> int:
    return len(bytearray(n))


needs_proc = pytest.mark.skipif(not bounded_helper.available(), reason="the helper needs /proc and RLIMIT_AS")


@needs_proc
def test_the_helper_is_a_fresh_interpreter_reused_across_calls():
    assert bounded_helper.call(_echo, b"abc", memory=1 << 28, timeout=60) == b"cba"
    pid = bounded_helper.helper_pid()
    assert bounded_helper.call(_echo, b"xyz", memory=1 << 28, timeout=60) == b"zyx"
    assert bounded_helper.helper_pid() == pid
    # Started as `python -P -c <boot>`, not a fork of this process (whose command line
    # it would share).
    argv = _cmdline(pid)
    assert argv[1:3] == [b"-P", b"-c"] and b"_serve_stdio" in argv[3], argv[:4]
    assert argv != _cmdline(os.getpid())


@needs_proc
def test_a_call_over_its_time_is_killed_and_the_next_gets_a_new_helper():
    bounded_helper.call(_echo, b"a", memory=1 << 28, timeout=60)
    before = bounded_helper.helper_pid()
    t0 = time.monotonic()
    with pytest.raises(bounded_helper.Failed, match=r"^it did not finish in 1 s$"):
        bounded_helper.call(_sleep, 30.0, memory=1 << 28, timeout=1)
    assert time.monotonic() - t0 < 15
    assert not Path(f"/proc/{before}").exists() or b"Z" in Path(f"/proc/{before}/stat").read_bytes().split()[2]
    assert bounded_helper.call(_sleep, 0.0, memory=1 << 28, timeout=60) == 0.0
    assert bounded_helper.helper_pid() not in (None, before)


@needs_proc
def test_each_call_has_its_own_memory_limit():
    with pytest.raises(bounded_helper.Failed, match=r"^it ran out of its memory \(0\.2 GiB\)$"):
        bounded_helper.call(_grow, 1 << 30, memory=256 << 20, timeout=60)
    # The same helper, its limit lifted again: a larger allowance takes the same size.
    pid = bounded_helper.helper_pid()
    assert bounded_helper.call(_grow, 1 << 30, memory=2 << 30, timeout=60) == 1 << 30
    assert bounded_helper.helper_pid() == pid


@needs_proc
def test_a_helper_of_its_own_is_kept_apart():
    """A crash in one helper costs only that one: another keeps its process."""
    own = bounded_helper.Helper(preload=("json",))
    try:
        assert own.call(_echo, b"ab", memory=1 << 28, timeout=60) == b"ba"
        assert bounded_helper.call(_echo, b"cd", memory=1 << 28, timeout=60) == b"dc"
        kept, pid = bounded_helper.helper_pid(), own.pid
        assert pid not in (None, kept)
        with pytest.raises(bounded_helper.Failed, match=r"^the process doing it died \(signal SIGSEGV\)$"):
            own.call(_crash, b"x", memory=1 << 28, timeout=60)
        assert own.pid is None and bounded_helper.helper_pid() == kept
        assert own.call(_echo, b"ef", memory=1 << 28, timeout=60) == b"fe" and own.pid not in (None, pid)
    finally:
        own.stop()
    assert own.pid is None


def _crash(arg: bytes) -> bytes:
    os.kill(os.getpid(), signal.SIGSEGV)
    return arg


def test_the_mlir_tools_run_capped_without_a_fork_of_this_process():
    """iree-opt and tosa-opt run under an address-space limit that a shell sets before it
    becomes the tool: no Python runs in a fork of this process (a preexec_fn did)."""
    from legalizer.kinds.mlir import tool as mlir_tool

    probe = [sys.executable, "-c", "import resource; print(resource.getrlimit(resource.RLIMIT_AS)[0])"]
    p = subprocess.run(mlir_tool._capped(probe, 1 << 30), capture_output=True, text=True, timeout=120)
    assert p.stdout.strip() == str(1 << 30), p.stderr
    script = ("import os, sys\nforks = []\nos.register_at_fork(before=lambda: forks.append(1))\n"
              "from legalizer.kinds.mlir import tool as mlir_tool\n"
              "out, _ = mlir_tool._run(sys.executable, b'', 'm.mlir', ['-c', 'import sys; sys.exit(3)'])\n"
              "print(type(out).__name__, forks)\n")
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert p.stdout.split() == ["BadInput", "[]"], p.stdout + p.stderr
