"""Round trips of hand-made ONNX models for what the wheel's corpus covers thinly:
external data, model-local functions, If/Loop/Scan bodies capturing outer values, and
header fields (metadata, doc strings, producer, value_info, initializers that are also
graph inputs)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import legalizer
from legalizer.kinds.onnx.exporter import export_model
from legalizer.kinds.onnx.importer import import_model

import onnx_suite as suite

F = TensorProto.FLOAT


def vi(name, shape, elem=F):
    return helper.make_tensor_value_info(name, elem, shape)


def model_of(nodes, inputs, outputs, inits=(), opset=17, ir_version=8, **kw):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], **kw)
    m.ir_version = ir_version
    return m


def roundtrip(m: onnx.ModelProto, feed=None) -> legalizer.Model:
    """Import and export ``m``: byte-identical, checker-clean, same ORT outputs."""
    onnx.checker.check_model(m, full_check=True)
    model = import_model(m)
    exported = export_model(model.graph, model.proto)
    assert exported.SerializeToString() == m.SerializeToString()
    feed = suite.synthesize(m) if feed is None else feed
    want = suite.ort_run(m.SerializeToString(), [feed])
    assert want.outputs is not None, want.reason
    got = suite.ort_run(exported.SerializeToString(), [feed])
    assert got.outputs is not None, got.reason
    suite.assert_outputs_equal(got.outputs[0], want.outputs[0], "outputs")
    return model


def ops_in(graph) -> list:
    return sorted(n.label for n in graph.walk() if n.kind == "op")


# ---- external data ------------------------------------------------------------------
W = np.arange(12, dtype=np.float32).reshape(3, 4)
B = np.arange(4, dtype=np.int64) - 2


def external_model(folder: Path) -> Path:
    m = model_of([helper.make_node("Add", ["x", "W"], ["y"], name="add"),
                  helper.make_node("Cast", ["B"], ["b"], name="cast", to=F),
                  helper.make_node("Mul", ["y", "b"], ["z"], name="mul")],
                 [vi("x", [3, 4])], [vi("z", [3, 4])],
                 [numpy_helper.from_array(W, "W"), numpy_helper.from_array(B, "B")])
    path = folder / "m.onnx"
    onnx.save_model(m, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="m.onnx.data", size_threshold=0)
    return path


def consts(model) -> dict:
    return {n.name: n.data for n in model.graph.constants()}


def data_file_of(out: Path) -> str:
    """The one data file legalize wrote beside ``out``: '<output name>.<16 hex digits>.data'."""
    (name,) = [n for n in os.listdir(out.parent) if re.fullmatch(re.escape(out.name) + r"\.[0-9a-f]{16}\.data", n)]
    return name


def check_external_output(out: Path, data_file: str, feed_x: np.ndarray, want) -> None:
    p = onnx.load_model(str(out), load_external_data=False)
    for t in p.graph.initializer:
        assert t.data_location == TensorProto.EXTERNAL, t.name
        assert {e.key: e.value for e in t.external_data}["location"] == data_file
    again = legalizer.load(out)  # the saved model reads back, lazily, equal
    for name, arr in (("W", W), ("B", B)):
        d = consts(again)[name]
        assert d._array is None
        np.testing.assert_array_equal(d.array, arr)
    got = suite.ort_run(str(out), [{"x": feed_x}])
    assert got.outputs is not None, got.reason
    suite.assert_outputs_equal(got.outputs[0], want, "outputs")


def test_external_data_stays_external_and_lazy(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    path = external_model(src)
    model = legalizer.load(path)
    data = consts(model)
    assert set(data) == {"W", "B"}
    for d in data.values():
        assert d.is_external and d._array is None  # nothing read at import
    exported = legalizer.to_onnx(model)
    assert exported.SerializeToString() == onnx.load_model(str(path), load_external_data=False).SerializeToString()
    assert all(t.data_location == TensorProto.EXTERNAL for t in exported.graph.initializer)
    for name, arr in (("W", W), ("B", B)):
        a = data[name].array
        assert isinstance(a, np.memmap)
        np.testing.assert_array_equal(a, arr)
    assert data["W"]._array is not None
    # Reading the data changes nothing that is exported.
    assert legalizer.to_onnx(model).SerializeToString() == exported.SerializeToString()


def _sample(np_dtype, shape, rng):
    if np_dtype.kind == "b":
        return rng.random(shape) < 0.5
    if np_dtype.kind in "iu":
        return rng.integers(0, 2, shape).astype(np_dtype)
    return (rng.standard_normal(shape) * 3).astype(np_dtype)


EXTERNAL_DTYPES = [n for n, v in TensorProto.DataType.items() if v not in (TensorProto.UNDEFINED, TensorProto.STRING)]


@pytest.mark.parametrize("dtype", EXTERNAL_DTYPES)
def test_external_data_every_dtype(tmp_path, dtype):
    """ConstData reads an external tensor of every element type as onnx does; those
    stored packed (int4, float4, int2, float6) are unpacked, the rest memory-mapped."""
    elem = TensorProto.DataType.Value(dtype)
    np_dtype = helper.tensor_dtype_to_np_dtype(elem)
    rng = np.random.default_rng(0)
    tensors = [numpy_helper.from_array(_sample(np_dtype, shape, rng), f"t{k}")
               for k, shape in enumerate([(2, 3), (5,), (), (0, 3)])]
    m = model_of([helper.make_node("Identity", [t.name], [f"y{t.name}"]) for t in tensors], [],
                 [helper.make_tensor_value_info(f"y{t.name}", elem, list(t.dims)) for t in tensors], tensors)
    onnx.save_model(m, str(tmp_path / "m.onnx"), save_as_external_data=True, location="m.bin", size_threshold=0)
    model = legalizer.load(tmp_path / "m.onnx")
    loaded = onnx.load_model(str(tmp_path / "m.onnx"))  # onnx reads the data itself
    for t in loaded.graph.initializer:
        d = consts(model)[t.name]
        assert d.is_external and d._array is None
        got, want = d.array, numpy_helper.to_array(t)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert np.asarray(got).tobytes() == want.tobytes()
        if want.size and t.data_type not in _PACKED_TYPES:
            assert isinstance(got, np.memmap)
    assert legalizer.to_onnx(model).SerializeToString() == \
        onnx.load_model(str(tmp_path / "m.onnx"), load_external_data=False).SerializeToString()


_PACKED_TYPES = {getattr(TensorProto, n) for n in ("INT4", "UINT4", "FLOAT4E2M1", "INT2", "UINT2",
                                                    "FLOAT6E2M3", "FLOAT6E3M2") if hasattr(TensorProto, n)}


@pytest.mark.parametrize("where", ["other folder", "same folder"])
def test_external_data_save(tmp_path, where):
    src = tmp_path / "in"
    src.mkdir()
    path = external_model(src)
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    want = suite.ort_run(str(path), [{"x": x}]).outputs[0]
    np.testing.assert_array_equal(want[0], (x + W) * B.astype(np.float32))
    dst = tmp_path / "out" if where == "other folder" else src
    dst.mkdir(exist_ok=True)
    out = dst / "legal.onnx"
    model = legalizer.load(path)
    legalizer.save(model, out)
    assert all(d._array is None for d in consts(model).values())  # streamed, not loaded
    if where == "other folder":
        # The data goes beside the output, into '<output name>.<16 hex digits>.data'.
        data = data_file_of(out)
        assert sorted(os.listdir(dst)) == ["legal.onnx", data]
        check_external_output(out, data, x, want)
        assert (dst / data).stat().st_size >= W.nbytes + B.nbytes
    else:
        # Beside the input, the input's data file is referenced as it is.
        assert sorted(os.listdir(dst)) == ["legal.onnx", "m.onnx", "m.onnx.data"]
        check_external_output(out, "m.onnx.data", x, want)
    assert onnx.load_model(str(path), load_external_data=False).graph.initializer[0].external_data[0].value \
        == "m.onnx.data"  # the input is untouched


@pytest.mark.parametrize("where", ["other folder", "same folder"])
def test_folded_external_constant_keeps_its_bytes_external(tmp_path, where):
    # A rank expansion of an external weight (a multi-GB positional table, say) only
    # prepends 1s: the folded constant points at the same bytes, which are never read;
    # inlining them failed over 2 GB (protobuf's limit).
    src = tmp_path / "in"
    src.mkdir()
    pe = np.random.default_rng(1).standard_normal((64, 256)).astype(np.float32)
    m = model_of([helper.make_node("Add", ["x", "pe"], ["y"], name="add_pe")], [vi("x", ["B", 64, 256])],
                 [vi("y", ["B", 64, 256])], [numpy_helper.from_array(pe, "pe")])
    path = src / "pe.onnx"
    onnx.save_model(m, str(path), save_as_external_data=True, location="pe.onnx.data", size_threshold=0)
    dst = tmp_path / "out" if where == "other folder" else src
    dst.mkdir(exist_ok=True)
    out = dst / "pe.legal.onnx"
    model = legalizer.load(path)
    stats = legalizer.legalize(model, "tosa").legalized.stats
    assert stats["constants_folded"] == 1 and stats["reshapes_inserted"] == 0
    legalizer.save(model, out)
    assert all(d._array is None for d in consts(model).values())  # nothing read
    written = onnx.load_model(str(out), load_external_data=False)
    (t,) = written.graph.initializer
    assert (t.name, list(t.dims), t.data_location) == ("pe_r3", [1, 64, 256], TensorProto.EXTERNAL)
    assert out.stat().st_size < 1024  # the model file holds no weights
    assert legalizer.verify(legalizer.load(out), "tosa").ok
    x = np.random.default_rng(2).standard_normal((2, 64, 256)).astype(np.float32)
    got = suite.ort_run(str(out), [{"x": x}])
    assert got.outputs is not None, got.reason
    suite.assert_outputs_equal(got.outputs[0], [x + pe], "outputs")


def test_external_data_save_needs_force_to_replace(tmp_path):
    path = external_model(tmp_path)
    (tmp_path / "out").mkdir()
    out = tmp_path / "out" / "m.onnx"
    (tmp_path / "out" / "m.onnx.data").write_bytes(b"not ours")  # a file no model of ours names
    legalizer.save(legalizer.load(path), out)
    first = data_file_of(out)
    with pytest.raises(legalizer.UsageError, match="already exists"):
        legalizer.save(legalizer.load(path), out)
    assert sorted(os.listdir(tmp_path / "out")) == sorted(["m.onnx", first, "m.onnx.data"])  # nothing written
    legalizer.save(legalizer.load(path), out, force=True)
    again = legalizer.load(out)
    np.testing.assert_array_equal(consts(again)["W"].array, W)
    # The replaced model's data file is removed; a file it did not name is left alone.
    second = data_file_of(out)
    assert second != first and sorted(os.listdir(tmp_path / "out")) == sorted(["m.onnx", second, "m.onnx.data"])
    assert (tmp_path / "out" / "m.onnx.data").read_bytes() == b"not ours"


def test_external_data_in_subfolder_and_subgraph(tmp_path):
    """Tensors of a subgraph and of a Constant node can be external too; a location
    may name a subfolder."""
    then_g = helper.make_graph([helper.make_node("Add", ["x", "tw"], ["t"], name="then_add")], "then", [],
                               [vi("t", [3, 4])], [numpy_helper.from_array(W * 2, "tw")])
    else_g = helper.make_graph([helper.make_node("Constant", [], ["c"], name="const",
                                                 value=numpy_helper.from_array(W * 3, "cv")),
                                helper.make_node("Sub", ["x", "c"], ["e"], name="else_sub")], "else", [],
                               [vi("e", [3, 4])])
    m = model_of([helper.make_node("If", ["cond"], ["z"], name="if", then_branch=then_g, else_branch=else_g)],
                 [vi("x", [3, 4]), vi("cond", [], TensorProto.BOOL)], [vi("z", [3, 4])])
    src = tmp_path / "in"
    (src / "weights").mkdir(parents=True)
    onnx.save_model(m, str(src / "m.onnx"), save_as_external_data=True, location="weights/w.bin",
                    size_threshold=0, convert_attribute=True)
    model = legalizer.load(src / "m.onnx")
    (tmp_path / "out").mkdir()
    out = tmp_path / "out" / "m.onnx"
    legalizer.save(model, out)
    assert sorted(os.listdir(tmp_path / "out")) == ["m.onnx", data_file_of(out)]
    x = np.ones((3, 4), np.float32)
    for cond, want in ((True, x + W * 2), (False, x - W * 3)):
        feed = {"x": x, "cond": np.array(cond)}
        got = suite.ort_run(str(out), [feed])
        assert got.outputs is not None, got.reason
        np.testing.assert_array_equal(got.outputs[0][0], want)


# ---- functions and subgraphs -------------------------------------------------------------
def test_model_local_function_kept():
    fn = helper.make_function("custom", "AddMul", ["a", "b"], ["c"],
                              [helper.make_node("Add", ["a", "b"], ["s"]),
                               helper.make_node("Mul", ["s", "b"], ["c"])],
                              [helper.make_opsetid("", 17)], doc_string="a + b, times b")
    g = helper.make_graph([helper.make_node("AddMul", ["x", "y"], ["z"], name="call", domain="custom")], "g",
                          [vi("x", [2, 3]), vi("y", [3])], [vi("z", [2, 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("custom", 1)],
                          functions=[fn])
    m.ir_version = 8
    model = roundtrip(m)
    assert [f.name for f in model.proto.functions] == ["AddMul"]
    assert ops_in(model.graph) == ["call"]
    assert legalizer.verify(model.graph).ok


def if_model(then_shapes=((3, 4), (3, 4)), opset=17):
    """An If whose branches use the outer graph's input ``x`` and initializer ``w``."""
    then_g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["t"], name="then_add")], "then", [],
                               [vi("t", [None, None])])
    else_g = helper.make_graph([helper.make_node("Sub", ["x", "w"], ["e"], name="else_sub")], "else", [],
                               [vi("e", [None, None])])
    w = np.full(then_shapes[1], 0.5, np.float32)
    return model_of([helper.make_node("If", ["cond"], ["z"], name="if", then_branch=then_g, else_branch=else_g)],
                    [vi("x", list(then_shapes[0])), vi("cond", [], TensorProto.BOOL)], [vi("z", [None, None])],
                    [numpy_helper.from_array(w, "w")], opset=opset)


