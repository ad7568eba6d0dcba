"""``legalize view``: Model Explorer started on a run, original and legalized side by
side with the overlays; the server's own API answers for the graphs and the node data
the page loads. Without the viewer extra, one line and exit 2."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from helpers import cli_command
from test_overlay import bias_model, _save

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, data: dict = None):
    req = urllib.request.Request(url, data=json.dumps(data).encode() if data is not None else None,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return r.read().decode()


class Viewer:
    """``legalize view ... --no-browser`` in a process of its own, until stopped."""

    def __init__(self, *args):
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.proc = subprocess.Popen(cli_command("view", *args, "--no-browser"),
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                     start_new_session=True)
        self.url, self.lines = None, []
        end = time.monotonic() + 240
        while self.url is None and time.monotonic() < end:
            line = self.proc.stdout.readline()
            if not line:
                raise AssertionError("legalize view stopped:\n" + "".join(self.lines))
            self.lines.append(line)
            if line.startswith("legalize view: http"):
                self.url = line.split(": ", 1)[1].strip()
        base = self.url.split("/?", 1)[0]
        while time.monotonic() < end:
            try:
                if _get(f"{base}/check_health") == "model_explorer_ok":
                    break
            except OSError:
                time.sleep(0.5)
        self.base = base

    def stop(self):
        os.killpg(self.proc.pid, signal.SIGINT)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@pytest.mark.needs("viewer")
def test_view_serves_both_models_with_their_overlays(tmp_path):
    model = _save(bias_model(), tmp_path / "bias.onnx")
    v = Viewer(model, "--port", _free_port(), "--localize")
    try:
        data = json.loads(parse_qs(urlparse(v.url).query)["data"][0])
        models = [Path(m["url"]) for m in data["models"]]
        assert models[0] == model.resolve() and models[1].name == "bias.legal.onnx"
        panes = data["uiState"]["paneStates"]
        assert [(p["selectedCollectionLabel"], p["selectedGraphId"], p["widthFraction"]) for p in panes] == [
            ("bias.onnx", "g", 0.5), ("bias.legal.onnx", "g (2)", 0.5)]  # as the page renames the second
        assert sorted(zip(data["nodeDataTargets"], [Path(p).name for p in data["nodeData"]])) == [
            ("bias.legal.onnx", "bias.legal.abs-error.json"), ("bias.legal.onnx", "bias.legal.rel-error.json"),
            ("bias.legal.onnx", "bias.legal.verdict.json"), ("bias.onnx", "bias.abs-error.json"),
            ("bias.onnx", "bias.rel-error.json"), ("bias.onnx", "bias.verdict.json")]
        for target, path in zip(data["nodeDataTargets"], data["nodeData"]):
            # what the page reads: the overlay through the server, its ids in the graph the server converts
            overlay = json.loads(json.loads(_get(f"{v.base}/api/v1/read_text_file?path={path}"))["content"])
            m = next(x for x in models if x.name == target)
            graphs = json.loads(_get(f"{v.base}/apipost/v1/send_command", {
                "extensionId": "onnx_adapter", "cmdId": "convert", "modelPath": str(m), "settings": {},
                "deleteAfterConversion": False}))
            listed = graphs.get("graphs") or [g for c in graphs.get("graphCollections", []) for g in c["graphs"]]
            drawn = {g["id"]: {n["id"] for n in g["nodes"]} for g in listed}
            for gid, g in overlay.items():
                # the page shows the second model's graph 'g' as 'g (2)', and so the overlay names it
                gid = "g" if target == "bias.legal.onnx" and gid == "g (2)" else gid
                assert g["results"] and set(g["results"]) <= drawn[gid]
        verdict = next(p for p in data["nodeData"] if p.endswith("bias.legal.verdict.json"))
        results = json.loads(Path(verdict).read_text())["g (2)"]["results"]
        assert results["b_r3"]["value"] == "inserted: reshape"
    finally:
        v.stop()
    assert not models[1].exists()  # the temporary folder went with the server


@pytest.mark.needs("viewer")
def test_view_of_a_report(tmp_path, legalize_in_process):
    model = _save(bias_model(), tmp_path / "bias.onnx")
    report = tmp_path / "r.json"
    assert legalize_in_process(model, "--report", report)[0] == 0
    v = Viewer(model, "--report", report, "--port", _free_port())
    try:
        data = json.loads(parse_qs(urlparse(v.url).query)["data"][0])
        assert [Path(m["url"]) for m in data["models"]] == [model.resolve(), (tmp_path / "bias.legal.onnx").resolve()]
        assert len(data["nodeData"]) == 2  # the verdicts: no localization ran
    finally:
        v.stop()


def test_view_without_the_extra_is_one_line(tmp_path, monkeypatch, legalize_in_process):
    import legalizer.view as view

    monkeypatch.setattr(view, "available", lambda: False)
    model = _save(bias_model(), tmp_path / "bias.onnx")
    code, out, err = legalize_in_process("view", model)
    assert code == 2
    assert err == "legalize: error: legalize view needs the viewer extra: pip install 'legalizer[viewer]'\n"


def test_a_model_file_named_view_is_dot_slash_view(tmp_path, monkeypatch, legalize_in_process):
    monkeypatch.chdir(tmp_path)
    _save(bias_model(), tmp_path / "view")
    code, out, err = legalize_in_process("./view", "view.legal.onnx", "-q")
    assert code == 0, err
    assert (tmp_path / "view.legal.onnx").exists()


@pytest.mark.needs("viewer")
def test_view_bad_input(tmp_path, legalize_in_process):
    code, out, err = legalize_in_process("view", tmp_path / "missing.onnx")
    assert code == 2 and err.endswith("missing.onnx: no such file\n")
    model = _save(bias_model(), tmp_path / "bias.onnx")
    (tmp_path / "r.json").write_text("[1, 2]")
    code, out, err = legalize_in_process("view", model, "--report", tmp_path / "r.json")
    assert code == 2 and "not a legalize report of one model" in err
