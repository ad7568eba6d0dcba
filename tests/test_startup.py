"""Start fast (docs/architecture.md, "Start-up"): a command imports only what it uses. Not timed (a
busy machine moves times by tens of milliseconds); what a run imports is what makes its
start slow, and that is asserted exactly, in a fresh process per command."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from needs import require

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "models" / "mlp_bias.onnx"

# Imported only by the runs that use them: the check (onnxruntime), a table or a
# progress bar (rich), the optional extras; pydantic never (typer parses, with the
# command's own conversion of values: cli._Command).
HEAVY = {"onnxruntime", "rich", "pydantic", "torch", "jax", "jaxlib", "iree", "ray", "tensorflow",
         "ai_edge_litert", "onnxscript", "onnx_ir", "transformers", "tflite", "flatbuffers"}
# The check's modules, which a run without it has no use for.
CHECK_MODULES = {f"legalizer.numeric.{m}" for m in ("ort", "plan", "ort_session", "runtime_shapes", "search",
                                                     "samples", "tflite", "torch_ref")}
# What any run that reads a model needs; --help needs none of it.
MODEL_LIBRARIES = {"onnx", "numpy", "networkx", "google"}

PROBE = """
import atexit, json, os, sys
def dump():
    with open(os.environ["MODULES_OUT"], "w") as f:
        json.dump(sorted(sys.modules), f)
