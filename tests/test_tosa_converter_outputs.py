"""TOSA modules written by tosa-converter-for-tflite (a tool nobody here wrote; made by
scripts/make_converter_models.sh, committed in models/tosa_converter/): read by
``--verify-only`` under the tosa profile, and run on IREE ``--against`` the .tflite
each came from on LiteRT."""

from __future__ import annotations

from pathlib import Path

import pytest

import legalizer
from legalizer.pipeline import RunOptions, is_output, run
from needs import require

ROOT = Path(__file__).resolve().parent.parent
MODULES = sorted((ROOT / "models/tosa_converter").glob("*.mlirbc"))

# What running them shows (see docs/formats.md): the converter's own semantics, not ours.
DIFFER = {
    "broadcast_floor_mod": "integer FLOOR_MOD lowered through reciprocal/floor: wrong results",
    "broadcast_pow": "tosa.pow is undefined for a negative base: NaN where TFLite computes x**2",
    "transformer_like": "its GELU/softmax lowering differs by ~8e-4 from LiteRT's kernels",
}
# What cannot be compared (exit 2, the reason in full).
NOT_RUN = {
    "two_signatures": "the module has no function @main, which the comparison runs",
}
# What --against refuses to compile (bad input, exit 2): an op of no TOSA-family dialect.
REFUSED = {"broadcast_right_shift": "tfl.right_shift"}


def test_every_converter_output_is_there():
    made = {p.stem for p in MODULES}
    tflite = {p.stem for p in (ROOT / "models/tflite").glob("*.tflite") if not is_output(p)}
    # broadcast_prelu: the converter rejects its rank-1 alpha
    assert made == tflite - {"broadcast_prelu"}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_converter_output_is_legal_under_tosa(path):
    require("iree")  # bytecode is read through IREE's MLIR bindings
    model = legalizer.load(path)
    assert model.format == "mlir"
    res = run(path, RunOptions(verify_only=True))
    assert res.report.profile == "tosa" and res.exit_code == 0, res.report.violations
    assert res.report.stats["elementwise_nodes"] > 0


@pytest.mark.needs("tosa-opt")  # the TOSA syntax of producers IREE does not take
def test_converter_text_reads_like_its_bytecode():
    require("iree")
    text = legalizer.load(ROOT / "models/tosa_converter/mobilenet_like.mlir")
    code = legalizer.load(ROOT / "models/tosa_converter/mobilenet_like.mlirbc")
    ops = lambda m: sorted(n.op for g in m.graphs for n in g.ops())  # noqa: E731
    assert ops(text) == ops(code) and "tosa.add" in ops(text)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_converter_output_against_its_tflite_on_litert(path):
    require("iree")
    require("litert")
    options = RunOptions(verify_only=True, against=ROOT / "models/tflite" / f"{path.stem}.tflite")
    if path.stem in REFUSED:  # tfl.right_shift is left unconverted
        with pytest.raises(legalizer.BadInput) as e:
            run(path, options)
        assert str(e.value) == (f"{path}: --against compiles and runs only functions of the tosa, func, arith, tensor,"
                                f" quant and ml_program dialects; the module has op '{REFUSED[path.stem]}'")
        return
    if path.stem in NOT_RUN:  # two functions and no @main
        with pytest.raises(legalizer.BadInput) as e:
            run(path, options)
        assert str(e.value) == (f"{path}: the comparison with {options.against} did not run:"
                                f" {NOT_RUN[path.stem]}")
        return
    res = run(path, options)
    check = res.report.check
    if path.stem in DIFFER:
        assert check["ran"] and not check["ok"] and res.exit_code == 1
    else:
        assert check["ran"] and check["ok"] and res.exit_code == 0, check
