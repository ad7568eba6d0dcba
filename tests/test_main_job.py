"""The main job end to end: `legalize MODEL [OUTPUT]` writes the tosa form, proves it
legal, checks it on onnxruntime, and writes nothing when anything fails."""

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import legalizer
from legalizer import pipeline, targets

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"
WHEEL = Path(onnx.__file__).parent / "backend" / "test" / "data"


def copy_model(name: str, tmp_path: Path) -> Path:
    dst = tmp_path / name
    shutil.copy(MODELS / name, dst)
    return dst


def test_default_output_is_legal_and_checked(tmp_path, legalize):
    src = copy_model("mlp_bias.onnx", tmp_path)
    before = src.read_bytes()
    p = legalize(src, "--report", tmp_path / "r.json")
    assert p.returncode == 0, p.stderr
    out = tmp_path / "mlp_bias.legal.onnx"
    assert src.read_bytes() == before
    m = onnx.load(str(out))
    onnx.checker.check_model(m, full_check=True)
    assert legalizer.verify(legalizer.load(out).graph, "tosa").violations == []
    assert [i.name for i in m.graph.input] == ["x"] and [o.name for o in m.graph.output] == ["y"]
    assert {t.name: list(t.dims) for t in m.graph.initializer if t.name.endswith("_r2")} == {
        "b1_r2": [1, 32], "b2_r2": [1, 8], "scale_r2": [1, 1]}
    # no dead node: the rank-1 originals are gone
    assert not {"b1", "b2", "scale"} & {t.name for t in m.graph.initializer}
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["output"] == str(out) and rep["outputs"] == {"onnx": str(out)}
    assert rep["stats"]["constants_folded"] == 3 and rep["stats"]["nodes_out"] == 6
    assert rep["check"]["ok"] and [b["dims"] for b in rep["check"]["bindings"]] == [{"N": 3}, {"N": 1}]
    assert set(rep["timings_s"]) >= {"load", "verify", "passes", "check", "save"}
    lines = p.stdout.splitlines()
    assert "PASSED | Output: 'y' | N=3 | max abs err 0, max rel err 0" in lines
    assert "PASSED | Output: 'y' | N=1 | max abs err 0, max rel err 0" in lines
    # --provider auto: CUDA where onnxruntime has it
    assert lines[-1] == f"{src}: legalized for 'tosa' -> {out}, outputs match on {rep['check']['provider']}"
    assert rep["check"]["provider"] == ("CUDAExecutionProvider" if "CUDAExecutionProvider" in
                                        ort.get_available_providers() else "CPUExecutionProvider")


def test_existing_output_needs_force_and_input_is_never_overwritten(tmp_path, legalize):
    src = copy_model("mlp_bias.onnx", tmp_path)
    out = tmp_path / "o.onnx"
    out.write_bytes(b"keep me")
    p = legalize(src, out)
    assert p.returncode == 2 and out.read_bytes() == b"keep me"
    assert p.stderr.strip() == f"legalize: error: {out}: already exists (use --force to replace it)"
    assert legalize(src, "-o", out, "--force", "-q").returncode == 0
    onnx.checker.check_model(onnx.load(str(out)))
    before = src.read_bytes()
    p = legalize(src, src, "--force")
    assert p.returncode == 2 and "refusing to overwrite the input model" in p.stderr
    assert src.read_bytes() == before


def test_violating_model_is_not_legalized(tmp_path, legalize):
    src = copy_model("incompatible_add.onnx", tmp_path)
    p = legalize(src)
    assert p.returncode == 1
    assert sorted(x.name for x in tmp_path.iterdir()) == ["incompatible_add.onnx"]
    assert p.stdout.splitlines()[-1] == f"{src}: 1 violation under 'mlir'; not legalized, nothing written"


def test_dim_binding_and_given_inputs(tmp_path, legalize):
    src = copy_model("mlp_bias.onnx", tmp_path)
    x = np.linspace(-1, 1, 5 * 16, dtype=np.float32).reshape(5, 16)
    np.save(tmp_path / "x.npy", x)
    p = legalize(src, "--input", f"x={tmp_path / 'x.npy'}", "--json", "-q")
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    # the given array fixes N=5 by its shape; the dim binding says so too
    p2 = legalize(src, "--dim", "N=7", "--json", "-q", "--force")
    assert [b["dims"] for b in json.loads(p2.stdout)["check"]["bindings"]] == [{"N": 7}]
    assert rep["check"]["ok"]
    p3 = legalize(src, "--dim", "N=seven", "--force")
    assert p3.returncode == 2 and "--dim expects NAME=SIZE" in p3.stderr


def test_no_check(tmp_path, legalize):
    src = copy_model("mlp_bias.onnx", tmp_path)
    p = legalize(src, "--no-check", "--json", "-q")
    assert p.returncode == 0
    assert json.loads(p.stdout)["check"] == {"ran": False, "ok": None}
    assert (tmp_path / "mlp_bias.legal.onnx").exists()


