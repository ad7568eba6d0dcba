"""Old opsets: a model below the opset a rewrite needs is brought up with onnx's version
converter (and the run says why its opset changed); a model that needs none keeps its
opset."""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from helpers import cli_in_process

F = TensorProto.FLOAT


def _squeeze_add(tmp_path, opset):
    """y = Squeeze(x) + b, x [1, N, 4]: Squeeze without axes leaves a rank that depends
    on N at run time, so only the rank-agnostic rewrite (Reshape's allowzero, opset 14)
    makes the Add provable."""
    g = helper.make_graph([helper.make_node("Squeeze", ["x"], ["s"], name="sq"),
                           helper.make_node("Add", ["s", "b"], ["y"], name="add")], "g",
                          [helper.make_tensor_value_info("x", F, [1, "N", 4])],
                          [helper.make_tensor_value_info("y", F, None)],
                          [numpy_helper.from_array(np.arange(4, dtype=np.float32), "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    path = tmp_path / f"sq{opset}.onnx"
    onnx.save(m, str(path))
    return path


def test_an_opset_13_model_is_raised_to_what_the_rewrite_needs(tmp_path):
    src, out, rep = _squeeze_add(tmp_path, 13), tmp_path / "o.onnx", tmp_path / "r.json"
    code, text, err = cli_in_process(src, "-o", out, "--report", rep, "-q")
    assert code == 0, text + err  # it was: 1 violation, unprovable
    why = ("opset raised from 13 to 14 by onnx's version converter: the legal form needs opset 14 (Reshape's"
           " allowzero, for operands of unknown rank)")
    report = json.loads(rep.read_text())
    assert report["warnings"] == [why] and report["violations"] == []  # the output's opset says why it changed
    assert [b["dims"] for b in report["check"]["bindings"]] == [{"N": 3}, {"N": 1}] and report["check"]["ok"]
    assert [o.version for o in onnx.load(str(out)).opset_import if o.domain == ""] == [14]


def test_a_model_that_needs_no_rewrite_of_a_newer_opset_keeps_its_own(tmp_path):
    g = helper.make_graph([helper.make_node("Add", ["x", "b"], ["y"], name="add")], "g",
                          [helper.make_tensor_value_info("x", F, ["N", 4])], [helper.make_tensor_value_info("y", F, ["N", 4])],
                          [numpy_helper.from_array(np.arange(4, dtype=np.float32), "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)])
    m.ir_version = 8
    onnx.save(m, str(tmp_path / "a.onnx"))
    code, text, err = cli_in_process(tmp_path / "a.onnx", "-o", tmp_path / "o.onnx", "-q")
    assert code == 0 and err == "", text + err
    assert [o.version for o in onnx.load(str(tmp_path / "o.onnx")).opset_import if o.domain == ""] == [11]


def test_a_conversion_that_fails_names_the_opset_step_and_the_op(tmp_path):
    """A legacy-broadcast Add (opset 6) needs opset 7, and onnx's converter has no GRU
    adapter past opset 6: one line, naming the step, the node and its op; nothing written."""
    h = 4
    g = helper.make_graph([helper.make_node("Add", ["x", "b"], ["xb"], broadcast=1, name="bias"),
                           helper.make_node("GRU", ["xb", "W", "R"], ["y", ""], hidden_size=h, name="rnn")], "g",
                          [helper.make_tensor_value_info("x", F, [5, 2, 3])],
                          [helper.make_tensor_value_info("y", F, [5, 1, 2, h])],
                          [numpy_helper.from_array(np.ones(3, np.float32), "b"),
                           numpy_helper.from_array(np.ones((1, 3 * h, 3), np.float32), "W"),
                           numpy_helper.from_array(np.ones((1, 3 * h, h), np.float32), "R")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 6)])
    m.ir_version = 4
    onnx.checker.check_model(m)
    src, out = tmp_path / "gru6.onnx", tmp_path / "o.onnx"
    onnx.save(m, str(src))
    code, text, err = cli_in_process(src, "-o", out)
    assert code == 2 and not out.exists()
    assert err.strip().splitlines() == [
        "legalize: error: the legal form needs opset 7 (numpy broadcasting), and onnx's version converter cannot"
        " raise this opset-6 model to it: at opset 6 -> 7, node 'rnn' (GRU): No Adapter From Version $6 for GRU"]


def test_the_step_is_found_when_the_converters_words_name_no_op():
    """A Pad-2 with no pads (its words: "required undefined attribute 'pads'") behind a
    Relu: raised one opset at a time, it fails at 10 -> 11, where Pad changes."""
    from legalizer.version_steps import failing_step

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["r"], name="act"),
                           helper.make_node("Pad", ["r"], ["y"], name="pad")], "g",
                          [helper.make_tensor_value_info("x", F, [2, 3])], [helper.make_tensor_value_info("y", F, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 2)])
    try:
        onnx.version_converter.convert_version(m, 14)
    except Exception as e:  # noqa: BLE001
        error = e
    step, node, words = failing_step(m, 2, 14, error)
    assert (step, node.name, node.op_type, words) == (11, "pad", "Pad", "required undefined attribute 'pads'")


def test_paddleocr_v4_recognizer_at_opset_12_is_raised_and_matches(tmp_path):
    """The issue's model: rapidocr-onnxruntime 1.4.4's PP-OCRv4 recognizer, opset 12, was
    refused with 64 "unprovable rank" violations and no word of its opset."""
    import pytest

    from corpus_models import model_path

    src = model_path("wheel_rapidocr_v4_rec_op12")
    if not src.is_file():
        pytest.skip("the corpus's wheel_rapidocr_v4_rec_op12: python scripts/corpus.py --only wheel_rapidocr_v4")
    out, rep = tmp_path / "rec.onnx", tmp_path / "r.json"
    code, text, err = cli_in_process(src, "-o", out, "--report", rep, "-q")
    assert code == 0, text + err
    report = json.loads(rep.read_text())
    assert report["warnings"] == ["opset raised from 12 to 14 by onnx's version converter: the legal form needs"
                                  " opset 14 (Reshape's allowzero, for operands of unknown rank)"]
    assert report["violations"] == [] and report["check"]["ok"] is True and len(report["check"]["bindings"]) >= 4
    assert [o.version for o in onnx.load(str(out)).opset_import if o.domain == ""] == [14]


def _weighted_opset13():
    """An opset-13 MatMul by a 256 KiB weight, then Squeeze and Add: (model, weight)."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
                           helper.make_node("Squeeze", ["m"], ["s"], name="sq"),
                           helper.make_node("Add", ["s", "b"], ["y"], name="add")], "g",
                          [helper.make_tensor_value_info("x", F, [1, "N", 256])],
                          [helper.make_tensor_value_info("y", F, None)],
                          [w, numpy_helper.from_array(np.arange(256, dtype=np.float32), "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m, w


def test_the_version_converter_is_given_the_model_without_its_large_weights(tmp_path, monkeypatch):
    """onnx's converter reads the model's bytes: a 256 KiB weight is left out of what it
    is given and put back into its result as it was, so the weights are not serialized
    and parsed back; the output holds the weight byte for byte, and its check passes."""
    given = []
    convert = onnx.version_converter.convert_version
    monkeypatch.setattr(onnx.version_converter, "convert_version",
                        lambda m, v: given.append(m.ByteSize()) or convert(m, v))
    m, w = _weighted_opset13()
    src, out, rep = tmp_path / "w13.onnx", tmp_path / "o.onnx", tmp_path / "r.json"
    onnx.save(m, str(src))
    code, text, err = cli_in_process(src, "-o", out, "--report", rep, "-q")
    assert code == 0, text + err
    assert len(given) == 1 and given[0] < 4096 < m.ByteSize()
    legal = onnx.load(str(out))
    assert [o.version for o in legal.opset_import if o.domain == ""] == [14]
    assert [t for t in legal.graph.initializer if t.name == "w"] == [w]
    assert json.loads(rep.read_text())["check"]["ok"]


def test_a_converter_that_fails_without_the_weights_is_given_the_whole_model(tmp_path, monkeypatch):
    """Where an adapter needs a weight left out (and fails without it), the whole model
    is converted: the raise succeeds, and its output is the model's."""
    given = []
    convert = onnx.version_converter.convert_version

    def needs_weights(m, v):
        given.append(m.ByteSize())
        if m.ByteSize() < 4096:
            raise RuntimeError("an adapter read a weight that is not there")
        return convert(m, v)

    monkeypatch.setattr(onnx.version_converter, "convert_version", needs_weights)
    m, w = _weighted_opset13()
    src, out = tmp_path / "w13.onnx", tmp_path / "o.onnx"
    onnx.save(m, str(src))
    code, text, err = cli_in_process(src, "-o", out, "--no-check", "-q")
    assert code == 0, text + err
    assert len(given) == 2 and given[0] < 4096 < given[1]
    legal = onnx.load(str(out))
    assert [o.version for o in legal.opset_import if o.domain == ""] == [14]
    assert [t for t in legal.graph.initializer if t.name == "w"] == [w]


def test_a_weight_the_converter_changed_or_dropped_has_the_whole_model_converted():
    """The weights go back only into initializers left as the converter was given them."""
    from legalizer.kinds.onnx.importer import weightless
    from legalizer.target_passes import _weights_back

    big = numpy_helper.from_array(np.ones((128, 256), np.float32), "w")
    small = numpy_helper.from_array(np.arange(4, dtype=np.float32), "b")
    g = helper.make_graph([helper.make_node("Add", ["w", "b"], ["y"])], "g", [],
                          [helper.make_tensor_value_info("y", F, None)], [big, small])
    proto = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    stub = weightless(proto)
    assert stub is not proto and [t.raw_data for t in stub.graph.initializer] == [b"", small.raw_data]
    kept = onnx.ModelProto()
    kept.CopyFrom(stub)
    assert _weights_back(kept, proto, stub) and list(kept.graph.initializer) == [big, small]
    changed = onnx.ModelProto()
    changed.CopyFrom(stub)
    changed.graph.initializer[0].dims[:] = [256, 128]
    assert not _weights_back(changed, proto, stub)
    dropped = onnx.ModelProto()
    dropped.CopyFrom(stub)
    del dropped.graph.initializer[0]
    assert not _weights_back(dropped, proto, stub)
    assert weightless(dropped) is dropped  # nothing large: the model itself