atexit.register(dump)
from legalizer.cli import main
main(sys.argv[1:])
"""


def imported(tmp_path: Path, *args, whole: bool = False) -> set:
    """The top-level modules a ``legalize`` command had imported when it exited (with
    ``whole``, every module by its full name)."""
    out = tmp_path / "modules.json"
    env = {**os.environ, "MODULES_OUT": str(out)}
    p = subprocess.run([sys.executable, "-c", PROBE, *map(str, args)], capture_output=True, text=True, cwd=ROOT,
                       env=env, timeout=300)
    assert "Traceback" not in p.stderr, p.stderr
    names = json.loads(out.read_text())
    return set(names) if whole else {m.split(".")[0] for m in names}, p


def test_help_imports_no_model_library(tmp_path):
    mods, p = imported(tmp_path, "--help")
    assert p.returncode == 0 and "--executor local|ray" in p.stdout
    assert "typer" in mods
    assert not mods & (HEAVY | MODEL_LIBRARIES), sorted(mods & (HEAVY | MODEL_LIBRARIES))


@pytest.mark.parametrize("args", [["--verify-only", "--no-check", "-q"], ["--verify-only", "-q"],
                                  ["OUT", "--no-check", "-q"]])
def test_a_run_without_the_check_imports_nothing_heavy(tmp_path, args):
    args = [str(tmp_path / "m.legal.onnx") if a == "OUT" else a for a in args]
    mods, p = imported(tmp_path, MODEL, *args, whole=True)
    assert p.returncode == 0, p.stderr
    top = {m.split(".")[0] for m in mods}
    assert MODEL_LIBRARIES <= top
    assert not top & HEAVY, sorted(top & HEAVY)
    # nor the check's own modules: its driver, its plan and sessions, the run-time shape checks
    assert not mods & CHECK_MODULES, sorted(mods & CHECK_MODULES)


def test_the_check_imports_onnxruntime_and_a_table_rich(tmp_path):
    mods, p = imported(tmp_path, MODEL, tmp_path / "a.onnx", "-q")
    assert p.returncode == 0 and "outputs match" in p.stdout
    assert mods & HEAVY == {"onnxruntime"}
    mods, p = imported(tmp_path, MODEL, tmp_path / "b.onnx", "--no-check")
    assert p.returncode == 0 and "┏" in p.stdout  # the before/after table
    assert mods & HEAVY == {"rich"}


@pytest.mark.parametrize("args", [["--verify-only", "-q"], ["OUT", "--no-check", "-q"]])
def test_a_tflite_model_imports_the_tflite_reader(tmp_path, args):
    args = [str(tmp_path / "m.legal.tflite") if a == "OUT" else a for a in args]
    mods, p = imported(tmp_path, ROOT / "models" / "tflite" / "broadcast_add.tflite", *args, whole=True)
    assert p.returncode == 0, p.stderr
    assert {m.split(".")[0] for m in mods} & HEAVY == {"flatbuffers", "tflite"}
    assert not mods & CHECK_MODULES, sorted(mods & CHECK_MODULES)


def test_the_local_executor_never_imports_ray(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    shutil.copy(MODEL, d / "a.onnx")
    shutil.copy(MODEL, d / "b.onnx")
    mods, p = imported(tmp_path, d, "-q", "--no-check", "-j", "2")
    assert p.returncode == 0, p.stderr
    assert "ray" not in mods and not mods & HEAVY, sorted(mods & HEAVY)


@pytest.mark.parametrize("args", [
    ["m.onnx"], ["a", "b", "-j", "2", "-o", "d"], ["m.onnx", "--dim", "N=1", "--dim", "N=2", "--rtol", "y:2"],
    ["m.onnx", "--no-localize", "--localize-budget", " 3 "], ["m.onnx", "-j", "3.0"], ["m.onnx", "-j", "0"],
    ["m.onnx", "-j", "x"], ["m.onnx", "-o", "o", "--report", "r.json", "--emit", "onnx", "--executor", "ray"],
    ["m.onnx", "--verify-only", "--json", "-q", "--no-check"]])
def test_values_are_converted_as_typer_converts_them(args):
    """The command's own conversion (no pydantic) gives typer's values and errors."""
    from typer.main import get_command

    from legalizer.cli import app

    def parsed(command):
        try:
            return command.make_context("legalize", list(args)).params
        except Exception as e:  # noqa: BLE001 - a usage error: its message
            return e.format_message()

    ours, typers = get_command(app), get_command(app)
    for param in typers.params:
        param._runtime_param = None  # typer's own conversion, built on first use
    assert repr(parsed(ours)) == repr(parsed(typers))


@pytest.mark.parametrize("args,flag", [(["", "-q"], "'MODEL'"), (["m.onnx", "-o", ""], "'-o' / '--output'"),
                                       (["m.onnx", "--report", ""], "'--report'")])
def test_an_empty_path_is_refused_where_typer_would_take_the_current_folder(args, flag):
    """Where the command's conversion differs from typer's: Path("") is ".", which
    would make ``legalize ""`` a batch of the current folder (and a path spelled with a
    trailing '/' is kept as such: below)."""
    from typer.main import get_command

    from legalizer.cli import app

    with pytest.raises(Exception) as e:
        get_command(app).make_context("legalize", list(args))
    assert e.value.format_message() == f"Invalid value for {flag}: an empty path names no file"


def test_a_trailing_slash_is_kept_as_a_folder_name():
    """Path("legal/") is Path("legal"): the conversion keeps that the user named a folder."""
    from typer.main import get_command

    from legalizer.cli import FolderSpelled, app

    params = get_command(app).make_context("legalize", ["m.onnx", "-o", "legal/", "--report", "r.json"]).params
    assert isinstance(params["out_opt"], FolderSpelled) and str(params["out_opt"]) == "legal"
    assert not isinstance(params["report"], FolderSpelled) and not isinstance(params["paths"][0], FolderSpelled)


def test_the_runtimes_warmed_follow_the_files_content_not_their_names(tmp_path):
    """The child imports ahead the runtimes of the kinds of model the command line names,
    as the run reads them: a TFLite file named .bin is LiteRT's, an ONNX file named
    .tflite is onnxruntime's alone, a TOSA module IREE's; a word that names no file
    warms nothing (onnxruntime where nothing is named)."""
    from legalizer.cli import _runtimes

    tfl = tmp_path / "m.bin"
    shutil.copy(ROOT / "models" / "tflite" / "broadcast_add.tflite", tfl)
    onnx_named_tflite = tmp_path / "m.tflite"
    shutil.copy(MODEL, onnx_named_tflite)
    mlir = tmp_path / "m.txt"
    mlir.write_text("module {\n}\n")
    assert _runtimes([str(tfl), "-q"]) == ("ai_edge_litert.interpreter", "onnxruntime")
    assert _runtimes([str(onnx_named_tflite), "--emit", "onnx"]) == ("onnxruntime",)
    assert _runtimes([str(mlir), "--verify-only"]) == ("iree.runtime",)
    assert _runtimes([str(tmp_path / "gone.tflite")]) == ("onnxruntime",)


HELPER_PROBE = """
import atexit, json, os, sys
from legalizer import bounded_helper
started = []
start = bounded_helper.start
bounded_helper.start = lambda preload=(): (started.append(list(preload)), start(preload))
atexit.register(lambda: open(os.environ["STARTED_OUT"], "w").write(json.dumps(started)))
from legalizer.cli import main
main(sys.argv[1:])
"""


@pytest.mark.parametrize("model, args, started", [
    ("mlp_bias.onnx", ["--no-check"], True),
    ("tflite/broadcast_add.tflite", ["--no-check"], False),
    ("tflite/broadcast_add.tflite", ["--no-check", "--emit", "tflite", "--emit", "tosa"], True),
    ("mlp.pt2", [], False)])
def test_the_shape_inference_helper_starts_ahead_only_for_a_run_that_infers(tmp_path, model, args, started):
    """The helper that runs ONNX shape inference starts while the command loads only when
    the run will infer ONNX shapes: an ONNX model, or a TFLite model emitted as MLIR
    (through its ONNX form); a TFLite run that emits TFLite starts nothing, nor does a
    checked .pt2 run (its ATen graph is read, checked and written: no ONNX is inferred)."""
    if model.endswith(".pt2"):
        require("torch")
    src = tmp_path / Path(model).name
    shutil.copy(ROOT / "models" / model, src)
    out = tmp_path / "started.json"
    p = subprocess.run([sys.executable, "-c", HELPER_PROBE, str(src), *args, "-q"], capture_output=True, text=True,
                       cwd=ROOT, env={**os.environ, "STARTED_OUT": str(out)}, timeout=300)
    assert p.returncode == 0, p.stderr
    # (the ONNX reader starts it too, as it parses the file: a no-op once started)
    assert {tuple(x) for x in json.loads(out.read_text())} == ({("legalizer.kinds.onnx.infer",)} if started else set())


def test_the_onnx_reader_starts_the_helper_before_it_parses_the_file(monkeypatch):
    """A library run (``pipeline.run``, ``api.load``) has no command line to start the
    shape inference helper ahead: the ONNX reader starts it, so that the helper's start
    and imports overlap the file's parse; a read that infers nothing starts nothing."""
    from legalizer import bounded_helper
    from legalizer.kinds.onnx import read as onnx_read

    did = []
    monkeypatch.setattr(bounded_helper, "start", lambda preload=(): did.append(("start", tuple(preload))))
    parse = onnx_read.load_onnx_proto
    monkeypatch.setattr(onnx_read, "load_onnx_proto", lambda path: (did.append(("parse",)), parse(path))[1])
    onnx_read.read(ROOT / "models" / "mlp_bias.onnx", infer=True, trust_pt2=False)
    assert did == [("start", ("legalizer.kinds.onnx.infer",)), ("parse",)]
    did.clear()
    onnx_read.read(ROOT / "models" / "mlp_bias.onnx", infer=False, trust_pt2=False)
    assert did == [("parse",)]
