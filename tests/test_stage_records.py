"""A run's set-up made once, and its stages as typed records: the options are validated,
the target resolved, the input sniffed and the output plan made once per command (the
CLI's checks before the work and the run share the ``pipeline.Prepared`` run), and a format's
check takes typed values (``formats.Subject``), not the run's state."""

import dataclasses
import shutil
import sys
from collections import Counter
from pathlib import Path

import pytest

from legalizer import emit_formats, job, pipeline, targets
from legalizer.job import RunOptions
from legalizer.formats import Subject, of_kind
from legalizer.kinds import registry as sniff_module

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"


def _count_everywhere(monkeypatch, original, name: str, calls: Counter, key=lambda *a, **k: True) -> None:
    """Every binding of ``original`` in legalizer's modules (``from x import f`` makes
    one per module) replaced by a wrapper that counts the calls ``key`` accepts."""
    def counting(*args, **kwargs):
        if key(*args, **kwargs):
            calls[name] += 1
        return original(*args, **kwargs)

    for mod_name, mod in list(sys.modules.items()):
        if mod is None or not (mod_name == "legalizer" or mod_name.startswith("legalizer.")):
            continue
        for attr, value in list(vars(mod).items()):
            if value is original:
                monkeypatch.setattr(mod, attr, counting)


def _count_set_up(monkeypatch, model: Path) -> Counter:
    """Counts, from now on, of what a run sets up: ``sniff`` of ``model``,
    ``RunOptions.validate``, the target looked up by name, the output plan made."""
    import legalizer.cli  # noqa: F401 - its bindings are counted too
    import legalizer.kinds.paths  # noqa: F401

    calls: Counter = Counter()
    same = model.resolve()
    _count_everywhere(monkeypatch, sniff_module.sniff, "sniff", calls,
                      key=lambda path, *a, **k: Path(path).resolve() == same)
    _count_everywhere(monkeypatch, targets.target, "target", calls)
    validate = job.RunOptions.validate

    def counted_validate(self):
        calls["validate"] += 1
        return validate(self)

    monkeypatch.setattr(job.RunOptions, "validate", counted_validate)
    emit_paths = emit_formats.emit_paths

    def counted_plan(*args, **kwargs):
        calls["plan"] += 1
        return emit_paths(*args, **kwargs)

    monkeypatch.setattr(emit_formats, "emit_paths", counted_plan)
    return calls


@pytest.mark.parametrize("name, args", [
    ("mlp_bias.onnx", []),  # checked on onnxruntime
    ("tflite/broadcast_add.tflite", ["--no-check"]),
])
def test_a_command_sets_each_thing_up_once(tmp_path, monkeypatch, legalize_in_process, name, args):
    src = tmp_path / Path(name).name
    shutil.copy(MODELS / name, src)
    out = tmp_path / f"{src.stem}.legal{src.suffix}"
    out.write_bytes(b"an earlier run's")  # --force: the checks before the work look at what exists
    calls = _count_set_up(monkeypatch, src)
    code, stdout, stderr = legalize_in_process(src, "--force", "-q", *args)
    assert code == 0, stderr
    assert out.read_bytes() != b"an earlier run's"  # it ran to the end and wrote
    assert dict(calls) == {"sniff": 1, "validate": 1, "target": 1, "plan": 1}


def test_the_library_run_sets_each_thing_up_once(tmp_path, monkeypatch):
    src = tmp_path / "mlp_bias.onnx"
    shutil.copy(MODELS / "mlp_bias.onnx", src)
    calls = _count_set_up(monkeypatch, src)
    res = pipeline.run(src, pipeline.RunOptions(check=False, emit=["onnx", "tosa"]))
    assert res.exit_code == 0
    assert sorted(res.report.outputs) == ["onnx", "tosa"]
    assert dict(calls) == {"sniff": 1, "validate": 1, "target": 1, "plan": 1}