@pytest.mark.parametrize("cond", [True, False])
def test_if_branches_capture_outer_values(cond):
    m = if_model(((3, 4), (4,)))
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    model = roundtrip(m, {"x": x, "cond": np.array(cond)})
    assert ops_in(model.graph) == ["else_sub", "if", "then_add"]
    (if_node,) = model.graph.ops()
    then_add = next(n for n in if_node.attrs["then_branch"].nodes() if n.kind == "op")
    outer_x = model.graph.value("x")
    assert then_add.inputs[0] is outer_x  # the captured value is the outer graph's
    assert then_add.inputs[1] is model.graph.value("w")
    assert legalizer.verify(model.graph).ok


def test_if_branch_violation_names_graph_path():
    m = if_model(((3, 4), (2,)))
    model = import_model(m)
    res = legalizer.verify(model.graph)
    got = sorted((d.code, d.node, d.graph) for d in res.violations)
    assert got == [("incompatible-operands", "else_sub", "if.else_branch"),
                   ("incompatible-operands", "then_add", "if.then_branch")]
    assert str(res.violations[0]).startswith("error: graph 'if.")
    assert export_model(model.graph, model.proto).SerializeToString() == m.SerializeToString()


def loop_model():
    """Loop with a trip count, a carried value, a scan output, and a captured ``w``."""
    body = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "w"], ["acc_out"], name="body_add"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_cond"),
         helper.make_node("Mul", ["acc_out", "acc_out"], ["sq"], name="body_mul")],
        "body", [vi("i", [], TensorProto.INT64), vi("cond_in", [], TensorProto.BOOL), vi("acc_in", [2, 3])],
        [vi("cond_out", [], TensorProto.BOOL), vi("acc_out", [2, 3]), vi("sq", [2, 3])])
    return model_of([helper.make_node("Loop", ["n", "", "x"], ["acc", "sqs"], name="loop", body=body)],
                    [vi("x", [2, 3]), vi("n", [], TensorProto.INT64)], [vi("acc", [2, 3]), vi("sqs", [None, 2, 3])],
                    [numpy_helper.from_array(np.array([1, 2, 3], np.float32), "w")])


