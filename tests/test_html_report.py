"""``--html PATH`` and ``legalizer.report_html``: the page's structure read back with the
standard library's parsers (html.parser for the page, xml.etree for each inline SVG),
never a golden file. The page in a real browser: tests/test_html_chromium.py."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from typing import Dict, List

import onnx
import pytest
from onnx import TensorProto, helper

import legalizer
from legalizer import html_report
from legalizer.html_report import STYLE
from legalizer.region_pictures import PICTURE_LIMIT

from helpers import vi

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"
SVG = "{http://www.w3.org/2000/svg}"
VOID = {"meta", "br", "hr", "img", "input", "link", "wbr"}
# A node name no page may show raw: markup, an entity, quotes, a control character.
NASTY = 'n<script>alert("x")</script>&amp;\'\x01'


class Page(HTMLParser):
    """Tags by class and id, and a check that every element is closed in order."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.stack: List[str] = []
        self.errors: List[str] = []
        self.classes: Dict[str, int] = {}
        self.ids: List[str] = []
        self.tags: Dict[str, int] = {}
        self.open_details = 0
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags[tag] = self.tags.get(tag, 0) + 1
        for c in (a.get("class") or "").split():
            self.classes[c] = self.classes.get(c, 0) + 1
        if "id" in a:
            self.ids.append(a["id"])
        if tag == "details" and "open" in a:
            self.open_details += 1
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):  # <path .../> inside SVG
        self.tags[tag] = self.tags.get(tag, 0) + 1
        for c in (dict(attrs).get("class") or "").split():
            self.classes[c] = self.classes.get(c, 0) + 1

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes <{self.stack[-1] if self.stack else None}>")
        else:
            self.stack.pop()


def svgs(page: str) -> List[ET.Element]:
    """Every inline SVG, parsed as XML: each must be well-formed on its own."""
    return [ET.fromstring(s) for s in re.findall(r"<svg\b.*?</svg>", page, re.S)]


def nodes(svg: ET.Element, role: str = "") -> List[ET.Element]:
    return [g for g in svg.iter(f"{SVG}g") if "node" in g.get("class", "").split()
            and (not role or role in g.get("class", "").split())]


def regions_of(page: str) -> List[str]:
    return re.findall(r'<details class="region".*?</details>', page, re.S)


def _self_contained(page: str) -> None:
    assert "<script" not in page.lower()
    assert not re.search(r"\b(src|href)\s*=", page), "the page loads nothing"
    assert "@import" not in page and "url(http" not in page
    assert set(re.findall(r"https?://[^\s\"'<>]+", page)) <= {"http://www.w3.org/2000/svg"}