def _sabotage(graph, ctx):
    """A wrong rewrite: every Add becomes a Sub."""
    for n in graph.ops():
        if n.op_type == "Add":
            n.op_type = "Sub"
    return True


def test_numeric_mismatch_exits_1_and_writes_nothing(tmp_path, monkeypatch):
    src = copy_model("mlp_bias.onnx", tmp_path)
    tosa = targets.TARGETS["tosa"]
    monkeypatch.setitem(targets.TARGETS, "tosa", dataclasses.replace(tosa, passes=tosa.passes + (_sabotage,)))
    res = pipeline.run(src, pipeline.RunOptions(output=tmp_path / "out.onnx"))
    assert res.exit_code == 1
    assert not res.check.ok and res.report.check["ok"] is False
    assert any(not o.ok for b in res.check.bindings for o in b.outputs)
    assert sorted(x.name for x in tmp_path.iterdir()) == ["mlp_bias.onnx"]


def test_original_that_onnxruntime_cannot_run_is_reported_as_such(tmp_path, legalize):
    # Gemm-6 (legacy broadcast): onnxruntime has no kernel; legalize raises the model to
    # opset 7, so the output runs, but there is nothing to compare it with.
    src = tmp_path / "addmm.onnx"
    shutil.copy(WHEEL / "pytorch-operator" / "test_operator_addmm" / "model.onnx", src)
    p = legalize(src, "--json")
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    assert rep["check"]["ran"] is False and "original does not load on onnxruntime" in rep["check"]["error"]
    assert any("numeric check did not run" in w for w in rep["warnings"])
    out = onnx.load(str(tmp_path / "addmm.legal.onnx"))
    assert out.opset_import[0].version == 7
    ort.InferenceSession(out.SerializeToString(), providers=["CPUExecutionProvider"])


def test_cuda_provider_without_cuda_is_a_clear_error(tmp_path, legalize):
    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("onnxruntime here has CUDA; test_cuda_check covers it")
    src = copy_model("mlp_bias.onnx", tmp_path)
    p = legalize(src, "--provider", "cuda")
    assert p.returncode == 2
    assert p.stderr.strip().startswith("legalize: error: --provider cuda: onnxruntime has no CUDAExecutionProvider")
    assert not (tmp_path / "mlp_bias.legal.onnx").exists()


@pytest.mark.skipif("CUDAExecutionProvider" not in ort.get_available_providers(),
                    reason="needs onnxruntime-gpu with a CUDA device (see CONTRIBUTING.md's GPU set-up)")
def test_cuda_check(tmp_path, legalize):
    src = copy_model("mlp_bias.onnx", tmp_path)
    p = legalize(src, "--provider", "cuda", "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["check"]["provider"] == "CUDAExecutionProvider"


@pytest.mark.parametrize("strict, emitted, elided", [(False, 2, 0), (True, 0, 2)])
def test_xla_target_counts_runtime_checks(tmp_path, strict, emitted, elided, legalize):
    src = copy_model("dynamic_broadcast.onnx", tmp_path)
    args = [src, "--target", "xla", "--json", "-q"] + (["--assume-dynamic-not-one"] if strict else [])
    p = legalize(*args)
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    assert rep["target"] == "xla"
    st = rep["stats"]
    assert (st["runtime_broadcast_checks"], st["runtime_broadcast_checks_elided"]) == (emitted, elided)
    assert st["broadcasts_made_explicit"] == 6
    assert rep["check"]["ok"]
    compared = [b for b in rep["check"]["bindings"] if not b.get("skipped")]
    # the constraints give the sizes each dim may take: every binding is one the model accepts
    assert len(compared) == len(rep["check"]["bindings"]) == (1 if strict else 8)
    if strict:
        assert {c["text"] for c in rep["constraints"]} >= {"M == N", "b[0] == 2"}
    out = legalizer.load(tmp_path / "dynamic_broadcast.legal.onnx")
    assert legalizer.verify(out.graph, "xla").violations == []
    ops = {n.op for n in out.graph.ops()}
    assert {"Expand", "Shape", "Gather"} <= ops and ("Where" in ops) == (not strict)


def test_cuda_sessions_multiply_in_fp32_not_tf32(monkeypatch):
    """Seen on an H100: TF32 matmuls (onnxruntime's CUDA default) put the check 4.5e-4 off
    PyTorch's fp32 on the sample transformer, failing it."""
    from legalizer.numeric import ort as ort_check

    seen = {}
    monkeypatch.setattr(ort, "InferenceSession",
                        lambda source, opts, providers, **kw: seen.setdefault("p", providers))
    ort_check.session(onnx.load(str(MODELS / "mlp_bias.onnx")), ["CUDAExecutionProvider", "CPUExecutionProvider"])
    assert seen["p"] == [("CUDAExecutionProvider", {"use_tf32": "0"}), "CPUExecutionProvider"]
