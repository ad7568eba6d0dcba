"""TFLite in and out: import, legalize for both targets, write .tflite, and the check on
LiteRT (original and legalized) and onnxruntime (the legalized model's ONNX form)."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import List, Tuple

import numpy as np
import pytest

import legalizer
from legalizer.numeric.ort import ATOL
from legalizer.kinds.tflite.exporter import to_tflite
from legalizer.ir.graph import OP
from legalizer.pipeline import RunOptions, is_output, run, verify_model
from legalizer.kinds.tflite.schema import FbTable, read, serialize

import tflite_build
import tflite_models
from helpers import assert_clean, cli_process, lines
from needs import has

ROOT = Path(__file__).resolve().parent.parent
MODELS = sorted(p for p in (ROOT / "models" / "tflite").glob("*.tflite") if not is_output(p))

needs_litert = pytest.mark.needs("litert")


def _ops(model) -> Counter:
    return Counter(n.op for g in model.graphs for n in g.nodes() if n.kind == OP)


def test_committed_models_are_what_the_script_makes():
    made = tflite_models.tflite_models()
    assert sorted(p.name for p in MODELS) == sorted(made)
    for p in MODELS:
        tflite_build.assert_same_tables(to_tflite(made[p.name]()), p.read_bytes())


def test_the_table_comparison_sees_one_field_changed():
    """The comparison the two tests above rest on fails on a model one scalar apart."""
    buf = (ROOT / "models/tflite/add_int8.tflite").read_bytes()
    import tflite

    t = read(tflite.Model.GetRootAs(buf, 0))
    t.fields["subgraphs"][0].fields["operators"][0].fields["builtin_options"].fields["fused_activation_function"] = 1
    with pytest.raises(AssertionError, match="fused_activation_function"):
        tflite_build.assert_same_tables(serialize(t), buf)


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.stem)
def test_import_export_keeps_every_field(path, tmp_path):
    """Everything read is written back: import -> export gives the same tables, every
    field as the tflite package's accessors read it (and writing that again, the same
    bytes: the writer's layout is deterministic)."""
    once = to_tflite(legalizer.load(path))
    tflite_build.assert_same_tables(once, path.read_bytes())
    (tmp_path / path.name).write_bytes(once)
    assert to_tflite(legalizer.load(tmp_path / path.name)) == once


def test_import_reads_shapes_quantization_constants_and_signatures():
    m = legalizer.load(ROOT / "models/tflite/dynamic_broadcast.tflite")
    assert m.format == "tflite" and m.graph.frontend == "tflite"
    assert [(n.output.name, n.output.type.shape) for n in m.graph.inputs] == [
        ("x", (None, 4, 5)), ("y", (5,)), ("z", (None, 1, 5)), ("w", (None, None, 5))]
    q = legalizer.load(ROOT / "models/tflite/add_int8.tflite")
    x = q.graph.inputs[0].output
    assert x.type.dtype == "int8" and x.quant.scale == (pytest.approx(0.05),) and x.quant.zero_point == (-3,)
    c = q.graph.value("c")
    assert c.producer.data.array.dtype == np.int8 and c.producer.data.array.shape == (8,)
    # a constant is a view of the file's bytes, not a copy
    assert not c.producer.data.array.flags.owndata
    two = legalizer.load(ROOT / "models/tflite/two_signatures.tflite")
    assert [g.name for g in two.graphs] == ["scale", "shift"]
    sigs = two.proto.table.get("signature_defs")
    assert [s.get("signature_key") for s in sigs] == ["scale", "shift"]
    add = next(n for n in legalizer.load(ROOT / "models/tflite/broadcast_add.tflite").graph.ops())
    # every field of the options table, absent ones at the schema default
    assert add.op == "tflite.ADD" and add.attrs == {"fused_activation_function": 0, "pot_scale_int16": True}


# What the tosa form inserts: one RESHAPE per non-constant operand of lower rank,
# a folded constant per constant one.
TOSA_COUNTS = {
    "broadcast_add": (1, 1), "broadcast_div": (1, 2), "dynamic_broadcast": (1, 0), "add_int8": (1, 1),
    "mobilenet_like": (0, 2), "mobilenet_like_int8": (0, 2), "transformer_like": (0, 5), "two_signatures": (1, 1),
    "broadcast_prelu": (0, 1), "broadcast_select_v2": (1, 1),
}


