"""Untrusted files, safe writes (issue 15; docs/untrusted-input.md): each hostile
case, its payload built here. Nothing in a module given to ``--against`` runs unless it
is TOSA (a marker file the payload would make proves it), no output is lost, replaced,
mixed with another run's or written over an input, and a file made to exhaust memory or
the stack is one line and exit 2 (or, being a valid model, legalized) under a 2 GB
address-space limit."""

from __future__ import annotations

import json
import os
import platform
import re
import resource
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import List

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from legalizer import bounded_helper
from legalizer.numeric import ort as ort_check
from helpers import assert_clean, cli_command, lines, make_model
from needs import require

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"
CAP = 2 * 10**9  # the address-space limit of the resource cases: 2 GB
DATA_NAME = r"\.[0-9a-f]{16}\.data"  # <output name>.<16 hex digits>.data


def _cap_address_space():
    """Run in the child before it starts: its address space limited to ``CAP`` bytes."""
    resource.setrlimit(resource.RLIMIT_AS, (CAP, CAP))


def _files(folder: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _copy(src: Path, dst: Path) -> Path:
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_bytes(src.read_bytes())
    return dst


def _external(folder: Path, w: np.ndarray) -> Path:
    """``y = x + w`` with ``w`` external (``w.bin``), in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    n = w.shape[-1]
    m = make_model([helper.make_node("Add", ["x", "w"], ["a"]), helper.make_node("Mul", ["a", "w"], ["y"])],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(w.shape))],
                   [numpy_helper.from_array(w, "w")])
    onnx.save_model(m, str(folder / "m.onnx"), save_as_external_data=True, location="w.bin", size_threshold=0)
    return folder / "m.onnx"


def _data_files(folder: Path, output: str) -> List[str]:
    return sorted(n for n in os.listdir(folder) if re.fullmatch(re.escape(output) + DATA_NAME, n))


def _ort(path: Path, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


# ---- --against: only TOSA is compiled and run ------------------------------------------

def _syscall_module(marker: Path) -> str:
    """A module whose @main dispatches a stream.executable holding ``llvm.inline_asm``
    that creates ``marker`` (open(O_CREAT), close: x86-64 Linux syscalls 2 and 3, the
    path built on the stack), then returns its argument. Generic form, as legalize's
    importer reads it (its ops are kept opaque: a legal module)."""
    raw = str(marker).encode() + b"\0"
    raw += b"\0" * (-len(raw) % 8)
    asm = ["subq $$512, %rsp"]
    for i in range(0, len(raw), 8):
        asm += [f"movabsq $$0x{int.from_bytes(raw[i:i + 8], 'little'):x}, %rax", f"movq %rax, {i}(%rsp)"]
    asm += ["movq %rsp, %rdi", "movl $$65, %esi", "movl $$420, %edx", "movl $$2, %eax", "syscall",
            "movq %rax, %rdi", "movl $$3, %eax", "syscall", "addq $$512, %rsp"]
    asm_string = "\\0A".join(asm)  # MLIR's escape for a newline
    return f'''"builtin.module"() ({{
  "stream.executable"() <{{sym_name = "executable", sym_visibility = "private"}}> ({{
    "stream.executable.export"() <{{function_ref = @boom, sym_name = "boom", sym_visibility = "public"}}> ({{
      %1 = "arith.constant"() <{{value = 1 : index}}> : () -> index
      "stream.return"(%1, %1, %1) : (index, index, index) -> ()
    }}) : () -> ()
    "builtin.module"() ({{
      "func.func"() <{{function_type = (!stream.binding) -> (), sym_name = "boom"}}> ({{
      ^bb0(%arg1: !stream.binding):
        "llvm.inline_asm"() <{{asm_string = "{asm_string}", constraints = "~{{rax}},~{{rdi}},~{{rsi}},~{{rdx}},~{{rcx}},~{{r11}},~{{memory}}", has_side_effects}}> : () -> ()
        "func.return"() : () -> ()
      }}) : () -> ()
    }}) : () -> ()
    "stream.executable.end"() : () -> ()
  }}) : () -> ()
  "func.func"() <{{function_type = (tensor<4xf32>) -> tensor<4xf32>, sym_name = "main"}}> ({{
  ^bb0(%arg0: tensor<4xf32>):
    %0 = "flow.dispatch"(%arg0) <{{entry_points = [@executable::@boom], operandSegmentSizes = array<i32: 0, 1, 0, 0>, tied_operands = [0 : index]}}> : (tensor<4xf32>) -> tensor<4xf32>
    "func.return"(%0) : (tensor<4xf32>) -> ()
  }}) : () -> ()
}}) : () -> ()
'''


def _identity(path: Path) -> Path:
    m = make_model([helper.make_node("Identity", ["x"], ["y"])],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    path.write_bytes(m.SerializeToString())
    return path


REFUSED = ("--against compiles and runs only functions of the tosa, func, arith, tensor, quant and ml_program"
           " dialects; the module has ")
X86_LINUX = platform.machine() in ("x86_64", "AMD64") and sys.platform.startswith("linux")


@pytest.mark.skipif(not X86_LINUX, reason="the payload is x86-64 Linux machine code")
def test_the_syscall_payload_runs_when_iree_is_given_it(tmp_path):
    """The payload is live: compiled and run by IREE directly, it makes the marker."""
    require("iree")
    from iree import compiler, runtime
    marker = tmp_path / "marker"
    vmfb = compiler.compile_str(_syscall_module(marker), input_type="tosa", target_backends=["llvm-cpu"])
    runtime.load_vm_flatbuffer(vmfb, driver="local-task").main(np.ones(4, np.float32))
    assert marker.exists()


def test_against_refuses_a_module_that_would_run_a_syscall(tmp_path, legalize):
    require("iree")
    marker = tmp_path / "marker"
    module = tmp_path / "evil.mlir"
    module.write_text(_syscall_module(marker))
    p = legalize(module, "--verify-only", "--against", _identity(tmp_path / "ref.onnx"), "-q")
    assert_clean(p)
    assert p.returncode == 2
    assert lines(p.stderr) == [f"legalize: error: {module}: {REFUSED}'stream.executable' at its top level"]
    assert not marker.exists()  # nothing ran


@pytest.mark.parametrize("name,body,refused", [
    ("object file", 'func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> attributes {hal.executable.objects = '
                    '[#hal.executable.object<{path = "MARKER"}>]} {\n  return %a : tensor<4xf32>\n}\n',
     "'#hal.executable.object' in attribute 'hal.executable.objects' of 'func.func'"),
    ("declaration", 'func.func private @hal.devices.count() -> index\n'
                    'func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n  return %a : tensor<4xf32>\n}\n',
     'a function declaration without a body ("hal.devices.count"), which IREE would import from elsewhere'),
    ("llvm type", 'func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n'
                  '  %0 = "tosa.identity"(%a) {x = !llvm.ptr} : (tensor<4xf32>) -> tensor<4xf32>\n'
                  '  return %0 : tensor<4xf32>\n}\n', "'!llvm.ptr' in attribute 'x' of 'tosa.identity'"),
    ("inline asm", 'func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n'
                   '  "llvm.inline_asm"() <{asm_string = "syscall", constraints = "", has_side_effects}> : () -> ()\n'
                   '  return %a : tensor<4xf32>\n}\n', "op 'llvm.inline_asm'"),
])
def test_against_refuses_what_is_not_tosa(tmp_path, name, body, refused, legalize):
    require("iree")
    module = tmp_path / "m.mlir"
    module.write_text(body.replace("MARKER", str(tmp_path / "marker.o")))
    p = legalize(module, "--verify-only", "--against", _identity(tmp_path / "ref.onnx"), "-q")
    assert_clean(p)
    assert p.returncode == 2
    assert lines(p.stderr) == [f"legalize: error: {module}: {REFUSED}{refused}"]


_CALLS = {
    "self": ("@main -> @main", 'func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n'
                               '  %0 = func.call @main(%a) : (tensor<4xf32>) -> tensor<4xf32>\n'
                               '  return %0 : tensor<4xf32>\n}\n'),
    "mutual": ("@f -> @g -> @f", "".join(
        f'func.func @{f}(%a: tensor<4xf32>) -> tensor<4xf32> {{\n'
        f'  %0 = call @{g}(%a) : (tensor<4xf32>) -> tensor<4xf32>\n  return %0 : tensor<4xf32>\n}}\n'
        for f, g in (("main", "f"), ("f", "g"), ("g", "f")))),
    "indirect": ("@main -> @main", 'func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n'
                                   '  %f = func.constant @main : (tensor<4xf32>) -> tensor<4xf32>\n'
                                   '  %0 = func.call_indirect %f(%a) : (tensor<4xf32>) -> tensor<4xf32>\n'
                                   '  return %0 : tensor<4xf32>\n}\n'),
}


@pytest.mark.parametrize("kind", sorted(_CALLS))
def test_against_refuses_a_recursive_call_graph_before_iree_compiles(tmp_path, kind, legalize):
    """A self-recursive func.call ran iree-compile until --run-timeout (300 s): a call
    graph with a cycle is refused before IREE's compiler sees the module."""
    require("iree")
    cycle, body = _CALLS[kind]
    module = tmp_path / "m.mlir"
    module.write_text(body)
    start = time.monotonic()
    p = legalize(module, "--verify-only", "--against", _identity(tmp_path / "ref.onnx"), "-q", "--run-timeout", "120")
    assert_clean(p)
    assert (p.returncode, lines(p.stderr)) == (2, [f"legalize: error: {module}: --against compiles no recursive call"
                                                   f" graph: {cycle}; IREE's compiler does not end on one"])
    assert time.monotonic() - start < 100  # not the run's time limit


def test_against_compiles_a_call_graph_without_a_cycle(tmp_path, legalize):
    require("iree")
    module = tmp_path / "m.mlir"
    module.write_text("".join(f'func.func @{f}(%a: tensor<4xf32>) -> tensor<4xf32> {{\n'
                              f'  %0 = call @{g}(%a) : (tensor<4xf32>) -> tensor<4xf32>\n'
                              f'  return %0 : tensor<4xf32>\n}}\n' for f, g in (("main", "f"), ("f", "g")))
                      + 'func.func @g(%a: tensor<4xf32>) -> tensor<4xf32> {\n  return %a : tensor<4xf32>\n}\n')
    p = legalize(module, "--verify-only", "--against", _identity(tmp_path / "ref.onnx"), "-q")
    assert_clean(p)
    assert p.returncode == 0, p.stderr


def test_against_compiles_tosa_with_the_attributes_of_its_producer(tmp_path, legalize):
    """What is refused is not TOSA: a module with TensorFlow's discardable attributes
    (dropped before IREE sees it) is compiled, run and compared."""
    require("iree")
    module = tmp_path / "m.mlir"
    module.write_text(
        'module attributes {tf.versions = {producer = 1 : i32}} {\n'
        '  func.func @main(%a: tensor<4xf32> {tf_saved_model.index_path = ["x"]}) -> tensor<4xf32>'
        ' attributes {tf.entry_function = {inputs = "x", outputs = "y"}} {\n'
        '    %0 = tosa.identity %a : (tensor<4xf32>) -> tensor<4xf32>\n'
        '    return %0 : tensor<4xf32>\n  }\n}\n')
    p = legalize(module, "--verify-only", "--against", _identity(tmp_path / "ref.onnx"), "-q")
    assert_clean(p)
    assert p.returncode == 0, p.stderr
    assert lines(p.stdout) == [f"{module}: legal under 'tosa', results match (IREE llvm-cpu vs onnxruntime)"]


# ---- outputs: never an input or another output, never a special file ---------------------

def test_report_html_and_emit_paths_must_be_their_own(tmp_path, legalize):
    src = _copy(MODELS / "mlp_bias.onnx", tmp_path / "m.onnx")
    out = tmp_path / "o.onnx"
    cases = [
        (["--report", out], f"{out}: is both the output model and the report (--report); give each its own path"),
        (["--emit", "onnx", "--emit", "tosa", "--report", tmp_path / "o.tosa.mlir"],
         f"{tmp_path / 'o.tosa.mlir'}: is both the tosa output (--emit tosa) and the report (--report);"
         " give each its own path"),
        (["--report", tmp_path / "r", "--html", tmp_path / "r"],
         f"{tmp_path / 'r'}: is both the report (--report) and the HTML report (--html); give each its own path"),
        (["--against", tmp_path / "ref.onnx", "--report", tmp_path / "ref.onnx"],
         f"{tmp_path / 'ref.onnx'}: is an input model and the report (--report); refusing to overwrite it"),
    ]
    _copy(MODELS / "mlp_bias.onnx", tmp_path / "ref.onnx")
    before = _files(tmp_path)
    for args, message in cases:
        p = legalize(src, out, *args, "-q")
        assert_clean(p)
        assert (p.returncode, lines(p.stderr)) == (2, [f"legalize: error: {message}"])
        assert _files(tmp_path) == before  # nothing written, nothing replaced


def test_batch_report_and_outputs_must_not_be_inputs_or_each_other(tmp_path, legalize):
    a = _copy(MODELS / "mlp_bias.onnx", tmp_path / "a" / "q.onnx")
    other = _copy(MODELS / "mlp_bias.onnx", tmp_path / "a" / "q.legal.onnx")  # another model of the batch
    before = _files(tmp_path / "a")
    p = legalize(a, other, "-j", "1", "--force", "-q")
    assert_clean(p)
    assert (p.returncode, lines(p.stderr)) == (2, [f"legalize: error: {other}: is an input model and the output of"
                                                    f" {a}; refusing to overwrite it"])
    (tmp_path / "out").mkdir()
    b = _copy(MODELS / "mlp_bias.onnx", tmp_path / "b" / "b.onnx")
    report = tmp_path / "out" / "q.legal.onnx"
    p = legalize(a, b, "-o", tmp_path / "out", "--report", report, "-q")
    assert (p.returncode, lines(p.stderr)) == (2, [f"legalize: error: {report}: is both the output of {a} and the"
                                                    " report (--report); give each its own path"])
    assert _files(tmp_path / "a") == before and not list((tmp_path / "out").iterdir())


def test_a_device_or_a_fifo_is_never_replaced(tmp_path, legalize):
    src = _copy(MODELS / "mlp_bias.onnx", tmp_path / "m.onnx")
    null = tmp_path / "null.onnx"
    null.symlink_to(os.devnull)  # as root, `legalize m.onnx /dev/null --force` made /dev/null a file
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    special = "is not a regular file (a device, a FIFO or a socket); legalize replaces only regular files"
    for args, path in (([null, "--force"], null), ([tmp_path / "o.onnx", "--report", fifo], fifo),
                       ([fifo, "--force"], fifo)):
        p = legalize(src, *args, "-q")
        assert_clean(p)
        assert (p.returncode, lines(p.stderr)) == (2, [f"legalize: error: {path}: {special}"])
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode) and null.is_symlink()
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert sorted(os.listdir(tmp_path)) == ["fifo.json", "m.onnx", "null.onnx"]


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
def test_a_link_to_a_descriptor_is_written_through_never_replaced(tmp_path):
    """`legalize m.onnx o.onnx --report /dev/stdout > log` replaced the link /dev/stdout
    with a file. A path that leads to one of the command's descriptors (a link to
    /proc/self/fd/1, as /dev/stdout is, or /dev/fd/1) is written through, as tee writes
    it; the link stays. (The system's /dev/stdout is not used here: on a code that
    replaces the link, the test would replace it.)"""
    src = _copy(MODELS / "mlp_bias.onnx", tmp_path / "m.onnx")
    stdout = tmp_path / "stdout"
    stdout.symlink_to("/proc/self/fd/1")
    chained = tmp_path / "r.json"
    chained.symlink_to(stdout)  # a link to the link
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for i, report in enumerate((stdout, chained, Path("/dev/fd/1"))):
        log = tmp_path / f"log{i}"
        with open(log, "w") as out:
            p = subprocess.run(cli_command(src, tmp_path / f"o{i}.onnx", "--report", report, "-q"), stdout=out,
                               stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path, timeout=300)
        assert p.returncode == 0, p.stderr
        summary, report_text = log.read_text().split("\n", 1)  # the command's line, then the report after it
        assert summary.startswith(f"{src}: legalized for 'tosa' -> ")
        assert json.loads(report_text)["output"] == str(tmp_path / f"o{i}.onnx")
    assert os.readlink(stdout) == "/proc/self/fd/1" and os.readlink(chained) == str(stdout)
    assert sorted(os.listdir(tmp_path)) == ["log0", "log1", "log2", "m.onnx", "o0.onnx", "o1.onnx", "o2.onnx",
                                            "r.json", "stdout"]  # no temporary left beside them


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
def test_a_descriptor_that_cannot_be_written_through_fails_before_the_work(tmp_path, legalize):
    src = _copy(MODELS / "mlp_bias.onnx", tmp_path / "m.onnx")
    stdin = tmp_path / "stdin"
    stdin.symlink_to("/proc/self/fd/0")
    other = subprocess.Popen(["sleep", "60"], stdout=subprocess.PIPE)
    try:
        theirs = Path(f"/proc/{other.pid}/fd/1")
        for report, why in ((stdin, f"{stdin}: is descriptor 0 of legalize, which is not open for writing"),
                            (theirs, f"{theirs}: is a descriptor of another process; legalize writes only files"
                                     " and its own descriptors")):
            p = legalize(src, tmp_path / "o.onnx", "--report", report, "-q")
            assert_clean(p)
            assert (p.returncode, lines(p.stderr)) == (2, [f"legalize: error: {why}"])
    finally:
        other.kill()
        other.wait()
    assert sorted(os.listdir(tmp_path)) == ["m.onnx", "stdin"] and os.readlink(stdin) == "/proc/self/fd/0"


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc")
def test_a_report_that_cannot_be_written_fails_before_the_work(tmp_path, legalize):
    src = _copy(MODELS / "mlp_bias.onnx", tmp_path / "m.onnx")
    report = Path("/proc/self/r.json")  # no file can be made there, not even by root
    p = legalize(src, tmp_path / "o.onnx", "--report", report, "-q")
    assert_clean(p)
    assert (p.returncode, lines(p.stderr)) == (2, [f"legalize: error: {report}: cannot write: No such file or"
                                                    " directory"])
    assert sorted(os.listdir(tmp_path)) == ["m.onnx"]  # the model is not written


