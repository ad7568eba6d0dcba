"""The sample models exported from PyTorch (models/*.dynamo.onnx, *.torchscript.onnx:
tests/sample_models.py's, written by scripts/make_models.py): each is a valid ONNX model
that onnxruntime runs, legal under the mlir profile, with the rank-changing broadcasts
the tosa target must fix; the dynamo ones have symbolic input dims; and the committed
files are what the script makes (when the pinned torch is installed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

import legalizer
from legalizer.numeric import ort as ort_check
from legalizer.pipeline import is_output
import sample_models
from needs import require

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"
SCRIPT = ROOT / "scripts" / "make_models.py"


TORCH_MODELS = sample_models.TORCH_MODELS

# What each model's inputs look like: the symbols (dynamo) or static shapes (torchscript).
INPUTS = {
    "transformer_block.dynamo.onnx": {"x": ["batch", "seq", 32], "mask": ["seq", "seq"]},
    "mlp.dynamo.onnx": {"x": ["batch", 16]},
    "small_cnn.dynamo.onnx": {"x": ["batch", 3, "height", "width"]},
    "transformer_block.torchscript.onnx": {"x": [2, 5, 32], "mask": [5, 5]},
    "mlp.torchscript.onnx": {"x": [4, 16]},
    "small_cnn.torchscript.onnx": {"x": [2, 3, 8, 8]},
}

# Broadcasts the models were made to contain, as (op, operand shapes): each must be an
# operand-rank-mismatch under the tosa profile (what `legalize` rewrites).
_T = ("batch", "seq")
EXPECTED_TOSA = {
    "transformer_block.dynamo.onnx": {
        ("Add", ((*_T, "96"), ("96",))),                                     # qkv + rank-1 bias
        ("Mul", (("batch", "2", "seq", "seq"), ())),                         # scores * scale
        ("Add", (("batch", "2", "seq", "seq"), ("seq", "seq"))),             # + mask [S,S]
        ("Add", ((*_T, "32"), ("32",))),                                     # Linear biases
        ("Add", ((*_T, "64"), ("64",))),
    },
    "transformer_block.torchscript.onnx": {
        ("Add", (("2", "5", "96"), ("96",))),
        ("Mul", (("2", "2", "5", "5"), ())),
        ("Add", (("2", "2", "5", "5"), ("5", "5"))),
        ("Add", (("32",), ("2", "5", "32"))),
        ("Add", (("64",), ("2", "5", "64"))),
    },
    "mlp.dynamo.onnx": {("Add", (("batch", "32"), ("32",)))},
    "mlp.torchscript.onnx": {("Add", (("4", "32"), ("32",)))},
    "small_cnn.dynamo.onnx": {("Mul", (("batch", "8", "height", "width"), ("8", "1", "1")))},
    "small_cnn.torchscript.onnx": {("Mul", (("2", "8", "8", "8"), ("8", "1", "1")))},
}

params = pytest.mark.parametrize("name", TORCH_MODELS)


def test_every_committed_torch_model_is_listed():
    on_disk = {p.name for p in MODELS.glob("*.onnx") if p.name.endswith((".dynamo.onnx", ".torchscript.onnx"))}
    assert on_disk == set(TORCH_MODELS) == set(INPUTS) == set(EXPECTED_TOSA)


def test_models_folder_is_small():
    # the committed files (not legalize's own *.legal.onnx outputs, which git ignores)
    total = sum(p.stat().st_size for p in MODELS.glob("*.onnx") if not is_output(p))
    assert total < 1 << 20, f"models/ holds {total} bytes"


@params
def test_checker_full(name):
    proto = onnx.load(str(MODELS / name))
    onnx.checker.check_model(proto, full_check=True)
    # weights inside the file, no external data
    assert not any(t.external_data for t in proto.graph.initializer)
    assert not (MODELS / f"{name}.data").exists()


@params
def test_input_dims(name):
    proto = onnx.load(str(MODELS / name))
    got = {}
    for vi in proto.graph.input:
        got[vi.name] = [d.dim_param if d.dim_param else d.dim_value for d in vi.type.tensor_type.shape.dim]
    assert got == INPUTS[name]
    symbolic = any(isinstance(d, str) for dims in got.values() for d in dims)
    assert symbolic == (".dynamo." in name)


@params
def test_loads_and_is_legal_under_mlir(name):
    model = legalizer.load(MODELS / name)
    assert model.format == "onnx"
    res = legalizer.verify(model.graph, "mlir")
    assert res.ok, [str(d) for d in res.violations]
    assert res.elementwise_nodes > 0


@params
def test_tosa_profile_flags_the_broadcasts(name):
    model = legalizer.load(MODELS / name)
    res = legalizer.verify(model.graph, "tosa")
    flagged = {(d.op, tuple(tuple(s) for s in d.to_json()["operand_shapes"]))
               for d in res.violations if d.code == "operand-rank-mismatch"}
    missing = EXPECTED_TOSA[name] - flagged
    assert not missing, f"not flagged: {missing}; flagged: {sorted(flagged)}"
    assert {d.code for d in res.violations} == {"operand-rank-mismatch"}


@params
def test_runs_on_onnxruntime(name):
    proto = onnx.load(str(MODELS / name))
    sess = ort_check.session(proto, ["CPUExecutionProvider"])
    bindings = ort_check.bindings_for(proto, {})
    if ".dynamo." in name:
        assert len(bindings) > 1  # 1 and a small size for each symbol
    for dims in bindings:
        feeds = ort_check.synthesize(proto, dims, {})
        (y,) = sess.run(None, feeds)
        assert y.dtype == np.float32 and np.isfinite(y).all(), dims
        batch = feeds["x"].shape[0]
        assert y.shape[0] == batch
        if name.startswith("transformer_block"):
            assert y.shape == feeds["x"].shape


@pytest.mark.slow  # re-exports every torch sample model
def test_rerun_is_byte_identical(tmp_path):
    require("torch")  # to re-export the sample models
    mismatch = sample_models.version_mismatch()
    if mismatch:
        pytest.skip(f"{mismatch}: the committed models were exported with the pinned versions")
    # A fresh process, as a user runs it (the exporters keep global state).
    out = subprocess.run([sys.executable, str(SCRIPT), "--only", "torch", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-4000:]
    assert "skipped" not in out.stdout, out.stdout
    made = sorted(p.name for p in tmp_path.iterdir())
    assert made == sorted(TORCH_MODELS)
    differ = [n for n in made if (tmp_path / n).read_bytes() != (MODELS / n).read_bytes()]
    assert not differ, f"re-exported models differ from the committed ones: {differ}"


def test_pins_match_pyproject():
    import tomllib
    with open(ROOT / "pyproject.toml", "rb") as f:
        extra = tomllib.load(f)["project"]["optional-dependencies"]["torch"]
    assert sorted(extra) == sorted(f"{k}=={v}" for k, v in sample_models.PINNED.items())