@needs_litert
@pytest.mark.parametrize("target", ["tosa", "xla"])
@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.stem)
def test_legalize_and_check_on_litert_and_onnxruntime(path, target, tmp_path):
    out = tmp_path / f"{path.stem}.legal.tflite"
    res = run(path, RunOptions(target=target, output=out))
    assert res.exit_code == 0, res.report.to_json()
    check = res.report.check
    assert check["ran"] and check["ok"], check
    runtimes = {o["name"].rsplit(" ", 1)[1] for b in check["bindings"] for o in b["outputs"]}
    assert runtimes == {"(LiteRT)", "(onnxruntime)"}
    assert not [w for w in res.report.warnings if "check" in w], res.report.warnings
    # the written file is legal under the target's profile when read back
    back = legalizer.load(out)
    assert not verify_model(back, target).violations
    assert back.format == "tflite" and len(back.graphs) == len(legalizer.load(path).graphs)
    stats = res.report.stats
    if target == "tosa" and path.stem in TOSA_COUNTS:
        assert (stats["reshapes_inserted"], stats["constants_folded"]) == TOSA_COUNTS[path.stem]
        assert _ops(back)["tflite.RESHAPE"] >= stats["reshapes_inserted"]
    if target == "xla":
        assert _ops(back)["tflite.BROADCAST_TO"] == stats["broadcasts_made_explicit"]


@needs_litert
def test_dynamic_model_checked_at_two_sizes_with_runtime_shapes(tmp_path):
    out = tmp_path / "d.tflite"
    res = run(ROOT / "models/tflite/dynamic_broadcast.tflite", RunOptions(target="xla", output=out))
    assert res.exit_code == 0
    compared = [b for b in res.report.check["bindings"] if not b.get("skipped")]
    assert [b["dims"]["x[0]"] for b in compared] == [3, 1]
    ops = _ops(legalizer.load(out))
    # SHAPE of x, z, w and of the first sum, whose dim 0 meets z's at run time
    assert ops["tflite.SHAPE"] == 4 and ops["tflite.SELECT_V2"] == 1 and ops["tflite.BROADCAST_TO"] == 6
    assert res.report.stats["runtime_broadcast_checks"] == 1


def test_quantization_follows_a_reshape():
    """A RESHAPE of a quantized operand carries its scale and zero point; the folded
    constant keeps its data and parameters."""
    m = legalizer.load(ROOT / "models/tflite/add_int8.tflite")
    original = legalizer.load(ROOT / "models/tflite/add_int8.tflite").graph.value("c").producer.data.array
    legalizer.legalize(m, "tosa")
    (reshape,) = [n for n in m.graph.ops() if n.op == "tflite.RESHAPE"]
    src, out = reshape.inputs[0], reshape.output
    assert out.type.shape == (1, 1, 1, 8) and out.quant == src.quant
    folded = m.graph.value("c_r4")
    assert folded.quant.scale == (pytest.approx(0.02),)
    assert np.array_equal(folded.producer.data.array.reshape(-1), original)


def test_per_axis_quantized_dim_moves_with_prepended_dims():
    from legalizer.ir.types import Quantization
    from legalizer.passes.frontend_ops import _placed_quant

    q = Quantization((0.1, 0.2, 0.3), (0, 0, 0), 1)
    assert _placed_quant(q, (0, 1), 4).quantized_dimension == 3
    assert _placed_quant(Quantization((0.1,), (0,), 0), (0,), 2).quantized_dimension == 0


def test_signatures_follow_their_tensors(tmp_path):
    out = tmp_path / "two.tflite"
    assert run(ROOT / "models/tflite/two_signatures.tflite", RunOptions(output=out, check=False)).exit_code == 0
    back = legalizer.load(out)
    for sig, g in zip(back.proto.table.get("signature_defs"), back.graphs):
        ins = [m.get("tensor_index") for m in sig.get("inputs")]
        tensors = {v.info_index: v.name for n in g.nodes() for v in n.outputs}
        assert [tensors[i] for i in ins] == [n.output.name for n in g.inputs]


def test_cli_on_tflite(tmp_path, legalize):
    src = tmp_path / "m.tflite"
    src.write_bytes((ROOT / "models/tflite/mobilenet_like.tflite").read_bytes())
    p = legalize(src, "-q")
    assert_clean(p)
    if not has("litert"):  # the check does not run: the run says so, and passes
        assert p.returncode == 0
        return
    assert p.returncode == 0, p.stdout + p.stderr
    assert lines(p.stdout)[-1] == (f"{src}: legalized for 'tosa' -> {tmp_path / 'm.legal.tflite'}, outputs match"
                                   " on LiteRT + onnxruntime CPUExecutionProvider")


