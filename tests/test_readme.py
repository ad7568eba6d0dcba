"""The README's two set-up commands are what .ci/run runs, and its sessions show what
the tool prints today."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def readme_commands():
    text = (ROOT / "README.md").read_text()
    setup = text.split("## Set-up", 1)[1].split("###", 1)[0]
    return re.findall(r"```bash\n(.*?)\n```", setup, re.S)


def test_ci_runs_exactly_the_readme_commands():
    commands = readme_commands()
    assert len(commands) == 2
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    for command in commands:
        assert command in ci


def test_readme_sessions_match_the_tool(tmp_path):
    """Every `$ legalize ...` block's last line is what the tool prints now."""
    text = (ROOT / "README.md").read_text()
    sessions = re.findall(r"```console\n\$ (legalize [^\n]*)\n(.*?)```", text, re.S)
    assert len(sessions) >= 3
    for command, shown in sessions:
        args = command.split()[1:]
        model = Path(args[0])
        if model.suffix == ".pt2" and not _have("torch", "onnxscript"):
            continue  # the torch extra is optional
        out = tmp_path / f"out{'.onnx' if model.suffix == '.pt2' else model.suffix}"
        if "--verify-only" not in args and "-j" in args:  # several models: -o names a folder
            (tmp_path / "batch").mkdir(exist_ok=True)
            args += ["-o", str(tmp_path / "batch"), "--force"]
        elif "--verify-only" not in args:
            args += ["-o", str(out), "--force"]
        p = subprocess.run([sys.executable, "-m", "legalizer.cli", *args], capture_output=True, text=True,
                           cwd=ROOT, env={"COLUMNS": "100", "PATH": "/usr/bin:/bin"}, timeout=300)
        last = shown.strip().splitlines()[-1]
        got = p.stdout.strip().splitlines()[-1]
        if "--verify-only" not in command:
            # out.onnx, out.stablehlo.mlir, ... -> models/<stem>.legal.onnx, ...
            got = got.replace(str(tmp_path / "out."), str(model.with_name(f"{model.stem}.legal.")))
        assert got == last, command
        for line in shown.strip().splitlines():
            if line.startswith(("error:", "PASSED", "FAILED", "constraint:", "culprit:", "reduced:")):
                assert line in p.stdout, (command, line)


def test_readme_library_example_runs(tmp_path, monkeypatch):
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) >= 4
    monkeypatch.chdir(ROOT)
    for code in blocks:  # a block that needs an optional extra runs where it is installed
        if ("import torch" in code and not _have("torch", "onnxscript")) or \
                ("onnx_ir" in code and not _have("onnx_ir")) or ("onnxscript" in code and not _have("onnxscript")):
            continue
        exec(compile(code.replace("/tmp/", f"{tmp_path}/"), "README.md", "exec"), {})  # noqa: S102
    assert (tmp_path / "mlp_bias.legal.onnx").exists()


def _have(*modules: str) -> bool:
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in modules)
