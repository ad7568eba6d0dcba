"""The HTML report in a real browser: headless Chromium loads the page with no console
error, and every region picture renders (each SVG, drawn on a canvas in the page, has
ink, and the "after" pictures show the inserted nodes' highlight colour).

Chromium is driven through a minimal DevTools-protocol client over
``--remote-debugging-pipe`` (file descriptors 3 and 4: no port is opened). Skipped,
with the reason, where no Chromium is installed (``apt-get install chromium``; .ci/run
installs it when it runs as root)."""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import subprocess
import time
from pathlib import Path

import pytest

from legalizer.html_report import STYLE
from helpers import cli_process
from needs import browser

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"

BROWSER = browser()
pytestmark = pytest.mark.needs("chromium")


class Chromium:
    """Headless Chromium and one page, over the DevTools pipe."""

    def __init__(self, profile: Path):
        to_browser_r, self._w = os.pipe()
        self._r, from_browser_w = os.pipe()

        def fds():  # the browser reads commands on fd 3 and writes replies on fd 4
            a = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD, 100)
            b = fcntl.fcntl(from_browser_w, fcntl.F_DUPFD, 100)
            os.dup2(a, 3)
            os.dup2(b, 4)

        args = [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--mute-audio",
                "--remote-debugging-pipe", f"--user-data-dir={profile}", "--window-size=1280,900", "about:blank"]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, pass_fds=(3, 4), preexec_fn=fds)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._id = 0
        self._buf = b""
        self.events = []
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]

    def _send(self, msg: dict) -> None:
        os.write(self._w, json.dumps(msg).encode() + b"\0")

    def _recv(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._r], [], [], left)[0]:
                raise TimeoutError("chromium did not answer")
            chunk = os.read(self._r, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the pipe: " + self.proc.stderr.read().decode(errors="replace")[-2000:])
            self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method: str, session: bool = False, timeout: float = 30, **params) -> dict:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params}
        if session:
            msg["sessionId"] = self.session
        self._send(msg)
        deadline = time.monotonic() + timeout
        while True:
            reply = self._recv(deadline)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str, timeout: float = 30) -> dict:
        deadline = time.monotonic() + timeout
        for e in self.events:
            if e.get("method") == method:
                return e
        while True:
            e = self._recv(deadline)
            self.events.append(e)
            if e.get("method") == method:
                return e

    def evaluate(self, expression: str):
        r = self.call("Runtime.evaluate", session=True, expression=expression, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in r:
            raise AssertionError(r["exceptionDetails"])
        return r["result"].get("value")

    def close(self) -> None:
        try:
            self._send({"id": 0, "method": "Browser.close"})
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        finally:
            os.close(self._w)
            os.close(self._r)
            self.proc.stderr.close()


@pytest.fixture
def browser(tmp_path):
    b = Chromium(tmp_path / "profile")
    try:
        yield b
    finally:
        b.close()


def _errors(events) -> list:
    """Console errors and warnings, uncaught exceptions, and browser log errors."""
    out = []
    for e in events:
        m, p = e.get("method"), e.get("params", {})
        if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "warning", "assert"):
            out.append(p)
        elif m == "Runtime.exceptionThrown":
            out.append(p)
        elif m == "Log.entryAdded" and p.get("entry", {}).get("level") in ("error", "warning"):
            out.append(p["entry"])
    return out