# ---- bad input --------------------------------------------------------------------------
def _mutated(path: Path, mutate) -> bytes:
    import tflite

    t = read(tflite.Model.GetRootAs(path.read_bytes(), 0), "Model")
    mutate(t)
    return serialize(t)


def _set_op_input(t: FbTable, index: int) -> None:
    op = t.get("subgraphs")[0].get("operators")[0]
    op.fields["inputs"] = np.array([index, 0], np.int32)


def _unknown_builtin(t: FbTable) -> None:
    t.get("operator_codes")[0].fields.update(builtin_code=9999, deprecated_builtin_code=127)


def _bad_opcode_index(t: FbTable) -> None:
    t.get("subgraphs")[0].get("operators")[0].fields["opcode_index"] = 7


def _bad_buffer(t: FbTable) -> None:
    t.get("subgraphs")[0].get("tensors")[2].fields["buffer"] = 99


def _short_buffer(t: FbTable) -> None:
    b = t.get("buffers")
    b[1].fields["data"] = np.asarray(b[1].get("data"))[:3]


def _type_code(t: FbTable) -> None:
    t.get("subgraphs")[0].get("tensors")[0].fields["type"] = 99  # TensorType ends at 18


def _signature(subgraph: int, input_tensor: int, output_tensor: int):
    def mutate(t: FbTable) -> None:
        t.fields["signature_defs"] = [FbTable("SignatureDef", {
            "signature_key": "serving", "subgraph_index": subgraph,
            "inputs": [FbTable("TensorMap", {"name": "x", "tensor_index": input_tensor})],
            "outputs": [FbTable("TensorMap", {"name": "y", "tensor_index": output_tensor})]})]
    return mutate


BAD = {
    "out-of-range tensor index": (lambda t: _set_op_input(t, 42), "refers to tensor 42, but the subgraph has"),
    "unknown builtin": (_unknown_builtin, "unknown builtin operator code 9999"),
    "out-of-range opcode index": (_bad_opcode_index, "has opcode index 7, but the model has 1 operator codes"),
    "out-of-range buffer": (_bad_buffer, "refers to buffer 99"),
    "truncated buffer": (_short_buffer, "needs 60 bytes, its buffer has 3"),
    "undefined tensor type code": (_type_code, "subgraph 0: tensor 0 'x' has type code 99, which TFLite does"
                                               " not define"),
    "signature of a missing subgraph": (_signature(3, 0, 2), "signature 'serving' refers to subgraph 3, but the"
                                                             " model has 1"),
    "signature of a missing tensor": (_signature(0, 0, 40), "signature 'serving': output 'y' refers to tensor 40,"
                                                            " but subgraph 0 has"),
}


def _assert_bad(src: Path, expect: str, *args: str) -> None:
    """``legalize SRC ARGS`` is bad input: exit 2, one line naming the file, nothing written."""
    before = sorted(p.name for p in src.parent.iterdir()), src.read_bytes()
    p = cli_process(src, *args)
    assert_clean(p)
    assert p.returncode == 2, p.stdout + p.stderr
    (line,) = p.stderr.splitlines()
    assert line.startswith(f"legalize: error: {src}: ") and expect in line, line
    assert (sorted(p.name for p in src.parent.iterdir()), src.read_bytes()) == before


@pytest.mark.parametrize("verify_only", [False, True], ids=["legalize", "verify-only"])
@pytest.mark.parametrize("case", BAD)
def test_bad_tflite_is_one_line_and_exit_2(case, verify_only, tmp_path):
    mutate, expect = BAD[case]
    src = tmp_path / "bad.tflite"
    src.write_bytes(_mutated(ROOT / "models/tflite/broadcast_add.tflite", mutate))
    _assert_bad(src, expect, "--verify-only" if verify_only else "-q")


@pytest.mark.parametrize("cut", [9, 40, 200, 500])
def test_truncated_tflite(cut, tmp_path, legalize):
    src = tmp_path / "cut.tflite"
    src.write_bytes((ROOT / "models/tflite/broadcast_add.tflite").read_bytes()[:cut])
    p = legalize(src, "--verify-only")
    assert_clean(p)
    assert p.returncode == 2
    (line,) = lines(p.stderr)
    assert "not a valid TFLite flatbuffer" in line or "TFLite" in line, line