def test_loop_body():
    x = np.ones((2, 3), np.float32)
    model = roundtrip(loop_model(), {"x": x, "n": np.array(3, np.int64)})
    assert ops_in(model.graph) == ["body_add", "body_cond", "body_mul", "loop"]
    assert legalizer.verify(model.graph).ok


def scan_model():
    """Scan (opset 9+) summing rows into a state, with a captured bias."""
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "row"], ["s_mid"], name="scan_add"),
         helper.make_node("Add", ["s_mid", "bias"], ["s_out"], name="scan_bias"),
         helper.make_node("Identity", ["s_out"], ["y"], name="scan_out")],
        "scan_body", [vi("s_in", [3]), vi("row", [3])], [vi("s_out", [3]), vi("y", [3])])
    return model_of([helper.make_node("Scan", ["s0", "rows"], ["s", "ys"], name="scan", body=body,
                                      num_scan_inputs=1)],
                    [vi("s0", [3]), vi("rows", [4, 3])], [vi("s", [3]), vi("ys", [4, 3])],
                    [numpy_helper.from_array(np.float32(0.25) * np.ones(1, np.float32), "bias")])


def test_scan_body():
    model = roundtrip(scan_model())
    assert ops_in(model.graph) == ["scan", "scan_add", "scan_bias", "scan_out"]
    assert legalizer.verify(model.graph).ok