# ---- outputs: no run loses or mixes another's ----------------------------------------------

def test_the_second_of_two_runs_without_force_fails(tmp_path, monkeypatch, legalize_in_process):
    """Both find the output free before the work; the one that finishes second gets
    exit 2 and the first one's file stays."""
    src = _copy(MODELS / "mlp_bias.onnx", tmp_path / "m.onnx")
    out = tmp_path / "o.onnx"
    real = ort_check.check

    def the_other_run_finishes_first(*args, **kwargs):
        out.write_bytes(b"the other run's model")
        return real(*args, **kwargs)

    monkeypatch.setattr(ort_check, "check", the_other_run_finishes_first)
    code, _, err = legalize_in_process(src, out, "-q")
    assert (code, lines(err)) == (2, [f"legalize: error: {out}: already exists (use --force to replace it)"])
    assert out.read_bytes() == b"the other run's model"
    assert sorted(os.listdir(tmp_path)) == ["m.onnx", "o.onnx"]  # no temporary left


def test_two_force_runs_with_external_data_never_mix(tmp_path, monkeypatch, legalize_in_process):
    """Run B writes the same output while run A checks its own: what is left is A's
    model with A's data (it finished last), and B's data is gone with B's model."""
    wa = np.full((8, 8), 2.0, np.float32)
    wb = np.full((8, 8), 3.0, np.float32)
    a, b = _external(tmp_path / "a", wa), _external(tmp_path / "b", wb)
    out = tmp_path / "out" / "m.onnx"
    out.parent.mkdir()
    real, calls = ort_check.check, []

    def meanwhile(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            assert legalize_in_process(b, out, "--force", "-q")[0] == 0
            assert np.array_equal(_ort(out, np.ones(8, np.float32)), (1 + wb) * wb)
        return real(*args, **kwargs)

    monkeypatch.setattr(ort_check, "check", meanwhile)
    code, _, err = legalize_in_process(a, out, "--force", "-q")
    assert code == 0, err
    x = np.arange(8, dtype=np.float32)
    np.testing.assert_array_equal(_ort(out, x), (x + wa) * wa)
    (data,) = _data_files(out.parent, "m.onnx")
    assert sorted(os.listdir(out.parent)) == ["m.onnx", data]


def _big_external(folder: Path, seed: int) -> Path:
    """Weights big enough (64 MB) that writing and checking take a while: a window."""
    return _external(folder, np.random.default_rng(seed).standard_normal((4096, 4096)).astype(np.float32))


def _stop_during_the_check(src: Path, out: Path, sig: int, *args) -> subprocess.CompletedProcess:
    p = subprocess.Popen(cli_command(src, out, "-q", *args), cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    # the model's temporary file is made once its data is written, just before the check
    model_tmp = re.compile(r"\." + re.escape(out.name) + r"\.legalize-[0-9a-f]{6}-\d+-[0-9a-f]{8}\.tmp")
    while not any(model_tmp.fullmatch(n) for n in os.listdir(out.parent)):
        assert p.poll() is None, p.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.002)
    p.send_signal(sig)
    out_, err = p.communicate(timeout=120)
    return subprocess.CompletedProcess(p.args, p.returncode, out_, err)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_force_run_stopped_during_its_check_leaves_the_previous_output(tmp_path, sig, legalize_in_process):
    out = tmp_path / "out" / "m.onnx"
    out.parent.mkdir()
    code, _, err = legalize_in_process(_big_external(tmp_path / "p", 0), out, "--no-check", "-q")
    assert code == 0, err
    previous = _files(out.parent)
    p = _stop_during_the_check(_big_external(tmp_path / "n", 1), out, sig, "--force")
    assert p.returncode != 0 and "Traceback" not in p.stderr
    left = {n: b for n, b in _files(out.parent).items() if not n.startswith(".")}
    assert left == previous  # the model and the data it names, byte for byte
    if sig == signal.SIGTERM:  # unwound: no temporary file either
        assert (p.returncode, p.stderr.strip()) == (130, "legalize: interrupted")
        assert sorted(os.listdir(out.parent)) == sorted(previous)


def test_a_first_run_killed_during_its_check_leaves_no_data_file(tmp_path):
    out = tmp_path / "out" / "m.onnx"
    out.parent.mkdir()
    p = _stop_during_the_check(_big_external(tmp_path / "n", 1), out, signal.SIGKILL)
    assert p.returncode == -signal.SIGKILL
    assert [n for n in os.listdir(out.parent) if not n.startswith(".")] == []  # only temporaries, hidden


# ---- bounded resources ------------------------------------------------------------------------

def _mul_bomb(path: Path, shape_op: bool = False) -> Path:
    """``Mul(x[2^62], z[2^62])``: ONNX's data propagation allocates by the dim (90 bytes).
    ``shape_op``: with ``Shape(x)`` as a second output, a value data propagation reads
    (without one, legalize does not run data propagation at all)."""
    n = 1 << 62
    m = make_model([helper.make_node("Mul", ["x", "z"], ["y"])]
                   + ([helper.make_node("Shape", ["x"], ["s"])] if shape_op else []),
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n]),
                helper.make_tensor_value_info("z", TensorProto.FLOAT, [n])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
                   + ([helper.make_tensor_value_info("s", TensorProto.INT64, None)] if shape_op else []))
    path.write_bytes(m.SerializeToString())
    return path


