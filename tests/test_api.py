"""The library API for pipelines: load/save/verify/legalize/check take a path, an
onnx.ModelProto, an onnx_ir.Model or legalize's Model, and legalize gives back the kind
it was given; legalizer.onnx_ir.LegalizePass inside onnx_ir / onnxscript pipelines."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

import legalizer

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"
SAMPLES = ["mlp_bias.onnx", "dynamic_broadcast.onnx", "transformer_block.dynamo.onnx", "small_cnn.torchscript.onnx"]

try:
    import onnx_ir as ir
except ImportError:  # the torch extra's (onnxscript's); the tests that use it say so
    ir = None
needs_ir = pytest.mark.needs("torch")


def _proto(name: str) -> onnx.ModelProto:
    return onnx.load(str(MODELS / name))


def _max_err(result) -> float:
    return max(o.max_abs_err for b in result.bindings if not b.skipped for o in b.outputs)


@pytest.mark.parametrize("target", ["tosa", "xla"])
@pytest.mark.parametrize("name", SAMPLES)
def test_legalize_proto_gives_a_new_legal_proto(name, target):
    proto = _proto(name)
    before = proto.SerializeToString()
    out = legalizer.legalize(proto, target=target)
    assert isinstance(out, onnx.ModelProto) and out is not proto
    assert proto.SerializeToString() == before  # the input is untouched
    onnx.checker.check_model(out)
    assert legalizer.verify(out, target).ok
    result = legalizer.check(proto, out, provider="cpu")
    assert result.ok, result.to_json()
    assert _max_err(result) <= 1e-5


@needs_ir
@pytest.mark.parametrize("target", ["tosa", "xla"])
@pytest.mark.parametrize("name", SAMPLES)
def test_legalize_onnx_ir_model_gives_an_onnx_ir_model(name, target):
    model = ir.serde.deserialize_model(_proto(name))
    before = ir.serde.serialize_model(model).SerializeToString()
    out = legalizer.legalize(model, target)
    assert isinstance(out, ir.Model) and out is not model
    assert ir.serde.serialize_model(model).SerializeToString() == before
    assert legalizer.verify(out, target).ok
    result = legalizer.check(model, out, provider="cpu")  # both onnx_ir models
    assert result.ok, result.to_json()


@pytest.mark.parametrize("name", SAMPLES)
def test_legalize_path_writes_and_returns_a_result(tmp_path, name):
    src = tmp_path / name
    shutil.copy(MODELS / name, src)
    res = legalizer.legalize(str(src), "tosa", provider="cpu")
    assert isinstance(res, legalizer.Result) and res.exit_code == 0 and res.ok
    out = res.output
    assert out == tmp_path / name.replace(".onnx", ".legal.onnx") and out.exists() and os.fspath(res) == str(out)
    assert res.report["output"] == str(out) and res.report["check"]["ok"] is True
    assert res.check.state == "ran" and res.check.ok is True and res.refused == ()
    assert legalizer.verify(out, "tosa").ok
    result = legalizer.check(src, out, provider="cpu")
    assert result.ok
    assert src.read_bytes() == (MODELS / name).read_bytes()
    # an explicit output; an existing one needs force
    again = legalizer.legalize(src, "xla", output=tmp_path / "x.onnx")
    assert again.output == tmp_path / "x.onnx" and legalizer.verify(again.output, "xla").ok
    with pytest.raises(legalizer.UsageError, match="already exists"):
        legalizer.legalize(src, "xla", output=tmp_path / "x.onnx")
    assert legalizer.legalize(src, "xla", output=tmp_path / "x.onnx", force=True).output == tmp_path / "x.onnx"


def test_model_is_rewritten_in_place_and_returned():
    """legalize's own Model: verified, rewritten in place and given back (the same kind,
    as for every other form); what changed is ``model.legalized``."""
    model = legalizer.load(MODELS / "mlp_bias.onnx")
    assert isinstance(model, legalizer.Model)
    assert legalizer.legalize(model, "tosa") is model
    assert model.legalized.model is model and model.legalized.stats["constants_folded"] == 3
    assert legalizer.verify(model.graph, "tosa").ok and legalizer.verify(model, "tosa").ok
    result = legalizer.check(model)  # against its source file
    assert result.ok and result.torch is None


def test_not_legal_input_raises():
    proto = _proto("incompatible_add.onnx")
    with pytest.raises(legalizer.NotLegal, match="operands don't have broadcast-compatible shapes") as e:
        legalizer.legalize(proto)
    assert e.value.exit_code == 1 and e.value.violations


@needs_ir
def test_not_legal_onnx_ir_model_raises():
    with pytest.raises(legalizer.NotLegal, match="operands don't have broadcast-compatible shapes"):
        legalizer.legalize(ir.serde.deserialize_model(_proto("incompatible_add.onnx")), "xla")


def test_not_legal_path_raises_and_writes_nothing(tmp_path):
    src = tmp_path / "incompatible_add.onnx"
    shutil.copy(MODELS / "incompatible_add.onnx", src)
    with pytest.raises(legalizer.NotLegal) as e:
        legalizer.legalize(src)
    assert e.value.report["violations"] and e.value.report["output"] is None
    assert sorted(p.name for p in tmp_path.iterdir()) == [src.name]


@pytest.mark.parametrize("kind", ["path", "str", "proto", pytest.param("ir", marks=needs_ir), "model"])
def test_load_verify_save_accept_every_kind(tmp_path, kind):
    path = MODELS / "mlp_bias.onnx"
    given = {"path": path, "str": str(path), "proto": _proto("mlp_bias.onnx"),
             "ir": lambda: ir.serde.deserialize_model(_proto("mlp_bias.onnx")),
             "model": legalizer.load(path)}[kind]
    given = given() if callable(given) else given
    model = legalizer.load(given)
    assert isinstance(model, legalizer.Model) and len(model.graph) > 0
    res = legalizer.verify(given, "tosa")
    assert isinstance(res, legalizer.VerifyResult)
    assert [d.node for d in res.violations] == ["fc1_bias", "fc2_bias", "out_scale"]
    assert legalizer.verify(given).ok  # mlir, the default profile
    if kind in ("path", "str"):
        return
    out = legalizer.save(given, tmp_path / "m.onnx")
    assert out == tmp_path / "m.onnx"
    assert legalizer.check(path, out, provider="cpu").ok
    with pytest.raises(legalizer.UsageError, match="already exists"):
        legalizer.save(given, out)


def test_wrong_kinds_are_type_errors():
    with pytest.raises(TypeError, match="onnx.ModelProto"):
        legalizer.legalize(42)
    with pytest.raises(TypeError):
        legalizer.load(b"bytes")
    with pytest.raises(TypeError, match="one argument"):
        legalizer.check(_proto("mlp_bias.onnx"))


# -- legalizer.onnx_ir.LegalizePass ---------------------------------------------------

@needs_ir
def test_pass_module_uses_the_real_onnx_ir():
    """legalizer/onnx_ir.py shadows nothing: inside it, and for its importers,
    ``onnx_ir`` is the installed package."""
    from legalizer import onnx_ir as mod

    assert mod.onnx_ir is ir and "legalizer" not in Path(ir.__file__).parts
    assert issubclass(mod.LegalizePass, ir.passes.InPlacePass)
    probe = ("import legalizer.onnx_ir, onnx_ir, sys; "
             "assert sys.modules['onnx_ir'] is onnx_ir and onnx_ir is legalizer.onnx_ir.onnx_ir; "
             "assert hasattr(onnx_ir, 'passes'), onnx_ir.__file__; print(onnx_ir.__file__)")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "site-packages" in out.stdout or "legalizer" not in out.stdout


@needs_ir
def test_pass_is_in_place_and_reports_modified():
    from legalizer.onnx_ir import LegalizePass

    model = ir.serde.deserialize_model(_proto("mlp_bias.onnx"))
    p = LegalizePass("tosa")
    result = p(model)
    assert isinstance(result, ir.passes.PassResult)
    assert result.model is model and result.modified
    assert p.stats["constants_folded"] == 3
    assert legalizer.verify(model, "tosa").ok
    again = LegalizePass("tosa")(model)  # already legal: nothing to do
    assert again.model is model and not again.modified
    with pytest.raises(ValueError, match="unknown target"):
        LegalizePass("tpu")


@needs_ir
def test_pass_raises_on_an_illegal_model():
    from legalizer.onnx_ir import LegalizePass

    model = ir.serde.deserialize_model(_proto("incompatible_add.onnx"))
    with pytest.raises(legalizer.NotLegal):
        LegalizePass()(model)
    with pytest.raises(ir.passes.PassError) as e:  # a PassManager wraps what a pass raises
        ir.passes.PassManager([LegalizePass()])(model)
    cause = e.value
    while cause is not None and not isinstance(cause, legalizer.NotLegal):
        cause = cause.__cause__
    assert cause is not None


@needs_ir
@pytest.mark.parametrize("target", ["tosa", "xla"])
def test_pass_in_an_onnxscript_optimizer_pipeline(target):
    """onnxscript's optimizer, then LegalizePass, then onnx_ir's dead-node removal, in one
    PassManager over the dynamo-exported transformer block; the outputs before and after
    compared on onnxruntime for every dim binding (batch, seq in {3, 1})."""
    import onnxscript
    from legalizer.onnx_ir import LegalizePass

    class Optimize(ir.passes.InPlacePass):
        """onnxscript.optimizer.optimize (in place on an onnx_ir.Model) as a pass."""

        def call(self, model):
            onnxscript.optimizer.optimize(model)
            return ir.passes.PassResult(model, True)

    original = _proto("transformer_block.dynamo.onnx")
    assert not legalizer.verify(original, target).ok
    model = ir.serde.deserialize_model(original)
    legal = LegalizePass(target)
    pipeline = ir.passes.PassManager([Optimize(), legal, ir.passes.common.RemoveUnusedNodesPass()])
    result = pipeline(model)
    assert result.model is model and result.modified
    assert legal.stats["reshapes_inserted" if target == "tosa" else "broadcasts_made_explicit"] >= 1
    assert legalizer.verify(model, target).ok
    check = legalizer.check(original, model, provider="cpu")
    assert check.ok, check.to_json()
    assert [b.dims for b in check.bindings] == [{"batch": 3, "seq": 3}, {"batch": 3, "seq": 1},
                                                {"batch": 1, "seq": 3}, {"batch": 1, "seq": 1}]
    assert _max_err(check) <= 1e-5
    # the optimizer after legalization keeps the model legal
    ir.passes.PassManager([Optimize()])(model)
    assert legalizer.verify(model, target).ok
    assert legalizer.check(original, model, provider="cpu").ok


def test_not_legal_carries_the_same_result_as_a_success(tmp_path):
    src = tmp_path / "incompatible_add.onnx"
    shutil.copy(MODELS / "incompatible_add.onnx", src)
    with pytest.raises(legalizer.NotLegal) as e:
        legalizer.legalize(src)
    res = e.value.result
    assert isinstance(res, legalizer.Result) and res.exit_code == 1 and not res.ok and res.output is None
    assert res.report is e.value.report and [v["node"] for v in res.violations] == ["bad_add"]
    # the check did not run, and says why; check.ok has one meaning: null when nothing was compared
    assert (res.check.state, res.check.why, res.check.ok) == ("not run", "the input violates the Broadcastable trait",
                                                              None)
    assert res.report["check"] == {"ran": False, "ok": None}
    with pytest.raises(legalizer.NotLegal) as e:  # an in-memory form carries one too
        legalizer.legalize(_proto("incompatible_add.onnx"))
    assert e.value.result.check.state == "not run" and e.value.result.report["violations"][0]["node"] == "bad_add"


def test_a_check_that_did_not_run_is_said(tmp_path):
    src = tmp_path / "mlp_bias.onnx"
    shutil.copy(MODELS / "mlp_bias.onnx", src)
    res = legalizer.legalize(src, check=False)
    assert res.exit_code == 0 and res.output.exists()
    assert str(res.check) == "not run: not asked for (check=False, --no-check, --verify-only)"
    assert res.report["check"] == {"ran": False, "ok": None}


def test_unknown_keyword_arguments_name_the_valid_ones(tmp_path):
    with pytest.raises(TypeError) as e:
        legalizer.legalize(MODELS / "mlp_bias.onnx", report=tmp_path / "r.json")
    assert str(e.value).startswith("legalize() got an unexpected keyword argument 'report'; its keyword arguments"
                                   " are debug, assume_dynamic_not_one, output, force, check, level and, for a path,"
                                   " provider, dims, input_shapes, inputs, rtol, atol, emit, profile,")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(TypeError, match="'provider' applies to a path"):
        legalizer.legalize(_proto("mlp_bias.onnx"), provider="cpu")


def test_a_check_that_could_not_run_is_said_not_only_recorded(tmp_path, monkeypatch):
    """A model the check cannot run (here: onnxruntime made to refuse every model) comes
    back written, with the check's state and why, and a RuntimeWarning that says so."""
    from legalizer.kinds.onnx import format as onnx_format

    src = tmp_path / "mlp_bias.onnx"
    shutil.copy(MODELS / "mlp_bias.onnx", src)
    monkeypatch.setattr(onnx_format.OnnxFormat, "check", lambda self, run, written: _not_run())
    with pytest.warns(RuntimeWarning, match="legalized, but the numeric check did not run: no runtime here"):
        res = legalizer.legalize(src)
    assert res.exit_code == 0 and res.output.exists()
    assert (res.check.state, res.check.why) == ("not run", "no runtime here")