def test_nested_subgraphs_reach_outer_values():
    """A Loop inside an If branch uses a value of the outermost graph."""
    body = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "w"], ["acc_out"], name="inner_add"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="inner_cond")],
        "body", [vi("i", [], TensorProto.INT64), vi("cond_in", [], TensorProto.BOOL), vi("acc_in", [2, 3])],
        [vi("cond_out", [], TensorProto.BOOL), vi("acc_out", [2, 3])])
    then_g = helper.make_graph([helper.make_node("Loop", ["n", "", "x"], ["t"], name="inner_loop", body=body)],
                               "then", [], [vi("t", [2, 3])])
    else_g = helper.make_graph([helper.make_node("Identity", ["x"], ["e"], name="else_id")], "else", [],
                               [vi("e", [2, 3])])
    m = model_of([helper.make_node("If", ["cond"], ["z"], name="if", then_branch=then_g, else_branch=else_g)],
                 [vi("x", [2, 3]), vi("cond", [], TensorProto.BOOL), vi("n", [], TensorProto.INT64)],
                 [vi("z", [2, 3])], [numpy_helper.from_array(np.array([1, 2, 3], np.float32), "w")])
    feed = {"x": np.zeros((2, 3), np.float32), "cond": np.array(True), "n": np.array(2, np.int64)}
    model = roundtrip(m, feed)
    inner_add = next(n for n in model.graph.walk() if n.label == "inner_add")
    assert inner_add.inputs[1] is model.graph.value("w")
    assert ops_in(model.graph) == ["else_id", "if", "inner_add", "inner_cond", "inner_loop"]


