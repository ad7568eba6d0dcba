"""The main job on the real-model corpus (tests/corpus_models.py; scripts/corpus.py builds
it in .cache/corpus/):
every cached model, ``legalize MODEL --target tosa`` and ``--target xla`` with the
check (a torch.export program, ``pt2_*``: ``--target coreml``, and its legal form
converted by coremltools and run on ExecuTorch), in a process of its own. Each must exit 0 with its check run fully (not "ran in
part") and matching, except:

- ORIGINAL_CANNOT_RUN: originals that LiteRT cannot run at all (MediaPipe's own custom
  ops, which only MediaPipe's resolver has): legalized, and the check says so;
- PENDING: failures that issue 14's other items fix on their own branches; strict
  xfails, so that each fails here once its fix is merged and must then be removed.

The converter's outputs (``tosa_*``: tosa-converter-for-tflite's TOSA bytecode of each
TFLite model of the corpus) are read with ``--verify-only --against`` their .tflite:
each must exit 0 with the comparison run and matching (at the tolerances
corpus.AGAINST_NEEDS gives, and says why), except AGAINST_REFUSED, exit 2 with the
exact reason.

Without a built corpus the tests skip, saying how to build it. The default run takes
``SAMPLE``; ``-m slow`` runs the rest.
"""

from __future__ import annotations

import pytest

import corpus_models as corpus
from needs import require

MODELS = [p for p in corpus.cached() if not corpus.source_of(p.stem)]
CONVERTED = [p for p in corpus.cached() if corpus.source_of(p.stem)]

ORIGINAL_CANNOT_RUN = {
    "wheel_mediapipe_face_landmark_with_attention": "unresolved custom op: Landmarks2TransformMatrix",
}
PENDING = {
}
SAMPLE = set(corpus.SAMPLE)  # the default run's

# Converter outputs that --against cannot compare: exit 2, the line starting so (after
# "legalize: error: PATH: "; REF is the .tflite) and holding the second part.
REFUSED_DIALECTS = ("--against compiles and runs only functions of the tosa, func, arith, tensor, quant and"
                    " ml_program dialects; the module has op ")
AGAINST_REFUSED = {
    # sparse weights: the converter leaves TFLite's DENSIFY as it was
    "tosa_wheel_mediapipe_face_detection_full_range_sparse": (REFUSED_DIALECTS + "'tfl.densify'", ""),
    "tosa_wheel_mediapipe_pose_detection": (REFUSED_DIALECTS + "'tfl.densify'", ""),
    # the reference itself: MediaPipe's custom op, which LiteRT lacks
    "tosa_wheel_mediapipe_face_landmark_with_attention": (
        "the comparison with REF did not run: REF fails on LiteRT: LiteRT allocate failed: Encountered unresolved"
        " custom op: Landmarks2TransformMatrix.", "(Landmarks2TransformMatrix) failed to prepare."),
    # MediaPipe's Convolution2DTransposeBias, kept as tosa.custom, which IREE cannot compile
    "tosa_wheel_mediapipe_selfie_segmentation": (
        "the comparison with REF did not run: IREE cannot compile the module: Error invoking IREE compiler tool"
        " iree-compile\\nError code: 1\\nDiagnostics:\\n<stdin>:",
        "error: failed to legalize operation 'tosa.custom': "),
    "tosa_wheel_mediapipe_selfie_segmentation_landscape": (
        "the comparison with REF did not run: IREE cannot compile the module: Error invoking IREE compiler tool"
        " iree-compile\\nError code: 1\\nDiagnostics:\\n<stdin>:",
        "error: failed to legalize operation 'tosa.custom': "),
}


def _cases():
    if not MODELS:
        return [pytest.param(None, None, marks=pytest.mark.skip(
            reason=f"the corpus is not built ({corpus.CACHE} has no model): python scripts/corpus.py builds it"))]
    cases = []
    for path in MODELS:
        for target in corpus.targets_of(path):
            marks = [pytest.mark.xfail(strict=True, reason=PENDING[path.stem])] if path.stem in PENDING else []
            marks += [] if path.stem in SAMPLE else [pytest.mark.slow]
            cases.append(pytest.param(path, target, marks=marks, id=f"{path.stem}-{target}"))
    return cases


