"""The main job on the real-model corpus (scripts/corpus.py, cached in .cache/corpus/):
every cached model, ``legalize MODEL --target tosa`` and ``--target xla`` with the
check, in a process of its own. Each must exit 0 with its check run fully (not "ran in
part") and matching, except:

- ORIGINAL_CANNOT_RUN: originals that LiteRT cannot run at all (MediaPipe's own custom
  ops, which only MediaPipe's resolver has): legalized, and the check says so;
- SPEC_REJECTS: inputs that MLIR's Broadcastable trait rejects as its pseudo-code says
  (an unranked operand is left out of the inference, so the result's rank must be the
  ranked operands'): exit 1 with that diagnostic, nothing written;
- PENDING: failures that issue 14's other items fix on their own branches; strict
  xfails, so that each fails here once its fix is merged and must then be removed.

Without a built corpus the tests skip, saying how to build it. The default run takes
``SAMPLE``; ``-m slow`` runs the rest.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import corpus  # noqa: E402
from needs import require  # noqa: E402

MODELS = corpus.cached()

ORIGINAL_CANNOT_RUN = {
    "wheel_mediapipe_face_landmark_with_attention": "unresolved custom op: Landmarks2TransformMatrix",
}
# Silero VAD's LSTM state is squeezed in one branch of nested Ifs and not in the other,
# so its rank is unknown; the final state is Add(that, a scalar) -> a rank-3 result.
SPEC_REJECTS = {
    "wheel_silero_vad_16k_op15": "result type 'AddstateN_dim_0xbatchxAddstateN_dim_2' not broadcast compatible"
                                 " with broadcasted operands's shapes '': rank 3 vs 0",
}
PENDING = {
}
# The default run's sample (the whole corpus is ``-m slow``): a transformer, an int8
# TFLite network, and the model the spec rejects.
SAMPLE = {"hf_bert", "keras_mobilenetv2_int8", "wheel_silero_vad_16k_op15"}


def _cases():
    if not MODELS:
        return [pytest.param(None, None, marks=pytest.mark.skip(
            reason=f"the corpus is not built ({corpus.CACHE} has no model): python scripts/corpus.py builds it"))]
    cases = []
    for path in MODELS:
        for target in corpus.TARGETS:
            marks = [pytest.mark.xfail(strict=True, reason=PENDING[path.stem])] if path.stem in PENDING else []
            marks += [] if path.stem in SAMPLE else [pytest.mark.slow]
            cases.append(pytest.param(path, target, marks=marks, id=f"{path.stem}-{target}"))
    return cases


@pytest.mark.parametrize("path, target", _cases())
def test_main_job_on_corpus_model(path, target, tmp_path):
    if path.suffix == ".tflite":
        require("litert")  # the check runs on LiteRT
    row = corpus.legalize_row(path, target, tmp_path, corpus.check_options(path, tmp_path))
    why = row.get("error") or row["stderr"][-600:]
    if path.stem in SPEC_REJECTS:
        assert (row["exit"], row["violations"], row["legalized"]) == (1, [SPEC_REJECTS[path.stem]], False), row
        return
    assert row["exit"] == 0, why
    assert row["legalized"], why
    ran_in_part = [w for w in row["warnings"] if "ran in part" in w]
    if path.stem in ORIGINAL_CANNOT_RUN:
        assert not row["check_ran"] and ORIGINAL_CANNOT_RUN[path.stem] in row["error"], row
        return
    assert row["check_ran"] and not row["in_part"] and not ran_in_part, why
    assert row["matched"], why
    assert row["bindings"], row


def test_the_corpus_is_what_the_issue_asks():
    """30+ models from the three sources; every exception above names a corpus model."""
    names = corpus.corpus()
    kinds = {n.split("_", 1)[0] for n in names}
    assert len(names) >= 30 and kinds == {"hf", "keras", "wheel"}
    keras = [n for n in names if n.startswith("keras_")]
    assert len(keras) == 16 and sum(n.endswith("_int8") for n in keras) == 8
    for table in (ORIGINAL_CANNOT_RUN, SPEC_REJECTS, PENDING, corpus.CHECK_NEEDS, SAMPLE):
        assert set(table) <= set(names)
    assert corpus.select(["keras_resnet50*"]) == ["keras_resnet50", "keras_resnet50_int8"]
