"""The MLIR emitters' one driver: one rule signature for both dialects, dialect op names
read from ``rules/onnx.toml`` only, the ``xla`` form read from the verifier's result,
and no importer behind the exporters (a symbolic dim is bound by the caller)."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

import legalizer
from helpers import op_model
from legalizer.emit_formats import bound_dims
from legalizer.errors import BadInput
from legalizer.exporters.stablehlo import LOWERINGS as STABLEHLO, ImplicitBroadcast, emit_stablehlo
from legalizer.exporters.tosa import LOWERINGS as TOSA, emit_tosa
from legalizer.kinds.onnx.importer import import_model
from legalizer.oprules import frontend_rules, parse_rules
from legalizer.verifier import Diagnostic, VerifyResult, verify

ROOT = Path(__file__).resolve().parent.parent
RULES = frontend_rules("onnx")


def _emitted(proto, target: str) -> str:
    model = import_model(proto)
    legalizer.legalize(model, target)
    return (emit_tosa if target == "tosa" else emit_stablehlo)(model)


@pytest.mark.parametrize("table", [TOSA, STABLEHLO], ids=["tosa", "stablehlo"])
def test_every_rule_takes_the_emitter_and_the_node(table):
    shapes = {op: [p.kind for p in inspect.signature(table.get(op)).parameters.values()] for op in table}
    assert shapes and all(kinds == [inspect.Parameter.POSITIONAL_OR_KEYWORD] * 2 for kinds in shapes.values())


# ONNX unary ops that are one dialect op, as the rules name it
UNARY = {"tosa": ["Exp", "Log", "Tanh", "Sigmoid", "Abs", "Reciprocal", "Floor", "Ceil", "Erf", "Sin", "Cos"],
         "stablehlo": ["Exp", "Log", "Sqrt", "Neg", "Abs", "Tanh", "Sigmoid", "Floor", "Ceil", "Round", "Sign",
                       "Sin", "Cos", "Tan"]}


@pytest.mark.parametrize("dialect,op", [(d, op) for d, ops in UNARY.items() for op in ops])
def test_a_unary_op_is_the_op_its_rule_names(dialect, op):
    text = _emitted(op_model(op, ["2x3xf32"], "2x3xf32"), "tosa" if dialect == "tosa" else "xla")
    name = RULES[op].targets[dialect]
    if dialect == "tosa":
        assert f"%result = {name} %arg0 : (tensor<2x3xf32>) -> tensor<2x3xf32>" in text
    else:
        assert f"%result = {name} %arg0 : tensor<2x3xf32>" in text


@pytest.mark.parametrize("op", ["Not", "BitwiseNot"])
def test_a_logical_or_bitwise_not_is_the_op_its_rule_names(op):
    elem = "i1" if op == "Not" else "i32"
    model = op_model(op, [f"4x{elem}"], f"4x{elem}", opset=18)
    assert f"%result = {RULES[op].targets['tosa']} %arg0 : (tensor<4x{elem}>) -> tensor<4x{elem}>" \
        in _emitted(model, "tosa")
    assert f"%result = {RULES[op].targets['stablehlo']} %arg0 : tensor<4x{elem}>" in _emitted(model, "xla")


@pytest.mark.parametrize("op,direction", [("Equal", "EQ"), ("Less", "LT"), ("Greater", "GT"), ("LessOrEqual", "LE"),
                                          ("GreaterOrEqual", "GE")])
def test_a_comparison_has_the_direction_its_rule_names(op, direction):
    assert RULES[op].direction == direction
    text = _emitted(op_model(op, ["3xf32", "3xf32"], "3xi1"), "xla")
    assert (f"%result = stablehlo.compare {direction}, %arg0, %arg1, FLOAT : (tensor<3xf32>, tensor<3xf32>)"
            " -> tensor<3xi1>") in text


@pytest.mark.parametrize("op,tosa_op", [("Less", "tosa.greater"), ("LessOrEqual", "tosa.greater_equal")])
def test_tosa_has_no_less_than_so_the_operands_are_swapped(op, tosa_op):
    assert RULES[op].targets["tosa"] == tosa_op
    text = _emitted(op_model(op, ["3xf32", "3xf32"], "3xi1"), "tosa")
    assert f"%result = {tosa_op} %arg1, %arg0 : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xi1>" in text


@pytest.mark.parametrize("op,tosa_op", [("ReduceSum", "tosa.reduce_sum"), ("ReduceMax", "tosa.reduce_max"),
                                        ("ReduceProd", "tosa.reduce_product")])
def test_a_reduction_is_the_tosa_op_its_rule_names(op, tosa_op):
    assert RULES[op].targets["tosa"] == tosa_op
    text = _emitted(op_model(op, ["2x3xf32"], "1x3xf32", opset=11, attrs={"axes": [0]}), "tosa")
    assert re.search(rf'= "{tosa_op}"\(%arg0\) <{{axis = 0 : i32}}> : \(tensor<2x3xf32>\) -> tensor<1x3xf32>', text)


def test_the_ops_only_exporters_read_are_not_unary_for_the_passes():
    # BitwiseNot and the reductions are listed for their names: rank folding's regions
    # (category unary) and the verifier (broadcasting categories) do not see them.
    for op in ("BitwiseNot", "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd"):
        assert RULES[op].category == "other" and not RULES[op].broadcasting


def test_a_comparison_direction_must_be_one_stablehlo_has():
    with pytest.raises(BadInput) as e:
        parse_rules('[Less]\ncategory = "binary"\ndirection = "BELOW"\n', "my.toml")
    assert str(e.value) == "my.toml: op 'Less': direction must be one of EQ, NE, LT, LE, GT, GE, not 'BELOW'"


def test_the_mlir_exporters_do_not_import_the_importers():
    exporters = ROOT / "legalizer" / "exporters"
    files = [exporters / "tosa.py", exporters / "stablehlo.py", exporters / "tosa_level.py",
             *sorted((exporters / "mlir").rglob("*.py"))]
    found = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and {"importers", "importer"} & set((node.module or "").split(".")):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
            elif isinstance(node, ast.Import) and any({"importers", "importer"} & set(a.name.split(".")) for a in node.names):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert len(files) > 10 and found == []


def test_symbolic_dims_are_bound_by_the_caller_before_tosa_is_emitted():
    model = legalizer.load(ROOT / "models" / "small_cnn.dynamo.onnx")
    legalizer.legalize(model, "tosa")
    with pytest.raises(BadInput, match=r"'node_conv2d' \(Conv: a window over dynamic spatial dims \(\?x3x\?x\?\)"):
        emit_tosa(model)
    with bound_dims(model, {"batch": 2, "height": 8, "width": 8}) as bound:
        text = emit_tosa(bound)
    assert text.splitlines()[2] == "  func.func @main(%arg0: tensor<2x3x8x8xf32>) -> tensor<2x4xf32> {"
    with pytest.raises(BadInput, match=r"'node_conv2d' \(Conv: a window over dynamic spatial dims"):
        emit_tosa(model)  # the model's own types are given back
    with bound_dims(model, {}) as bound:
        assert bound is model


def _read_back(model, dims):
    """The reference: ``model``'s ONNX form with the input dims bound, read into a new IR
    (what binding dims did before the IR's own values were retyped)."""
    from legalizer.exporters.as_onnx import to_onnx

    proto = to_onnx(model)
    g = proto.graph
    for vi in list(g.input) + list(g.output):
        for d in vi.type.tensor_type.shape.dim:
            if d.WhichOneof("value") == "dim_param":
                if d.dim_param in dims:
                    d.dim_value = dims[d.dim_param]
                elif vi in g.output:
                    d.ClearField("dim_param")
    del g.value_info[:]
    return import_model(proto)


@pytest.mark.parametrize("name, dims", [
    ("small_cnn.dynamo.onnx", {"batch": 2, "height": 8, "width": 8}),
    ("transformer_block.dynamo.onnx", {"batch": 2, "seq": 5}),
    ("mlp_bias.onnx", {"N": 3}),
    ("mlp.dynamo.onnx", {"batch": 1}),
])
def test_bound_dims_retype_the_ir_itself_with_one_shape_inference(name, dims, monkeypatch):
    """The module emitted under bound dims is the one the model's form read back gave,
    byte for byte; but nothing is read back (no import), shape inference runs once, and
    the IR's types are its own again after."""
    import legalizer.kinds.onnx.importer as onnx_importer

    model = legalizer.load(ROOT / "models" / name)
    legalizer.legalize(model, "tosa")
    expected = emit_tosa(_read_back(model, dims))
    own = [(v, v.type) for n in model.graph.nodes() for v in n.outputs]
    calls = {"import_model": 0, "_infer": 0}

    def counted(name, fn):
        def call(*a, **k):
            calls[name] += 1
            return fn(*a, **k)
        return call

    for fn in calls:
        monkeypatch.setattr(onnx_importer, fn, counted(fn, getattr(onnx_importer, fn)))
    with bound_dims(model, dims) as bound:
        assert bound is model
        text = emit_tosa(model)
    assert calls == {"import_model": 0, "_infer": 1}
    assert text == expected
    assert all(v.type == t for v, t in own)


def _xla_model():
    model = legalizer.load(ROOT / "models" / "mlp_bias.onnx")
    legalizer.legalize(model, "xla")
    return model


def test_stablehlo_reads_the_verification_it_is_given():
    model = _xla_model()
    verified = verify(model.graph, "xla")
    assert verified.ok
    assert emit_stablehlo(model, verified=verified) == emit_stablehlo(model)
    # a verification that found an implicit broadcast is believed, not redone
    d = Diagnostic("implicit-broadcast", "fc1_bias", "Add", "operand #1 is not the shape of the operation", [], None)
    with pytest.raises(ImplicitBroadcast) as e:
        emit_stablehlo(model, verified=VerifyResult(violations=[d]))
    assert str(e.value) == ("cannot emit StableHLO: Add 'fc1_bias' broadcasts implicitly (operand #1 is not the shape"
                            " of the operation); emit_stablehlo needs a model legalized for target xla")


def test_stablehlo_of_a_model_not_in_the_xla_form_names_the_verifiers_diagnostic():
    model = legalizer.load(ROOT / "models" / "mlp_bias.onnx")  # not legalized
    with pytest.raises(ImplicitBroadcast) as e:
        emit_stablehlo(model)
    assert str(e.value) == ("cannot emit StableHLO: Add 'fc1_bias' broadcasts implicitly (operand #1 is not the shape"
                            " of the operation: '32' is broadcast implicitly to 'Nx32'); emit_stablehlo needs a model"
                            " legalized for target xla")