@pytest.mark.parametrize("path, target", _cases())
def test_main_job_on_corpus_model(path, target, tmp_path):
    if path.suffix == ".tflite":
        require("litert")  # the check runs on LiteRT
    if path.suffix == ".pt2":
        require("torch")
    row = corpus.legalize_row(path, target, tmp_path, corpus.check_options(path, tmp_path))
    why = row.get("error") or row["stderr"][-600:]
    assert row["exit"] == 0, why
    assert row["legalized"], why
    ran_in_part = [w for w in row["warnings"] if "ran in part" in w]
    if path.stem in ORIGINAL_CANNOT_RUN:
        assert not row["check_ran"] and ORIGINAL_CANNOT_RUN[path.stem] in row["error"], row
        return
    assert row["check_ran"] and not row["in_part"] and not ran_in_part, why
    assert row["matched"], why
    assert row["bindings"], row
    if path.suffix == ".pt2":
        _deployed(path, tmp_path / f"{path.stem}.{target}.legal.pt2", row)


def _deployed(path, legal, row):
    """A torch.export program of the corpus: its legal form for coreml is what the
    target takes (no refusal left, every tensor at rank <= 5), what coremltools converts,
    and what ExecuTorch (XNNPACK) runs with the original's outputs (the check's, where
    the executorch extra is installed); its original has a rank-6 tensor."""
    from needs import has

    from legalizer.kinds.pt2.safety import load_untrusted

    def rank(program):
        return max(len(n.meta["val"].shape) for n in program.graph.nodes if hasattr(n.meta.get("val"), "shape"))

    program = load_untrusted(legal)
    assert not row["refused_after"] and rank(program) <= 5 < rank(load_untrusted(path).run_decompositions())
    if has("executorch"):
        assert row["executorch_ran"] and row["executorch_matched"], row.get("executorch_error")
    if has("coreml"):
        import coremltools as ct

        # coremltools 9.0 refuses any program read back from a .pt2 as it is ("does not
        # handle/bind value at index 1", the original's too): decomposed again, it converts
        assert ct.convert(program.run_decompositions(), convert_to="mlprogram") is not None


def _converted_cases():
    if not CONVERTED:
        return [pytest.param(None, marks=pytest.mark.skip(
            reason=f"no converter output in {corpus.CACHE}: bash scripts/setup_tosa_converter.sh, then python"
                   " scripts/corpus.py builds them"))]
    return [pytest.param(p, id=p.stem, marks=[] if p.stem in SAMPLE else [pytest.mark.slow]) for p in CONVERTED]


@pytest.mark.parametrize("path", _converted_cases())
def test_converter_output_against_its_tflite(path, tmp_path):
    """What tosa-converter-for-tflite wrote from a real model is read (--verify-only,
    under the tosa profile) and compared with the model on IREE vs LiteRT."""
    row = corpus.against_row(path, tmp_path)
    if path.stem in AGAINST_REFUSED:
        ref = path.with_name(row["reference"])
        start, part = (t.replace("REF", str(ref)) for t in AGAINST_REFUSED[path.stem])
        assert row["exit"] == 2 and len(row["error"]) == 1, row
        assert row["error"][0].startswith(f"legalize: error: {path}: {start}") and part in row["error"][0], row
        if not part:
            assert row["error"][0] == f"legalize: error: {path}: {start}"
        return
    assert (row["exit"], row["error"]) == (0, []), row
    assert row["ran"] and row["matched"] and row["provider"] == "IREE llvm-cpu vs LiteRT", row
    assert row["stdout"] == f"{path}: legal under 'tosa', results match (IREE llvm-cpu vs LiteRT)"


def test_the_corpus_is_what_the_issue_asks():
    """30+ models from the three sources, and the converter's output of each TFLite
    model; every exception above names a corpus model."""
    names = corpus.corpus()
    kinds = {n.split("_", 1)[0] for n in names}
    assert len(names) >= 30 and kinds == {"hf", "pt2", "keras", "wheel", "tosa"}
    assert {n for n, suffix in names.items() if suffix == ".pt2"} == set(corpus.PT2_MODELS)
    keras = [n for n in names if n.startswith("keras_")]
    assert len(keras) == 16 and sum(n.endswith("_int8") for n in keras) == 8
    tflite = sorted(n for n, suffix in names.items() if suffix == ".tflite")
    assert sorted(corpus.source_of(n) for n in names if names[n] == ".mlirbc") == tflite
    for table in (ORIGINAL_CANNOT_RUN, PENDING, corpus.CHECK_NEEDS, AGAINST_REFUSED,
                  corpus.AGAINST_NEEDS, SAMPLE):
        assert set(table) <= set(names)
    assert corpus.select(["keras_resnet50*"]) == ["keras_resnet50", "keras_resnet50_int8"]