def _not_run():
    from legalizer.numeric.results import CheckResult

    return CheckResult(False, "CPUExecutionProvider", error="no runtime here")


@needs_ir
@pytest.mark.parametrize("rewritten", [True, False])
def test_pass_converts_each_way_once_and_back_only_when_rewritten(rewritten, monkeypatch):
    """The onnx_ir model becomes legalize's IR once (one import, one shape inference);
    the IR is written back as ONNX and read into onnx_ir once if it was rewritten, and
    not at all if not (the model's graph is then the very one it had)."""
    import legalizer.kinds.onnx.exporter as onnx_exporter
    import legalizer.kinds.onnx.importer as onnx_importer
    from legalizer.onnx_ir import LegalizePass

    calls = {"import_model": 0, "_infer": 0, "export_graph": 0, "deserialize_model": 0}

    def counted(module, fn):
        real = getattr(module, fn)

        def call(*a, **k):
            calls[fn] += 1
            return real(*a, **k)
        monkeypatch.setattr(module, fn, call)

    model = ir.serde.deserialize_model(_proto("mlp_bias.onnx"))
    if not rewritten:  # legal already
        assert LegalizePass("tosa")(model).modified
    graph = model.graph
    for fn in ("import_model", "_infer"):
        counted(onnx_importer, fn)
    counted(onnx_exporter, "export_graph")
    counted(ir.serde, "deserialize_model")
    result = LegalizePass("tosa")(model)
    assert result.modified is rewritten and result.model is model
    once = int(rewritten)
    assert calls == {"import_model": 1, "_infer": 1, "export_graph": once, "deserialize_model": once}
    assert (model.graph is graph) is not rewritten
    assert legalizer.verify(model, "tosa").ok
