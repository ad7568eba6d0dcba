"""Golden data between Polygraphy and legalize, on the sample models: for each ONNX
model, ``polygraphy run --onnxrt --save-inputs/--save-outputs`` (3 iterations), then
``legalize --load-inputs/--load-outputs`` on them; Polygraphy's own verdict on the
legalized model with the same files and tolerances; and the other way, legalize's
``--save-inputs/--save-outputs`` replayed by ``polygraphy run --load-inputs
--load-outputs``. Prints one row per model (needs polygraphy on PATH).

    python scripts/polygraphy_roundtrip.py [models/*.onnx ...]
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(*args) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=600)


def verdict(p: subprocess.CompletedProcess) -> str:
    return {0: "pass", 1: "FAIL"}.get(p.returncode, f"error {p.returncode}")


def main(paths) -> int:
    poly = shutil.which("polygraphy") or str(Path(sys.executable).parent / "polygraphy")
    legalize = [sys.executable, "-m", "legalizer.cli"]
    print("| model | polygraphy saved | legalize --load-* | polygraphy --load-* on the legalized model |"
          " legalize --save-* replayed by polygraphy |")
    print("| --- | --- | --- | --- | --- |")
    for model in paths:
        with tempfile.TemporaryDirectory() as d:
            d = Path(d)
            i, o, legal = d / "i.json", d / "o.json", d / f"{model.stem}.legal.onnx"
            saved = run(poly, "run", model, "--onnxrt", "--iterations", 3, "--save-inputs", i, "--save-outputs", o)
            if saved.returncode:
                print(f"| {model.name} | polygraphy run fails (exit {saved.returncode}) | | | |")
                continue
            ours = run(*legalize, model, legal, "--load-inputs", i, "--load-outputs", o, "-q")
            theirs = run(poly, "run", legal, "--onnxrt", "--load-inputs", i, "--load-outputs", o, "--rtol", "1e-4",
                         "--atol", "1e-5") if legal.exists() else None
            si, so, legal2 = d / "si.json", d / "so.json", d / "again.legal.onnx"
            back = run(*legalize, model, legal2, "--save-inputs", si, "--save-outputs", so, "-q")
            replay = run(poly, "run", legal2, "--onnxrt", "--load-inputs", si, "--load-outputs", so) \
                if back.returncode == 0 else None
            print(f"| {model.name} | 3 iterations | {verdict(ours)} | {verdict(theirs) if theirs else 'n/a'} |"
                  f" {verdict(replay) if replay else 'legalize ' + verdict(back)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main([Path(p) for p in sys.argv[1:]] or sorted((ROOT / "models").glob("*.onnx"))))
