"""Every file legalize writes goes to a temporary name beside it and is renamed (or,
without --force, hard-linked) into place (``atomic_files.atomic_output``): the ONNX and TFLite models, their external data, the
MLIR texts of --emit, the JSON report. A run killed while writing never leaves a
half-written file under the output's name; killed with SIGTERM (or ^C) it leaves no
temporary file either."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from legalizer import atomic_files
from helpers import cli_command

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"


@pytest.fixture
def renames(monkeypatch):
    """Every file given its final name by atomic_files.commit (os.replace with --force, else a hard
    link, which never replaces a file), as (temporary, final) pairs."""
    done = []
    real_replace, real_link = os.replace, os.link

    def replace(src, dst):
        done.append((Path(src), Path(dst)))
        return real_replace(src, dst)

    def link(src, dst):
        done.append((Path(src), Path(dst)))
        return real_link(src, dst)

    monkeypatch.setattr(atomic_files.os, "replace", replace)
    monkeypatch.setattr(atomic_files.os, "link", link)
    return done


def _assert_all_renamed(tmp_path: Path, renames, expected):
    finals = {dst for _, dst in renames}
    assert finals == set(expected)
    for src, dst in renames:
        assert src.parent == dst.parent and src.name.startswith(f".{dst.name}.") and src.name.endswith(".tmp")
    assert not list(tmp_path.glob(".*.tmp"))  # no temporary file left


def test_onnx_model_mlir_text_and_report_are_renamed_into_place(tmp_path, renames, legalize_in_process):
    src = tmp_path / "m.onnx"
    src.write_bytes((MODELS / "mlp_bias.onnx").read_bytes())
    out, rep = tmp_path / "m.legal.onnx", tmp_path / "r.json"
    code, o, e = legalize_in_process(src, "--emit", "onnx", "--emit", "tosa", "--report", rep)
    assert code == 0, o + e
    _assert_all_renamed(tmp_path, renames, [out, tmp_path / "m.legal.tosa.mlir", rep])


def test_tflite_model_its_onnx_form_and_batch_report_are_renamed_into_place(tmp_path, renames, legalize_in_process):
    src = tmp_path / "b.tflite"
    src.write_bytes((MODELS / "tflite" / "broadcast_add.tflite").read_bytes())
    rep = tmp_path / "r.json"
    assert legalize_in_process(src, "--emit", "tflite", "--emit", "onnx", "--report", rep)[0] == 0
    _assert_all_renamed(tmp_path, renames, [tmp_path / "b.legal.tflite", tmp_path / "b.legal.onnx", rep])


def test_external_data_is_renamed_into_place(tmp_path, renames, legalize_in_process):
    w = numpy_helper.from_array(np.ones((64, 64), np.float32), "w")
    g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 64])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    (tmp_path / "in").mkdir()
    onnx.save_model(m, str(tmp_path / "in" / "m.onnx"), save_as_external_data=True, location="m.bin",
                    size_threshold=0)
    out = tmp_path / "m.legal.onnx"
    assert legalize_in_process(tmp_path / "in" / "m.onnx", "-o", out)[0] == 0
    (data,) = tmp_path.glob("m.legal.onnx.*.data")  # <output name>.<16 hex digits>.data
    assert re.fullmatch(r"m\.legal\.onnx\.[0-9a-f]{16}\.data", data.name)
    _assert_all_renamed(tmp_path, renames, [out, data])


def test_a_failed_write_leaves_nothing(tmp_path, monkeypatch, legalize_in_process):
    """The rename itself fails (a full disk, say): no output, no temporary file."""
    src = tmp_path / "m.onnx"
    src.write_bytes((MODELS / "mlp_bias.onnx").read_bytes())

    def fail(a, b):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic_files.os, "replace", fail)
    monkeypatch.setattr(atomic_files.os, "link", fail)
    assert legalize_in_process(src)[0] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_interrupted_the_moment_the_temporary_file_is_made(tmp_path, monkeypatch):
    """^C (or SIGTERM, which unwinds alike) just after the temporary file is created,
    before the call that creates it returns: it is removed all the same (its name is
    known before the file exists; a name told only on return was left behind)."""
    real_open = os.open

    def open_then_interrupted(*args, **kwargs):
        real_open(*args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(atomic_files.os, "open", open_then_interrupted)
    try:
        with pytest.raises(KeyboardInterrupt):
            with atomic_files.atomic_output(tmp_path / "m.legal.onnx"):
                pass
    finally:
        monkeypatch.undo()  # os.open is everyone's
    assert list(tmp_path.iterdir()) == []


def _big_model(path: Path) -> Path:
    """Big enough that writing and checking it take a while: a window to kill it in."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4096, 4096)).astype(np.float32), "w")
    nodes = [helper.make_node("Add", ["x", "w"], ["a"]), helper.make_node("Mul", ["a", "w"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4096])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4096, 4096])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path.write_bytes(m.SerializeToString())
    return path


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_killed_while_writing(tmp_path, sig):
    src = _big_model(tmp_path / "big.onnx")
    before = src.read_bytes()
    out = tmp_path / "big.legal.onnx"
    p = subprocess.Popen(cli_command(src, "-q"), cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob(".big.legal.onnx.*.tmp")):  # the write has begun
        assert p.poll() is None, p.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.002)
    p.send_signal(sig)
    _, err = p.communicate(timeout=120)
    assert p.returncode != 0
    assert not out.exists()  # never a half-written model under the output's name
    assert src.read_bytes() == before
    assert "Traceback" not in err
    if sig != signal.SIGKILL:  # unwound: the temporary file is gone too
        assert err.strip() == "legalize: interrupted" and p.returncode == 130
        assert sorted(x.name for x in tmp_path.iterdir()) == ["big.onnx"]


