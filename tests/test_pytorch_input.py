"""PyTorch input (the optional ``torch`` extra): ``legalize model.pt2`` and
``legalizer.load(module, example_inputs=...)``, checked against onnxruntime on the
original export and against PyTorch itself."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

import legalizer
import sample_models
from needs import require

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"
SCRIPT = ROOT / "scripts" / "make_models.py"
PT2 = ["transformer_block.pt2", "mlp.pt2", "small_cnn.pt2"]


# How the command runs here: a bare environment (this checkout on PYTHONPATH, 120
# columns), ``python -c`` calling ``main``, time for torch to import.
BARE = {"isolated": True, "prelude": "", "timeout": 600}


def _max_err(check: dict) -> float:
    return max(o["max_abs_err"] for b in check["bindings"] if not b.get("skipped") for o in b["outputs"])


def test_pt2_without_torch_is_one_line_exit_2(tmp_path, legalize):
    """No torch: exit 2, one line naming the extra, nothing written."""
    shutil.copy(MODELS / "mlp.pt2", tmp_path / "mlp.pt2")
    p = legalize(tmp_path / "mlp.pt2", isolated=True, prelude="import sys; sys.modules['torch'] = None; ",
                 timeout=600)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert "torch.export archive" in lines[0] and "pip install 'legalizer[torch]'" in lines[0], lines[0]
    assert "Traceback" not in p.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == ["mlp.pt2"]


def test_pt2_extra_is_the_pyproject_one():
    text = (ROOT / "pyproject.toml").read_text()
    assert 'name = "legalizer"' in text and "\ntorch = [" in text


@pytest.mark.parametrize("name", PT2)
@pytest.mark.parametrize("target", ["tosa", "xla"])
def test_pt2_cli_checked_against_ort_and_torch(tmp_path, name, target, legalize):
    require("torch")
    src = tmp_path / name
    shutil.copy(MODELS / name, src)
    p = legalize(src, "--target", target, "--report", tmp_path / "r.json", "--provider", "cpu", **BARE)
    assert p.returncode == 0, p.stdout + p.stderr
    out = tmp_path / name.replace(".pt2", ".legal.onnx")
    assert out.exists()
    assert "outputs match on CPUExecutionProvider and PyTorch" in p.stdout
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["format"] == "pt2" and report["output"] == str(out)
    check = report["check"]
    assert check["ok"] and check["provider"] == "CPUExecutionProvider"
    torch_check = check["torch"]
    assert torch_check["ran"] and torch_check["ok"] and torch_check["provider"] == "torch"
    # the same bindings, compared against both references; size-1 dims included
    assert [b["dims"] for b in torch_check["bindings"]] == [b["dims"] for b in check["bindings"]]
    assert any(1 in b["dims"].values() for b in torch_check["bindings"])
    assert all(not b.get("skipped") for b in torch_check["bindings"])
    assert _max_err(check) <= 1e-5 and _max_err(torch_check) <= 1e-5
    # the legal model keeps the program's symbolic dims, and is legal for its target
    legal = onnx.load(str(out))
    dyn = [d.dim_param for i in legal.graph.input for d in i.type.tensor_type.shape.dim if not d.HasField("dim_value")]
    assert dyn and all(dyn), dyn
    assert legalizer.verify(legal, target).ok
    assert src.read_bytes() == (MODELS / name).read_bytes()


def test_pt2_symbolic_dims_follow_the_program(tmp_path):
    """The ONNX inputs carry the program's own symbols: the transformer's x and mask
    share ``seq``, so the export names both with one symbol."""
    require("torch")
    model = legalizer.load(MODELS / "transformer_block.pt2")
    assert model.format == "onnx" and model.torch is not None
    shapes = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
              for i in model.torch.onnx.graph.input}
    x, mask = shapes["x"], shapes["mask"]
    assert isinstance(x[0], str) and isinstance(x[1], str) and x[2] == 32
    assert mask == [x[1], x[1]]
    program_syms = {str(s) for s in model.torch.program.range_constraints}
    assert {x[0], x[1]} <= program_syms


def test_pt2_with_torch_corrupt_archive_is_exit_2(tmp_path, legalize):
    require("torch")
    import zipfile

    bad = tmp_path / "m.pt2"
    with zipfile.ZipFile(bad, "w") as z:
        z.writestr("model/archive_format", "pt2")
        z.writestr("model/archive_version", "0")
    p = legalize(bad, "--verify-only", **BARE)
    assert p.returncode == 2
    assert len(p.stderr.strip().splitlines()) == 1 and "torch.export" in p.stderr, p.stderr


def test_module_api_round_trip():
    """``legalizer.load(module, example_inputs=..., dynamic_shapes=...)``, legalized in
    place, checked against its export and PyTorch."""
    require("torch")
    import torch
    make, inputs = sample_models._torch_modules()["transformer_block"]
    torch.manual_seed(0)
    module = make().eval()
    args, names, dynamic = inputs()
    model = legalizer.load(module, example_inputs=args, dynamic_shapes=tuple(dynamic[n] for n in names))
    assert model.torch is not None
    assert not legalizer.verify(model, "tosa").ok  # the bias and the mask have lower ranks
    stats = legalizer.legalize(model, "tosa").legalized.stats
    assert stats["reshapes_inserted"] >= 1
    assert legalizer.verify(model, "tosa").ok
    result = legalizer.check(model)  # against its own export and PyTorch
    assert result.ok and result.torch is not None and result.torch.ok
    assert len(result.torch.bindings) == len(result.bindings) == 4
    # the reference really is PyTorch: the module's own output, for one binding
    x = np.random.default_rng(1).standard_normal((2, 4, 32)).astype(np.float32)
    m = np.zeros((4, 4), np.float32)
    with torch.no_grad():
        want = module(torch.from_numpy(x), torch.from_numpy(m)).numpy()
    from legalizer.numeric.ort_session import session

    got = session(legalizer.to_onnx(model), ["CPUExecutionProvider"]).run(None, {"x": x, "mask": m})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_module_without_example_inputs_is_bad_input():
    require("torch")
    import torch
    with pytest.raises(legalizer.BadInput, match="example_inputs"):
        legalizer.load(torch.nn.Linear(2, 2))


def test_pt2_samples_rerun_byte_identical(tmp_path):
    require("torch")
    if sample_models.version_mismatch():
        pytest.skip(f"{sample_models.version_mismatch()}: the committed .pt2 files were made with the pinned versions")
    out = subprocess.run([sys.executable, str(SCRIPT), "--only", "pt2", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(PT2)
    for name in PT2:
        assert (tmp_path / name).read_bytes() == (MODELS / name).read_bytes(), name
        assert (MODELS / name).stat().st_size < 1 << 20


def test_a_difference_from_torch_fails_the_check(tmp_path, monkeypatch):
    """Outputs that match the export on onnxruntime but not PyTorch: exit 1, nothing
    written, the report says which comparison failed."""
    require("torch")
    from legalizer import pipeline
    from legalizer.importers import pytorch

    from legalizer.numeric import torch_ref

    real = pytorch.run_program
    monkeypatch.setattr(pytorch, "run_program", lambda source, feeds: [o + 1e-3 for o in real(source, feeds)])
    # PyTorch runs the program in the child that runs models, out of the patch's reach: here, in this process
    monkeypatch.setattr(torch_ref, "ChildRunner", lambda factory, *args, model="", preloaded=None, **kw: factory(*args, **kw))
    src = tmp_path / "mlp.pt2"
    shutil.copy(MODELS / "mlp.pt2", src)
    res = pipeline.run(src, pipeline.RunOptions(provider="cpu"))
    assert res.exit_code == 1
    assert sorted(x.name for x in tmp_path.iterdir()) == ["mlp.pt2"]
    check = res.report.to_json()["check"]
    assert all(b["ok"] for b in check["bindings"])  # the export on onnxruntime matches
    assert not check["ok"] and not check["torch"]["ok"]
    assert _max_err(check["torch"]) == pytest.approx(1e-3, rel=1e-3)


def test_check_api_with_a_pt2_path(tmp_path):
    """``legalizer.check("m.pt2", legal)``: against the export and against PyTorch;
    ``legalizer.legalize("m.pt2")`` writes ``m.legal.onnx`` and returns a Result with its path."""
    require("torch")
    src = tmp_path / "small_cnn.pt2"
    shutil.copy(MODELS / "small_cnn.pt2", src)
    res = legalizer.legalize(src, "xla", provider="cpu")
    out = res.output
    assert out == tmp_path / "small_cnn.legal.onnx" and res.check.state == "ran" and res.check.ok
    result = legalizer.check(src, out, provider="cpu")
    assert result.ok and result.torch.ok and len(result.torch.bindings) == 8
    assert result.to_json()["torch"]["provider"] == "torch"