@pytest.mark.parametrize("name, ident", [("m.tflite", b"TFL2"), ("m.tflite", b"XXXX"), ("m.bin", b"XXXX"),
                                         ("m.tflite", b"\x00\x01\n\xff")])
def test_wrong_identifier(name, ident, tmp_path):
    """A flatbuffer (or a file named .tflite) with another identifier is not taken for
    ONNX: the error says what the identifier is and what it should be."""
    data = bytearray((ROOT / "models/tflite/broadcast_add.tflite").read_bytes())
    data[4:8] = ident
    src = tmp_path / name
    src.write_bytes(bytes(data))
    shown = repr(ident)[1:]
    expect = f"not a TFLite flatbuffer (file identifier {shown} at bytes 4..8, expected 'TFL3')"
    _assert_bad(src, expect, "--verify-only")
    _assert_bad(src, expect, "-q")


def test_onnx_named_tflite_is_still_onnx(tmp_path):
    """Content decides: an ONNX model with a .tflite name is read as ONNX."""
    src = tmp_path / "mlp.tflite"
    src.write_bytes((ROOT / "models/mlp_bias.onnx").read_bytes())
    assert legalizer.load(src).format == "onnx"


def test_schema_type_without_ir_dtype_is_kept_by_number(tmp_path):
    """RESOURCE (13) is a TensorType the IR has no dtype for: kept by its code and written
    back, not rejected as undefined."""
    import tflite_build as tb

    data = tb.build_tflite(
        [tb.tensor("h", "RESOURCE", []), tb.tensor("v", "float32", [2])],
        [tb.op("VAR_HANDLE", [], [0], "VarHandleOptions", shared_name="v"),
         tb.op("READ_VARIABLE", [0], [1])], [], [1])
    src = tmp_path / "var.tflite"
    src.write_bytes(data)
    m = legalizer.load(src)
    assert m.graph.value("h").type.dtype == "tflite_type13"
    assert to_tflite(m) == data


def custom_op_model(path: Path) -> Path:
    """A TFLite model with a custom op (MyFrob) feeding a rank-mismatched ADD."""
    b = tflite_models.Builder("custom", 1)
    x = b.input("x", "float", (2, 3))
    y = b.g.add_op("MyFrob", [x], [x.type], domain="tflite.custom", output_names=["frob"]).output
    b.output(b.op("ADD", [y, b.const("c", np.ones(3, np.float32))], (2, 3), name="out", fused_activation_function=0))
    path.write_bytes(to_tflite(tflite_models._model(b)))
    return path


def test_custom_op_is_kept_opaque(tmp_path):
    src = custom_op_model(tmp_path / "custom.tflite")
    m = legalizer.load(src)
    assert m.warnings == ["subgraph 'custom': custom ops kept opaque: MyFrob"]
    assert _ops(m)["tflite.custom.MyFrob"] == 1
    assert to_tflite(m) == src.read_bytes()
    out = tmp_path / "custom.legal.tflite"
    res = run(src, RunOptions(output=out, check=False))
    assert res.exit_code == 0 and out.exists()
    back = legalizer.load(out)
    assert _ops(back)["tflite.custom.MyFrob"] == 1 and _ops(back)["tflite.ADD"] == 1
    codes = back.proto.table.get("operator_codes")
    assert [c.get("custom_code") for c in codes if c.get("builtin_code") == 32] == ["MyFrob"]


def test_without_the_tflite_package_a_tflite_model_is_one_clear_error(monkeypatch):
    from legalizer.errors import BadInput

    monkeypatch.setitem(sys.modules, "tflite", None)  # import tflite raises ImportError
    path = ROOT / "models/tflite/broadcast_add.tflite"
    with pytest.raises(BadInput) as e:
        legalizer.load(path)
    assert str(e.value) == (f"{path}: reading TFLite needs the 'tflite' package, which is not installed"
                            " (pip install tflite)")


