"""Several models in one command (docs/several-models.md): a folder or a list of
files, -j N processes, one result line per model in the order given, each model's own
output, -o DIR, --report/--json as one JSON list, --force, an aggregated exit status,
and a bad file or a dying worker that stops nobody else."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
from pathlib import Path

import pytest

from legalizer import batch
from legalizer.pipeline import RunOptions
from helpers import assert_clean

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"


@pytest.fixture
def folder(tmp_path):
    """good.onnx (legal after legalizing), net.tflite, violating.onnx, bad.onnx (text)."""
    d = tmp_path / "models"
    d.mkdir()
    shutil.copy(MODELS / "mlp_bias.onnx", d / "good.onnx")
    shutil.copy(MODELS / "tflite" / "broadcast_add.tflite", d / "net.tflite")
    shutil.copy(MODELS / "incompatible_add.onnx", d / "violating.onnx")
    (d / "bad.onnx").write_text("not a model\n")
    return d


def _files(d: Path):
    return sorted(str(p.relative_to(d)) for p in d.rglob("*"))


def test_folder_one_line_per_model_in_order_and_worst_exit(folder, legalize):
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    p = legalize(folder, "-q")
    assert_clean(p)
    assert p.returncode == 2  # bad.onnx; the others still ran
    out = p.stdout.splitlines()
    assert out[-1] == ("legalize: 4 models: 2 legalized, 1 with violations or a mismatch (exit 1), "
                       "1 not processed (exit 2)")
    finals = [ln for ln in out if ln.startswith(str(folder))]
    assert [ln.split(":")[0] for ln in finals] == [str(folder / n) for n in ("good.onnx", "net.tflite",
                                                                             "violating.onnx")]
    assert finals[0].endswith(f"-> {folder / 'good.legal.onnx'}, outputs match on CPUExecutionProvider")
    assert "legalized for 'tosa'" in finals[1]
    assert finals[2].endswith("1 violation under 'mlir'; not legalized, nothing written")
    assert p.stderr.splitlines() == [f"legalize: error: {folder / 'bad.onnx'}: is a text file, not an ONNX model"]
    assert _files(folder) == ["bad.onnx", "good.legal.onnx", "good.onnx", "net.legal.tflite", "net.tflite",
                              "violating.onnx"]
    assert all((folder / n).read_bytes() == b for n, b in before.items())


def test_jobs_give_the_same_output(folder, legalize):
    (folder / "bad.onnx").unlink()
    p1 = legalize(folder, "-j", "1", "--no-check")
    for f in folder.glob("*.legal.*"):
        f.unlink()
    p2 = legalize(folder, "-j", "3", "--no-check")
    assert_clean(p1), assert_clean(p2)
    assert p1.returncode == p2.returncode == 1
    assert p1.stdout == p2.stdout and p1.stderr == p2.stderr


def test_all_pass_is_exit_0_and_a_violation_is_exit_1(folder, legalize):
    (folder / "bad.onnx").unlink()
    p = legalize(folder / "good.onnx", folder / "net.tflite", "-j", "2", "-q")
    assert_clean(p)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.splitlines()[-1].startswith("legalize: 2 models: 2 legalized, 0 ")
    p = legalize(folder / "good.onnx", folder / "violating.onnx", folder / "net.tflite", "-q", "--force")
    assert p.returncode == 1


def test_two_paths_alone_are_model_and_output(folder, tmp_path, legalize):
    p = legalize(folder / "good.onnx", tmp_path / "out.onnx", "-q")
    assert p.returncode == 0 and (tmp_path / "out.onnx").exists()
    assert "models:" not in p.stdout


def test_output_folder(folder, tmp_path, legalize):
    out = tmp_path / "legal"
    out.mkdir()
    p = legalize(folder / "good.onnx", folder / "net.tflite", "-o", out, "-q")
    assert_clean(p)
    assert p.returncode == 0, p.stderr
    assert _files(out) == ["good.legal.onnx", "net.legal.tflite"]
    assert not list(folder.glob("*.legal.*"))


@pytest.mark.parametrize("spelled", ["legal/", "legal", "new/legal/"])
def test_output_folder_is_made_as_mkdir_p_would(folder, tmp_path, spelled, legalize):
    """``-o legal/`` (the README's and --help's command) makes the folder, parents too."""
    p = legalize(folder / "good.onnx", folder / "net.tflite", "-o", spelled, "-q", cwd=tmp_path)
    assert_clean(p)
    assert p.returncode == 0, p.stderr
    assert _files(tmp_path / spelled) == ["good.legal.onnx", "net.legal.tflite"]
    assert not list(folder.glob("*.legal.*"))


@pytest.mark.parametrize("what", ["file", "under a file"])
def test_output_must_be_a_folder(folder, tmp_path, what, legalize):
    taken = tmp_path / "out.onnx"
    taken.write_bytes(b"x")
    out = taken if what == "file" else taken / "sub"
    p = legalize(folder, "-o", out)
    assert_clean(p)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.splitlines() == [
        f"legalize: error: {out}: exists and is not a folder; with several models, -o names the folder to write"
        " them into" if what == "file" else
        f"legalize: error: {out}: cannot make this folder (-o): {taken} is not a folder"]
    assert not list(folder.glob("*.legal.*")) and taken.read_bytes() == b"x"


def test_a_folder_is_not_made_when_the_batch_is_refused(folder, tmp_path, legalize):
    """A usage error found before the work (here two models writing one file) leaves
    no folder behind."""
    (tmp_path / "b").mkdir()
    shutil.copy(folder / "good.onnx", tmp_path / "b" / "good.onnx")
    out = tmp_path / "new" / "legal"
    p = legalize(folder / "good.onnx", tmp_path / "b" / "good.onnx", "-o", f"{out}/")
    assert_clean(p)
    assert p.returncode == 2 and "would both be written to" in p.stderr
    assert not (tmp_path / "new").exists()


def test_two_models_writing_one_file_are_refused_before_any_work(tmp_path, legalize):
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
        shutil.copy(MODELS / "mlp_bias.onnx", tmp_path / sub / "m.onnx")
    out = tmp_path / "out"
    out.mkdir()
    p = legalize(tmp_path / "a", tmp_path / "b", "-o", out)
    assert_clean(p)
    assert p.returncode == 2 and "would both be written to" in p.stderr and len(p.stderr.splitlines()) == 1
    assert list(out.iterdir()) == []


def test_force(folder, legalize):
    (folder / "bad.onnx").unlink()
    (folder / "violating.onnx").unlink()
    (folder / "good.legal.onnx").write_bytes(b"old")
    p = legalize(folder, "-q")
    assert_clean(p)
    assert p.returncode == 2  # good.onnx: its output exists; net.tflite still done
    assert p.stderr.splitlines() == [f"legalize: error: {folder / 'good.legal.onnx'}: already exists "
                                     "(use --force to replace it)"]
    assert (folder / "good.legal.onnx").read_bytes() == b"old" and (folder / "net.legal.tflite").exists()
    p = legalize(folder, "-q", "--force")
    assert p.returncode == 0 and (folder / "good.legal.onnx").read_bytes() != b"old"


def test_report_and_json_are_one_list(folder, tmp_path, legalize):
    rep = tmp_path / "all.json"
    p = legalize(folder, "--verify-only", "--report", rep, "--json")
    assert_clean(p)
    assert p.returncode == 2
    listed = json.loads(p.stdout)  # stdout is the JSON only
    assert [e["input"] for e in listed] == [str(folder / n) for n in ("bad.onnx", "good.onnx", "net.tflite",
                                                                      "violating.onnx")]
    assert [e["exit_code"] for e in listed] == [2, 0, 0, 1]
    bad = listed[0]
    assert set(bad) == {"schema", "tool_version", "input", "exit_code", "error", "worker"}
    assert bad["error"] == f"{folder / 'bad.onnx'}: is a text file, not an ONNX model"
    # where each ran: a process of its own on this host
    pids = [e["worker"]["pid"] for e in listed]
    assert all(e["worker"] == {"executor": "local", "node_id": socket.gethostname(), "pid": pid}
               for e, pid in zip(listed, pids))
    assert len(set(pids)) == 4 and os.getpid() not in pids
    assert listed[3]["violations"][0]["code"] and listed[1]["schema"] == 1
    on_disk = json.loads(rep.read_text())
    assert [e["input"] for e in on_disk] == [e["input"] for e in listed]
    assert "legalize: 4 models:" in p.stderr  # the human lines went to stderr


def test_folder_skips_outputs_and_hidden_files(tmp_path):
    d = tmp_path / "d"
    (d / "sub").mkdir(parents=True)
    (d / ".hidden").mkdir()
    for name in ("a.onnx", "sub/b.tflite", "a.legal.onnx", ".x.onnx", ".hidden/c.onnx", "notes.txt",
                 "m.mlir", "sub/m.mlirbc", "a.legal.tosa.mlir"):
        (d / name).write_bytes(b"x")
    assert batch.find_models(d, verify_only=False) == [d / "a.onnx", d / "sub" / "b.tflite"]
    assert batch.find_models(d, verify_only=True) == [d / "a.onnx", d / "m.mlir", d / "sub" / "b.tflite",
                                                      d / "sub" / "m.mlirbc"]
    assert batch.expand([d / "a.onnx", d, d / "sub"], False) == [d / "a.onnx", d / "sub" / "b.tflite"]


def test_a_folder_without_models_is_a_usage_error(tmp_path, legalize):
    (tmp_path / "notes.txt").write_text("hi\n")
    p = legalize(tmp_path)
    assert_clean(p)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.splitlines() == [f"legalize: error: {tmp_path}: is a directory with no model files in it "
                                     "(*.onnx, *.tflite)"]


def test_aggregate():
    assert batch.aggregate([]) == 0
    assert batch.aggregate([0, 0]) == 0
    assert batch.aggregate([0, 1, 0]) == 1
    assert batch.aggregate([1, 2, 0]) == 2
    assert batch.aggregate([0, 130]) == 2  # an interrupted or crashed model counts as not processed


def _dying_worker(model, settings, conn):
    """The worker, but good.onnx's dies (named to the worker process by reference, as
    its target is: a worker is a fresh process, and sees no patch of this one)."""
    if model.name == "good.onnx":
        os.kill(os.getpid(), signal.SIGKILL)
    batch._worker(model, settings, conn)


def test_a_dying_worker_stops_only_its_model(folder, monkeypatch, capsys):
    """A model whose process dies (a segfault in a runtime, the OOM killer) is one error
    line and exit 2; the models after it still run."""
    monkeypatch.setattr(batch, "_worker", _dying_worker)
    settings = batch.Settings(RunOptions(check=False), quiet=True)
    outcomes = batch.run_all([folder / "good.onnx", folder / "net.tflite"], settings, jobs=2)
    assert [o.exit_code for o in outcomes] == [2, 0]
    err = capsys.readouterr().err.splitlines()
    assert err == [f"legalize: error: {folder / 'good.onnx'}: the process legalizing it died (signal SIGKILL);"
                   " out of memory?"]
    assert (folder / "net.legal.tflite").exists()
    assert outcomes[0].report_entry()["worker"]["executor"] == "local"
    assert outcomes[0].worker["pid"] != outcomes[1].worker["pid"]


def test_html_folder_gets_one_page_per_model(folder, tmp_path, legalize):
    pages = tmp_path / "pages"
    pages.mkdir()
    p = legalize(folder / "good.onnx", folder / "violating.onnx", "-j", "2", "--html", pages, "-q")
    assert_clean(p)
    assert p.returncode == 1  # the violating model
    assert _files(pages) == ["good.legal.html", "violating.legal.html"]
    good = (pages / "good.legal.html").read_text()
    assert "good.onnx" in good and "<svg" in good and "outputs match" in good
    assert "violat" in (pages / "violating.legal.html").read_text().lower()


def test_html_with_several_models_must_be_a_folder_and_pages_must_not_collide(folder, tmp_path, legalize):
    p = legalize(folder, "--html", tmp_path / "r.html")
    assert_clean(p)
    assert p.returncode == 2
    assert p.stderr.splitlines() == [f"legalize: error: {tmp_path / 'r.html'}: with several models, --html must "
                                     "name an existing folder (one page per model)"]
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
        shutil.copy(MODELS / "mlp_bias.onnx", tmp_path / sub / "m.onnx")
    p = legalize(tmp_path / "a", tmp_path / "b", "--verify-only", "--html", tmp_path)
    assert_clean(p)
    assert p.returncode == 2 and p.stderr.splitlines() == [
        "legalize: error: --html: two models would write the same page (m.legal.html): run them separately"]
    assert not list(tmp_path.glob("*.html"))


def test_file_links_out_of_the_folder_are_skipped_with_a_warning(tmp_path, legalize):
    """``tenant/stolen.onnx -> ../private/secret.onnx``: the private model is not read,
    nor written into the outputs; a link that stays inside the folder is a model."""
    tenant, private = tmp_path / "tenant", tmp_path / "private"
    tenant.mkdir(), private.mkdir()
    shutil.copy(MODELS / "mlp_bias.onnx", tenant / "good.onnx")
    shutil.copy(MODELS / "mlp_bias.onnx", private / "secret.onnx")
    (tenant / "stolen.onnx").symlink_to(Path("..") / "private" / "secret.onnx")
    (tenant / "sub").mkdir()
    (tenant / "sub" / "alias.onnx").symlink_to(Path("..") / "good.onnx")  # inside: the same model, once
    p = legalize(tenant, "-j", "1", "--no-check")
    assert_clean(p)
    assert p.returncode == 0, p.stderr
    assert p.stderr.splitlines() == [
        f"legalize: warning: {tenant / 'stolen.onnx'}: links to a file outside the folder given; skipped"]
    assert p.stdout.splitlines()[-1].startswith("legalize: 1 model: 1 legalized")
    assert _files(tenant) == ["good.legal.onnx", "good.onnx", "stolen.onnx", "sub", "sub/alias.onnx"]


@pytest.mark.parametrize("extra", [[], ["-j", "2"], ["-o", "OUT"], ["-o", "OUT", "-j", "2"]])
def test_a_bad_file_stops_only_itself_when_outputs_exist_already(folder, legalize, tmp_path, extra):
    """Reading the models' external data before the work (outputs exist: one might be
    one of them) once ended the whole batch at the first unreadable file, with no
    summary; now the bad file is its own line and counts, and the others run."""
    extra = [str(tmp_path / "out") if a == "OUT" else a for a in extra]
    outdir = tmp_path / "out" if "-o" in extra else folder
    (folder / "violating.onnx").unlink()
    saved = folder / "saved"  # a TensorFlow SavedModel among them: its own line too
    saved.mkdir()
    (saved / "saved_model.pb").write_bytes(b"\x08\x01")
    for again in ([], ["--force"]):  # no output yet; then every output there, replaced
        p = legalize(folder, saved, "-q", "--no-check", *extra, *again)
        assert_clean(p)
        assert p.returncode == 2
        assert p.stdout.splitlines()[-1] == ("legalize: 4 models: 2 legalized, 0 with violations or a mismatch"
                                             " (exit 1), 2 not processed (exit 2)")
        errors = p.stderr.splitlines()
        assert errors[0] == f"legalize: error: {folder / 'bad.onnx'}: is a text file, not an ONNX model"
        assert errors[1].startswith(f"legalize: error: {saved}: is a TensorFlow SavedModel") and len(errors) == 2
        assert [ln.split(":")[0] for ln in p.stdout.splitlines()[:-1]] == [str(folder / "good.onnx"),
                                                                          str(folder / "net.tflite")]
        assert (outdir / "good.legal.onnx").exists() and (outdir / "net.legal.tflite").exists()
