"""tests/needs.py, the one table of what a test needs beyond ``.[test]``: it names the
extras pyproject.toml declares, its skips name the extra and how to install it, and no
test asks for an optional module on its own."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

import needs

ROOT = Path(__file__).resolve().parent.parent
# Extras no test needs: the test tools themselves.
NOT_NEEDED = {"test"}


def test_the_table_names_the_extras_of_pyproject():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(needs.EXTRAS) == set(extras) - NOT_NEEDED


def test_a_missing_extra_skips_naming_it(monkeypatch):
    monkeypatch.setitem(needs.EXTRAS, "iree", ("legalize_no_such_module",))
    needs.missing.cache_clear()
    try:
        assert needs.missing("iree") == ("needs the iree extra: pip install 'legalizer[iree]'"
                                         " (legalize_no_such_module: No module named 'legalize_no_such_module')")
        with pytest.raises(pytest.skip.Exception, match=r"^needs the iree extra: pip install 'legalizer\[iree\]'"):
            needs.require("iree")
    finally:
        needs.missing.cache_clear()


def test_a_missing_tool_skips_saying_how_to_set_it_up(monkeypatch):
    from legalizer.kinds.mlir import tool as mlir_tool

    monkeypatch.setattr(mlir_tool, "find_tosa_opt", lambda: None)
    needs.missing.cache_clear()
    try:
        assert needs.missing("tosa-opt") == f"needs tosa-opt: {mlir_tool.SETUP_HINT}"
    finally:
        needs.missing.cache_clear()


def test_an_unknown_need_is_an_error():
    with pytest.raises(KeyError, match="unknown need 'iere'"):
        needs.missing("iere")


def test_no_test_probes_an_optional_module_on_its_own():
    """Every skip for an extra goes through the table (``needs`` marker, ``require``)."""
    found = [f"{p.name}:{i}" for p in sorted((ROOT / "tests").glob("*.py")) if p.name != "needs.py"
             for i, line in enumerate(p.read_text().splitlines(), 1) if re.search(r"\bimportorskip\(", line)]
    assert found == []


def test_a_missing_browser_or_gpu_driver_skips_saying_how_to_get_it(monkeypatch):
    monkeypatch.setattr(needs.shutil, "which", lambda name: None)
    monkeypatch.setitem(needs.EXTRAS, "litert", ("legalize_no_such_module",))
    needs.missing.cache_clear()
    try:
        assert needs.missing("chromium") == "needs chromium: no chromium on PATH: apt-get install chromium"
        assert needs.missing("ps") == "needs ps: no ps on PATH: apt-get install procps"
        assert needs.missing("litert-gpu") == ("needs litert-gpu: it comes with the litert extra:"
                                               " pip install 'legalizer[litert]'")
    finally:
        needs.missing.cache_clear()
