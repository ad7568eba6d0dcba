"""``--executor ray`` (docs/several-models.md): on a local Ray instance that this module
starts, a folder of sample models and a few corpus models give the local executor's
lines, exit status, files and JSON list, from Ray workers; a worker that dies fails only
its model; a file a task returns is written only where the command planned it; and
without the extra the option is one line, exit 2."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import signal
from pathlib import Path

import pytest

from legalizer import batch, ray_batch
from legalizer.pipeline import RunOptions
from helpers import assert_clean, cli_process
from needs import require

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"
CORPUS = ROOT / ".cache" / "corpus"
# Corpus models whose check runs with the defaults (no per-model sizes): two ONNX
# transformers, a convnet, and a TFLite model with its int8 twin.
CORPUS_MODELS = ["hf_bert.onnx", "hf_resnet.onnx", "hf_vit.onnx", "keras_mobilenetv2.tflite",
                 "keras_mobilenetv2_int8.tflite"]


@pytest.fixture(scope="module")
def cluster():
    """A local Ray instance (2 CPUs) for the module; the commands reach it through
    RAY_ADDRESS, as they would a cluster."""
    require("ray")
    import ray
    # Its workers import this checkout's legalizer, as the commands do, whatever folder
    # a command runs in (they inherit the instance's environment).
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), before]))
    try:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    finally:
        if before is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = before
    try:
        yield {"address": ray.get_runtime_context().gcs_address, "node_id": ray.get_runtime_context().get_node_id()}
    finally:
        ray.shutdown()


def _ray(address=None, timeout: float = 600, **env) -> dict:
    """The arguments of a ``legalize`` run here: this checkout's legalizer on PYTHONPATH
    wherever the command runs, Ray's address (none inherited), more ``env`` on top, and
    time for Ray to start."""
    return {"env": {"RAY_ADDRESS": address, "PYTHONPATH": str(ROOT), **env}, "timeout": timeout}


def outputs(d: Path) -> dict:
    """Every file legalize wrote under ``d``, by relative path, with its digest."""
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(d.rglob("*")) if p.is_file() and ".legal." in p.name}


def entries(report: Path) -> list:
    """The JSON list without what differs from run to run (timings) or by executor."""
    listed = json.loads(report.read_text())
    for e in listed:
        e.pop("timings_s", None)
        e.pop("worker")
    return listed


def remove_outputs(d: Path) -> None:
    for p in d.rglob("*"):
        if p.is_file() and ".legal." in p.name:
            p.unlink()


def run_both(cluster, tmp_path, target: Path, *args, out: Path = None):
    """The same command with each executor, on the same files (outputs removed between
    them); returns both runs, their reports and their outputs."""
    runs = {}
    remove_outputs(out or target)  # (a copy of models/ may hold the README set-up's own run's output)
    for executor in ("local", "ray"):
        rep = tmp_path / f"{executor}.json"
        p = cli_process(target, "--executor", executor, "--report", rep, *args,
                        **_ray(cluster["address"] if executor == "ray" else None))
        assert_clean(p)
        runs[executor] = (p, rep, outputs(out or target))
        remove_outputs(out or target)
    return runs


def assert_same(runs, cluster, n: int) -> None:
    (lp, lrep, lfiles), (rp, rrep, rfiles) = runs["local"], runs["ray"]
    assert rp.returncode == lp.returncode
    assert rp.stdout == lp.stdout and rp.stderr == lp.stderr
    assert rfiles == lfiles and lfiles
    assert entries(rrep) == entries(lrep) and len(entries(lrep)) == n
    for e in json.loads(rrep.read_text()):
        assert e["worker"]["executor"] == "ray" and e["worker"]["node_id"] == cluster["node_id"]
        assert isinstance(e["worker"]["pid"], int) and e["worker"]["pid"] != os.getpid()
    local = json.loads(lrep.read_text())
    assert {e["worker"]["executor"] for e in local} == {"local"}


def test_sample_models_on_ray_are_the_local_executors(cluster, tmp_path):
    d = tmp_path / "models"
    shutil.copytree(MODELS, d)
    (d / "bad.onnx").write_text("not a model\n")
    runs = run_both(cluster, tmp_path, d, "-q")
    assert_same(runs, cluster, 39)
    p = runs["ray"][0]
    assert p.returncode == 2 and p.stdout.splitlines()[-1].startswith("legalize: 39 models: 37 legalized, 1 ")
    assert p.stderr.splitlines() == [f"legalize: error: {d / 'bad.onnx'}: is a text file, not an ONNX model"]


def test_corpus_models_on_ray_into_an_output_folder(cluster, tmp_path, legalize):
    found = [CORPUS / name for name in CORPUS_MODELS if (CORPUS / name).is_file()]
    if not found:
        pytest.skip(f"the corpus is not built ({CORPUS} has none of {CORPUS_MODELS}): python scripts/corpus.py")
    out, pages = tmp_path / "legal", tmp_path / "pages"
    out.mkdir(), pages.mkdir()
    runs = {}
    for executor in ("local", "ray"):
        rep = tmp_path / f"{executor}.json"
        p = legalize(*found, "-o", out, "--html", pages, "--executor", executor, "--report", rep,
                     **_ray(cluster["address"] if executor == "ray" else None))
        assert_clean(p)
        # the pages carry the run's timings: compared by name only
        runs[executor] = (p, rep, {**outputs(out), **{f"pages/{n}": "page" for n in outputs(pages)}})
        for f in [*out.iterdir(), *pages.iterdir()]:
            f.unlink()
    assert_same(runs, cluster, len(found))
    assert sorted(runs["ray"][2]) == sorted([f"{m.stem}.legal{m.suffix}" for m in found]
                                            + [f"pages/{m.stem}.legal.html" for m in found])
    assert not list(CORPUS.glob("*.legal.*"))


def test_emit_html_and_existing_outputs_on_ray(cluster, tmp_path, legalize):
    """--emit onnx (a TFLite model's ONNX form only: its own format written aside), one
    page per model, and an existing output without --force: that model's error only."""
    d = tmp_path / "d"
    d.mkdir()
    shutil.copy(MODELS / "mlp_bias.onnx", d / "good.onnx")
    shutil.copy(MODELS / "tflite" / "broadcast_add.tflite", d / "net.tflite")
    shutil.copy(MODELS / "incompatible_add.onnx", d / "violating.onnx")
    shutil.copy(MODELS / "small_cnn.dynamo.onnx", d / "cnn.onnx")
    pages = tmp_path / "pages"
    pages.mkdir()
    runs = {}
    for executor in ("local", "ray"):
        (d / "cnn.legal.onnx").write_bytes(b"old")
        rep = tmp_path / f"{executor}.json"
        p = legalize(d, "--emit", "onnx", "--html", pages, "--executor", executor, "--report", rep,
                     **_ray(cluster["address"] if executor == "ray" else None))
        assert_clean(p)
        assert (d / "cnn.legal.onnx").read_bytes() == b"old"
        runs[executor] = (p, rep, {**outputs(d), **{f"pages/{n}": "page" for n in outputs(pages)}})
        remove_outputs(d)
        for f in pages.iterdir():
            f.unlink()
    assert_same(runs, cluster, 4)
    p, _, written = runs["ray"]
    assert p.returncode == 2
    assert p.stderr.splitlines() == [f"legalize: error: {d / 'cnn.legal.onnx'}: already exists (use --force to "
                                     "replace it)"]
    assert sorted(written) == ["cnn.legal.onnx", "good.legal.onnx", "net.legal.onnx", "pages/good.legal.html",
                               "pages/net.legal.html", "pages/violating.legal.html"]


def test_relative_paths_name_the_same_files_on_the_workers(cluster, tmp_path, legalize):
    """The tasks run in the command's working folder: a relative path reads and names
    the same model, and the outputs land beside it (-j 1: one task at a time)."""
    (tmp_path / "d").mkdir()
    shutil.copy(MODELS / "mlp_bias.onnx", tmp_path / "d" / "a.onnx")
    shutil.copy(MODELS / "tflite" / "broadcast_add.tflite", tmp_path / "d" / "b.tflite")
    seen = {}
    for executor in ("local", "ray"):
        p = legalize("d", "-q", "-j", "1", "--executor", executor, cwd=tmp_path,
                     **_ray(cluster["address"] if executor == "ray" else None))
        assert_clean(p)
        seen[executor] = (p.returncode, p.stdout, p.stderr, outputs(tmp_path))
        remove_outputs(tmp_path)
    assert seen["ray"] == seen["local"]
    code, out, _, written = seen["ray"]
    assert code == 0 and out.splitlines()[0].startswith("d/a.onnx: legalized for 'tosa' -> d/a.legal.onnx, ")
    assert sorted(written) == ["d/a.legal.onnx", "d/b.legal.tflite"]


def test_an_output_folder_is_made_and_dims_bind_where_present_on_ray(cluster, tmp_path, legalize):
    """-o legal/new/ is made (as mkdir -p would) before the tasks write into it, and a
    --dim binds the model that has it, on Ray as locally."""
    (tmp_path / "d").mkdir()
    shutil.copy(MODELS / "mlp_bias.onnx", tmp_path / "d" / "a.onnx")
    shutil.copy(MODELS / "dynamic_broadcast.onnx", tmp_path / "d" / "b.onnx")
    seen = {}
    for executor in ("local", "ray"):
        p = legalize("d", "-o", f"legal-{executor}/new/", "--dim", "M=1", "--executor", executor, cwd=tmp_path,
                     **_ray(cluster["address"] if executor == "ray" else None))
        assert_clean(p)
        assert p.returncode == 0, p.stderr
        seen[executor] = (p.stderr, sorted(outputs(tmp_path / f"legal-{executor}")))
    assert seen["ray"] == seen["local"] == (
        "legalize: warning: --dim M=1: the model has no dynamic dim 'M' (its dims are: N): not used here\n",
        ["new/a.legal.onnx", "new/b.legal.onnx"])


def test_a_dying_ray_worker_stops_only_its_model(cluster, tmp_path, monkeypatch, capfd):
    """A task whose worker process dies (a segfault, the OOM killer) is one error line
    and exit 2, and so is a task that fails; the other models still run and are written."""
    d = tmp_path / "d"
    d.mkdir()
    shutil.copy(MODELS / "mlp_bias.onnx", d / "good.onnx")
    shutil.copy(MODELS / "tflite" / "broadcast_add.tflite", d / "net.tflite")
    shutil.copy(MODELS / "mlp_bias.onnx", d / "odd.onnx")
    real = ray_batch._task

    def task(model, settings, cwd):  # shipped to the worker by value (a closure)
        if model.name == "good.onnx":
            os.kill(os.getpid(), signal.SIGKILL)
        if model.name == "odd.onnx":
            raise RuntimeError("no legalizer on this node")
        return real(model, settings, cwd)

    monkeypatch.setattr(ray_batch, "_task", task)
    settings = batch.Settings(RunOptions(check=False), quiet=True)
    outcomes = ray_batch.run_all([d / "good.onnx", d / "net.tflite", d / "odd.onnx"], settings, jobs=None)
    assert [o.exit_code for o in outcomes] == [2, 0, 2]
    out, err = capfd.readouterr()
    assert err.splitlines() == [
        f"legalize: error: {d / 'good.onnx'}: the Ray worker legalizing it died (WorkerCrashedError)",
        f"legalize: error: {d / 'odd.onnx'}: the Ray task legalizing it failed: RuntimeError: no legalizer on"
        " this node"]
    assert out.splitlines() == [f"{d / 'net.tflite'}: legalized for 'tosa' -> {d / 'net.legal.tflite'}"
                                " (not checked: --no-check)"]
    assert sorted(p.name for p in d.iterdir()) == ["good.onnx", "net.legal.tflite", "net.tflite", "odd.onnx"]
    assert outcomes[0].report_entry()["worker"] == {"executor": "ray", "node_id": None, "pid": None}
    assert outcomes[1].worker["node_id"] == cluster["node_id"]


DATA = "good.legal.onnx.0123456789abcdef.data"  # external data beside the output: a new name each write


@pytest.mark.parametrize("name", ["../escape.onnx", "other.legal.onnx", "good.legal.onnx.data", DATA + ".tmp"])
def test_a_file_the_run_does_not_plan_is_refused(tmp_path, name):
    """The command writes a task's file only under a name it planned for that model,
    at the path it computed: anything else fails the model, with nothing written."""
    d = tmp_path / "d"
    d.mkdir()
    shutil.copy(MODELS / "mlp_bias.onnx", d / "good.onnx")
    settings = batch.Settings(RunOptions(check=False), quiet=True)
    done = batch.Outcome(str(d / "good.onnx"), 0, stdout="legalized\n", worker={"executor": "ray"})
    outcome = ray_batch._deliver(d / "good.onnx", done, {"good.legal.onnx": b"model", name: b"x"}, settings)
    assert outcome.exit_code == 2 and outcome.stdout == ""
    assert outcome.stderr == (f"legalize: error: {d / 'good.onnx'}: the Ray task returned a file this run does"
                              f" not write ('{name}'); nothing written\n")
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["d", "good.onnx"]
    ok = ray_batch._deliver(d / "good.onnx", done, {"good.legal.onnx": b"model", DATA: b"w"}, settings)
    assert ok is done and (d / "good.legal.onnx").read_bytes() == b"model"
    assert (d / DATA).read_bytes() == b"w"


def test_cuda_needs_a_gpu_in_the_cluster(cluster, tmp_path, legalize):
    shutil.copy(MODELS / "mlp_bias.onnx", tmp_path / "m.onnx")
    p = legalize(tmp_path / "m.onnx", "--executor", "ray", "--provider", "cuda", **_ray(cluster["address"]))
    assert_clean(p)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.splitlines() == ["legalize: error: --provider cuda with --executor ray: the Ray cluster has no"
                                     " GPU for the tasks"]
    assert not (tmp_path / "m.legal.onnx").exists()


@pytest.mark.needs("ray")
def test_an_unreachable_cluster_is_one_line(tmp_path, legalize):
    shutil.copy(MODELS / "mlp_bias.onnx", tmp_path / "m.onnx")
    p = legalize(tmp_path / "m.onnx", "--executor", "ray", **_ray("127.0.0.1:9", timeout=120))
    assert_clean(p)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.splitlines() == ["legalize: error: --executor ray: cannot reach the Ray cluster at"
                                     " RAY_ADDRESS=127.0.0.1:9: Connection refused"]


def test_without_the_extra_ray_is_one_line(tmp_path, legalize):
    """Ray not importable (a module that raises ImportError shadows it): one line naming
    the extra, exit 2, nothing run."""
    shadow = tmp_path / "shadow"
    (shadow / "ray").mkdir(parents=True)
    (shadow / "ray" / "__init__.py").write_text("raise ImportError('No module named ray (simulated)')\n")
    shutil.copy(MODELS / "mlp_bias.onnx", tmp_path / "m.onnx")
    p = legalize(tmp_path, "--executor", "ray", **_ray(PYTHONPATH=f"{shadow}{os.pathsep}{ROOT}"))
    assert_clean(p)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.splitlines() == ["legalize: error: --executor ray needs Ray: install the ray extra"
                                     " (pip install 'legalizer[ray]')"]
    assert not (tmp_path / "m.legal.onnx").exists()


def test_a_bad_file_stops_only_itself_on_ray_with_outputs_there(cluster, tmp_path, legalize):
    """Issue 32, item 1, on Ray: with every output there already and --force, a text
    file named .onnx is its own line and counts; the other models run."""
    d = tmp_path / "models"
    d.mkdir()
    shutil.copy(MODELS / "mlp_bias.onnx", d / "good.onnx")
    (d / "junk.onnx").write_text("not a model\n")
    for attempt in ([], ["--force"]):  # the first writes good.legal.onnx; the second replaces it
        p = legalize(d, "--executor", "ray", "-q", "--no-check", *attempt, **_ray(cluster["address"]))
        assert_clean(p)
        assert p.returncode == 2, p.stderr
        assert p.stdout.splitlines()[-1] == ("legalize: 2 models: 1 legalized, 0 with violations or a mismatch"
                                             " (exit 1), 1 not processed (exit 2)")
        assert p.stderr.splitlines() == [f"legalize: error: {d / 'junk.onnx'}: is a text file, not an ONNX model"]
        assert (d / "good.legal.onnx").is_file()
