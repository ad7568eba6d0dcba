"""Emitted TOSA passes ``tosa-opt --tosa-validate`` (PyPI tosa-tools 2026.8.0, in its own
venv: ``bash scripts/setup_tosa_tools.sh``), for every static model shipped or used here:
the sample ONNX models (symbolic dims bound to 3), the onnx wheel's 9 light models and
the TFLite models of models/tflite. Spec 1.0's level check rejects dynamic dims, so the
models with unnamed dynamic dims (dynamic_broadcast) are left out."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

import legalizer
from legalizer.numeric.tosa_validate import find_tosa_opt, validate
from legalizer.emit_formats import bound_dims, render_mlir
from legalizer.exporters.tosa import emit_tosa
from legalizer.pipeline import is_output

ROOT = Path(__file__).resolve().parent.parent
TOSA_OPT = find_tosa_opt()
pytestmark = pytest.mark.needs("tosa-opt")

SAMPLES = sorted(p for p in (ROOT / "models").glob("*.onnx") if p.stem != "incompatible_add" and not is_output(p))
LIGHT = sorted((Path(onnx.__file__).parent / "backend/test/data/light").glob("light_*.onnx"))
TFLITE = sorted(p for p in (ROOT / "models/tflite").glob("*.tflite") if not is_output(p))


def _bindings(model):
    """The ``dims`` binding every symbolic input dim to 3; None if an input has an unnamed
    dynamic dim (the module cannot be made static)."""
    dims = {}
    for node in model.graph.inputs:
        for value in node.outputs:
            for d in value.type.shape or ():
                if d is None:
                    return None
                if isinstance(d, str):
                    dims[d] = 3
    return dims


def _emitted(path: Path) -> str:
    model = legalizer.load(path)
    dims = _bindings(model)
    if dims is None:
        pytest.skip(f"{path.name} has unnamed dynamic dims: not a static module")
    legalizer.legalize(model, "tosa")
    if path.suffix == ".tflite":
        return render_mlir(model, ["tosa"], dims)["tosa"]
    with bound_dims(model, dims):
        return emit_tosa(model)


def _assert_valid(path: Path) -> None:
    text = _emitted(path)
    assert "x?" not in text and "<?" not in text, f"{path.name}: emitted module is not static"
    ok, error = validate(text)
    assert ok, f"{path.name}: {error}"


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
def test_sample_model_validates(path):
    _assert_valid(path)


def test_light_models_are_nine():
    assert len(LIGHT) == 9


@pytest.mark.parametrize("path", LIGHT, ids=lambda p: p.stem.replace("light_", ""))
def test_light_model_validates(path):
    _assert_valid(path)


@pytest.mark.parametrize("path", TFLITE, ids=lambda p: p.stem)
def test_tflite_model_validates(path):
    _assert_valid(path)


def _module(arg_types, op_line, result_type):
    args = ", ".join(f"%a{i}: {t}" for i, t in enumerate(arg_types))
    return (f"module {{\n  func.func @main({args}) -> {result_type} {{\n    {op_line}\n"
            f"    return %0 : {result_type}\n  }}\n}}\n")


def test_valid_hand_written_module_passes():
    text = _module(["tensor<2x3xf32>", "tensor<1x3xf32>"],
                   "%0 = tosa.add %a0, %a1 : (tensor<2x3xf32>, tensor<1x3xf32>) -> tensor<2x3xf32>",
                   "tensor<2x3xf32>")
    assert validate(text) == (True, "")


@pytest.mark.parametrize("arg_types, op_line, result_type, message", [
    # operand ranks differ: the op verifier rejects it
    (["tensor<2x3xf32>", "tensor<3xf32>"],
     "%0 = tosa.add %a0, %a1 : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>",
     "tensor<2x3xf32>", "operands don't have matching ranks"),
    # i8 add: no profile has it (the validation pass rejects it)
    (["tensor<2x3xi8>", "tensor<1x3xi8>"],
     "%0 = tosa.add %a0, %a1 : (tensor<2x3xi8>, tensor<1x3xi8>) -> tensor<2x3xi8>",
     "tensor<2x3xi8>", "did not align with any profile or extension"),
    # a dynamic dim: spec 1.0's level check rejects it
    (["tensor<?x3xf32>", "tensor<1x3xf32>"],
     "%0 = tosa.add %a0, %a1 : (tensor<?x3xf32>, tensor<1x3xf32>) -> tensor<?x3xf32>",
     "tensor<?x3xf32>", "cannot be dynamic"),
], ids=["rank-mismatch", "i8-add", "dynamic-dim"])
def test_invalid_hand_written_module_fails(arg_types, op_line, result_type, message):
    ok, error = validate(_module(arg_types, op_line, result_type))
    assert not ok
    assert error.startswith("<stdin>:3:") and "error:" in error and message in error, error


def test_missing_tool_is_reported():
    ok, error = validate("module {}", tool="/nonexistent/tosa-opt")
    assert not ok and error.startswith("tosa-opt cannot run")
