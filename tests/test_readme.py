"""The README: its two set-up commands are what .ci/run runs, and it is the short page
a user reads first (the rest is in docs/; tests/test_examples.py runs its examples)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def readme_commands():
    text = (ROOT / "README.md").read_text()
    setup = text.split("## Set-up", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.*?)\n```", setup, re.S)


def test_ci_runs_exactly_the_readme_commands():
    commands = readme_commands()
    assert len(commands) == 2
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    for command in commands:  # as it is, or with its exit status kept: `COMMAND || failed=...`
        assert any(line == command or line.startswith(command + " || failed=") for line in ci), command


def test_the_readme_is_short_and_says_first_what_it_reads():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    first = text.split("\n\n")[1]
    for name in ("ONNX", "TFLite", "TOSA MLIR", "PyTorch", ".pt2"):
        assert name in first, name


def test_the_readme_python_version_is_pyprojects():
    import tomllib

    required = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert required.startswith(">=")
    assert f"Python {required[2:]} or later" in (ROOT / "README.md").read_text()