# ---- buffers stored by offset (the layout of models over 2 GB) -----------------------
def _offset_model() -> Tuple[bytes, np.ndarray, np.ndarray]:
    """s = x[4,3] + c[2,4,3]; y = s * d[3], with c and d stored after the flatbuffer:
    legalizing reshapes x (a new shape constant) and folds d (a new buffer; d's own
    is left unused)."""
    import tflite_build as tb

    c = np.arange(24, dtype=np.float32).reshape(2, 4, 3) * 0.5 - 1
    d = np.array([10, 20, 30], np.float32)
    data = tb.build_tflite(
        [tb.tensor("x", "float32", [4, 3]), tb.tensor("c", "float32", [2, 4, 3], data=c),
         tb.tensor("s", "float32", [2, 4, 3]), tb.tensor("d", "float32", [3], data=d),
         tb.tensor("y", "float32", [2, 4, 3])],
        [tb.op("ADD", [0, 1], [2], "AddOptions", fused_activation_function=0),
         tb.op("MUL", [2, 3], [4], "MulOptions", fused_activation_function=0)], [0], [4], offset_buffers=True)
    return data, c, d


def _buffer_layout(data: bytes) -> List[Tuple[int, int, int]]:
    """(offset, size, inline length) of each buffer of a .tflite file."""
    import tflite

    t = read(tflite.Model.GetRootAs(data, 0), "Model")
    return [(int(b.get("offset", 0)), int(b.get("size", 0)), len(b.get("data", ()))) for b in t.get("buffers")]


def test_offset_buffers_are_read_from_after_the_flatbuffer(tmp_path):
    data, c, d = _offset_model()
    layout = _buffer_layout(data)
    assert [o > 1 and size > 0 and inline == 0 for o, size, inline in layout] == [False, True, True]
    src = tmp_path / "off.tflite"
    src.write_bytes(data)
    m = legalizer.load(src)
    for name, want, buf in (("c", c, 1), ("d", d, 2)):
        arr = m.graph.value(name).producer.data.array
        assert np.array_equal(arr, want) and not arr.flags.owndata  # a view of the file
        offset, size, _ = layout[buf]
        assert arr.tobytes() == data[offset:offset + size]


def test_offset_buffer_past_the_end_of_the_file(tmp_path):
    data, _, _ = _offset_model()
    offset, size, _ = _buffer_layout(data)[2]
    src = tmp_path / "cut.tflite"
    src.write_bytes(data[:offset + size - 1])
    _assert_bad(src, f"tensor 'd': buffer 2 lies past the end of the file (bytes {offset}..{offset + size},"
                     f" the file has {offset + size - 1})", "--verify-only")


def _assert_offset_layout(data: bytes) -> None:
    """Every buffer with data is stored after the flatbuffer, 16-byte aligned, inside the
    file, without overlap; an empty one has no offset or size left."""
    import tflite

    (root,) = np.frombuffer(data[:4], np.uint32)
    model = tflite.Model.GetRootAs(data, 0)
    ends = []
    for o, size, inline in _buffer_layout(data):
        assert inline == 0
        if size == 0:
            assert o == 0  # no stale offset into whatever follows
            continue
        assert o % 16 == 0 and o + size <= len(data) and o > root
        ends.append((o, o + size))
    ends.sort()
    assert all(a[1] <= b[0] for a, b in zip(ends, ends[1:]))
    assert model.BuffersLength() == len(_buffer_layout(data))


def test_offset_buffers_are_written_back_by_offset(tmp_path):
    data, c, d = _offset_model()
    src = tmp_path / "off.tflite"
    src.write_bytes(data)
    out = to_tflite(legalizer.load(src))
    _assert_offset_layout(out)
    again = tmp_path / "again.tflite"
    again.write_bytes(out)
    back = legalizer.load(again)
    assert np.array_equal(back.graph.value("c").producer.data.array, c)
    assert np.array_equal(back.graph.value("d").producer.data.array, d)
    assert to_tflite(back) == out  # the exporter's own layout comes back byte for byte


@needs_litert
def test_legalized_offset_model_runs_on_litert(tmp_path, legalize):
    from legalizer.numeric.litert import run_tflite

    data, c, d = _offset_model()
    src = tmp_path / "off.tflite"
    src.write_bytes(data)
    p = legalize(src, "-q")
    assert_clean(p)
    assert p.returncode == 0, p.stdout + p.stderr
    out = (tmp_path / "off.legal.tflite").read_bytes()
    _assert_offset_layout(out)
    assert _ops(legalizer.load(tmp_path / "off.legal.tflite"))["tflite.RESHAPE"] == 1
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal((4, 3)).astype(np.float32)
        want = run_tflite(data, {"x": x})["y"]
        np.testing.assert_array_equal(want, (x + c) * d)
        np.testing.assert_array_equal(run_tflite(out, {"x": x})["y"], want)


