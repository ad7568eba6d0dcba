"""Every example of the README and the docs runs and prints what it shows.

Each ``$ `` command of a ```console block of README.md and docs/**/*.md (the README
first, then the pages in the site's order) runs in that order, as a user runs them on a
fresh clone after the README's set-up: in a folder holding a copy of ``models/`` (without
any ``*.legal.*`` file a developer's runs left there), where the set-up's own
``legalize`` command has run first. What it prints, stdout and stderr as a terminal
shows them, must be what the block shows under it; absolute paths of that folder and
timings are normalized, and a line ``...`` in a block stands for any number of lines.
The ```python blocks of the docs run too, in the same folder.

An example that needs an optional extra (a ``.pt2``: torch, and executorch for
``legalize``, whose check runs it there too; a ``.tflite``: litert; TOSA
MLIR, read or written with the check on: iree; ``--executor ray``: ray; ``--emit
stablehlo-bytecode``: jax) is skipped,
naming the extra, where the extra is not installed. Nothing else is skipped: an example
that no longer prints what it shows fails.
"""

from __future__ import annotations

import difflib
import os
import re
import shlex
import shutil
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Tuple

import pytest

from legalizer.extras import install_hint
from needs import has

ROOT = Path(__file__).resolve().parent.parent

@dataclass(frozen=True)
class Example:
    file: str  # relative to the repository
    line: int  # of the command (or of the python block's first line)
    kind: str  # "console" or "python"
    code: str  # the command after "$ ", or the python source
    shown: str  # what the block shows the command printing ("" for python)
    block: int = 0  # the line its block starts at: the commands of a block run in order

    @property
    def id(self) -> str:
        return f"{self.file}:{self.line}"


def documents() -> List[Path]:
    """README.md, then the site's pages in the order of mkdocs.yml's nav, then any other
    page under docs/ (mkdocs build --strict refuses a page left out of the nav)."""
    nav = re.findall(r"^\s*- [^:\n]+:\s*(\S+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M)
    pages = [ROOT / "docs" / name for name in nav]
    rest = sorted(p for p in (ROOT / "docs").rglob("*.md") if p not in pages)
    return [ROOT / "README.md", *pages, *rest]


def examples() -> List[Example]:
    found = []
    for doc in documents():
        text = doc.read_text(encoding="utf-8")
        name = doc.relative_to(ROOT).as_posix()
        for block in re.finditer(r"^```(console|python)\n(.*?)^```", text, re.M | re.S):
            first = text.count("\n", 0, block.start(2)) + 1
            if block[1] == "python":
                found.append(Example(name, first, "python", block[2], ""))
                continue
            lines = block[2].splitlines()
            starts = [i for i, line in enumerate(lines) if line.startswith("$ ")]
            assert starts and starts[0] == 0, f"{name}:{first}: a console block starts with a '$ ' command"
            for i, j in zip(starts, starts[1:] + [len(lines)]):
                found.append(Example(name, first + i, "console", lines[i][2:], "\n".join(lines[i + 1:j]), first))
    return found


EXAMPLES = examples()


def extras_needed(example: Example) -> List[str]:
    if example.kind == "python":
        code = example.code
        needs = ["torch"] if ("torch" in code or "onnx_ir" in code or "onnxscript" in code) else []
        needs += ["coreml"] if "coremltools" in code else []
        return needs + (["executorch"] if "executorch" in code else [])
    words = shlex.split(example.code)
    needs = set()
    for word in words:
        if word.endswith(".pt2"):
            needs.add("torch")
            if words[0] == "legalize":  # its check runs the legal program on ExecuTorch too, and says so
                needs.add("executorch")
        elif word.endswith(".tflite"):
            needs.add("litert")
        elif word.endswith((".mlir", ".mlirbc")) and word.startswith("models/"):
            needs.add("iree")
    if "ray" in words and "--executor" in words:
        needs.add("ray")
    if "stablehlo-bytecode" in words:
        needs.add("jax")
    if "tosa" in words and "--emit" in words and "--no-check" not in words:  # the module written is run
        needs.add("iree")
    return sorted(needs)


def missing_extras(example: Example) -> List[str]:
    """What this example, or a command before it in its block (whose files it may read),
    needs and is not installed."""
    before = [e for e in EXAMPLES if e.kind == "console" and e.file == example.file and e.block == example.block
              and e.line < example.line] if example.kind == "console" else []
    return sorted({x for e in [*before, example] for x in extras_needed(e) if not has(x)})


def setup_command() -> str:
    """The README's set-up ends by running the main job on a sample model: its last
    ``&&`` part, without the venv's path."""
    setup = (ROOT / "README.md").read_text(encoding="utf-8").split("## Set-up", 1)[1]
    first = re.findall(r"```bash\n(.*?)\n```", setup, re.S)[0]
    last = first.split("&&")[-1].strip()
    assert last.startswith(".venv/bin/legalize "), last
    return last.removeprefix(".venv/bin/")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Tuple[Path, dict]:
    """A folder as a fresh clone has it after the set-up command: ``models/`` and the
    output the set-up wrote; a ``legalize`` on PATH that runs this checkout."""
    ws = tmp_path_factory.mktemp("examples")
    shutil.copytree(ROOT / "models", ws / "models", ignore=shutil.ignore_patterns("*.legal.*", "__pycache__"))
    bin_dir = tmp_path_factory.mktemp("bin")
    shim = bin_dir / "legalize"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m legalizer.cli "$@"\n')
    shim.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "NO_COLOR", "COLUMNS", "LINES")}
    env.update(PATH=f"{bin_dir}:{env.get('PATH', '/usr/bin:/bin')}", PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1",
               COLUMNS="100", TERM="dumb")
    p = _run(setup_command(), ws, env)
    assert p.returncode == 0, p.stdout
    assert (ws / "models" / "transformer_block.dynamo.legal.onnx").exists()
    return ws, env