def test_shape_inference_stops_at_its_memory_bound(tmp_path):
    from legalizer.kinds.onnx.importer import _infer_here

    data = _mul_bomb(tmp_path / "bomb.onnx").read_bytes()
    assert len(data) < 120
    t0 = time.monotonic()
    out = bounded_helper.call(_infer_here, data, memory=256 << 20, timeout=120)
    assert out[:1] == b"m"  # data propagation ran out of its 256 MiB; inferred without it
    assert time.monotonic() - t0 < 60
    shape = onnx.load_model_from_string(out[1:]).graph.output[0].type.tensor_type.shape
    assert [d.dim_value for d in shape.dim] == [1 << 62]


def _crash(arg: bytes) -> bytes:
    os.kill(os.getpid(), signal.SIGSEGV)
    return arg


def _echo(arg: bytes) -> bytes:
    return arg[::-1]


def test_a_crash_in_the_bounded_helper_is_contained():
    with pytest.raises(bounded_helper.Failed, match=r"^the process doing it died \(signal SIGSEGV\)$"):
        bounded_helper.call(_crash, b"x", memory=1 << 28, timeout=60)
    assert bounded_helper.call(_echo, b"abc", memory=1 << 28, timeout=60) == b"cba"  # a new helper


def test_the_mul_bomb_is_legalized_under_2gb(tmp_path, legalize):
    bomb = _mul_bomb(tmp_path / "bomb.onnx", shape_op=True)
    p = legalize(bomb, "--no-check", preexec_fn=_cap_address_space)
    assert_clean(p)
    assert p.returncode == 0, p.stderr
    assert lines(p.stderr) == ["legalize: warning: ONNX shape inference with data propagation ran out of its memory"
                               " (1 GiB or more); shapes were inferred without it"]


