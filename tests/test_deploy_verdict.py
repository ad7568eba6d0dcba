"""A deployment target's verdict on the real models of the issue (the corpus's wheels):
a float model for Vela, which would place none of its ops on the NPU, is refused before
any work, saying that it must be quantized first (it once came back "legalized", exit 0,
with nothing refused). The partial placement's verdict (exit 1 unless --allow-fallback)
is in tests/test_target_onnx_input.py."""

from __future__ import annotations

import pytest

from corpus_models import model_path
from helpers import cli_in_process

WHY = ("places int8/uint8/int16 ops on the NPU, and this model computes in float (unsupported DataType Float32):"
       " quantize it first (full-integer quantization)")


@pytest.mark.parametrize("name,package,target,tool", [
    ("wheel_mediapipe_face_detection_short_range", "mediapipe", "ethos-u", "Vela (Ethos-U85)"),
    ("wheel_rapidocr_det", "rapidocr", "ethos-u", "Vela (Ethos-U85)"),
    ("wheel_rapidocr_det", "rapidocr", "ethos-u55", "Vela legacy core (Ethos-U55/U65)")])
def test_a_float_model_is_refused_for_an_integer_only_target(tmp_path, name, package, target, tool):
    src = model_path(name)
    if not src.is_file():
        pytest.skip(f"the corpus's {name} (the {package} wheel): python scripts/corpus.py --only {name}")
    out, rep = tmp_path / f"out{src.suffix}", tmp_path / "r.json"
    code, text, err = cli_in_process(src, "--target", target, "-o", out, "--report", rep)
    assert (code, text) == (2, "")
    assert err.splitlines() == [f"legalize: error: {src}: --target {target}: {tool} {WHY}"]
    assert not out.exists() and rep.is_file()  # the report says so too (an error report)