def test_transformer_page(tmp_path, legalize):
    out, page_path, report = tmp_path / "x.onnx", tmp_path / "report.html", tmp_path / "r.json"
    p = legalize(MODELS / "transformer_block.dynamo.onnx", "-o", out, "--html", page_path, "--report", report)
    assert p.returncode == 0, p.stderr
    page = page_path.read_text(encoding="utf-8")
    parsed = Page(page)
    assert not parsed.errors and not parsed.stack, (parsed.errors, parsed.stack)
    for sid in ("summary", "violations", "constraints", "check", "regions"):
        assert sid in parsed.ids
    assert len(parsed.ids) == len(set(parsed.ids))  # every id unique (each picture's arrowhead too)
    import re
    assert set(re.findall(r'url\(#([^)]+)\)', page)) <= set(parsed.ids)
    _self_contained(page)
    assert "verdict ok" in page and "outputs match" in page

    import json
    rep = json.loads(report.read_text())
    rewrites = rep["stats"]["reshapes_inserted"] + rep["stats"]["constants_folded"]
    regions = regions_of(page)
    assert len(regions) == rewrites == 9
    assert parsed.open_details == min(9, html_report.OPEN_PICTURES)
    # the check: one PASSED row per output and binding
    bindings = rep["check"]["bindings"]
    assert page.count(">PASSED<") == sum(len(b["outputs"]) for b in bindings) == 4

    for region in regions:
        before, after = svgs(region)  # one pair per region, each well-formed
        assert before.get("class") == after.get("class") == "region-svg"
        assert float(after.get("width")) > 50 and float(after.get("height")) > 50
        assert len(nodes(before, "center")) == len(nodes(after, "center")) == 1
        assert not nodes(before, "inserted")
        inserted = nodes(after, "inserted")
        assert inserted, "every rewrite inserts something: a reshape or a folded constant"
        for g in inserted:  # highlighted: the inserted fills, not the original ones
            fill = g.find(f"{SVG}rect").get("fill")
            assert fill in (STYLE["inserted"][0], STYLE["inserted-const"][0])
            assert fill not in (STYLE["original"][0], STYLE["original-io"][0], STYLE["center"][0])
        # shapes on the edges: the result's shape leads to the result value
        labels = [t.text for g in after.iter(f"{SVG}g") if g.get("class") == "shape" for t in g.iter(f"{SVG}text")]
        assert len(labels) == sum(1 for _ in after.iter(f"{SVG}path")) - 1  # less the arrowhead's path
    # the one Unsqueeze: node_add_70's mask operand goes 'seqxseq' -> '1x1xseqxseq'
    (add70,) = [r for r in regions if "node_add_70" in r.split("</summary>")[0]]
    after = svgs(add70)[1]
    assert [g.get("data-name") for g in nodes(after, "inserted") if "op" in g.get("class").split()] == ["mask_r4"]
    text = " ".join(t.text or "" for t in after.iter(f"{SVG}text"))
    assert "seqxseq" in text and "1x1xseqxseq" in text and "Unsqueeze" in text