def test_a_stop_lost_in_a_destructor_still_stops_before_the_commit(tmp_path, monkeypatch, legalize_in_process):
    """A ^C that lands while a destructor runs cannot raise (Python reports it as
    ignored and goes on): the run still stops before its output takes its name, exit
    130, with no traceback."""
    from legalizer import cli

    class StoppedInDestructor:
        def __del__(self):
            cli._interrupted(signal.SIGINT, None)

    from legalizer.kinds.onnx import exporter as onnx_writer

    made = onnx_writer.temp_beside

    def temp_beside(path, temps):
        StoppedInDestructor()  # gone at once: its __del__ "receives" the ^C
        return made(path, temps)

    monkeypatch.setattr(onnx_writer, "temp_beside", temp_beside)
    src = tmp_path / "m.onnx"
    shutil.copy(MODELS / "mlp_bias.onnx", src)
    code, out, err = legalize_in_process(src, tmp_path / "out.onnx", "--no-check")
    assert (code, err.strip()) == (130, "legalize: interrupted")
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]
    monkeypatch.undo()
    code, _, _ = legalize_in_process(src, tmp_path / "out.onnx", "--no-check")  # a new run starts afresh
    assert code == 0 and (tmp_path / "out.onnx").exists()


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_the_sweep_removes_only_what_a_run_marked(tmp_path, legalize):
    """A file whose name only looks like a dead run's temporary is the user's: the next
    run into the folder keeps it. A temporary the tool made carries its marker (an
    extended attribute naming the file), and one a killed run left is removed."""
    host, pid = atomic_files._HOST, _dead_pid()
    notes = tmp_path / f".notes.txt.{atomic_files.TEMP_TAG}-{host}-{pid}-0123abcd.tmp"
    notes.write_text("the user's notes\n")
    made = []
    atomic_files.temp_beside(tmp_path / "x.onnx", made)  # as the tool makes one, then renamed as a dead run's
    left = tmp_path / f".x.onnx.{atomic_files.TEMP_TAG}-{host}-{pid}-89abcdef.tmp"
    os.rename(made[0], left)
    os.setxattr(left, atomic_files.MARKER, left.name.encode())  # its marker names the file it marks
    forged = tmp_path / f".y.onnx.{atomic_files.TEMP_TAG}-{host}-{pid}-00000000.tmp"
    forged.write_text("not a temporary")
    os.setxattr(forged, atomic_files.MARKER, b"another name")
    src = tmp_path / "m.onnx"
    shutil.copy(MODELS / "mlp_bias.onnx", src)
    p = legalize(src, tmp_path / "o.onnx", "-q", "--no-check")
    assert p.returncode == 0, p.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == sorted([notes.name, forged.name, "m.onnx", "o.onnx"])
    assert notes.read_text() == "the user's notes\n"


def test_a_temporary_carries_its_marker(tmp_path):
    made = []
    tmp = atomic_files.temp_beside(tmp_path / "x.onnx", made)
    assert os.getxattr(tmp, atomic_files.MARKER) == tmp.name.encode()
    atomic_files.remove_temps(made)


def test_a_link_to_a_regular_file_keeps_the_rule_of_a_file(tmp_path):
    """Only a link into the command's descriptors is written through: a link to a
    regular file needs --force like the file, and is then replaced by the output, its
    target left as it was."""
    target = tmp_path / "target.json"
    target.write_text("kept")
    link = tmp_path / "r.json"
    link.symlink_to(target)
    assert atomic_files.descriptor(link) is None
    assert atomic_files.descriptor(Path("/dev/fd/1")) == 1
    with pytest.raises(atomic_files.UsageError, match="already exists"):
        atomic_files.check_output_path(link)
    with atomic_files.atomic_output(link, force=True) as tmp:
        Path(tmp).write_text("new")
    assert not link.is_symlink() and link.read_text() == "new" and target.read_text() == "kept"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "target.json"]