def _compounding_int8_model(path: Path) -> Path:
    """int8 MEAN over 2 values (half the sums odd: ties, which LiteRT rounds away from
    zero and onnxruntime's QuantizeLinear to even: one step apart), then MUL by 1 into a
    4x finer scale, so that one step of the MEAN is 4 steps of the output."""
    import tflite_build as tb

    data = tb.build_tflite(
        tensors=[tb.tensor("x", "INT8", [1, 2, 64], scale=1.0, zero_point=0),
                 tb.tensor("axes", "int32", [1], data=np.array([1], np.int32)),
                 tb.tensor("mean", "INT8", [1, 64], scale=1.0, zero_point=0),
                 tb.tensor("one", "INT8", [1], data=np.array([1], np.int8), scale=1.0, zero_point=0),
                 tb.tensor("y", "INT8", [1, 64], scale=0.25, zero_point=0)],
        operators=[tb.op("MEAN", [0, 1], [2], "ReducerOptions", keep_dims=False),
                   tb.op("MUL", [2, 3], [4], "MulOptions", fused_activation_function=0)],
        inputs=[0], outputs=[4])
    path.write_bytes(data)
    return path


@needs_litert
def test_quantized_rounding_that_compounds_is_judged_op_by_op(tmp_path):
    """The ONNX form is 4 steps off end to end (> one step), each op within one step of
    LiteRT when fed LiteRT's operands: the output passes, and says why."""
    from legalizer.numeric.tflite import check_tflite

    src = _compounding_int8_model(tmp_path / "m.tflite")
    model = legalizer.load(src)
    out = tmp_path / "m.legal.tflite"
    out.write_bytes(to_tflite(model))
    res = check_tflite(src, out, model, provider="cpu")
    assert res.ran and res.ok and not res.error, res.to_json()
    ort = [o for b in res.bindings for o in b.outputs if o.name.endswith("(onnxruntime)")]
    assert [o.max_abs_err for o in ort] == [4.0]
    assert ort[0].detail == ("4 steps off end to end (quantized rounding compounds); op by op, all 2 ops agree"
                             " with LiteRT")


def _cancelling_float_model(path: Path) -> Path:
    """What MediaPipe's pose landmark model does to its segmentation output, in two ops:
    h[1,16] = FULLY_CONNECTED(x[1,256]) with weights of magnitude 100 whose rows come in
    pairs 1e-3 apart, then y[1,8] = FULLY_CONNECTED(h) taking each pair's difference. h
    is large, y small: the rounding of h's sums, which onnxruntime's kernels do in
    another order than LiteRT's, is most of y's error."""
    import tflite_build as tb

    rng = np.random.default_rng(0)
    w1 = rng.normal(0, 100, (8, 256)).astype(np.float32)
    w = np.concatenate([w1, w1 + rng.normal(0, 1e-3, (8, 256)).astype(np.float32)])
    v = np.concatenate([-np.eye(8), np.eye(8)], 1).astype(np.float32)
    path.write_bytes(tb.build_tflite(
        [tb.tensor("x", "float32", [1, 256]), tb.tensor("w", "float32", [16, 256], data=w),
         tb.tensor("h", "float32", [1, 16]), tb.tensor("v", "float32", [8, 16], data=v),
         tb.tensor("y", "float32", [1, 8])],
        [tb.op("FULLY_CONNECTED", [0, 1, -1], [2], "FullyConnectedOptions"),
         tb.op("FULLY_CONNECTED", [2, 3, -1], [4], "FullyConnectedOptions")], [0], [4]))
    return path


def _checked(src: Path, tmp_path: Path):
    from legalizer.numeric.tflite import check_tflite

    model = legalizer.load(src)
    out = tmp_path / "m.legal.tflite"
    out.write_bytes(to_tflite(model))
    return check_tflite(src, out, model, provider="cpu")


@needs_litert
def test_an_onnx_form_onnxruntime_refuses_leaves_the_litert_side(tmp_path, monkeypatch):
    """The ONNX form's loading is begun in the child and waited for after LiteRT's: a
    form onnxruntime refuses is a note, its outputs compared on LiteRT alone."""
    from legalizer.numeric import tflite as ct

    real = ct.onnx_runner
    monkeypatch.setattr(ct, "onnx_runner", lambda form, *a, **k: real(b"not an ONNX model", *a, **k))
    res = _checked(_cancelling_float_model(tmp_path / "m.tflite"), tmp_path)
    assert res.ran and res.ok and res.provider == "LiteRT", res.to_json()
    assert [o.name for b in res.bindings for o in b.outputs] == ["y (LiteRT)"]
    assert res.error.startswith("output 'y' of subgraph 'main' not compared on onnxruntime: onnxruntime cannot load"
                                " their ONNX form: "), res.error


