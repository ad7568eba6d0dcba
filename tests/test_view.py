"""``legalize view``: Model Explorer's page on a run, original and legalized side by
side with the overlays; the view's server answers for the graphs and the node data the
page loads, to requests that carry the run's token and name the host it bound, and for
nothing else (no file read by path, no upload, no adapter run). Without the viewer
extra, one line and exit 2."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.parse
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


def _raw(base: str, method: str, path: str, host: str = None, body: bytes = None, headers: dict = None):
    """(status, body) of one request, its path sent as it is and its Host header as given
    (what a local process or a DNS-rebound page can send)."""
    u = urlparse(base)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    try:
        conn.request(method, path, body=body, headers={"Host": host or u.netloc, **(headers or {})})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


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
        self.token = parse_qs(urlparse(self.url).query)["token"][0]
        while time.monotonic() < end:
            try:
                if _get(f"{base}/check_health?token={self.token}") == "model_explorer_ok":
                    break
            except OSError:
                time.sleep(0.5)
        self.base = base

    def get(self, path: str) -> str:
        """What the page gets for ``path`` (the token as its cookie carries it)."""
        return _get(f"{self.base}{path}{'&' if '?' in path else '?'}token={self.token}")

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
        # the page gets each model's graphs and each overlay from the server by index, never by path
        assert [m["url"] for m in data["models"]] == ["graphs://bias.onnx/0", "graphs://bias.legal.onnx/1"]
        panes = data["uiState"]["paneStates"]
        assert [(p["selectedCollectionLabel"], p["selectedGraphId"], p["widthFraction"]) for p in panes] == [
            ("bias.onnx", "g", 0.5), ("bias.legal.onnx", "g (2)", 0.5)]  # as the page renames the second
        assert sorted(zip(data["nodeDataTargets"], [p.split("/")[2] for p in data["nodeData"]])) == [
            ("bias.legal.onnx", "bias.legal.abs-error.json"), ("bias.legal.onnx", "bias.legal.rel-error.json"),
            ("bias.legal.onnx", "bias.legal.verdict.json"), ("bias.onnx", "bias.abs-error.json"),
            ("bias.onnx", "bias.rel-error.json"), ("bias.onnx", "bias.verdict.json")]
        assert [p.split("/")[3] for p in data["nodeData"]] == [str(i) for i in range(6)]
        drawn = {}
        for i, name in enumerate(["bias.onnx", "bias.legal.onnx"]):
            graphs = json.loads(v.get(f"/api/v1/load_graphs_json?graph_index={i}"))
            drawn[name] = {g["id"]: {n["id"] for n in g["nodes"]} for g in graphs["graphs"]}
        assert "b_r3" in drawn["bias.legal.onnx"]["g"] and "b_r3" not in drawn["bias.onnx"]["g"]
        overlays = {}
        for i, (target, source) in enumerate(zip(data["nodeDataTargets"], data["nodeData"])):
            overlay = json.loads(json.loads(v.get(f"/api/v1/load_node_data?node_data_index={i}"))["content"])
            overlays[source.split("/")[2]] = overlay
            for gid, g in overlay.items():
                # the page shows the second model's graph 'g' as 'g (2)', and so the overlay names it
                gid = "g" if target == "bias.legal.onnx" and gid == "g (2)" else gid
                assert g["results"] and set(g["results"]) <= drawn[target][gid]
        assert overlays["bias.legal.verdict.json"]["g (2)"]["results"]["b_r3"]["value"] == "inserted: reshape"
    finally:
        v.stop()
    legal = next(Path(re.search(r" -> (\S+\.legal\.onnx)", ln)[1]) for ln in v.lines if ": legalized for " in ln)
    assert legal.name == "bias.legal.onnx" and not legal.parent.exists()  # the temporary folder went with the server


@pytest.mark.needs("viewer")
def test_view_of_a_report(tmp_path, legalize_in_process):
    model = _save(bias_model(), tmp_path / "bias.onnx")
    report = tmp_path / "r.json"
    assert legalize_in_process(model, "--report", report)[0] == 0
    v = Viewer(model, "--report", report, "--port", _free_port())
    try:
        data = json.loads(parse_qs(urlparse(v.url).query)["data"][0])
        assert [m["url"] for m in data["models"]] == ["graphs://bias.onnx/0", "graphs://bias.legal.onnx/1"]
        assert len(data["nodeData"]) == 2  # the verdicts: no localization ran
        graphs = json.loads(v.get("/api/v1/load_graphs_json?graph_index=1"))  # the report's output, as written
        assert "b_r3" in {n["id"] for n in graphs["graphs"][0]["nodes"]}
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


@pytest.mark.needs("viewer", "torch")
def test_view_serves_the_run_only(tmp_path):
    """From another process, against the real server: without the token, or naming
    another host (a page reached by DNS rebinding), 403; with them, no file is read by
    path, nothing is uploaded, and no adapter converts a hostile .pt2 (its pickle would
    create the marker)."""
    from test_pt2_safety import _hostile

    archive, marker, _ = _hostile("sample_inputs", tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text("the user's secret\n")
    model = _save(bias_model(), tmp_path / "bias.onnx")
    v = Viewer(model, "--port", _free_port())
    try:
        t = v.token
        netloc = urlparse(v.base).netloc
        assert _raw(v.base, "GET", f"/?token={t}")[0] == 200
        # no token, a wrong one, or another Host: 403, whatever the route
        for path in ("/", "/index.html", "/check_health", "/api/v1/load_graphs_json?graph_index=0",
                     f"/api/v1/read_text_file?path={secret}", f"/?token={t[:-1]}"):
            assert _raw(v.base, "GET", path) == (403, b"forbidden\n"), path
        for host in ("attacker.example", f"attacker.example:{v.base.rsplit(':', 1)[1]}", "127.0.0.2"):
            assert _raw(v.base, "GET", f"/?token={t}", host=host) == (403, b"forbidden\n"), host
        # the cookie the page gets opens the API; a wrong cookie does not
        cookie = {"Cookie": f"legalize_view_{urlparse(v.base).port}={t}"}
        assert _raw(v.base, "GET", "/api/v1/load_graphs_json?graph_index=1", headers=cookie)[0] == 200
        bad = {"Cookie": f"legalize_view_{urlparse(v.base).port}=x{t}"}
        assert _raw(v.base, "GET", "/api/v1/load_graphs_json?graph_index=1", headers=bad)[0] == 403
        # with the token: no file by path (the API's, or the page's files by traversal)
        for path in (f"/api/v1/read_text_file?path={secret}&token={t}", f"/read_file?path={secret}&token={t}",
                     f"/../../../..{secret}?token={t}", f"/%2e%2e/%2e%2e/%2e%2e{secret}?token={t}",
                     f"/api/v1/notify_user_provided_model_path?path={secret}&token={t}",
                     f"/api/v1/load_graphs_json?graph_index=2&token={t}",
                     f"/api/v1/load_graphs_json?graph_index=-1&token={t}"):
            status, body = _raw(v.base, "GET", path)
            assert status == 404 and b"secret" not in body, path
        # no upload, and no adapter run on an archive already on disk
        boundary = "b0undary"
        form = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"model.pt2\"\r\n"
                f"Content-Type: application/octet-stream\r\n\r\n").encode() + archive.read_bytes() + \
            f"\r\n--{boundary}--\r\n".encode()
        status, body = _raw(v.base, "POST", f"/apipost/v1/upload?token={t}", body=form,
                            headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
        assert status == 405 and b"path" not in body
        command = {"extensionId": "builtin_pytorch_exportedprogram", "cmdId": "convert", "modelPath": str(archive),
                   "settings": {}, "deleteAfterConversion": False}
        status, _ = _raw(v.base, "POST", f"/apipost/v1/send_command?token={t}", body=json.dumps(command).encode(),
                         headers={"Content-Type": "application/json"})
        assert status == 405
        q = urllib.parse.quote(json.dumps(command))
        assert _raw(v.base, "GET", f"/api/v1/send_command?json={q}&token={t}")[0] == 404
        assert _raw(v.base, "POST", f"/apipost/v1/update_config?token={t}", body=b"{}",
                    headers={"Content-Type": "application/json"})[0] == 405
        # the adapters offered: the JSON loader of the served graphs only
        assert [e["id"] for e in json.loads(v.get("/api/v1/get_extensions"))] == ["builtin_json"]
        assert not marker.exists()
        assert netloc.startswith("localhost:")
    finally:
        v.stop()


@pytest.mark.needs("viewer")
def test_view_host_other_than_loopback_needs_expose(tmp_path, legalize_in_process):
    model = _save(bias_model(), tmp_path / "bias.onnx")
    code, out, err = legalize_in_process("view", model, "--host", "0.0.0.0", "--no-browser")
    assert code == 2 and err == ("legalize: error: --host 0.0.0.0: not a loopback address; give --expose to serve"
                                 " the models' graphs and overlays to other machines\n")
    code, out, err = legalize_in_process("view", "--help")
    assert code == 0 and "--expose" in out and "sees both models' graphs" in " ".join(out.split())


@pytest.mark.needs("viewer", "torch")
def test_view_of_a_report_naming_a_pt2_is_one_line(tmp_path, legalize_in_process):
    from sample_models import save_pt2

    model = _save(bias_model(), tmp_path / "bias.onnx")
    save_pt2("mlp", tmp_path / "m.pt2")
    report = tmp_path / "r.json"
    assert legalize_in_process(model, "--report", report, "--no-check")[0] == 0
    data = json.loads(report.read_text())
    data["output"] = str(tmp_path / "m.pt2")
    report.write_text(json.dumps(data))
    code, out, err = legalize_in_process("view", model, "--report", report, "--no-browser")
    assert code == 2, err
    assert err == (f"legalize: error: --report {report}: its output {tmp_path / 'm.pt2'}: legalize view shows"
                   " ONNX and TFLite models, not pt2\n")