def test_the_mul_bomb_without_a_shape_op_skips_data_propagation(tmp_path, legalize):
    p = legalize(_mul_bomb(tmp_path / "bomb.onnx"), "--no-check", preexec_fn=_cap_address_space)
    assert_clean(p)
    assert p.returncode == 0, p.stderr
    assert lines(p.stderr) == []


def _nested_regions_bytecode(path: Path, depth: int) -> Path:
    """``depth`` ops inside one another's regions, as MLIR bytecode (IREE's bindings;
    written in a thread with a large stack: MLIR's writer recurses too)."""
    from iree.compiler import ir

    def build():
        ctx = ir.Context()
        ctx.allow_unregistered_dialects = True
        with ctx, ir.Location.unknown():
            module = ir.Module.create()
            at = ir.InsertionPoint(module.body)
            for _ in range(depth):
                op = ir.Operation.create("x.nest", regions=1, ip=at)
                at = ir.InsertionPoint(op.regions[0].blocks.append())
            with open(path, "wb") as f:
                module.operation.write_bytecode(f)

    old = threading.stack_size(512 << 20)
    try:
        t = threading.Thread(target=build)
        t.start()
        t.join()
    finally:
        threading.stack_size(old)
    return path


def test_deeply_nested_bytecode_is_bad_input_under_2gb(tmp_path, legalize):
    require("iree")
    path = _nested_regions_bytecode(tmp_path / "deep.mlirbc", 20_000)
    assert 100_000 < path.stat().st_size < 1_000_000
    p = legalize(path, "--verify-only", preexec_fn=_cap_address_space)
    assert_clean(p)
    assert (p.returncode, lines(p.stderr)) == (2, [f"legalize: error: {path}: regions nested deeper than 64 levels"
                                                    " (at 'x.nest'); legalize reads no deeper"])