@needs_litert
def test_float_rounding_that_compounds_is_judged_op_by_op(tmp_path):
    """A float output that cancels large sums is off on onnxruntime by far more than
    the tolerances allow (as pose_landmark_full's segmentation output, 1.2e-4 of its
    scale), each op within them when fed LiteRT's operands: the output passes, and
    says why. LiteRT itself, same kernels, is exact."""
    res = _checked(_cancelling_float_model(tmp_path / "m.tflite"), tmp_path)
    assert res.ran and res.ok and not res.error, res.to_json()
    (litert_out, ort), = [b.outputs for b in res.bindings]
    assert litert_out.ok and litert_out.max_abs_err == 0.0
    assert ort.max_abs_err > 20 * ATOL  # y's magnitude is about 0.02: RTOL of it is below ATOL
    assert ort.detail == (f"{ort.max_abs_err:.3g} max abs err off end to end (float rounding compounds); op by op,"
                          " all 2 ops agree with LiteRT")


@needs_litert
def test_op_by_op_judges_a_float_op_against_its_own_scale(tmp_path, monkeypatch):
    """Each FULLY_CONNECTED translated 0.01 off: within the tolerance of h (magnitude
    ~3,000), not of y (~0.02): op by op, y's op is named."""
    from legalizer.kinds.tflite.onnx_form.registry import OPS

    fc = OPS["FULLY_CONNECTED"]
    monkeypatch.setitem(OPS, "FULLY_CONNECTED",
                        lambda e, n: [e.emit("Add", [fc(e, n)[0], e.scalar(0.01, "float")])])
    res = _checked(_cancelling_float_model(tmp_path / "m.tflite"), tmp_path)
    assert res.ran and not res.ok
    (litert_out, ort), = [b.outputs for b in res.bindings]
    assert litert_out.ok and not ort.ok
    assert ort.detail.startswith(f"{ort.max_abs_err:.3g} max abs err off end to end; op by op, 1 of 2 ops differ"
                                 " from LiteRT: 'y' (FULLY_CONNECTED) max abs err 0.01"), ort.detail


@needs_litert
def test_op_by_op_names_the_op_that_differs(tmp_path, monkeypatch):
    """A MEAN translated 3 steps off (a stand-in for a translation bug) fails op by op,
    named, while LiteRT still matches."""
    from legalizer.numeric.tflite import check_tflite
    from legalizer.kinds.tflite.onnx_form.registry import OPS

    reduce = OPS["MEAN"]
    monkeypatch.setitem(OPS, "MEAN",
                        lambda e, n: [e.emit("Add", [reduce(e, n)[0], e.scalar(3.0, "float")])])
    src = _compounding_int8_model(tmp_path / "m.tflite")
    model = legalizer.load(src)
    out = tmp_path / "m.legal.tflite"
    out.write_bytes(to_tflite(model))
    res = check_tflite(src, out, model, provider="cpu")
    assert res.ran and not res.ok
    (litert_out, ort), = [b.outputs for b in res.bindings]
    assert litert_out.ok and not ort.ok
    # The MUL, fed LiteRT's MEAN, is right: only the MEAN is named.
    assert ort.detail == ("12 steps off end to end; op by op, 1 of 2 ops differ from LiteRT: 'mean' (MEAN) more"
                          " than one quantization step")


# -- the vtable reader reads what the generated accessors read (issue 24, item 6) ----------

_same_table = tflite_build.same_table


BUILT = {"stateful": tflite_build.stateful_model, "sparse": tflite_build.sparse_model,
         "empty_constant": tflite_build.empty_constant_model, "deconv": tflite_build.deconv_model,
         "attention_int8": tflite_build.attention_int8_model}


@pytest.mark.parametrize("source", sorted(p.name for p in (ROOT / "models" / "tflite").glob("*.tflite")) + sorted(BUILT))
def test_vtable_reader_reads_what_the_accessors_read(source):
    import tflite

    from legalizer.kinds.tflite.schema import read_by_accessors

    data = BUILT[source]() if source in BUILT else (ROOT / "models" / "tflite" / source).read_bytes()
    _same_table(read_by_accessors(tflite.Model.GetRootAs(data, 0), "Model"), read(tflite.Model.GetRootAs(data, 0), "Model"))


