"""``--emit``: which files are written where, and the usage errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from legalizer.emit_formats import emit_paths
from helpers import assert_clean, lines
from needs import require

ROOT = Path(__file__).resolve().parent.parent


def test_paths_beside_the_output_stem():
    paths = emit_paths(Path("d/m.legal.onnx"), ["onnx", "stablehlo", "tosa"], "onnx")
    assert paths == {"onnx": Path("d/m.legal.onnx"), "stablehlo": Path("d/m.legal.stablehlo.mlir"),
                     "tosa": Path("d/m.legal.tosa.mlir")}
    assert emit_paths(Path("m.legal.tflite"), ["onnx"], "tflite") == {"onnx": Path("m.legal.onnx")}


def test_tflite_model_emitted_as_onnx_too(tmp_path, legalize):
    require("litert")
    from legalizer.numeric.litert import run_tflite

    src = tmp_path / "mob.tflite"
    src.write_bytes((ROOT / "models/tflite/mobilenet_like.tflite").read_bytes())
    p = legalize(src, "--emit", "tflite", "--emit", "onnx", "-q")
    assert_clean(p)
    assert p.returncode == 0, p.stderr
    out_t, out_o = tmp_path / "mob.legal.tflite", tmp_path / "mob.legal.onnx"
    assert lines(p.stdout)[-1].startswith(f"{src}: legalized for 'tosa' -> {out_t}, {out_o}, outputs match")
    import onnxruntime as ort

    x = np.random.default_rng(0).standard_normal((1, 16, 16, 3)).astype(np.float32)
    got = ort.InferenceSession(str(out_o)).run(None, {"image": x})[0]
    want = run_tflite(str(src), {"image": x})["probs"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    onnx.checker.check_model(onnx.load(str(out_o)), full_check=True)


@pytest.mark.parametrize("args, message", [
    (["--emit", "tflite"], "--emit tflite: only a TFLite model can be written as .tflite"),
    (["--emit", "pt2"], "--emit pt2: only a torch.export program (.pt2) can be written as .pt2"),
    (["--emit", "stablehlo"], "--emit stablehlo writes the xla form: add --target xla"),
    (["--emit", "tosa", "--target", "xla"], "--emit tosa writes the tosa form: add --target tosa"),
    (["--emit", "pdf"], "--emit must be one of onnx, tflite, pt2, stablehlo, stablehlo-bytecode, tosa, not 'pdf'"),
    (["--emit", "stablehlo-bytecode"], "--emit stablehlo-bytecode writes the xla form: add --target xla"),
])
def test_emit_usage_errors(args, message, tmp_path, legalize):
    src = tmp_path / "m.onnx"
    src.write_bytes((ROOT / "models/mlp_bias.onnx").read_bytes())
    p = legalize(src, *args)
    assert_clean(p)
    assert p.returncode == 2
    assert lines(p.stderr) == [f"legalize: error: {message}"]
    assert sorted(x.name for x in tmp_path.iterdir()) == ["m.onnx"]


def test_emit_without_the_native_format_still_checks_and_writes_only_what_was_asked(tmp_path, legalize):
    src = tmp_path / "t.tflite"
    src.write_bytes((ROOT / "models/tflite/broadcast_add.tflite").read_bytes())
    p = legalize(src, "--emit", "onnx", "-q")
    assert_clean(p)
    assert p.returncode == 0, p.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == ["t.legal.onnx", "t.tflite"]


def test_stablehlo_bytecode_is_a_portable_artifact_that_runs_as_the_text_does(tmp_path, legalize):
    require("jax")
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import stablehlo

    from legalizer.numeric import xla_run

    src = tmp_path / "m.onnx"
    src.write_bytes((ROOT / "models/small_cnn.dynamo.onnx").read_bytes())
    p = legalize(src, "--target", "xla", "--emit", "stablehlo", "--emit", "stablehlo-bytecode", "-q")
    assert_clean(p)
    assert p.returncode == 0, p.stderr
    artifact = (tmp_path / "m.legal.stablehlo.mlirbc").read_bytes()
    assert artifact.startswith(b"ML\xefR")  # MLIR bytecode, of the VHLO dialect
    with xla_run.context():
        from_bytecode = str(ir.Module.parse(stablehlo.deserialize_portable_artifact_str(artifact)))
    text = (tmp_path / "m.legal.stablehlo.mlir").read_text()
    x = np.random.default_rng(1).standard_normal((2, 3, 16, 16)).astype(np.float32)
    for got, want in zip(xla_run.run(from_bytecode, [x]), xla_run.run(text, [x])):
        np.testing.assert_array_equal(got, want)


def test_stablehlo_bytecode_of_a_chlo_op_is_one_clear_line(tmp_path, legalize):
    require("jax")
    src = tmp_path / "t.onnx"
    src.write_bytes((ROOT / "models/transformer_block.dynamo.onnx").read_bytes())
    p = legalize(src, "--target", "xla", "--emit", "stablehlo-bytecode")
    assert_clean(p)
    assert p.returncode == 2
    assert lines(p.stderr) == ["legalize: error: cannot write a StableHLO portable artifact: chlo.erf is not in "
                               "StableHLO's stable opset (--emit stablehlo writes the text)"]
    assert sorted(x.name for x in tmp_path.iterdir()) == ["t.onnx"]


@pytest.mark.parametrize("emit,dialect", [(["--emit", "tflite", "--emit", "onnx"], "write it as ONNX"),
                                          (["--emit", "tosa"], "emit TOSA (made from its ONNX form)"),
                                          (["--target", "xla", "--emit", "stablehlo"],
                                           "emit StableHLO (made from its ONNX form)")])
def test_tflite_op_without_onnx_form_writes_nothing(tmp_path, emit, dialect, legalize):
    # Every extra format is made before the model's own is written: no partial result.
    from test_tflite import custom_op_model

    src = custom_op_model(tmp_path / "custom.tflite")
    p = legalize(src, *emit, "-q")
    assert_clean(p)
    assert p.returncode == 2
    assert lines(p.stderr) == [f"legalize: error: {src}: cannot {dialect}: no ONNX form for TFLite ops: CUSTOM.MyFrob"]
    assert sorted(f.name for f in tmp_path.iterdir()) == ["custom.tflite"]


def test_tflite_models_onnx_form_is_made_once_for_every_mlir_format(tmp_path, legalize_in_process, monkeypatch):
    """The ONNX-op IR the StableHLO text and bytecode are emitted from is made (imported
    and legalized) once, by the pipeline, and gives the same text as one made alone."""
    require("jax")
    import legalizer.kinds.onnx.importer as onnx_importer
    from legalizer.emit_formats import render_mlir
    from legalizer.importers.reader import read_model
    from legalizer.target_passes import legalize as legalize_model

    src = tmp_path / "m.tflite"
    src.write_bytes((ROOT / "models/tflite/broadcast_add.tflite").read_bytes())
    imported = []
    import_model = onnx_importer.import_model
    monkeypatch.setattr(onnx_importer, "import_model", lambda *a, **k: imported.append(1) or import_model(*a, **k))
    code, out, err = legalize_in_process(src, "--target", "xla", "--emit", "stablehlo", "--emit",
                                         "stablehlo-bytecode", "--no-check", "-q")
    assert code == 0, err
    assert len(imported) == 1
    assert sorted(f.name for f in tmp_path.iterdir()) == ["m.legal.stablehlo.mlir", "m.legal.stablehlo.mlirbc",
                                                          "m.tflite"]
    model = read_model(src)
    legalize_model(model, "xla")
    assert (tmp_path / "m.legal.stablehlo.mlir").read_text() == render_mlir(model, ["stablehlo"])["stablehlo"]


def _tflite_copy(tmp_path, name="broadcast_add"):
    src = tmp_path / f"{name}.tflite"
    src.write_bytes((ROOT / f"models/tflite/{name}.tflite").read_bytes())
    return src


def test_tflite_models_onnx_form_written_is_the_legalized_one_the_check_ran(tmp_path, monkeypatch):
    """--emit onnx of a TFLite model writes its ONNX form legalized (legal under the
    target's profile: the translation's own broadcasts made explicit), and the check's
    onnxruntime side ran those very bytes; the MLIR emitters read the same form."""
    require("litert")
    import legalizer
    import legalizer.numeric.tflite as tflite_check
    from legalizer.pipeline import RunOptions, run

    ran = []
    runner = tflite_check.onnx_runner
    monkeypatch.setattr(tflite_check, "onnx_runner", lambda model, *a, **k: ran.append(model) or runner(model, *a, **k))
    src = _tflite_copy(tmp_path, "broadcast_floor_mod")  # its translation tests the sign by broadcasting
    res = run(src, RunOptions(emit=["tflite", "onnx"]))
    assert res.exit_code == 0, res.report.to_json()
    written = (tmp_path / "broadcast_floor_mod.legal.onnx").read_bytes()
    assert ran == [written]
    out = legalizer.load(tmp_path / "broadcast_floor_mod.legal.onnx")
    assert legalizer.verify(out.graph, "tosa").violations == []  # (the bare translation has 6)
    runtimes = {o["name"].rsplit(" ", 1)[1] for b in res.report.check["bindings"] for o in b["outputs"]}
    assert runtimes == {"(LiteRT)", "(onnxruntime)"}


def test_emitted_tosa_module_is_itself_run_against_the_original(tmp_path):
    """--emit tosa: the module written is run on IREE against the original (as
    --against runs one), and the verdict names it."""
    require("litert")
    require("iree")
    from legalizer.pipeline import RunOptions, run
    from legalizer.report import verdict

    src = _tflite_copy(tmp_path)
    res = run(src, RunOptions(emit=["tflite", "tosa"]))
    assert res.exit_code == 0, res.report.to_json()
    module = res.report.check["module"]
    assert module["ran"] and module["ok"] and module["provider"] == "the TOSA module on IREE llvm-cpu vs LiteRT"
    assert [o["name"] for b in module["bindings"] for o in b["outputs"]] == ["result #0", "result #1"]
    line = verdict(res.report.to_json(), legalizing=True)[1]
    assert line.endswith("outputs match on LiteRT + onnxruntime CPUExecutionProvider, and the TOSA module on"
                         " IREE llvm-cpu vs LiteRT")
    assert (tmp_path / "broadcast_add.legal.tosa.mlir").exists()


def test_a_tosa_module_that_differs_is_not_written(tmp_path, monkeypatch):
    """The module is part of what is checked: one that computes something else fails the
    run (exit 1) and nothing is written, though the legalized model itself matches."""
    require("litert")
    require("iree")
    import legalizer.exporters.tosa as tosa
    from legalizer.pipeline import RunOptions, run

    emit = tosa.emit_tosa
    monkeypatch.setattr(tosa, "emit_tosa", lambda *a, **k: emit(*a, **k).replace("tosa.add", "tosa.sub"))
    src = _tflite_copy(tmp_path)
    res = run(src, RunOptions(emit=["tflite", "tosa"]))
    assert res.exit_code == 1
    assert res.report.check["module"]["ran"] and not res.report.check["module"]["ok"]
    assert all(o["ok"] for b in res.report.check["bindings"] for o in b["outputs"])
    assert sorted(f.name for f in tmp_path.iterdir()) == ["broadcast_add.tflite"]


def test_a_tosa_module_not_run_is_said_so(tmp_path, monkeypatch):
    """Where IREE cannot run the module, the run writes it and says that it was not run:
    a warning, and the verdict line; --require-check makes that a failure."""
    require("litert")
    import legalizer.numeric.against as against
    from legalizer.errors import CheckUnavailable
    from legalizer.pipeline import RunOptions, run
    from legalizer.report import verdict

    def missing(*a, **k):
        raise CheckUnavailable("IREE is not installed: install the iree extra")

    monkeypatch.setattr(against, "check_against", missing)
    src = _tflite_copy(tmp_path)
    res = run(src, RunOptions(emit=["tflite", "tosa"]))
    assert res.exit_code == 0
    assert "the TOSA module written was not run: IREE is not installed: install the iree extra" in res.report.warnings
    assert verdict(res.report.to_json(), legalizing=True)[1].endswith(
        "outputs match on LiteRT + onnxruntime CPUExecutionProvider (the TOSA module written was not run)")
    res = run(src, RunOptions(emit=["tflite", "tosa"], require_check=True, force=True))
    assert res.exit_code == 1


def test_tosa_of_a_torch_export_program_with_bound_dims_is_one_line(tmp_path, legalize_in_process):
    """A .pt2 has no TOSA form (its Core ATen ops have no lowering): binding its dims
    first changes nothing of that (it was an internal error: the ATen graph was written
    as ONNX to have its shapes inferred)."""
    require("torch")
    src = tmp_path / "mlp.pt2"
    src.write_bytes((ROOT / "models/mlp.pt2").read_bytes())
    code, out, err = legalize_in_process(src, "--emit", "tosa", "--no-check", "--trust-pt2", "-q", "--dim", "s77=3")
    assert code == 2 and len(lines(err)) == 1
    assert lines(err)[0].startswith("legalize: error: cannot emit TOSA for 12 ops: input 'p_bias'")
    assert "input 'x' (tensor<3x16xfloat32>: needs a ranked tensor type TOSA has); 'permute' (aten.permute.default:" \
        " no TOSA lowering)" in err
    assert sorted(f.name for f in tmp_path.iterdir()) == ["mlp.pt2"]


def test_emit_tosa_with_bound_dims_reads_the_model_once(tmp_path, legalize_in_process, monkeypatch):
    """--emit tosa with --dim: the model is imported once (its own read); the dims are
    bound on the legalized IR itself, not on a second import of its ONNX form."""
    import legalizer.kinds.onnx.importer as onnx_importer

    src = tmp_path / "cnn.onnx"
    src.write_bytes((ROOT / "models/small_cnn.dynamo.onnx").read_bytes())
    imported = []
    import_model = onnx_importer.import_model
    monkeypatch.setattr(onnx_importer, "import_model", lambda *a, **k: imported.append(1) or import_model(*a, **k))
    code, out, err = legalize_in_process(src, "--emit", "onnx", "--emit", "tosa", "--dim", "batch=2", "--dim", "height=8",
                                         "--dim", "width=8", "--no-check", "-q")
    assert code == 0, err
    assert len(imported) == 1
    text = (tmp_path / "cnn.legal.tosa.mlir").read_text()
    assert text.splitlines()[2] == "  func.func @main(%arg0: tensor<2x3x8x8xf32>) -> tensor<2x4xf32> {"
    written = onnx.load(str(tmp_path / "cnn.legal.onnx"))  # the model's own types, not the bound ones
    assert [d.dim_param or d.dim_value for d in written.graph.input[0].type.tensor_type.shape.dim] == \
        ["batch", 3, "height", "width"]