# ---- header fields ------------------------------------------------------------------------
def test_header_fields_survive():
    nodes = [helper.make_node("Add", ["x", "w"], ["s"], name="add", doc_string="adds w"),
             helper.make_node("Relu", ["s"], ["y"], name="relu")]
    m = model_of(nodes, [vi("x", [2, 3])], [vi("y", [2, 3])],
                 [numpy_helper.from_array(np.ones((2, 3), np.float32), "w")],
                 producer_name="hand", producer_version="1.2", doc_string="a model", domain="org.example",
                 model_version=7)
    m.graph.doc_string = "the graph"
    m.graph.value_info.append(vi("s", [2, 3]))
    m.graph.input[0].doc_string = "input x"
    helper.set_model_props(m, {"author": "me", "license": "none"})
    model = roundtrip(m)
    p = legalizer.to_onnx(model)
    assert p.producer_name == "hand" and p.producer_version == "1.2" and p.domain == "org.example"
    assert p.model_version == 7 and p.doc_string == "a model" and p.graph.doc_string == "the graph"
    assert {e.key: e.value for e in p.metadata_props} == {"author": "me", "license": "none"}
    assert p.graph.node[0].doc_string == "adds w" and p.graph.input[0].doc_string == "input x"
    assert [v.name for v in p.graph.value_info] == ["s"]


