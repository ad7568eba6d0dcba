"""``legalize MODEL --verify-only``, end to end, as a subprocess: exit codes, the JSON
report's exact schema (docs/report.md), what goes to stdout and stderr under
``--json``, ``-q`` and ``-v``, and the progress indicator on a terminal."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import List

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import legalizer
import sample_models
from helpers import assert_clean, cli_command, cli_env, lines, make_model, save, vi

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"

STAT_KEYS = ["nodes_in", "nodes_out", "elementwise_nodes", "reshapes_inserted",
             "broadcasts_made_explicit", "constants_folded", "runtime_broadcast_checks",
             "runtime_broadcast_checks_elided"]
REPORT_KEYS = ["schema", "tool_version", "input", "output", "format", "outputs", "target",
               "profile", "stats", "violations", "constraints", "check", "timings_s", "warnings"]
VIOLATION_KEYS = ["code", "node", "op", "message", "operand_shapes", "result_shape", "stage", "dim", "graph"]


def custom_domain_model(t_shape, n_frob: int = 1) -> onnx.ModelProto:
    """x -> com.example.Frobnicate (output typed only by value_info) -> Add(t, x)."""
    nodes, prev = [], "x"
    for i in range(n_frob):
        nodes.append(helper.make_node("Frobnicate", [prev], [f"t{i}"], name=f"frob{i}", domain="com.example"))
        prev = f"t{i}"
    nodes.append(helper.make_node("Add", [prev, "x"], ["y"], name="add"))
    infos = [vi(f"t{i}", TensorProto.FLOAT, t_shape) for i in range(n_frob)]
    return make_model(nodes, [vi("x", TensorProto.FLOAT, [2, 3])], [vi("y", TensorProto.FLOAT, None)],
                      value_info=infos, domains=[("com.example", 1)])


def check_report(rep: dict, *, input: str, profile: str = "mlir") -> None:
    """Every key and type of the report schema (docs/report.md), for --verify-only."""
    assert list(rep) == REPORT_KEYS
    assert rep["schema"] == 1
    assert isinstance(rep["tool_version"], str) and rep["tool_version"]
    assert rep["input"] == input
    assert rep["output"] is None
    assert rep["format"] == "onnx"
    assert rep["outputs"] == {}
    assert rep["target"] == "tosa"
    assert rep["profile"] == profile
    assert list(rep["stats"]) == STAT_KEYS
    assert all(type(v) is int and v >= 0 for v in rep["stats"].values())
    for v in rep["violations"]:
        assert list(v) == VIOLATION_KEYS
        assert all(isinstance(v[k], str) and v[k] for k in ("code", "node", "op", "message"))
        assert isinstance(v["operand_shapes"], list)
        for s in v["operand_shapes"]:
            assert s is None or (isinstance(s, list) and all(isinstance(d, str) for d in s))
        assert v["result_shape"] is None or all(isinstance(d, str) for d in v["result_shape"])
        assert v["stage"] == "input"
        assert v["dim"] is None or type(v["dim"]) is int
        assert isinstance(v["graph"], str)
    assert isinstance(rep["warnings"], list) and all(isinstance(w, str) for w in rep["warnings"])
    for c in rep["constraints"]:
        assert list(c) in (["text", "nodes"], ["text", "nodes", "inputs"])  # (inputs: where a dim is declared)
        assert all(isinstance(d, list) and d for d in c.get("inputs", {}).values())
        assert isinstance(c["text"], str) and c["text"]
        assert c["nodes"] and all(isinstance(n, str) for n in c["nodes"])
    assert rep["check"] == {"ran": False, "ok": None}
    assert set(rep["timings_s"]) == {"load", "verify"}
    assert all(type(t) is float and t >= 0 for t in rep["timings_s"].values())


# -- exit codes and the human summary --------------------------------------------------

@pytest.mark.parametrize("name, code", [("mlp_bias.onnx", 0), ("dynamic_broadcast.onnx", 0),
                                        ("incompatible_add.onnx", 1)])
def test_exit_code_and_verdict(name, code, legalize):
    p = legalize(MODELS / name, "--verify-only")
    assert_clean(p)
    assert p.returncode == code, p.stderr
    assert p.stderr == ""
    verdict = lines(p.stdout)[-1]
    assert verdict.startswith(str(MODELS / name) + ": ")
    assert ("legal under 'mlir'" in verdict) == (code == 0)


def test_incompatible_broadcast_is_a_diagnostic_not_a_crash(legalize):
    # onnx's strict shape inference rejects this model; we must report it, exit 1.
    p = legalize(MODELS / "incompatible_add.onnx", "--verify-only")
    assert_clean(p)
    assert p.returncode == 1
    assert ("error: node 'bad_add': 'Add' op operands don't have broadcast-compatible shapes: "
            "operand #0 '3x4' has 4 at dim 1 but operand #1 '2' has 2 at dim 0") in lines(p.stdout)
    assert lines(p.stdout)[-1].endswith(": 1 violation under 'mlir'")


@pytest.mark.parametrize("profile, code", [("mlir", 0), ("strict", 0), ("tosa", 1)])
def test_profiles(profile, code, legalize):
    # The biases are rank 1 against rank-2 results: legal except under tosa.
    p = legalize(MODELS / "mlp_bias.onnx", "--verify-only", "--profile", profile)
    assert_clean(p)
    assert p.returncode == code
    assert lines(p.stdout)[-1].endswith(f"under '{profile}'")
    if code:
        assert any("operands don't have matching ranks" in ln for ln in lines(p.stdout))


def test_variants_from_make_models(tmp_path, legalize):
    for name, make in sample_models.MODELS.items():
        path = save(make(), tmp_path / name)
        p = legalize(path, "--verify-only", "-q")
        assert_clean(p)
        assert p.returncode == (1 if name == "incompatible_add.onnx" else 0), p.stdout + p.stderr


@pytest.mark.parametrize("name", ["weights.bin", "model", "model.txt", "model.tflite"])
def test_model_recognized_by_content_not_extension(tmp_path, name, legalize):
    path = save(sample_models.mlp_bias(), tmp_path / name)
    p = legalize(path, "--verify-only")
    assert_clean(p)
    assert p.returncode == 0, p.stderr
    assert lines(p.stdout)[-1] == f"{path}: legal under 'mlir'"


def test_entry_point():
    exe = Path(sys.executable).parent / "legalize"
    if not exe.exists():
        exe = shutil.which("legalize")
    if exe is None:
        pytest.skip("no legalize entry point installed")
    p = subprocess.run([str(exe), str(MODELS / "incompatible_add.onnx"), "--verify-only", "-q"],
                       capture_output=True, text=True, env=cli_env(), timeout=120)
    assert p.returncode == 1 and p.stderr == ""
    assert len(lines(p.stdout)) == 2


def test_help(legalize):
    import re

    p = legalize("--help", env={"COLUMNS": "120"})
    assert p.returncode == 0 and p.stderr == ""
    text = p.stdout
    # A manual: the choices and value forms in the option list, and examples whose every
    # option is one the command has.
    for form in ("--target tosa|xla", "--profile mlir|strict|tosa|xla", "--provider auto|cpu|cuda",
                 "--dim NAME=SIZE", "--input NAME=FILE.npy", "--emit FORMAT", "-j, --jobs N", "Exit status: 0"):
        assert form in text, form
    examples = [ln.split("#")[0] for ln in text.splitlines() if ln.strip().startswith("legalize ")]
    assert len(examples) >= 15
    options = set(re.findall(r"(?m)^\s+(?:-\w, )?(--[\w-]+)", text.split("Options:")[1]))
    used = {o for ex in examples for o in re.findall(r"(?<!\S)(--[\w-]+)", ex)}
    assert used and used <= options | {"--no-check"}, used - options


# -- custom ops ------------------------------------------------------------------------

@pytest.mark.parametrize("n_frob", [1, 3])
def test_custom_domain_op_is_opaque_with_one_warning(tmp_path, n_frob, legalize):
    path = save(custom_domain_model([2, 3], n_frob), tmp_path / "custom.onnx")
    p = legalize(path, "--verify-only")
    assert_clean(p)
    assert p.returncode == 0, p.stdout
    err = lines(p.stderr)
    assert len(err) == 1 and err[0].startswith("legalize: warning: ")
    assert "com.example.Frobnicate" in err[0]
    assert lines(p.stdout)[-1] == f"{path}: legal under 'mlir'"


def test_custom_domain_op_declared_type_feeds_the_verifier(tmp_path, legalize):
    # The Add downstream of the opaque op uses its declared type, 4x5, against x: 2x3.
    path = save(custom_domain_model([4, 5]), tmp_path / "custom_bad.onnx")
    p = legalize(path, "--verify-only")
    assert_clean(p)
    assert p.returncode == 1
    assert len(lines(p.stderr)) == 1 and p.stderr.startswith("legalize: warning: ")
    errors = [ln for ln in lines(p.stdout) if ln.startswith("error:")]
    assert errors == ["error: node 'add': 'Add' op operands don't have broadcast-compatible shapes: "
                      "operand #0 '4x5' has 4 at dim 0 but operand #1 '2x3' has 2 at dim 0"]


# -- the report ------------------------------------------------------------------------

@pytest.mark.parametrize("name, code", [("mlp_bias.onnx", 0), ("dynamic_broadcast.onnx", 0),
                                        ("incompatible_add.onnx", 1)])
def test_report_schema(tmp_path, name, code, legalize):
    src = shutil.copy(MODELS / name, tmp_path / name)
    before = Path(src).read_bytes()
    out = tmp_path / "out"
    out.mkdir()
    p = legalize(src, "--verify-only", "--report", out / "r.json")
    assert_clean(p)
    assert p.returncode == code
    assert sorted(os.listdir(out)) == ["r.json"]  # atomic: no temporary file left
    assert sorted(os.listdir(tmp_path)) == sorted(["out", name])
    assert Path(src).read_bytes() == before
    rep = json.loads((out / "r.json").read_text())
    check_report(rep, input=str(src))
    assert (len(rep["violations"]) > 0) == (code == 1)


def test_report_contents(tmp_path, legalize):
    p = legalize(MODELS / "incompatible_add.onnx", "--verify-only", "--report", tmp_path / "r.json")
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["stats"]["nodes_in"] == 1 and rep["stats"]["elementwise_nodes"] == 1
    assert rep["violations"] == [{
        "code": "incompatible-operands", "node": "bad_add", "op": "Add",
        "message": "operands don't have broadcast-compatible shapes: operand #0 '3x4' has 4 at dim 1 "
                   "but operand #1 '2' has 2 at dim 0",
        "operand_shapes": [["3", "4"], ["2"]], "result_shape": None, "stage": "input",
        "dim": 1, "graph": ""}]
    assert p.returncode == 1

    legalize(MODELS / "dynamic_broadcast.onnx", "--verify-only", "--report", tmp_path / "d.json")
    rep = json.loads((tmp_path / "d.json").read_text())
    assert {"text": "M == N or M == 1 or N == 1", "nodes": ["sub_N_M"], "inputs": {"M": ["f[0]"], "N": ["e[0]"]}} \
        in rep["constraints"]
    assert rep["stats"]["nodes_in"] == 3 and rep["stats"]["elementwise_nodes"] == 3


def test_report_replaces_an_existing_report(tmp_path, legalize):
    r = tmp_path / "r.json"
    r.write_text("old")
    p = legalize(MODELS / "mlp_bias.onnx", "--verify-only", "--report", r, "-q")
    assert p.returncode == 0
    check_report(json.loads(r.read_text()), input=str(MODELS / "mlp_bias.onnx"))
    assert os.listdir(tmp_path) == ["r.json"]


@pytest.mark.parametrize("name, code", [("mlp_bias.onnx", 0), ("incompatible_add.onnx", 1)])
def test_json_stdout_is_the_report_only(tmp_path, name, code, legalize):
    p = legalize(MODELS / name, "--verify-only", "--json", "--report", tmp_path / "r.json")
    assert_clean(p)
    assert p.returncode == code
    rep = json.loads(p.stdout)  # the whole of stdout, nothing else
    check_report(rep, input=str(MODELS / name))
    assert p.stdout == (tmp_path / "r.json").read_text()  # the very same report
    # The human summary went to stderr.
    assert lines(p.stderr)[-1].startswith(f"{MODELS / name}: ")
    assert any(ln.startswith("error: node 'bad_add'") for ln in lines(p.stderr)) == (code == 1)


@pytest.mark.parametrize("content", [b"", b"not a model at all", None], ids=["empty", "text", "missing"])
def test_json_and_report_of_bad_input(tmp_path, content, legalize):
    # A pipeline reading --json or --report gets a report that says what went wrong.
    path = tmp_path / "m.onnx"
    if content is not None:
        path.write_bytes(content)
    p = legalize(path, "--json", "--report", tmp_path / "r.json")
    assert_clean(p)
    assert p.returncode == 2
    (line,) = lines(p.stderr)
    rep = json.loads(p.stdout)
    assert rep == {"schema": 1, "tool_version": legalizer.__version__, "input": str(path), "exit_code": 2,
                   "error": line.removeprefix("legalize: error: ")}
    assert p.stdout == (tmp_path / "r.json").read_text()
    assert sorted(os.listdir(tmp_path)) == sorted(["r.json"] + (["m.onnx"] if content is not None else []))


def test_json_with_quiet_and_warnings(tmp_path, legalize):
    path = save(custom_domain_model([2, 3]), tmp_path / "c.onnx")
    p = legalize(path, "--verify-only", "--json")
    assert p.returncode == 0
    check_report(json.loads(p.stdout), input=str(path))
    assert sum(ln.startswith("legalize: warning:") for ln in lines(p.stderr)) == 1
    p = legalize(path, "--verify-only", "--json", "-q")
    check_report(json.loads(p.stdout), input=str(path))
    assert lines(p.stderr) == [f"{path}: legal under 'mlir'"]


# -- -q and -v -------------------------------------------------------------------------

def test_quiet(legalize):
    p = legalize(MODELS / "mlp_bias.onnx", "--verify-only", "-q")
    assert (p.returncode, lines(p.stdout), p.stderr) == (0, [f"{MODELS / 'mlp_bias.onnx'}: legal under 'mlir'"], "")
    p = legalize(MODELS / "incompatible_add.onnx", "--verify-only", "-q")
    out = lines(p.stdout)
    assert p.returncode == 1 and p.stderr == "" and len(out) == 2
    assert out[0].startswith("error: node 'bad_add': 'Add' op operands don't have broadcast-compatible shapes")
    assert out[1] == f"{MODELS / 'incompatible_add.onnx'}: 1 violation under 'mlir'"
    p = legalize(MODELS / "dynamic_broadcast.onnx", "--verify-only", "-q")
    assert len(lines(p.stdout)) == 1 and "constraint" not in p.stdout


def test_verbose_prints_ir_and_constraints(legalize):
    p = legalize(MODELS / "mlp_bias.onnx", "--verify-only", "-v")
    assert_clean(p)
    assert p.returncode == 0
    assert "graph mlp_bias(%x: tensor<Nx16xfloat>) {" in p.stdout
    assert "%h1 = Add(%h0, %b1) : (tensor<Nx32xfloat>, tensor<32xfloat>) -> tensor<Nx32xfloat>" in p.stdout
    p = legalize(MODELS / "dynamic_broadcast.onnx", "--verify-only", "-v")
    assert "constraint: M == N or M == 1 or N == 1  (nodes: sub_N_M; M: f[0]; N: e[0])" in p.stdout
    plain = legalize(MODELS / "dynamic_broadcast.onnx", "--verify-only")
    assert "constraint:" not in plain.stdout and "graph dynamic_broadcast(" not in plain.stdout


# -- the progress indicator ------------------------------------------------------------

def big_file_model() -> onnx.ModelProto:
    """Few nodes, a 2 MiB initializer: large by file size."""
    w = numpy_helper.from_array(np.zeros((512, 1024), np.float32), "w")
    return make_model([helper.make_node("Add", ["x", "w"], ["y"], name="add")],
                      [vi("x", TensorProto.FLOAT, [1, 1024])], [vi("y", TensorProto.FLOAT, [512, 1024])], inits=[w])


def many_nodes_model(n: int = 20_500) -> onnx.ModelProto:
    """A chain of n Relu nodes: large by node count, under 1 MiB."""
    nodes = [helper.make_node("Relu", [f"v{i}" if i else "x"], [f"v{i + 1}"]) for i in range(n)]
    return make_model(nodes, [vi("x", TensorProto.FLOAT, [4])], [vi(f"v{n}", TensorProto.FLOAT, [4])])


def run_on_tty(args) -> tuple:
    """Run legalize with stderr on a pseudo-terminal; (exit code, stdout, terminal bytes)."""
    import pty

    master, slave = pty.openpty()
    env = cli_env({"TERM": "xterm", "COLUMNS": "120"})
    p = subprocess.Popen(cli_command(*args), stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=slave, env=env)
    os.close(slave)
    chunks: List[bytes] = []

    def read():
        while True:
            try:
                b = os.read(master, 65536)
            except OSError:  # EIO once the child has gone
                return
            if not b:
                return
            chunks.append(b)

    t = threading.Thread(target=read, daemon=True)
    t.start()
    out, _ = p.communicate(timeout=300)
    t.join(timeout=10)
    os.close(master)
    return p.returncode, out.decode(), b"".join(chunks).decode(errors="replace")


pytestmark_tty = pytest.mark.skipif(sys.platform == "win32", reason="needs a pseudo-terminal")


@pytest.fixture(scope="module")
def big_models(tmp_path_factory):
    d = tmp_path_factory.mktemp("big")
    return {"file": save(big_file_model(), d / "big_file.onnx"),
            "nodes": save(many_nodes_model(), d / "many_nodes.onnx")}


@pytestmark_tty
def test_progress_on_a_terminal_for_a_large_file(big_models):
    path = big_models["file"]
    assert path.stat().st_size > 2 * 10**6
    code, out, term = run_on_tty([path, "--verify-only"])
    assert code == 0 and out.splitlines()[-1] == f"{path}: legal under 'mlir'"
    assert "loading big_file.onnx" in term and "verifying big_file.onnx" in term
    assert "Traceback" not in term


@pytestmark_tty
def test_progress_on_a_terminal_for_many_nodes(big_models):
    path = big_models["nodes"]
    assert path.stat().st_size < 2**20
    code, out, term = run_on_tty([path, "--verify-only"])
    assert code == 0
    assert "verifying many_nodes.onnx (20,502 nodes)" in term
    assert "loading" not in term  # the file is small: no indicator until the node count is known


@pytestmark_tty
@pytest.mark.parametrize("flag", ["-q", "--json"])
def test_no_progress_with_quiet_or_json(big_models, flag):
    code, out, term = run_on_tty([big_models["file"], "--verify-only", flag])
    assert code == 0
    assert "loading" not in term and "verifying" not in term
    if flag == "--json":
        json.loads(out)


@pytestmark_tty
def test_no_progress_on_a_small_model():
    code, out, term = run_on_tty([MODELS / "mlp_bias.onnx", "--verify-only"])
    assert code == 0 and term.strip() == ""


def test_no_progress_when_stderr_is_not_a_terminal(big_models, legalize):
    p = legalize(big_models["file"], "--verify-only")
    assert p.returncode == 0 and p.stderr == ""


def test_names_are_printed_literally(tmp_path, legalize):
    # rich markup in a path, control characters in a node name: printed as they are
    # (escaped), one line each, never interpreted.
    d = tmp_path / "d[" / "]x"  # the path reads 'd[/]x'
    d.mkdir(parents=True)
    path = save(sample_models.mlp_bias(), d / "[red]m[bold].onnx")
    p = legalize(path, "--verify-only")
    assert_clean(p)
    assert p.returncode == 0 and p.stderr == ""
    assert lines(p.stdout)[0] == f"{path} (onnx, profile mlir)"
    assert lines(p.stdout)[-1] == f"{path}: legal under 'mlir'"

    m = make_model([helper.make_node("Add", ["x", "b"], ["y"], name="bad[/]\nnode :smile:")],
                   [vi("x", TensorProto.FLOAT, [3, 4]), vi("b", TensorProto.FLOAT, [2])],
                   [vi("y", TensorProto.FLOAT, None)])
    path = save(m, tmp_path / "n.onnx")
    p = legalize(path, "--verify-only", "-q", "--report", tmp_path / "r.json")
    assert_clean(p)
    assert p.returncode == 1 and p.stderr == ""
    assert lines(p.stdout)[0].startswith("error: node 'bad[/]\\nnode :smile:': 'Add' op ")
    assert len(lines(p.stdout)) == 2
    assert json.loads((tmp_path / "r.json").read_text())["violations"][0]["node"] == "bad[/]\nnode :smile:"


def test_report_has_the_usual_permissions(tmp_path, legalize):
    umask = os.umask(0o022)
    os.umask(umask)
    r = tmp_path / "r.json"
    assert legalize(MODELS / "mlp_bias.onnx", "--verify-only", "--report", r).returncode == 0
    assert r.stat().st_mode & 0o777 == 0o666 & ~umask  # not mkstemp's private 0600
    r.chmod(0o640)
    assert legalize(MODELS / "mlp_bias.onnx", "--verify-only", "--report", r).returncode == 0
    assert r.stat().st_mode & 0o777 == 0o640  # a replaced report keeps its permissions


def test_progress_shows_only_once_a_run_has_gone_on_for_its_delay(capsys):
    import time

    from legalizer.console import Progress

    quick = Progress(True, "m.onnx", delay=0.5)
    quick("load", {"bytes": 2_000})
    quick.close()  # ended before the delay: nothing was ever shown
    assert quick.progress is None and quick.timer is not None and quick.timer.finished.is_set()

    slow = Progress(True, "m.onnx", delay=0.05)
    slow("load", {"bytes": 2_000})
    deadline = time.monotonic() + 5
    while slow.progress is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert slow.progress is not None
    slow("verify", {"nodes": 12_345})
    task = slow.progress.tasks[0]
    assert task.description == "verifying m.onnx (12,345 nodes)"
    assert (task.completed, task.total) == (1, 2)  # a bar over the run's stages: load done
    slow.close()
    assert slow.progress is None

    off = Progress(False, "m.onnx", delay=0.0)  # -q, --json, or stderr not a terminal
    off("load", {})
    assert off.timer is None


def test_every_stage_of_a_run_is_announced(tmp_path):
    # The progress indicator names the stage under way, the write included.
    from legalizer.pipeline import RunOptions, run, stages

    for options, want in ((RunOptions(output=tmp_path / "m.legal.onnx"),
                           ["load", "verify", "passes", "verify", "emit", "save", "check"]),
                          (RunOptions(output=tmp_path / "n.legal.onnx", check=False),
                           ["load", "verify", "passes", "verify", "emit", "save"]),
                          (RunOptions(verify_only=True), ["load", "verify"])):
        seen = []
        res = run(MODELS / "mlp_bias.onnx", options, on_stage=lambda stage, size: seen.append(stage))
        assert res.exit_code == 0
        assert seen == want == stages(options)  # the bar's length is what the run announces
