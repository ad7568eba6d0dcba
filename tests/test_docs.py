"""The documentation site builds with ``mkdocs build --strict`` (no broken link or
anchor, no page left out of the nav, no API object mkdocstrings cannot find), its
command-line reference is the command's own, and its API reference documents the public
API from the docstrings."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parent.parent

def _reference() -> str:
    sys.path.insert(0, str(ROOT / "docs" / "hooks"))
    try:
        import cli_reference
    finally:
        sys.path.pop(0)
    return cli_reference.reference()


def test_the_cli_reference_is_generated_from_every_parameter():
    import typer.main

    from legalizer.cli import app

    command = typer.main.get_command(app)
    text = _reference()
    assert text.count("**Usage**:") == 1 and "$ legalize [OPTIONS] {MODEL}..." in text
    for param in command.params:
        if param.param_type_name == "option":
            names = ", ".join(param.opts) + "".join(f" / {', '.join(param.secondary_opts)}" for _ in param.secondary_opts[:1])
            assert f"* `{names}" in text, names
        else:
            assert f"* `{param.metavar}" in text, param.name
        if param.help:
            assert " ".join(param.help.split()) in text, param.name
    # the --help's preformatted paragraphs stay preformatted
    assert "```text\nExamples:\n  legalize model.onnx " in text


@pytest.mark.needs("docs")
def test_the_site_builds_strict(tmp_path, capsys):
    site = tmp_path / "site"
    start = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                        "-d", str(site)], cwd=ROOT, capture_output=True, text=True, timeout=600,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    seconds = time.perf_counter() - start
    assert p.returncode == 0, p.stderr[-5000:]
    with capsys.disabled():
        print(f"\nmkdocs build --strict: {seconds:.1f} s")
    nav = re.findall(r"^\s*- [^:\n]+:\s*(\S+)\.md\s*$", (ROOT / "mkdocs.yml").read_text(), re.M)
    pages = {p.relative_to(ROOT / "docs").with_suffix("").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    assert set(nav) == pages
    for name in nav:
        assert (site / ("index.html" if name == "index" else f"{name}/index.html")).is_file(), name
    cli = (site / "cli" / "index.html").read_text()
    assert "--localize-budget" in cli and "legalize-cli-reference" not in cli
    api = (site / "api" / "index.html").read_text()
    for name in ("load", "verify", "legalize", "save", "check", "Graph", "Model", "NotLegal", "LegalizePass"):
        assert re.search(rf'id="legalizer\.[\w.]*\b{name}"', api), name
