"""MLIR input with any subset of extras: without MLIR's parser (iree-base-compiler), every
MLIR input, text or bytecode, with or without ``--against``, is one line naming the
extra, exit 2; without tosa-opt, the converters' TOSA syntax is iree-opt's error and the
extra; with the ``mlir`` extra, tosa-opt is found inside the environment legalize runs
in (the tosa-tools wheel keeps its binary under site-packages' ``bin/``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from legalizer.extras import install_hint

ROOT = Path(__file__).resolve().parent.parent
CONVERTER = ROOT / "models" / "tosa_converter"
TFLITE = ROOT / "models" / "tflite"
HINT = install_hint("mlir")


@pytest.fixture
def no_iree(monkeypatch):
    """As if iree-base-compiler and iree-base-runtime were not installed: every iree
    module, imported already or not, fails to import."""
    for name in [n for n in sys.modules if n == "iree" or n.startswith("iree.")] + ["iree", "iree.compiler",
                                                                                     "iree.runtime"]:
        monkeypatch.setitem(sys.modules, name, None)


# every MLIR file type models/ holds: text (the converters' syntax), bytecode (float, int8)
INPUTS = {
    "text": (CONVERTER / "mobilenet_like.mlir", "reading MLIR"),
    "bytecode": (CONVERTER / "mobilenet_like.mlirbc", "reading MLIR bytecode"),
    "int8 bytecode": (CONVERTER / "mobilenet_like_int8.mlirbc", "reading MLIR bytecode"),
}


@pytest.mark.parametrize("against", [False, True], ids=["verify-only", "against"])
@pytest.mark.parametrize("kind", list(INPUTS))
def test_without_mlirs_parser_every_mlir_input_names_the_extra(no_iree, kind, against, legalize_in_process):
    path, what = INPUTS[kind]
    args = [path, "--verify-only"] + (["--against", TFLITE / f"{path.stem}.tflite"] if against else [])
    code, out, err = legalize_in_process(*args)
    assert (code, out) == (2, "")
    assert err.splitlines() == [f"legalize: error: {path}: {what} needs MLIR's parser (the mlir extra: {HINT})"]


def test_without_mlirs_parser_the_api_says_the_same(no_iree):
    import legalizer

    with pytest.raises(legalizer.BadInput) as e:
        legalizer.load(CONVERTER / "mobilenet_like.mlir")
    assert str(e.value) == f"{CONVERTER / 'mobilenet_like.mlir'}: reading MLIR needs MLIR's parser (the mlir extra: {HINT})"


@pytest.mark.needs("mlir")
def test_without_tosa_opt_the_converters_syntax_names_the_extra(monkeypatch, legalize_in_process):
    from legalizer.kinds.mlir import tool as mlir_tool

    monkeypatch.setattr(mlir_tool, "find_tosa_opt", lambda: None)
    path = CONVERTER / "mobilenet_like.mlir"
    for args in ([path, "--verify-only"], [path, "--verify-only", "--against", TFLITE / "mobilenet_like.tflite"]):
        code, out, err = legalize_in_process(*args)
        assert (code, out) == (2, "")
        assert err.splitlines() == [
            f"legalize: error: {path}:4:28: custom op 'tosa.const_shape' expected 'values' (a TOSA syntax IREE's"
            f" parser does not take; tosa-opt reads it: install the mlir extra: {HINT})"]


def test_tosa_opt_is_found_in_the_environment_legalize_runs_in(monkeypatch, tmp_path):
    """The tosa-tools wheel's binary (``<site-packages>/bin/tosa-opt``, as its record
    says), before a checkout's .venv-tosa-tools and PATH; LEGALIZE_TOSA_OPT first."""
    from importlib import metadata

    from legalizer.kinds.mlir import tool as mlir_tool

    site = tmp_path / "site-packages"
    (site / "bin").mkdir(parents=True)
    tool = site / "bin" / "tosa-opt"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)

    class Dist:
        def locate_file(self, p):
            return site / p

    def distribution(name):
        if name != "tosa-tools":
            raise metadata.PackageNotFoundError(name)
        return Dist()

    monkeypatch.delenv(mlir_tool.ENV_VAR, raising=False)
    monkeypatch.setattr(mlir_tool.metadata, "distribution", distribution)
    assert mlir_tool.find_tosa_opt() == str(tool)
    monkeypatch.setenv(mlir_tool.ENV_VAR, str(tool.with_name("mine")))  # not there: skipped
    assert mlir_tool.find_tosa_opt() == str(tool)
    mine = tool.with_name("mine")
    mine.write_text("#!/bin/sh\n")
    mine.chmod(0o755)
    assert mlir_tool.find_tosa_opt() == str(mine)
    monkeypatch.delenv(mlir_tool.ENV_VAR)
    monkeypatch.setattr(mlir_tool.metadata, "distribution", lambda name: (_ for _ in ()).throw(
        metadata.PackageNotFoundError(name)))
    monkeypatch.setattr(mlir_tool, "VENV_TOOL", tmp_path / "no-venv" / "tosa-opt")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert mlir_tool.find_tosa_opt() is None


def test_a_checkouts_tosa_tools_venv_is_looked_for_at_its_root():
    """``scripts/setup_tosa_tools.sh`` makes ``.venv-tosa-tools`` at the checkout's root:
    that is where the tool is looked for (when the module moved a package deeper, the
    path pointed into ``legalizer/`` and every tosa-opt test here skipped)."""
    from legalizer.kinds.mlir import tool as mlir_tool

    root = Path(__file__).resolve().parent.parent
    assert mlir_tool.VENV_TOOL == root / ".venv-tosa-tools" / "bin" / "tosa-opt"
    assert (mlir_tool.REPO_ROOT / "scripts" / "setup_tosa_tools.sh").is_file()