def _nasty_model(path: Path) -> Path:
    x, b = vi("x<&>", TensorProto.FLOAT, [2, 3]), vi('b"\'', TensorProto.FLOAT, [3])
    node = helper.make_node("Add", ["x<&>", 'b"\''], ["y"], name=NASTY)
    g = helper.make_graph([node], "g", [x, b], [vi("y", TensorProto.FLOAT, [2, 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return path


def test_names_are_escaped(tmp_path, legalize):
    model = _nasty_model(tmp_path / "nasty.onnx")
    page_path = tmp_path / "nasty.html"
    p = legalize(model, "-o", tmp_path / "out.onnx", "--html", page_path)
    assert p.returncode == 0, p.stderr
    page = page_path.read_text(encoding="utf-8")
    _self_contained(page)  # no <script> from the node name
    assert "\x01" not in page
    assert "n&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;amp;" in page
    parsed = Page(page)
    assert not parsed.errors and not parsed.stack
    (region,) = regions_of(page)
    before, after = svgs(region)
    shown = NASTY.replace("\x01", "\\x01")  # a control character is shown as its escape
    assert [g.get("data-name") for g in nodes(after, "center")] == [shown]
    assert {g.get("data-name") for g in nodes(before, "original")} == {"x<&>", 'b"\''}
    assert any(g.get("data-name") == "b\"'_r2" for g in nodes(after, "inserted"))


def _chain(n: int) -> onnx.ModelProto:
    """``n`` Adds of a rank-1 operand onto a rank-3 one: one rewrite each."""
    nodes_, prev = [], "x"
    for k in range(n):
        nodes_.append(helper.make_node("Add", [prev, "b"], [f"y{k}"], name=f"add{k}"))
        prev = f"y{k}"
    g = helper.make_graph(nodes_, "g", [vi("x", TensorProto.FLOAT, [2, 3, 4]), vi("b", TensorProto.FLOAT, [4])],
                          [vi(prev, TensorProto.FLOAT, [2, 3, 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_library_pictures_are_capped(tmp_path):
    """A model with more rewrites than PICTURE_LIMIT: the first ones are drawn, and the
    page says how many were left out; the pictures past the first few start folded."""
    n = PICTURE_LIMIT + 30
    path = tmp_path / "chain.onnx"
    onnx.save(_chain(n), str(path))
    model = legalizer.load(path)
    before = legalizer.snapshot(model)
    legalizer.legalize(model, "tosa")
    regions = before.regions(model, limit=PICTURE_LIMIT)
    assert regions.total == n and len(regions.regions) == PICTURE_LIMIT and regions.omitted == 30
    assert regions.by_op == {"Add": n}
    page = legalizer.report_html({"input": str(path), "target": "tosa", "profile": "mlir"}, regions)
    parsed = Page(page)
    assert not parsed.errors and not parsed.stack
    assert len(regions_of(page)) == PICTURE_LIMIT
    assert parsed.open_details == html_report.OPEN_PICTURES
    assert "30 more rewritten regions are not drawn" in page
    assert f"Rewritten regions ({n:,})" in page
    assert len(svgs(page)) == 2 * PICTURE_LIMIT
    # the shared Unsqueeze of b is in each picture, highlighted
    for region in regions_of(page)[:3]:
        after = svgs(region)[1]
        assert [g.get("data-name") for g in nodes(after, "inserted") if "op" in g.get("class").split()] == ["b_r3"]


def test_xla_dynamic_regions(tmp_path, legalize):
    """xla's runtime shape computations (Shape, Gather, Where, Concat) are inserted nodes too."""
    page_path = tmp_path / "dyn.html"
    p = legalize(MODELS / "dynamic_broadcast.onnx", "--target", "xla", "-o", tmp_path / "d.onnx", "--html",
                 page_path, "--no-check")
    assert p.returncode == 0, p.stderr
    page = page_path.read_text(encoding="utf-8")
    assert "not checked: --no-check" in page
    regions = regions_of(page)
    assert len(regions) == 3
    ops = {t.text for r in regions for g in nodes(svgs(r)[1], "inserted") for t in g.iter(f"{SVG}text")}
    assert {"Expand", "Shape", "Gather", "Where", "Concat"} <= ops


def test_verify_only_page_shows_the_violations(tmp_path, legalize):
    page_path = tmp_path / "bad.html"
    p = legalize(MODELS / "incompatible_add.onnx", "--verify-only", "--html", page_path)
    assert p.returncode == 1
    page = page_path.read_text(encoding="utf-8")
    assert "verdict bad" in page and "<code>bad_add</code>" in page
    assert "incompatible-operands" in page
    assert "None: the model was not legalized." in page
    assert not svgs(page)


def test_html_never_replaces_a_model(tmp_path, legalize):
    model = tmp_path / "m.onnx"
    model.write_bytes((MODELS / "mlp_bias.onnx").read_bytes())
    data = model.read_bytes()
    for args in (["-o", tmp_path / "o.onnx", "--html", model], ["-o", tmp_path / "o.onnx", "--html", tmp_path / "o.onnx"]):
        p = legalize(model, *args)
        assert p.returncode == 2
        assert len(p.stderr.strip().splitlines()) == 1 and "cannot replace a model file" in p.stderr
        assert not (tmp_path / "o.onnx").exists()
    assert model.read_bytes() == data


def test_html_is_replaced_atomically(tmp_path, legalize):
    page_path = tmp_path / "r.html"
    page_path.write_text("old")
    p = legalize(MODELS / "mlp_bias.onnx", "-o", tmp_path / "o.onnx", "--html", page_path, "--no-check")
    assert p.returncode == 0, p.stderr
    assert page_path.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert sorted(f.name for f in tmp_path.iterdir()) == ["o.onnx", "r.html"]  # no temporary left
    p = legalize(MODELS / "mlp_bias.onnx", "--verify-only", "--html", tmp_path / "nodir" / "r.html")
    assert p.returncode == 2 and "does not exist" in p.stderr


def test_separate_keeps_order_and_room():
    xs = html_report._separate([10.0, 10.0, 11.0, 200.0], [20.0, 10.0, 30.0, 8.0], 4.0)
    for (a, wa), (b, wb) in zip(zip(xs, [20, 10, 30, 8]), list(zip(xs, [20, 10, 30, 8]))[1:]):
        assert b - a >= (wa + wb) / 2 + 4 - 1e-9
    assert xs[3] == pytest.approx(200.0)  # far enough: stays where it wants to be
    assert sum(xs[:3]) / 3 == pytest.approx((10 + 10 + 11) / 3)  # a packed run keeps its mean
