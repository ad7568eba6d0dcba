"""``--verify-only --against``: a TOSA MLIR module run on IREE against the model it was
converted from (LiteRT for .tflite, onnxruntime for .onnx)."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import assert_clean, cli_process, lines
from needs import require

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.needs("iree")


def _emitted_tosa(src: Path, tmp_path: Path) -> Path:
    local = tmp_path / src.name
    local.write_bytes(src.read_bytes())
    p = cli_process(local, "--emit", "tosa", "-q", "--no-check")
    assert p.returncode == 0, p.stderr
    return tmp_path / f"{local.stem}.legal.tosa.mlir"


@pytest.mark.parametrize("name", ["mobilenet_like.tflite", "dynamic_broadcast.tflite", "transformer_like.tflite"])
def test_module_matches_the_tflite_it_came_from(name, tmp_path, legalize):
    require("litert")
    module = _emitted_tosa(ROOT / "models/tflite" / name, tmp_path)
    p = legalize(module, "--verify-only", "--against", ROOT / "models/tflite" / name)
    assert_clean(p)
    assert p.returncode == 0, p.stdout + p.stderr
    assert lines(p.stdout)[-1] == f"{module}: legal under 'tosa', results match (IREE llvm-cpu vs LiteRT)"
    assert any(ln.startswith("PASSED | Output: 'result #0'") for ln in lines(p.stdout))


def test_module_against_onnx(tmp_path, legalize):
    module = _emitted_tosa(ROOT / "models/mlp_bias.onnx", tmp_path)
    p = legalize(module, "--verify-only", "--against", ROOT / "models/mlp_bias.onnx", "-q")
    assert_clean(p)
    assert p.returncode == 0, p.stdout + p.stderr
    assert lines(p.stdout)[-1].endswith("results match (IREE llvm-cpu vs onnxruntime)")


def test_a_different_model_is_a_mismatch_exit_1(tmp_path, legalize):
    require("litert")
    module = _emitted_tosa(ROOT / "models/tflite/broadcast_add.tflite", tmp_path)
    p = legalize(module, "--verify-only", "--against", ROOT / "models/tflite/broadcast_sub.tflite")
    assert_clean(p)
    assert p.returncode == 1
    assert lines(p.stdout)[-1] == f"{module}: legal under 'tosa', results DIFFER (IREE llvm-cpu vs LiteRT)"
    assert any(ln.startswith("FAILED | Output: 'result #0'") for ln in lines(p.stdout))


def test_dynamic_batch_is_bound_before_iree_compiles(tmp_path, legalize):
    """A module whose @main takes tensor<?x8x16xf32> (the transformer sample with a
    dynamic batch, in legalize's TOSA form): IREE compiled the ? as it was and failed to
    run it ("transient buffer has not been committed"). Bound to each of the check's
    sizes, it runs, and matches LiteRT at both."""
    require("litert")
    import tflite_build as tb

    src = tmp_path / "transformer_dynamic.tflite"
    src.write_bytes(tb.with_dynamic_batch((ROOT / "models/tflite/transformer_like.tflite").read_bytes()))
    module = _emitted_tosa(src, tmp_path)
    assert "func.func @main(%arg0: tensor<?x8x16xf32>) -> tensor<?x8x16xf32>" in module.read_text()
    p = legalize(module, "--verify-only", "--against", src)
    assert_clean(p)
    assert p.returncode == 0, p.stdout + p.stderr
    passed = [ln.split(" | ")[2] for ln in lines(p.stdout) if ln.startswith("PASSED | Output: 'result #0'")]
    assert passed == ["tokens[0]=3", "tokens[0]=1"]
    assert lines(p.stdout)[-1] == f"{module}: legal under 'tosa', results match (IREE llvm-cpu vs LiteRT)"


def test_bind_dims_binds_main_arguments_only():
    """The arguments' dynamic dims take the arrays' sizes (the ops reading them follow;
    results keep their declared types); a module with no ? is returned as it is."""
    from legalizer.numeric.iree_run import bind_dims

    bound = bind_dims(ADD_MODULE, [(3, 4), (1, 4)])
    assert "func.func @main(%arg0: tensor<3x4xf32>, %arg1: tensor<1x4xf32>) -> tensor<?x4xf32>" in bound
    assert "(tensor<3x4xf32>, tensor<1x4xf32>) -> tensor<?x4xf32>" in bound
    assert bind_dims(ADD_MODULE.replace("?", "2"), [(3, 4), (1, 4)]) == ADD_MODULE.replace("?", "2")
    # a static dim that does not fit the array is left for IREE to refuse
    assert "func.func @main(%arg0: tensor<?x4xf32>, %arg1: tensor<1x4xf32>)" in bind_dims(ADD_MODULE, [(3, 5), (1, 4)])


ADD_MODULE = """func.func @main(%arg0: tensor<?x4xf32>, %arg1: tensor<1x4xf32>) -> tensor<?x4xf32> {
  %0 = tosa.add %arg0, %arg1 : (tensor<?x4xf32>, tensor<1x4xf32>) -> tensor<?x4xf32>
  return %0 : tensor<?x4xf32>
}
"""


def test_against_pairs_onnx_with_onnx_and_tflite_with_tflite_only(tmp_path, legalize):
    p = legalize(ROOT / "models/mlp_bias.onnx", "--verify-only", "--against", ROOT / "models/tflite/broadcast_add.tflite")
    assert_clean(p)
    assert p.returncode == 2
    assert lines(p.stderr) == ["legalize: error: --against compares ONNX with ONNX, TFLite with TFLite, or TOSA MLIR"
                               " with TFLite or ONNX; not onnx with tflite"]
    p = legalize(ROOT / "models/mlp_bias.onnx", "--against", ROOT / "models/mlp_bias.onnx", "--no-check")
    assert p.returncode == 2
    assert lines(p.stderr) == ["legalize: error: --against compares MODEL with another model: add --verify-only"]


@pytest.mark.needs("litert", "tosa-opt")
def test_the_converters_text_compares_as_its_bytecode_does(legalize):
    """models/tosa_converter/mobilenet_like.mlir, in the TOSA syntax IREE's parser does not
    take: given to IREE in tosa-opt's generic form, it compares and matches (it printed
    'the comparison did not run: TOSA text does not parse' and exited 0)."""
    for module in ("mobilenet_like.mlir", "mobilenet_like.mlirbc"):
        path = ROOT / "models/tosa_converter" / module
        p = legalize(path, "--verify-only", "--against", ROOT / "models/tflite/mobilenet_like.tflite", "-q")
        assert_clean(p)
        assert (p.returncode, lines(p.stdout)) == (0, [
            f"{path}: legal under 'tosa', results match (IREE llvm-cpu vs LiteRT)"]), p.stderr


def test_a_comparison_that_cannot_run_is_exit_2_with_mlirs_whole_diagnostic(tmp_path, legalize):
    """IREE's verifier refuses what legalize reads (an f32 -> i32 tosa.abs): exit 2, every
    line of MLIR's diagnostic on a line of its own after the error line (it once printed
    them with literal \\n between them), the module's control characters escaped, the
    markup of a string printed as text."""
    module = tmp_path / "m.mlir"
    module.write_text('func.func @main(%a: tensor<1x10xf32>) -> tensor<1x10xi32> {\n'
                      '  %0 = "tosa.abs"(%a) {x.note = "[red]\\1B[31m"} : (tensor<1x10xf32>) -> tensor<1x10xi32>\n'
                      '  return %0 : tensor<1x10xi32>\n}\n')
    ref = ROOT / "models/mlp_bias.onnx"
    p = legalize(module, "--verify-only", "--against", ref, "-q")
    assert_clean(p)
    assert (p.returncode, p.stdout) == (2, "")
    assert lines(p.stderr) == [
        f"legalize: error: {module}: the comparison with {ref} did not run: TOSA text does not parse: Unable to parse"
        " module assembly:",
        "  error: \"-\":2:8: 'tosa.abs' op requires the same element type for all operands and results",
        "   note: \"-\":2:8: see current operation: %0 = \"tosa.abs\"(%arg0) {x.note = \"[red]\\1B[31m\"} :"
        " (tensor<1x10xf32>) -> tensor<1x10xi32>"]
    assert "\x1b" not in p.stderr
