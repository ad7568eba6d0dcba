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
def test_pt2_cli_writes_a_legal_pt2_checked_in_pytorch(tmp_path, name, target, legalize):
    """``legalize m.pt2`` writes ``m.legal.pt2``: a torch.export program, legal for the
    target as its Core ATen graph, with the program's symbolic dims and ranges, checked
    against the original program in PyTorch (size-1 dims among the bindings)."""
    require("torch")
    from legalizer.kinds.pt2.importer import import_program
    from legalizer.kinds.pt2.safety import load_untrusted
    from legalizer.pipeline import verify_model
    from legalizer.targets import target as target_named

    src = tmp_path / name
    shutil.copy(MODELS / name, src)
    p = legalize(src, "--target", target, "--report", tmp_path / "r.json", **BARE)
    assert p.returncode == 0, p.stdout + p.stderr
    out = tmp_path / name.replace(".pt2", ".legal.pt2")
    assert out.exists()
    assert "outputs match in PyTorch" in p.stdout
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["format"] == "pt2" and report["output"] == str(out)
    check = report["check"]
    assert check["ok"] and check["provider"] == "torch"
    assert any(1 in b["dims"].values() for b in check["bindings"]) or not check["bindings"][0]["dims"]
    assert all(not b.get("skipped") for b in check["bindings"])
    assert _max_err(check) <= 1e-5
    # what was written is a program the safe loader reads, legal for the target, with the
    # original's symbols and ranges
    legal, original = load_untrusted(out), load_untrusted(src)
    assert {str(k): str(v) for k, v in legal.range_constraints.items()} == \
           {str(k): str(v) for k, v in original.range_constraints.items()}
    assert not verify_model(import_program(legal), target_named(target).profile.name).violations
    assert src.read_bytes() == (MODELS / name).read_bytes()


def test_pt2_emit_onnx_writes_the_legal_programs_onnx_form(tmp_path, legalize):
    require("torch")
    src = tmp_path / "mlp.pt2"
    shutil.copy(MODELS / "mlp.pt2", src)
    p = legalize(src, "--emit", "pt2", "--emit", "onnx", **BARE)
    assert p.returncode == 0, p.stdout + p.stderr
    assert (tmp_path / "mlp.legal.pt2").exists()
    proto = onnx.load(str(tmp_path / "mlp.legal.onnx"))
    dyn = [d.dim_param for i in proto.graph.input for d in i.type.tensor_type.shape.dim if not d.HasField("dim_value")]
    assert dyn and all(dyn), dyn  # the program's symbols, as dim params


def test_pt2_symbolic_dims_follow_the_program(tmp_path):
    """The ONNX inputs carry the program's own symbols: the transformer's x and mask
    share ``seq``, so the export names both with one symbol."""
    require("torch")
    model = legalizer.load(MODELS / "transformer_block.pt2")  # the library's Model of a .pt2: its ONNX export
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


def test_a_difference_from_the_original_fails_the_check(tmp_path, monkeypatch):
    """A legal program whose outputs differ from the original's in PyTorch: exit 1,
    nothing written, the report says by how much."""
    require("torch")
    from legalizer import pipeline
    from legalizer.kinds.pt2 import onnx_export as pytorch

    real = pytorch.run_program
    originals = []

    def run_program(source, feeds):
        out = real(source, feeds)
        return out if source.program in originals else [o + 1e-3 for o in out]

    monkeypatch.setattr(pytorch, "run_program", run_program)
    src = tmp_path / "mlp.pt2"
    shutil.copy(MODELS / "mlp.pt2", src)
    from legalizer.kinds.pt2 import importer as aten

    real_import = aten.import_program

    def import_program(program, what="the program"):
        originals.append(program)
        return real_import(program, what)

    monkeypatch.setattr(aten, "import_program", import_program)
    res = pipeline.run(src, pipeline.RunOptions())
    assert res.exit_code == 1
    assert sorted(x.name for x in tmp_path.iterdir()) == ["mlp.pt2"]
    check = res.report.to_json()["check"]
    assert check["provider"] == "torch" and not check["ok"]
    assert _max_err(check) == pytest.approx(1e-3, rel=1e-3)


def test_check_api_with_a_pt2_path(tmp_path):
    """``legalizer.legalize("m.pt2")`` writes ``m.legal.pt2`` and returns a Result with its
    path; ``legalizer.check("m.pt2", "m.legal.pt2")`` runs both programs in PyTorch."""
    require("torch")
    src = tmp_path / "small_cnn.pt2"
    shutil.copy(MODELS / "small_cnn.pt2", src)
    res = legalizer.legalize(src, "xla")
    out = res.output
    assert out == tmp_path / "small_cnn.legal.pt2" and res.check.state == "ran" and res.check.ok
    result = legalizer.check(src, out)
    assert result.ok and result.provider == "torch" and len(result.bindings) == 8
    assert result.to_json()["provider"] == "torch"