def test_the_plan_is_a_record_made_before_the_model_is_read(tmp_path):
    src = tmp_path / "m.onnx"
    shutil.copy(MODELS / "tflite" / "broadcast_add.tflite", src)  # a TFLite model, whatever its name
    plan = pipeline.prepare(src, pipeline.RunOptions(target="xla", emit=["tflite", "stablehlo"]))
    assert (plan.kind, plan.target) == ("tflite", targets.TARGETS["xla"])
    assert plan.planned() == [("the output model", tmp_path / "m.legal.tflite"),
                              ("the stablehlo output (--emit stablehlo)", tmp_path / "m.legal.stablehlo.mlir")]
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.kind = "onnx"


def test_a_plan_that_fails_is_refused_before_the_work_by_the_command_and_where_it_writes_by_the_run(
        tmp_path, legalize_in_process):
    src = tmp_path / "incompatible_add.onnx"  # violates the trait: the run writes nothing
    shutil.copy(MODELS / "incompatible_add.onnx", src)
    res = pipeline.run(src, pipeline.RunOptions(check=False, emit=["stablehlo"]))
    assert res.exit_code == 1 and res.report.violations  # as before: the violations, not the --emit
    code, _, stderr = legalize_in_process(src, "--emit", "stablehlo", "--no-check")
    assert code == 2
    assert stderr.strip() == "legalize: error: --emit stablehlo writes the xla form: add --target xla"
    ok = tmp_path / "mlp_bias.onnx"
    shutil.copy(MODELS / "mlp_bias.onnx", ok)
    with pytest.raises(pipeline.UsageError, match="--emit stablehlo writes the xla form"):
        pipeline.run(ok, pipeline.RunOptions(check=False, emit=["stablehlo"]))


def test_a_file_that_is_no_model_is_said_once_where_it_is_read(tmp_path, legalize_in_process):
    bad = tmp_path / "empty.onnx"
    bad.write_bytes(b"")
    plan = pipeline.prepare(bad, pipeline.RunOptions())
    assert plan.kind is None and str(plan.refused) == f"{bad}: is empty"
    code, _, stderr = legalize_in_process(bad)
    assert code == 2 and stderr.strip() == f"legalize: error: {bad}: is empty"



def test_a_target_is_looked_up_by_its_name_only():
    """A run resolves its target once (``Valid.target``) and hands the record on: the
    lookup takes a name, and a record given to it is one clear error, not an answer."""
    from legalizer.errors import UsageError

    assert targets.target("tosa") is targets.TARGETS["tosa"]
    with pytest.raises(UsageError, match="^a target is given by its name, one of tosa, .*, not a Target$"):
        targets.target(targets.TARGETS["tosa"])

def test_a_format_check_takes_typed_values(tmp_path):
    """``Format.check`` of the ONNX record, given a ``Subject``: the model against
    itself on onnxruntime, at the dims bound."""
    from legalizer.importers.reader import read_model
    from legalizer.numeric.settings import CheckSettings

    src = MODELS / "dynamic_broadcast.onnx"
    model = read_model(src)
    subject = Subject(src, model, CheckSettings("cpu", 1e-5, 1e-6))
    result = of_kind("onnx").check(subject, src)
    assert result.ran and result.ok
    sides = of_kind("onnx").sides(subject, tmp_path / "written.onnx")
    assert (sides.candidate, sides.reference) == (tmp_path / "written.onnx", src)


@pytest.mark.parametrize("name", [".", "x" * 300 + ".onnx"])
def test_a_path_that_names_no_model_is_one_error_from_the_library_and_the_command(tmp_path, name):
    """A folder, or a name too long for the file system: the library raises BadInput
    (the output plan is not made for a file that will not load), the command says one
    line and exits 2."""
    from legalizer.errors import BadInput
    from helpers import cli_in_process

    path = tmp_path if name == "." else tmp_path / name
    with pytest.raises(BadInput, match="is a directory, not a model file|cannot be read: File name too long"):
        pipeline.run(path, RunOptions())
    if name != ".":  # (a folder on the command line is a batch of its models)
        code, out, err = cli_in_process(path, "-q")
        assert code == 2 and len(err.strip().splitlines()) == 1 and "cannot be read: File name too long" in err, err