@pytest.mark.parametrize("what,text,where", [
    ("attribute", 'func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {\n  "x.op"() {deep = ' + "[" * 20_000 + "1"
     + "]" * 20_000 + '} : () -> ()\n  return %a : tensor<2xf32>\n}\n', "2:146"),
    ("regions", 'func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {\n' + '"x.nest"() ({\n' * 20_000
     + '}) : () -> ()\n' * 20_000 + '  return %a : tensor<2xf32>\n}\n', "65:13"),
])
def test_deeply_nested_text_is_bad_input_under_2gb(tmp_path, what, text, where, legalize):
    path = tmp_path / "deep.mlir"
    path.write_text(text)
    p = legalize(path, "--verify-only", preexec_fn=_cap_address_space)
    assert_clean(p)
    assert (p.returncode, lines(p.stderr)) == (2, [f"legalize: error: {path}:{where}: brackets nest deeper than 128"
                                                    " levels (regions, attributes or types); legalize reads no deeper"])


@pytest.mark.needs("iree")
def test_nesting_within_the_bound_is_read(tmp_path, legalize):
    path = tmp_path / "ok.mlir"
    path.write_text('func.func @main(%a: tensor<2xf32>) -> tensor<2xf32> {\n  "x.op"() {deep = ' + "[" * 126 + "1"
                    + "]" * 126 + '} : () -> ()\n  return %a : tensor<2xf32>\n}\n')
    p = legalize(path, "--verify-only", "-q")
    assert_clean(p)
    assert p.returncode == 0 and lines(p.stdout) == [f"{path}: legal under 'tosa'"]