@contextmanager
def _tables_kept():
    """What a Python example registers (a target, a profile, a pass, a kind, a runtime)
    is gone after it: the worker that ran it runs other test files next, which see the
    shipped tables (``test_add_profile`` registers a ``gpu4`` of its own)."""
    from legalizer.kinds.registry import KINDS
    from legalizer.numeric.runtimes import RUNTIMES
    from legalizer.passes import base
    from legalizer.targets import TARGETS
    from legalizer.verifier import PROFILE_RECORDS

    saved = [(table, table.copy()) for table in (TARGETS, PROFILE_RECORDS, base.PASSES, base._BY_FUNCTION, KINDS,
                                                 RUNTIMES)]
    try:
        yield
    finally:
        for table, copy in saved:
            table.clear()
            table.update(copy) if isinstance(table, dict) else table.extend(copy)


def _run(command: str, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=600, stdin=subprocess.DEVNULL)


def normalize(text: str, ws: Optional[Path] = None) -> str:
    if ws is not None:
        text = text.replace(f"{ws}/", "").replace(str(ws), ".")
    text = text.replace(f"{ROOT}/", "<repo>/")
    # Timings: "0.3 s", "12 ms", and the JSON report's seconds per stage.
    text = re.sub(r"\b\d+(?:\.\d+)? ?(?:ms|s)\b", "<time>", text)
    text = re.sub(r'("timings_s": \{)(.*?)(\})',
                  lambda m: m[1] + re.sub(r"-?\d+(?:\.\d+)?(?:e-?\d+)?", "<time>", m[2]) + m[3], text, flags=re.S)
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


# A decimal a page shows (not part of a version such as 2.21.0)
_DECIMAL = re.compile(r"(?<![\d.])(\d+\.\d+)(?![\d.])")


def matches(shown: str, got: str) -> bool:
    """``got`` is ``shown`` line for line, a shown line ``...`` standing for any lines.
    A decimal may differ by one unit in its last shown digit: an error measured on
    another CPU (IREE's and XNNPACK's kernels follow its vector width) rounds either way."""
    parts, shown_decimals = [], []
    for line in shown.splitlines():
        if line == "...":
            parts.append(r"(?:[^\n]*\n)*?")
            continue
        for i, piece in enumerate(_DECIMAL.split(line)):
            if i % 2:
                parts.append(r"(\d+\.\d+)")
                shown_decimals.append(piece)
            else:
                parts.append(re.escape(piece))
        parts.append(r"\n")
    m = re.fullmatch("".join(parts), got + "\n" if got else "")
    return m is not None and all(abs(float(g) - float(w)) <= 1.000001 * 10.0 ** -len(w.split(".")[1])
                                 for g, w in zip(m.groups(), shown_decimals))


def test_the_docs_have_examples():
    consoles = [e for e in EXAMPLES if e.kind == "console"]
    assert len(consoles) >= 15 and {e.file for e in consoles} >= {"README.md", "docs/getting-started.md"}
    assert len([e for e in EXAMPLES if e.kind == "python"]) >= 4


def test_the_matcher_holds_examples_to_what_they_show():
    assert matches("a\n...\nd", "a\nb\nc\nd") and matches("a\n...\nd", "a\nd")
    assert not matches("a\nd", "a\nb\nd") and not matches("a\n...\nd", "a\nb\nc")
    assert not matches("a", "a\nb") and not matches("a (b)", "a b")
    assert matches("err 0.000472, 141 of 256", "err 0.000471, 141 of 256")
    assert not matches("err 0.000472, 141 of 256", "err 0.000470, 141 of 256")
    assert not matches("err 0.000472, 141 of 256", "err 0.000472, 142 of 256")
    assert matches("tf 2.21.0", "tf 2.21.0") and not matches("tf 2.21.0", "tf 2.21.1")
    assert normalize('x 0.31 s\n"timings_s": {\n  "load": 0.08\n}') == 'x <time>\n"timings_s": {\n  "load": <time>\n}'
    assert normalize("/w/models/m.onnx: -> /w/m.legal.onnx", Path("/w")) == "models/m.onnx: -> m.legal.onnx"


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.id for e in EXAMPLES])
def test_example(example: Example, workspace, monkeypatch):
    missing = missing_extras(example)
    if missing:
        extras = f"the {' and '.join(missing)} extra{'s' if len(missing) > 1 else ''}"
        pytest.skip(f"needs {extras}: {install_hint(','.join(missing))}")
    ws, env = workspace
    if example.kind == "python":
        monkeypatch.chdir(ws)
        with _tables_kept():
            exec(compile(example.code, example.id, "exec"), {})  # noqa: S102 - the docs' own code
        return
    p = _run(example.code, ws, env)
    got, shown = normalize(p.stdout, ws), normalize(example.shown)
    assert matches(shown, got), (
        f"{example.id}: `{example.code}` (exit {p.returncode}) prints otherwise than the docs show:\n"
        + "\n".join(difflib.unified_diff(shown.splitlines(), got.splitlines(), "shown", "printed", lineterm="")))