def test_value_info_of_no_value_of_the_graph_kept():
    """value_info may name a value of another graph (an outer one from a branch, an
    inner one from the main graph), nothing at all, or one value twice: all valid, all
    kept in place."""
    then_g = helper.make_graph([helper.make_node("Add", ["x", "x"], ["t"], name="then_add")], "then", [],
                               [vi("t", [2])], value_info=[vi("x", [2])])
    else_g = helper.make_graph([helper.make_node("Sub", ["x", "x"], ["e"], name="else_sub")], "else", [],
                               [vi("e", [2])])
    m = model_of([helper.make_node("Relu", ["x"], ["r"], name="relu"),
                  helper.make_node("If", ["c"], ["z0"], name="if", then_branch=then_g, else_branch=else_g),
                  helper.make_node("Add", ["z0", "r"], ["z"], name="add")],
                 [vi("x", [2]), vi("c", [], TensorProto.BOOL)], [vi("z", [2])])
    m.graph.value_info.extend([vi("r", [2]), vi("e", [2]), vi("nothing", [7]), vi("r", [2]), vi("z0", [2])])
    model = roundtrip(m, {"x": np.array([1, -2], np.float32), "c": np.array(False)})
    assert [v.name for v in legalizer.to_onnx(model).graph.value_info] == ["r", "e", "nothing", "r", "z0"]


def test_initializer_that_is_also_an_input():
    """IR version 3: an initializer listed among the graph inputs is an input with a
    default value; it stays both."""
    nodes = [helper.make_node("Add", ["x", "w"], ["y"], name="add")]
    m = model_of(nodes, [vi("x", [2, 3]), vi("w", [3])], [vi("y", [2, 3])],
                 [numpy_helper.from_array(np.array([1, 2, 3], np.float32), "w")], opset=7, ir_version=3)
    model = roundtrip(m, {"x": np.ones((2, 3), np.float32)})
    (w,) = [n for n in model.graph.inputs if n.name == "w"]
    assert w.data is not None
    np.testing.assert_array_equal(w.data.array, [1, 2, 3])
    assert model.graph.constants() == []
    p = legalizer.to_onnx(model)
    assert [i.name for i in p.graph.input] == ["x", "w"] and [t.name for t in p.graph.initializer] == ["w"]


def test_streamed_save_writes_what_onnx_save_writes(tmp_path):
    """``legalizer.save`` streams the main graph's initializers into the file, one at a
    time, instead of copying them into a new ModelProto: the bytes are onnx.save's of
    the whole model, for an unchanged model and for a legalized one (new constants,
    changed nodes), inline and external."""
    from legalizer.target_passes import legalize

    m = model_of([helper.make_node("Add", ["x", "W"], ["y"], name="add"),
                  helper.make_node("Cast", ["B"], ["b"], name="cast", to=F),
                  helper.make_node("Mul", ["y", "b"], ["z"], name="mul")],
                 [vi("x", [2, 3, 4])], [vi("z", [2, 3, 4])],
                 [numpy_helper.from_array(W, "W"), numpy_helper.from_array(B, "B")],
                 doc_string="d", producer_name="p")
    m.metadata_props.add(key="k", value="v")  # a model field after the graph
    src = tmp_path / "m.onnx"
    onnx.save_model(m, str(src))
    for change in (False, True):
        model = legalizer.load(src)
        if change:
            legalize(model, "tosa")
        out = tmp_path / f"out{int(change)}.onnx"
        legalizer.save(model, out)
        assert out.read_bytes() == legalizer.to_onnx(model).SerializeToString()
        if not change:
            assert out.read_bytes() == src.read_bytes()
    ext = external_model(tmp_path)
    model = legalizer.load(ext)
    legalize(model, "tosa")
    legalizer.save(model, tmp_path / "ext.legal.onnx")
    assert (tmp_path / "ext.legal.onnx").read_bytes() == legalizer.to_onnx(model).SerializeToString()
