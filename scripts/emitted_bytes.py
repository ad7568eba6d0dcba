"""The bytes each sample model is written as, per target and ``--emit`` format, by one
checkout or two side by side: what a change to the pipeline must keep, or explain.

    python scripts/emitted_bytes.py                      # this checkout: a manifest
    python scripts/emitted_bytes.py --baseline ../before # which outputs differ, and how

Each run is ``legalize MODEL --target T --emit ... --no-check`` in a process of its own
(``PYTHONPATH`` the checkout), into a scratch folder; a file's entry is its SHA-256, a
refused run's its exit code and first line. A ``.pt2`` is hashed by its members, less what
torch.export writes anew each time (the archive's serialization id, each node's
``graph_id``: a Python object id)."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, Tuple

ROOT = Path(__file__).resolve().parents[1]

# (model suffix, target, the formats emitted)
PLANS: List[Tuple[str, str, Tuple[str, ...]]] = [
    (".onnx", "tosa", ("onnx", "tosa")),
    (".onnx", "xla", ("onnx", "stablehlo")),
    (".onnx", "qnn-htp", ("onnx",)),
    (".tflite", "tosa", ("tflite", "onnx", "tosa")),
    (".tflite", "xla", ("tflite", "stablehlo")),
    (".tflite", "litert-gpu", ("tflite",)),
    (".tflite", "ethos-u", ("tflite",)),
    (".tflite", "ethos-u55", ("tflite",)),
    (".pt2", "tosa", ("pt2",)),
    (".pt2", "coreml", ("pt2",)),
]


def samples() -> List[Path]:
    found = [*ROOT.glob("models/*.onnx"), *ROOT.glob("models/tflite/*.tflite"), *ROOT.glob("models/*.pt2")]
    return sorted(p for p in found if ".legal." not in p.name and "incompatible" not in p.name)


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    if path.suffix == ".pt2":
        with zipfile.ZipFile(path) as z:
            for name in sorted(z.namelist()):
                if not name.endswith("serialization_id"):
                    h.update(name.encode() + re.sub(rb"graph_id[^0-9]{1,6}[0-9]+", b"graph_id", z.read(name)))
    else:
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def _one(tree: Path, model: Path, target: str, emits: Tuple[str, ...]) -> Tuple[str, Dict[str, str]]:
    key = f"{model.relative_to(ROOT)} --target {target} --emit {','.join(emits)}"
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / model.name
        src.write_bytes(model.read_bytes())
        args = [sys.executable, "-m", "legalizer.cli", src.name, "--target", target, "--no-check", "-q"]
        for e in emits:
            args += ["--emit", e]
        env = dict(os.environ, PYTHONPATH=str(tree))
        done = subprocess.run(args, capture_output=True, text=True, env=env, cwd=tmp, timeout=600)
        files = {p.name: _digest(p)
                 for p in sorted(Path(tmp).iterdir()) if p.is_file() and p.name != model.name}
        if done.returncode:
            first = (done.stderr.strip() or done.stdout.strip()).splitlines()[:1]
            files["exit"] = f"{done.returncode}: {first[0] if first else ''}"
    return key, files


def manifest(tree: Path, jobs: int) -> Dict[str, Dict[str, str]]:
    runs = [(m, t, e) for m in samples() for suffix, t, e in PLANS if m.suffix == suffix]
    with ThreadPoolExecutor(jobs) as pool:
        return dict(pool.map(lambda r: _one(tree, *r), runs))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", type=Path, help="another checkout: list the outputs whose bytes differ")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json", type=Path, help="write the manifest (or both) here")
    a = ap.parse_args()
    now = manifest(ROOT, a.jobs)
    if a.baseline is None:
        text = json.dumps(now, indent=1, sort_keys=True)
        if a.json:
            a.json.write_text(text)
        else:
            print(text)
        return 0
    before = manifest(a.baseline.resolve(), a.jobs)
    if a.json:
        a.json.write_text(json.dumps({"before": before, "after": now}, indent=1, sort_keys=True))
    differ = 0
    for key in sorted(set(before) | set(now)):
        b, n = before.get(key, {}), now.get(key, {})
        for name in sorted(set(b) | set(n)):
            if b.get(name) != n.get(name):
                differ += 1
                print(f"{key}: {name}: {b.get(name, '(none)')} -> {n.get(name, '(none)')}")
    outputs = sum(len(v) for v in now.values())
    print(f"{len(now)} runs, {outputs} outputs: {differ} differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
