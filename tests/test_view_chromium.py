"""``legalize view`` in a real browser: headless Chromium opens the page the command
prints, both models are drawn side by side, and the overlay's text for a selected node
is read from the page (the node info panel, where Model Explorer shows a node's data).
Set LEGALIZE_SCREENSHOT=PATH to keep the screenshot (docs/images/legalize-view.png is one)."""

from __future__ import annotations

import base64
import json
import os
import time
from pathlib import Path
from urllib.parse import parse_qs, quote, urlparse

import pytest

from test_html_chromium import Chromium
from test_overlay import _save, bias_model
from test_view import Viewer, _free_port

pytestmark = pytest.mark.needs("chromium", "viewer")


def test_the_page_shows_both_models_and_a_nodes_overlay(tmp_path):
    model = _save(bias_model(), tmp_path / "bias.onnx")
    v = Viewer(model, "--port", _free_port(), "--localize")
    b = Chromium(tmp_path / "profile")
    try:
        data = json.loads(parse_qs(urlparse(v.url).query)["data"][0])
        data["uiState"]["paneStates"][0]["selectedNodeId"] = "add_bias"  # rewritten
        data["uiState"]["paneStates"][1]["selectedNodeId"] = "b_r3"  # the inserted Unsqueeze
        b.call("Page.enable", session=True)
        b.call("Emulation.setDeviceMetricsOverride", session=True, width=1600, height=900, deviceScaleFactor=1,
               mobile=False)
        lines = []
        # Until both info panels show their lines. Model Explorer now and then leaves the
        # second pane's node unselected (its graph info shown instead, the values only in
        # its node data table): the page is loaded again then, three times at most.
        for _ in range(3):
            b.call("Page.navigate", session=True, url=f"{v.base}/?token={v.token}&data={quote(json.dumps(data))}")
            end = time.monotonic() + 30
            while not ("inserted: reshape" in lines and "rewritten: reshape inserted" in lines) and \
                    time.monotonic() < end:
                time.sleep(1)
                lines = [ln.strip() for ln in (b.evaluate("document.body.innerText") or "").splitlines() if ln.strip()]
            if "inserted: reshape" in lines and "rewritten: reshape inserted" in lines:
                break
        # the two panes' titles, and the selected node's overlay values in its info panel
        assert "bias.onnx | g" in lines and "bias.legal.onnx | g (2)" in lines
        k = lines.index("inserted: reshape")
        assert lines[k - 1] == "legalize: verdict" and "b_r3" in lines[:k]
        k = lines.index("rewritten: reshape inserted")
        assert lines[k - 1] == "legalize: verdict" and "add_bias" in lines[:k]
        time.sleep(2)  # let the graph finish drawing
        png = base64.b64decode(b.call("Page.captureScreenshot", session=True, format="png")["data"])
        assert png.startswith(b"\x89PNG") and len(png) > 50_000
        if os.environ.get("LEGALIZE_SCREENSHOT"):
            Path(os.environ["LEGALIZE_SCREENSHOT"]).write_bytes(png)
    finally:
        b.close()
        v.stop()
