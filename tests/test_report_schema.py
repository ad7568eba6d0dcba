"""The report's one definition: the JSON Schema shipped in the package
(legalizer/report.schema.json), which ``legalize --schema`` prints, every report a test
makes is validated against (tests/conftest.py sets LEGALIZE_VALIDATE_REPORTS), and
docs/report.md is generated from (docs/hooks/report_reference.py)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import jsonschema  # the test extra's, as pytest's
import pytest

from legalizer import report
from helpers import cli_in_process, cli_process

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"


def _hook():
    spec = importlib.util.spec_from_file_location("report_reference", ROOT / "docs/hooks/report_reference.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_schema_is_a_valid_json_schema_and_legalize_prints_it():
    jsonschema.Draft202012Validator.check_schema(report.schema())
    p = cli_process("--schema")
    assert p.returncode == 0 and p.stderr == ""
    assert p.stdout == (ROOT / "legalizer/report.schema.json").read_text()
    assert json.loads(p.stdout)["$defs"]["run"]["required"][:5] == ["schema", "tool_version", "input", "output",
                                                                     "format"]


def test_version():
    p = cli_process("--version")
    assert (p.returncode, p.stdout, p.stderr) == (0, "legalize 0.1.0\n", "")


def test_reports_that_are_not_the_schema_are_refused():
    code, out, _ = cli_in_process(MODELS / "incompatible_add.onnx", "--verify-only", "--json", "-q")
    good = json.loads(out)
    assert code == 1
    report.validate(good)
    report.validate([good, {**good, "exit_code": 1}])  # a batch's list
    for bad in ({**good, "atomic_files": {}},  # what docs/report.md once documented
                {k: v for k, v in good.items() if k != "outputs"},
                {**good, "check": {"ran": False}},  # check.ok is always there: null when it did not run
                {**good, "check": {"ran": True, "ok": None, "numeric": {}}}):
        with pytest.raises(jsonschema.ValidationError):
            report.validate(bad)


def test_a_report_that_does_not_conform_is_never_written(tmp_path, monkeypatch):
    """With validation on (as in every test), a report the schema refuses is an internal
    error, not a file: here the schema is made to require a key no report has."""
    strict = report.schema()
    strict["$defs"]["run"]["required"].append("no_such_key")
    monkeypatch.setattr(report, "schema", lambda: strict)
    code, _, err = cli_in_process(MODELS / "mlp_bias.onnx", "--verify-only", "--report", tmp_path / "r.json")
    assert code == 2 and "'no_such_key' is a required property" in err
    assert not (tmp_path / "r.json").exists()


def test_the_report_page_is_generated_from_the_schema():
    page = (ROOT / "docs/report.md").read_text()
    assert "<!-- legalize-report-schema -->" in page
    assert "atomic_files" not in page and "numeric." not in page
    text = _hook().reference()
    schema = report.schema()
    for key in schema["$defs"]["run"]["properties"]:
        assert f"| `{key}` |" in text
    for key in schema["$defs"]["check"]["properties"]:
        assert f"| `{key}` |" in text
    assert "| `outputs` | yes | object of string | format -> path of every file written (`--emit`) |" in text
    assert ("| `ok` | yes | boolean or null | whether the compared outputs match: true or false when it ran, null when"
            " it did not") in text


def test_usage_errors_with_json_are_a_json_object():
    for args in (["--dim", "x"], ["--bogus"]):
        code, out, err = cli_in_process(MODELS / "mlp_bias.onnx", "--json", *args)
        entry = json.loads(out)
        assert code == 2 and entry["exit_code"] == 2 and entry["input"] is None
        assert err.strip() .startswith(f"legalize: error: {entry['error']}")
        report.validate(entry)
