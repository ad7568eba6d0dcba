"""A plain (non-editable) install ships the rules tables inside the wheel."""

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_ships_rules_and_finds_them(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path / "dist"), str(ROOT)],
                   check=True, capture_output=True)
    (wheel,) = (tmp_path / "dist").glob("legalize-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "legalizer/rules/onnx.toml" in names
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                   check=True, capture_output=True)
    # Run from an empty folder with only the installed copy importable: the rules must
    # come from inside the package, not from a source tree.
    probe = ("import legalizer, legalizer.oprules as r; "
             "assert legalizer.__file__.startswith(%r), legalizer.__file__; "
             "rules = r.builtin_rules('onnx'); print(len(rules), rules['PRelu'].broadcasts)") % str(site)
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
                         check=True, capture_output=True, text=True)
    count, broadcasts = out.stdout.split(maxsplit=1)
    assert int(count) >= 24 and broadcasts.strip() == "(1,)"
