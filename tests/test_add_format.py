"""Adding a model kind is one package with its record, registered
(tests/toy_format.py: ``TOY1`` and an ONNX model's bytes, suffix ``.toy``): the main job
then sniffs it, reads it, legalizes it and writes it back in its own format, through
the record; what it cannot do it refuses in the record's words."""

import json

import onnx
import pytest
from onnx import TensorProto, helper

from legalizer.kinds import registry
from helpers import cli_in_process
from toy_format import KIND, MAGIC


@pytest.fixture
def toy():
    registry.register(KIND)
    yield KIND
    registry.KINDS.remove(KIND)


def _toy_file(path):
    """y = x + b, x float[2, 3] and b float[3]: a rank broadcast TOSA refuses."""
    graph = helper.make_graph([helper.make_node("Add", ["x", "b"], ["y"], name="add")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
                               helper.make_tensor_value_info("b", TensorProto.FLOAT, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path.write_bytes(MAGIC + model.SerializeToString())
    return path


def test_a_registered_kind_is_sniffed_read_and_written_back(toy, tmp_path):
    src = _toy_file(tmp_path / "m.toy")
    assert registry.sniff(src) == "toy"
    code, out, err = cli_in_process(src, "--no-check", "--report", tmp_path / "r.json")
    assert code == 0, err
    written = (tmp_path / "m.legal.toy").read_bytes()
    assert written.startswith(MAGIC)
    legal = onnx.load_model_from_string(written[len(MAGIC):])
    # b made rank 2 for TOSA's equal ranks, then added
    assert [n.op_type for n in legal.graph.node] == ["Unsqueeze", "Add"]
    report = json.loads((tmp_path / "r.json").read_text())
    assert (report["format"], report["output"]) == ("toy", str(tmp_path / "m.legal.toy"))


def test_a_registered_kind_is_refused_in_its_records_words(toy, tmp_path):
    src = _toy_file(tmp_path / "m.toy")
    code, _, err = cli_in_process(src, "--no-check", "-o", tmp_path / "m.onnx")
    assert (code, err.strip()) == (2, f"legalize: error: {tmp_path / 'm.onnx'}: a '.onnx' name, but the legalized"
                                      " model is a toy model: name it '*.toy' (--emit writes other formats beside it)")


def test_a_kind_is_registered_once_and_the_report_schema_names_its_format(toy):
    from legalizer.report import schema, schema_text

    with pytest.raises(ValueError, match="a model kind named 'toy' is registered already"):
        registry.register(toy)
    builtin = json.loads(schema_text())["$defs"]["run"]["properties"]["format"]["enum"]
    assert builtin == ["onnx", "tflite", "mlir", "pt2"]
    assert schema()["$defs"]["run"]["properties"]["format"]["enum"] == builtin + ["toy"]


def test_without_its_record_the_file_is_no_model(tmp_path):
    src = _toy_file(tmp_path / "m.toy")
    assert registry.sniff(src) == "onnx"  # (no signature matched: the default kind's parser then refuses it)
    code, _, err = cli_in_process(src, "--no-check")
    assert (code, err) == (2, f"legalize: error: {src}: not a valid ONNX model (DecodeError: Error parsing message"
                              " with type 'onnx.ModelProto': Wire format was corrupt)\n")