@pytest.mark.parametrize("source", sorted(BUILT))
def test_writer_writes_every_field_it_reads(source):
    """What the writer writes (fields placed at once, what repeats written once) reads
    back, through the generated accessors, as the tables it was given."""
    import tflite

    data = BUILT[source]()
    tflite_build.assert_same_tables(serialize(read(tflite.Model.GetRootAs(data, 0))), data)


@pytest.mark.parametrize("source", sorted(p.name for p in (ROOT / "models" / "tflite").glob("*.tflite"))
                         + sorted(BUILT) + ["add_chain"])
def test_one_write_tables_are_the_builders_bytes(source):
    """Each table written in one go (its fields, offset to its vtable and the vtable
    laid out at once, issue 31, item 6) is byte for byte what flatbuffers' builder
    makes of it through StartObject/EndObject, at any alignment the buffer is at."""
    import tflite

    if source == "add_chain":
        data = tflite_build.add_chain(50)
    else:
        data = BUILT[source]() if source in BUILT else (ROOT / "models" / "tflite" / source).read_bytes()
    table = read(tflite.Model.GetRootAs(data, 0), "Model")
    ours = serialize(table, 1024)
    assert ours == serialize(table, 1024, by_builder=True)
    assert serialize(table, len(data) + 7) == ours  # another start: the buffer grows less often


def test_compiled_table_writers_write_the_builders_bytes_whatever_is_present_and_refuse_unknown_fields():
    """The writer made once per type and set of fields (issue 31, item 6) writes what
    the builder does for each mix of present, absent and default-valued fields, shares
    equal tables of scalars alone, and names a field the schema lacks."""
    import flatbuffers

    from legalizer.kinds.tflite import schema

    tensors = [FbTable("Tensor", {"name": f"t{i}", "type": t, "shape": shape, "buffer": buf, "is_variable": var})
               for i, (t, shape, buf, var) in enumerate([(0, [1, 2], 0, False), (9, [3], 1, True), (0, None, 0, False),
                                                         (2, np.array([4, 5, 6], np.int32), 0, False)])]
    opts = [FbTable("AddOptions", {"fused_activation_function": a, "pot_scale_int16": p})
            for a, p in [(0, True), (1, True), (0, False), (1, True)]]
    ops = [FbTable("Operator", {"opcode_index": k % 2, "inputs": [k, -1], "outputs": [k + 1],
                                "builtin_options_type": 11, "builtin_options": o}) for k, o in enumerate(opts)]
    sg = FbTable("SubGraph", {"tensors": tensors, "operators": ops, "inputs": [0], "outputs": [3], "name": "g"})
    model = FbTable("Model", {"version": 3, "subgraphs": [sg], "buffers": [FbTable("Buffer", {})] * 2,
                              "description": "mix"})
    for start in (1024, 1031):  # another alignment of the buffer's end
        assert serialize(model, start) == serialize(model, start, by_builder=True)
    b = flatbuffers.Builder(64)
    w = schema._Writer(b)
    assert w.table(opts[1]) == w.table(opts[3])  # equal: written once
    assert w.table(opts[0]) != w.table(opts[1])
    for by_builder in (False, True):
        with pytest.raises(KeyError, match="table Operator has no field colour"):
            schema.write(flatbuffers.Builder(64), FbTable("Operator", {"opcode_index": 1, "colour": 2}), by_builder)


def test_a_file_of_more_table_layouts_than_a_writer_makes_is_refused_in_one_line(monkeypatch):
    """Each distinct layout costs the reader a compiled function: a crafted file of
    thousands (one every ~16 bytes) is bad input, not minutes and gigabytes."""
    from legalizer.kinds.tflite import schema as tflite_schema
    from legalizer.errors import BadInput
    from legalizer.importers.reader import read_model

    src = ROOT / "models/tflite/broadcast_add.tflite"
    assert read_model(src).format == "tflite"  # (its layouts: within the limit)
    monkeypatch.setattr(tflite_schema, "MAX_LAYOUTS", 3)
    with pytest.raises(BadInput) as e:
        read_model(src)
    assert str(e.value) == (f"{src}: not a valid TFLite flatbuffer (truncated or corrupt: ValueError:"
                            " more than 3 distinct table layouts)")