# Each region SVG drawn on a canvas (as an image from its own markup): the share of
# pixels that are not white, and of those in the fills of inserted ops and constants.
RENDER_JS = """
(async () => {
  for (const d of document.querySelectorAll('details')) d.open = true;
  await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
  const hex = h => [1, 3, 5].map(i => parseInt(h.slice(i, i + 2), 16));
  const hi = hex(HIGHLIGHT), hc = hex(CONSTLIGHT);
  const near = (px, i, c) => Math.abs(px[i] - c[0]) < 4 && Math.abs(px[i + 1] - c[1]) < 4 && Math.abs(px[i + 2] - c[2]) < 4;
  const out = [];
  for (const svg of document.querySelectorAll('svg.region-svg')) {
    const box = svg.getBoundingClientRect();
    const texts = [...svg.querySelectorAll('text')];
    const img = new Image();
    img.src = 'data:image/svg+xml;charset=utf-8,' + encodeURIComponent(new XMLSerializer().serializeToString(svg));
    await img.decode();
    const c = document.createElement('canvas');
    c.width = img.naturalWidth; c.height = img.naturalHeight;
    const g = c.getContext('2d');
    g.fillStyle = '#fff'; g.fillRect(0, 0, c.width, c.height); g.drawImage(img, 0, 0);
    const px = g.getImageData(0, 0, c.width, c.height).data;
    let ink = 0, high = 0, highConst = 0;
    for (let i = 0; i < px.length; i += 4) {
      if (px[i] < 245 || px[i + 1] < 245 || px[i + 2] < 245) ink++;
      if (near(px, i, hi)) high++;
      if (near(px, i, hc)) highConst++;
    }
    out.push({after: !!svg.closest('figure.after'), w: box.width, h: box.height, pixels: px.length / 4,
              ink, high, highConst, texts: texts.length,
              blankText: texts.filter(t => t.textContent && t.getBBox().width === 0).length});
  }
  return {svgs: out, regions: document.querySelectorAll('details.region').length,
          scripts: document.scripts.length, title: document.title,
          overflowX: document.documentElement.scrollWidth > window.innerWidth + 1};
})()
""".replace("HIGHLIGHT", json.dumps(STYLE["inserted"][0])).replace("CONSTLIGHT", json.dumps(STYLE["inserted-const"][0]))


def _load(browser: Chromium, page: Path) -> None:
    for domain in ("Runtime", "Log", "Page"):
        browser.call(f"{domain}.enable", session=True)
    browser.call("Page.navigate", session=True, url=page.resolve().as_uri())
    browser.wait_for("Page.loadEventFired")


def _legalize(*args) -> None:
    p = cli_process(*args)
    assert p.returncode == 0, p.stderr


@pytest.mark.parametrize("target", ["tosa", "xla"])
def test_transformer_report_renders(browser, tmp_path, target):
    page = tmp_path / "report.html"
    _legalize(MODELS / "transformer_block.dynamo.onnx", "-o", tmp_path / "x.onnx", "--target", target,
              "--html", page, "--no-check")
    _load(browser, page)
    got = browser.evaluate(RENDER_JS)
    assert not _errors(browser.events), _errors(browser.events)
    assert got["scripts"] == 0 and got["title"].startswith("legalize report")
    assert not got["overflowX"], "the page fits the window; wide pictures scroll inside their figure"
    assert got["regions"] == 9 and len(got["svgs"]) == 18
    for s in got["svgs"]:
        assert s["w"] > 50 and s["h"] > 50 and s["pixels"] > 0
        assert s["ink"] > 0.02 * s["pixels"], s  # nodes, edges and labels drawn
        assert s["texts"] >= 5 and s["blankText"] == 0, s  # every label laid out with a font
        if s["after"]:  # every rewrite inserts something, highlighted
            assert s["high"] + s["highConst"] > 200, s
        else:
            assert s["high"] == s["highConst"] == 0, s  # nothing inserted before the passes
        if s["after"] and target == "xla":  # every xla rewrite inserts an op (Expand)
            assert s["high"] > 200, s
    if target == "tosa":  # one Unsqueeze, in one picture
        assert sum(1 for s in got["svgs"] if s["after"] and s["high"] > 200) == 1
    shot = browser.call("Page.captureScreenshot", session=True, format="png", captureBeyondViewport=True)
    png = base64.b64decode(shot["data"])
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 20_000
    (tmp_path / f"report_{target}.png").write_bytes(png)


def test_report_with_violations_renders(browser, tmp_path, legalize):
    page = tmp_path / "bad.html"
    p = legalize(MODELS / "incompatible_add.onnx", "--verify-only", "--html", page)
    assert p.returncode == 1
    _load(browser, page)
    got = browser.evaluate("({rows: document.querySelectorAll('#violations tbody tr').length,"
                           " verdict: document.querySelector('.verdict').textContent,"
                           " color: getComputedStyle(document.querySelector('.verdict')).backgroundColor})")
    assert not _errors(browser.events), _errors(browser.events)
    assert got["rows"] == 1 and "1 violation" in got["verdict"]
    assert got["color"] == "rgb(254, 226, 226)"