def test_an_oversized_sum_is_bad_input_under_2gb(tmp_path, legalize):
    path = tmp_path / "sum.onnx"
    m = make_model([helper.make_node("Sum", ["x"] * 1_000_000, ["y"], name="big_sum")],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    path.write_bytes(m.SerializeToString())
    p = legalize(path, "-q", preexec_fn=_cap_address_space)
    assert_clean(p)
    assert (p.returncode, lines(p.stderr)) == (2, [f"legalize: error: {path}: node 'big_sum': 'Sum' op has 1,000,000"
                                                    " operands; legalize reads at most 65,536 per node"])
    assert sorted(os.listdir(tmp_path)) == ["sum.onnx"]


@pytest.mark.parametrize("nested", [False, True], ids=["top", "in_an_if_branch"])
def test_a_value_read_by_too_many_operands_is_refused_before_any_inference(nested, monkeypatch):
    """x read by 70,000 Identity nodes that one Concat joins: the Concat is refused from
    the proto's counts before shape inference or the IR (a million took 44 s and 2.9 GB
    before it was refused; now 6 s and 0.56 GB, most of it onnx.load), in a branch too."""
    from legalizer.errors import BadInput
    from legalizer.kinds.onnx import importer as onnx_importer

    monkeypatch.setattr(onnx_importer, "_infer", lambda *a, **k: pytest.fail("shape inference ran"))
    n = 70_000
    nodes = [helper.make_node("Identity", ["x"], [f"i{k}"]) for k in range(n)]
    nodes.append(helper.make_node("Concat", [f"i{k}" for k in range(n)], ["y"], axis=0, name="cat"))
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])
    if nested:
        branch = helper.make_graph(nodes, "then", [], [out])
        nodes = [helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch, name="if")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1]),
              helper.make_tensor_value_info("c", TensorProto.BOOL, [])]
    m = helper.make_model(helper.make_graph(nodes, "g", inputs, [out]), opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(BadInput) as e:
        onnx_importer.import_model(m)
    assert str(e.value) == "node 'cat': 'Concat' op has 70,000 operands; legalize reads at most 65,536 per node"


# ---- every file the run reads is an input (issue 24, item 3) ------------------------------

def test_no_output_may_be_a_file_the_run_reads(tmp_path, legalize):
    """External data, --input arrays and the reduction's side files: each refused as an
    output before any work, with nothing written or replaced."""
    model = _external(tmp_path, np.arange(4, dtype=np.float32))
    x = tmp_path / "x.npy"
    np.save(x, np.ones(4, np.float32))
    npz = tmp_path / "in.npz"
    np.savez(npz, x=np.ones(4, np.float32))
    out, data = tmp_path / "o.onnx", tmp_path / "w.bin"
    cases = [
        (["--report", data], f"{data}: is the external data of {model} and the report (--report)"),
        (["--html", data], f"{data}: is the external data of {model} and the HTML report (--html)"),
        (["--input", f"x={x}", "--report", x], f"{x}: is an input array (--input) and the report (--report)"),
        (["--input", npz, "--html", npz], f"{npz}: is an input array (--input) and the HTML report (--html)"),
    ]
    before = _files(tmp_path)
    for args, message in cases:
        p = legalize(model, out, *args, "-q")
        assert_clean(p)
        assert (p.returncode, lines(p.stderr)) == (2, [f"legalize: error: {message}; refusing to overwrite it"])
        assert _files(tmp_path) == before


def test_reduce_side_files_are_checked_before_the_work(tmp_path, legalize):
    src = _copy(MODELS / "mlp_bias.onnx", tmp_path / "m.onnx")
    ref = _copy(MODELS / "mlp_bias.onnx", tmp_path / "ref.onnx")
    red = tmp_path / "r.onnx"
    p = legalize(src, "--verify-only", "--against", ref, "--reduce", red, "--report", tmp_path / "r.inputs.npz", "-q")
    assert_clean(p)
    assert (p.returncode, lines(p.stderr)) == (2, [
        f"legalize: error: {tmp_path / 'r.inputs.npz'}: is both the report (--report) and the reduction's inputs"
        f" (--reduce); give each its own path"])
    (tmp_path / "r.expected.npz").write_bytes(b"mine")
    before = _files(tmp_path)
    p = legalize(src, "--verify-only", "--against", ref, "--reduce", red, "-q")
    assert_clean(p)
    assert (p.returncode, lines(p.stderr)) == (2, [
        f"legalize: error: {tmp_path / 'r.expected.npz'}: already exists (use --force to replace it)"])
    assert _files(tmp_path) == before


def test_overlays_join_the_distinct_outputs_check(tmp_path, legalize):
    """--overlay DIR replaced a --load-inputs file named DIR/<stem>.verdict.json, and
    --overlay naming the output model was an internal error after all the work: each
    overlay file and the folder are outputs like the others, checked before any work."""
    src = _copy(MODELS / "mlp_bias.onnx", tmp_path / "m.onnx")
    ov = tmp_path / "ov"
    ov.mkdir()
    p = legalize(src, tmp_path / "s.onnx", "--save-inputs", ov / "m.verdict.json", "-q")
    assert p.returncode == 0, p.stderr
    saved = (ov / "m.verdict.json").read_bytes()

    def tree():
        return {str(f.relative_to(tmp_path)): f.read_bytes() for f in sorted(tmp_path.rglob("*")) if f.is_file()}

    before = tree()
    for args, why in (
            ([tmp_path / "o.onnx", "--load-inputs", ov / "m.verdict.json", "--overlay", ov, "--force"],
             f"{ov / 'm.verdict.json'}: is the loaded inputs (--load-inputs) and the input model's verdict overlay"
             " (--overlay); refusing to overwrite it"),
            ([tmp_path / "o.onnx", "--overlay", tmp_path / "o.onnx"],
             f"{tmp_path / 'o.onnx'}: is both the output model and the overlay folder (--overlay); give each its"
             " own path"),
            ([tmp_path / "o.onnx", "--overlay", tmp_path, "--report", tmp_path / "o.verdict.json"],
             f"{tmp_path / 'o.verdict.json'}: is both the report (--report) and the legalized model's verdict"
             " overlay (--overlay); give each its own path")):
        p = legalize(src, *args, "-q")
        assert_clean(p)
        assert (p.returncode, lines(p.stderr)) == (2, [f"legalize: error: {why}"])
    assert tree() == before and (ov / "m.verdict.json").read_bytes() == saved
