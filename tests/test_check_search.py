"""A check that runs on models whose dynamic dims must be large: when the original
rejects every synthesized binding (sizes 3 and 1), the check searches for bindings it
accepts; the user can give shapes (--input-shape) and arrays (--input FILE.npz); and
--require-check fails a run whose check did not run fully."""

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import legalizer
from legalizer import pipeline
from legalizer.numeric import search as search_mod
from legalizer.numeric.search import graph_sizes, sizes_in_error, sizes_in_name
from helpers import cli_process, make_model
from needs import require

ROOT = Path(__file__).resolve().parent.parent


def window_model():
    """Audio framed into windows of 512 samples: [batch, samples] -> [batch, -1, 512],
    plus a rank-1 bias (legalize reshapes it). onnxruntime rejects samples=3."""
    return make_model([helper.make_node("Reshape", ["x", "frame"], ["frames"]),
                       helper.make_node("Add", ["frames", "bias"], ["y"], name="add_bias")],
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "samples"])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                      [numpy_helper.from_array(np.array([0, -1, 512], np.int64), "frame"),
                   numpy_helper.from_array(np.linspace(-1, 1, 512, dtype=np.float32), "bias")])


def conv_stack_model():
    """Three Conv1d (kernel 5, stride 2) over a dynamic time axis, then a bias: time must
    be at least 29 (13 after one conv, 5 after two)."""
    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    for i in range(3):
        inits.append(numpy_helper.from_array(rng.standard_normal((4, 1 if i == 0 else 4, 5)).astype(np.float32),
                                             f"w{i}"))
        nodes.append(helper.make_node("Conv", [prev, f"w{i}"], [f"c{i}"], strides=[2], name=f"conv{i}"))
        prev = f"c{i}"
    nodes.append(helper.make_node("Add", [prev, "bias"], ["y"], name="add_bias"))
    inits.append(numpy_helper.from_array(rng.standard_normal((4, 1)).astype(np.float32), "bias"))
    return make_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 1, "time"])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)


def gemm_model():
    """A Gemm whose weight needs 400 features: onnxruntime's error names the size
    ("W: {400,8} K: 3"); no reshape, slice or kernel in the graph does."""
    return make_model([helper.make_node("Gemm", ["x", "w"], ["g"]), helper.make_node("Add", ["g", "b"], ["y"])],
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "features"])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                      [numpy_helper.from_array(np.full((400, 8), 0.01, np.float32), "w"),
                   numpy_helper.from_array(np.arange(8, dtype=np.float32), "b")])


def padded_window_model():
    """silero-vad's pattern, with its anonymous dims: x [?, ?] reflect-padded by 64 at
    the end (samples must exceed 64: onnxruntime says "post-pad (64) exceeds maximum
    allowed (2)" at 3, "(63)" at 64, ...), framed into windows of 128 ([?, -1, 128]),
    concatenated with a state [2, ?, 128] summed over its first axis (its batch must be
    x's), plus a rank-1 bias (legalize reshapes it)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [0, 0])
    state = helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, 0, 128])
    for dim in [*x.type.tensor_type.shape.dim, state.type.tensor_type.shape.dim[1]]:
        dim.Clear()  # neither a size nor a name: keys x[0], x[1], state[1]
    return make_model([helper.make_node("Pad", ["x", "pads"], ["padded"], mode="reflect"),
                       helper.make_node("Reshape", ["padded", "frame"], ["frames"]),
                       helper.make_node("ReduceSum", ["state", "zero"], ["s"], keepdims=0),
                       helper.make_node("Unsqueeze", ["s", "one"], ["s1"]),
                       helper.make_node("Concat", ["frames", "s1"], ["h"], axis=1),
                       helper.make_node("Add", ["h", "bias"], ["y"], name="add_bias")],
                      [x, state], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                      [numpy_helper.from_array(np.array([0, 0, 0, 64], np.int64), "pads"),
                   numpy_helper.from_array(np.array([0, -1, 128], np.int64), "frame"),
                   numpy_helper.from_array(np.array([0], np.int64), "zero"),
                   numpy_helper.from_array(np.array([1], np.int64), "one"),
                   numpy_helper.from_array(np.linspace(-1, 1, 128, dtype=np.float32), "bias")])


def always_failing_model():
    """Range with a step computed as 0 at run time: the original fails at every size."""
    return make_model([helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
                       helper.make_node("Mul", ["s", "zero"], ["step"]),
                       helper.make_node("Range", ["start", "limit", "step"], ["r"]),
                       helper.make_node("Add", ["x", "b"], ["y"])],
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                   helper.make_tensor_value_info("r", TensorProto.FLOAT, None)],
                      [numpy_helper.from_array(np.array(0, np.float32), "zero"),
                   numpy_helper.from_array(np.array(0, np.float32), "start"),
                   numpy_helper.from_array(np.array(10, np.float32), "limit"),
                   numpy_helper.from_array(np.ones(1, np.float32), "b")])


def custom_op_model():
    """An op of a domain onnxruntime does not know: the original does not load."""
    m = make_model([helper.make_node("Mystery", ["x"], ["z"], domain="com.example"),
                    helper.make_node("Add", ["z", "b"], ["y"])],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])],
                   [numpy_helper.from_array(np.ones(4, np.float32), "b")],
                   domains=[("com.example", 1)])
    m.graph.value_info.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, ["n", 4]))
    return m


def save(model, tmp_path, name):
    path = tmp_path / name
    onnx.save(model, str(path))
    return path


def run_json(*args):
    p = cli_process(*args, "--json")
    assert p.returncode == 0, p.stderr
    return p, json.loads(p.stdout)


def compared(check):
    return [(b["dims"], b["source"]) for b in check["bindings"] if not b.get("skipped")]


# -- the search -----------------------------------------------------------------------

def test_window_of_512_samples_is_found_in_the_error_in_one_try(tmp_path):
    src = save(window_model(), tmp_path, "window.onnx")
    p, rep = run_json(src)
    check = rep["check"]
    assert check["ran"] and check["ok"]
    assert check["search"] == {"tried": 1, "found": {"batch": 3, "samples": 512}}
    # the found size, with batch at 3 and 1 as always; samples=1 was rejected already
    assert compared(check) == [({"batch": 3, "samples": 512}, "search"), ({"batch": 1, "samples": 512}, "search")]
    assert [(b["dims"], b["source"]) for b in check["bindings"] if b.get("skipped")] == [
        ({"batch": b, "samples": s}, "synthesized") for b in (3, 1) for s in (3, 1)]
    assert all(o["max_abs_err"] == 0 for b in check["bindings"] for o in b["outputs"])
    assert "search: the original model rejects every synthesized dim binding; 1 try found batch=3, samples=512" \
        in p.stderr.splitlines()  # --json: the human lines go to stderr
    out = tmp_path / "window.legal.onnx"
    assert p.stderr.splitlines()[-1] == (f"{src}: legalized for 'tosa' -> {out}, outputs match on "
                                         f"{check['provider']} (at dims the search found: batch=3, samples=512)")
    assert rep["stats"]["reshapes_inserted"] + rep["stats"]["constants_folded"] == 1


def test_conv_stack_time_axis_grows_by_powers_of_two(tmp_path):
    src = save(conv_stack_model(), tmp_path, "convs.onnx")
    _, rep = run_json(src)
    check = rep["check"]
    assert check["ran"] and check["ok"]
    # The kernel size 5 (time, batch, both: 3 tries), then 2, 4, 8, 16 (3 tries each),
    # then time=32: the first power of two past the 29 the three convs need.
    assert check["search"] == {"tried": 16, "found": {"batch": 3, "time": 32}}
    assert compared(check) == [({"batch": 3, "time": 32}, "search"), ({"batch": 1, "time": 32}, "search")]


def test_a_size_only_the_error_names(tmp_path):
    model = gemm_model()
    assert graph_sizes(model) == []  # no constant of the graph says 400
    src = save(model, tmp_path, "gemm.onnx")
    _, rep = run_json(src)
    check = rep["check"]
    assert check["ok"] and check["search"] == {"tried": 1, "found": {"batch": 3, "features": 400}}
    assert compared(check) == [({"batch": 3, "features": 400}, "search"), ({"batch": 1, "features": 400}, "search")]


def test_an_error_that_recurs_with_the_tried_size_is_not_followed_down(tmp_path):
    """The pad's error names 64 at the synthesized sizes; at 64 it says "maximum allowed
    (63)", at 63 "(62)": the same error, its number following the size tried. Followed
    down, that took 253 of the 256 tries (silero-vad's window needed a --dim). Tried last:
    64, 2, the reshape's 128 (whose error names 192: 128 + 64), then 192."""
    src = save(padded_window_model(), tmp_path, "padded.onnx")
    res = legalizer.check(src, legalizer.legalize(onnx.load(str(src))), provider="cpu")
    assert res.ran and res.ok
    assert res.search.to_json() == {"tried": 13, "found": {"state[1]": 3, "x[0]": 3, "x[1]": 192}}
    # state's batch must be x's: the two bindings where they differ are rejected
    assert [b.dims for b in res.bindings if not b.skipped] == [
        {"state[1]": 3, "x[0]": 3, "x[1]": 192}, {"state[1]": 1, "x[0]": 1, "x[1]": 192}]


def test_synthesized_bindings_that_run_need_no_search(tmp_path):
    _, rep = run_json(ROOT / "models" / "mlp_bias.onnx", "-o", tmp_path / "out.onnx")
    assert "search" not in rep["check"]
    assert compared(rep["check"]) == [({"N": 3}, "synthesized"), ({"N": 1}, "synthesized")]


def test_a_search_that_finds_nothing_is_bounded_and_says_so(tmp_path):
    src = save(always_failing_model(), tmp_path, "always.onnx")
    legal = legalizer.legalize(onnx.load(str(src)))
    res = legalizer.check(src, legal, provider="cpu", max_search_tries=5)
    assert not res.ran and res.search.tried == 5 and res.search.found is None
    assert res.to_json()["search"] == {"tried": 5, "found": None}
    assert res.error == ("the original model fails on onnxruntime for every input binding tried (2 synthesized;"
                         " a search of 5 more found none it accepts): original fails: [ONNXRuntimeError] : 2 :"
                         " INVALID_ARGUMENT : Non-zero status code returned while running Range node. Name:''"
                         " Status Message: delta in Range operator can not be zero!")


def test_sizes_read_off_errors_names_and_the_graph():
    assert sizes_in_error("[ONNXRuntimeError] : 1 : FAIL : Non-zero status code returned while running Reshape"
                          " node. Name:'' Status Message: /onnxruntime_src/onnxruntime/core/providers/cpu/tensor/"
                          "reshape_helper.h:84 onnxruntime::ReshapeHelper::ReshapeHelper(...) size != 0 &&"
                          " (input_shape_size % size) == 0 was false. The input tensor cannot be reshaped to the"
                          " requested shape. Input shape:{3,3}, requested shape:{3,-1,512}") == [3, 512]
    assert sizes_in_error("Got invalid dimensions for input: x for the following indices index: 1 Got: 3"
                          " Expected: 512") == [3, 512]
    assert sizes_in_error("concatbase.h:135 Non concat axis dimensions must match: Axis 1 has mismatched"
                          " dimensions of 400 and 3 in node 'cat_12'") == [400, 3]
    assert sizes_in_name("seq_512") == [512] and sizes_in_name("n_fft=400") == [400]
    assert sizes_in_name("s77") == [] and sizes_in_name("unk__12") == [] and sizes_in_name("batch") == []
    assert graph_sizes(window_model()) == [512]
    assert graph_sizes(conv_stack_model()) == [5]


def test_dim_names_are_tried_before_growing(tmp_path):
    """A dim named after its size (frames_400) needs no error to say it."""
    model = conv_stack_model()
    for dim in model.graph.input[0].type.tensor_type.shape.dim:
        if dim.dim_param == "time":
            dim.dim_param = "time_400"
    src = save(model, tmp_path, "named.onnx")
    _, rep = run_json(src)
    assert rep["check"]["search"] == {"tried": 1, "found": {"batch": 3, "time_400": 400}}


def test_pt2_range_constraints_are_tried(tmp_path):
    require("torch")
    import torch
    from torch.export import Dim

    class Convs(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = torch.nn.Sequential(*[torch.nn.Conv1d(1 if i == 0 else 4, 4, 5, stride=2) for i in range(3)])

        def forward(self, x):
            return self.convs(x) + torch.ones(4, 1)

    torch.manual_seed(0)
    program = torch.export.export(Convs().eval(), (torch.randn(1, 1, 64),),
                                  dynamic_shapes={"x": {2: Dim("time", min=37, max=4096)}})
    path = tmp_path / "convs.pt2"
    torch.export.save(program, str(path))
    _, rep = run_json(path)
    check = rep["check"]
    # a .pt2 is checked in PyTorch at sizes its range takes: the bounds of [37, 4096]
    # (37: the convs leave at least 2 steps, which torch.export requires of the broadcast
    # add), not the usual 3 and 1, which the program's guards reject
    (key,) = {k for b in check["bindings"] for k in b["dims"]}
    assert check["provider"] == "torch" and check["ok"]
    assert sorted(b["dims"][key] for b in check["bindings"] if not b.get("skipped")) == [37, 4096]


# -- shapes and arrays the user gives ----------------------------------------------------

def test_input_shape_binds_the_dims(tmp_path):
    src = save(window_model(), tmp_path, "window.onnx")
    _, rep = run_json(src, "--input-shape", "x:2x1024")
    assert "search" not in rep["check"]
    assert [(b["dims"], b["source"]) for b in rep["check"]["bindings"]] == [({"batch": 2, "samples": 1024}, "user")]
    assert rep["check"]["ok"]
    # A shape that binds one of two inputs' dims leaves the other's synthesized.
    res = legalizer.check(src, legalizer.legalize(onnx.load(str(src))), provider="cpu",
                          input_shapes={"x": (1, 512)})
    assert [(b.dims, b.source) for b in res.bindings] == [({"batch": 1, "samples": 512}, "user")] and res.ok


def test_inputs_from_an_npz(tmp_path):
    src = save(conv_stack_model(), tmp_path, "convs.onnx")
    x = np.linspace(-1, 1, 2 * 64, dtype=np.float32).reshape(2, 1, 64)
    np.savez(tmp_path / "inputs.npz", x=x)
    _, rep = run_json(src, "--input", tmp_path / "inputs.npz")
    assert [(b["dims"], b["source"]) for b in rep["check"]["bindings"]] == [({"batch": 2, "time": 64}, "user")]
    assert rep["check"]["ok"]
    # the library takes the path too, and the arrays are what ran
    legal = legalizer.legalize(onnx.load(str(src)))
    res = legalizer.check(src, legal, provider="cpu", inputs=str(tmp_path / "inputs.npz"))
    assert [b.dims for b in res.bindings] == [{"batch": 2, "time": 64}] and res.ok
    import onnxruntime as ort

    want = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = ort.InferenceSession(str(tmp_path / "convs.legal.onnx"),
                               providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(want, got)


BAD = [
    (["--input-shape", "y:1x512"], "legalize: error: input shape 'y' (1x512): the model has no input 'y' (its inputs: 'x')"),
    (["--input-shape", "x:1x1x512x1"], "legalize: error: input shape 'x' (1x1x512x1): rank 4, but input 'x' is"
                                       " declared 'batchx1xtime' (rank 3)"),
    (["--input-shape", "x:1x512"], "legalize: error: input shape 'x' (1x512): rank 2, but input 'x' is declared"
                                   " 'batchx1xtime' (rank 3)"),
    (["--input-shape", "x:1x3x512"], "legalize: error: input shape 'x' (1x3x512): dim 1 is 3, but input 'x' is"
                                     " declared 'batchx1xtime', static 1 there"),
    (["--input-shape", "x:1x1xabc"], "legalize: error: --input-shape expects NAME:DIMxDIM... with each DIM a"
                                     " positive integer (e.g. x:1x512), not 'x:1x1xabc'"),
    (["--input-shape", "x1x1x512"], "legalize: error: --input-shape expects NAME:DIMxDIM... with each DIM a"
                                    " positive integer (e.g. x:1x512), not 'x1x1x512'"),
    (["--input-shape", "x:2x1x64", "--dim", "batch=4"], "legalize: error: input shape 'x' (2x1x64): dim 0 ('batch')"
                                                          " is 2, but --dim batch=4 binds it to 4"),
    (["--input-shape", "x:2x1x64", "--input-shape", "x:2x1x32"], "legalize: error: --input-shape: input 'x' is"
                                                                   " given twice"),
    (["--require-check", "--no-check"], "legalize: error: --require-check needs a check to require: it cannot go"
                                        " with --no-check, nor with --verify-only (except with --against)"),
]


@pytest.mark.parametrize("args,line", BAD)
def test_bad_values_are_one_line_and_exit_2(tmp_path, args, line, legalize):
    src = save(conv_stack_model(), tmp_path, "convs.onnx")
    p = legalize(src, *args)
    assert p.returncode == 2 and p.stderr.strip() == line and p.stdout == ""
    assert sorted(f.name for f in tmp_path.iterdir()) == ["convs.onnx"]


def test_bad_arrays_are_one_line_and_exit_2(tmp_path, legalize):
    src = save(conv_stack_model(), tmp_path, "convs.onnx")
    np.savez(tmp_path / "other.npz", y=np.zeros((1, 1, 64), np.float32))
    np.savez(tmp_path / "rank.npz", x=np.zeros((1, 64), np.float32))
    np.save(tmp_path / "x.npy", np.zeros((1, 1, 64), np.float32))
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    cases = [
        (["--input", tmp_path / "other.npz"], "legalize: error: input array 'y' (1x1x64): the model has no input 'y'"
                                              " (its inputs: 'x')"),
        (["--input", tmp_path / "rank.npz"], "legalize: error: input array 'x' (1x64): rank 2, but input 'x' is"
                                             " declared 'batchx1xtime' (rank 3)"),
        (["--input", tmp_path / "junk.npz"], f"legalize: error: --input {tmp_path / 'junk.npz'}: cannot read it:"
                                             " not an .npz archive (nor a .npy array)"),
        (["--input", tmp_path / "x.npy"], f"legalize: error: --input {tmp_path / 'x.npy'}: is a .npy array, not an"
                                          f" .npz archive: give it as --input NAME={tmp_path / 'x.npy'}"),
        (["--input", f"x={tmp_path / 'other.npz'}"], f"legalize: error: --input x: '{tmp_path / 'other.npz'}' is an"
                                                     " .npz archive, not a .npy array: give it as --input"
                                                     f" {tmp_path / 'other.npz'}"),
        (["--input", f"x={tmp_path / 'x.npy'}", "--input", tmp_path / "rank.npz"],
         "legalize: error: --input: input 'x' is given twice"),
    ]
    for args, line in cases:
        p = legalize(src, *args)
        assert p.returncode == 2 and p.stderr.strip() == line, args
    assert sorted(f.name for f in tmp_path.iterdir() if f.suffix == ".onnx") == ["convs.onnx"]
    with pytest.raises(legalizer.LegalizeError, match="rank 2, but input 'x' is declared 'batchx1xtime'"):
        legalizer.check(src, legalizer.legalize(onnx.load(str(src))), input_shapes={"x": (1, 64)})


def test_npz_bombs_are_refused_before_they_inflate(tmp_path, legalize):
    """An archive read by its zip directory and its arrays' headers first (issue 24):
    3 MB that inflate to 320 MiB, and a header that declares 2^40 floats."""
    import io
    import zipfile

    src = save(conv_stack_model(), tmp_path, "convs.onnx")
    bomb = tmp_path / "bomb.npz"
    np.savez_compressed(bomb, x=np.zeros((80, 1 << 20), np.float32))
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (1 << 40,)})
    with zipfile.ZipFile(tmp_path / "huge.npz", "w") as z:
        z.writestr("x.npy", header.getvalue() + bytes(64))  # the header holds the magic
    size = zipfile.ZipFile(bomb).getinfo("x.npy")
    cases = [
        (bomb, f"array 'x' inflates from {size.compress_size:,} to {size.file_size:,} bytes (more than 100x);"
               " refusing to read it"),
        (tmp_path / "huge.npz", f"array 'x' declares {1 << 40} of float32 ({4 << 40:,} bytes), over the limit of"
                                f" {4 << 30:,}; refusing to read it"),
    ]
    for npz, reason in cases:
        p = legalize(src, "--input", npz)
        assert (p.returncode, p.stderr.strip()) == (2, f"legalize: error: --input {npz}: {reason}")


def test_npy_bombs_are_refused_before_they_allocate(tmp_path, legalize):
    """A .npy file (``--input NAME=FILE``) is read by its header first, too: 2^40 floats
    declared, or 2^28 declared in a file of 64 bytes (reading would allocate 1 GiB
    before finding the data short); a bare .npy path is told to name its input."""
    import io

    src = save(conv_stack_model(), tmp_path, "convs.onnx")
    for name, count in [("huge.npy", 1 << 40), ("short.npy", 1 << 28)]:
        header = io.BytesIO()
        np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (count,)})
        (tmp_path / name).write_bytes(header.getvalue() + bytes(64))
    huge, short = tmp_path / "huge.npy", tmp_path / "short.npy"
    cases = [
        (f"x={huge}", f"--input x: array '{huge}' declares {1 << 40} of float32 ({4 << 40:,} bytes), over the limit"
                      f" of {4 << 30:,}; refusing to read it"),
        (f"x={short}", f"--input x: array '{short}' declares {1 << 28} of float32 ({1 << 30:,} bytes), but its file"
                       " holds 64 bytes of data; refusing to read it"),
        (str(short), f"--input {short}: is a .npy array, not an .npz archive: give it as --input NAME={short}"),
    ]
    for arg, line in cases:
        p = legalize(src, "--input", arg)
        assert (p.returncode, p.stderr.strip()) == (2, f"legalize: error: {line}")


# -- --require-check ------------------------------------------------------------------

def test_require_check_fails_a_run_whose_original_cannot_run(tmp_path, legalize):
    src = save(custom_op_model(), tmp_path, "custom.onnx")
    p = legalize(src, "-q")
    assert p.returncode == 0 and (tmp_path / "custom.legal.onnx").exists()
    (tmp_path / "custom.legal.onnx").unlink()
    p = legalize(src, "-q", "--require-check", "--report", tmp_path / "r.json")
    assert p.returncode == 1
    assert p.stdout.strip() == (f"{src}: the check is required (--require-check) and the numeric check did not run:"
                                " the original does not load on onnxruntime: [ONNXRuntimeError] : 1 : FAIL : Load"
                                f" model from {src} failed:Fatal error: com.example:Mystery(-1) is not a registered"
                                " function/op; nothing written")
    assert not (tmp_path / "custom.legal.onnx").exists()
    assert json.loads((tmp_path / "r.json").read_text())["check"]["ran"] is False
    with pytest.raises(legalizer.NotLegal, match=r"the check is required \(require_check\) and the numeric check did"
                                                 r" not run: the original does not load"):
        legalizer.legalize(src, require_check=True)
    assert not (tmp_path / "custom.legal.onnx").exists()


def test_require_check_fails_when_the_search_finds_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(search_mod, "MAX_TRIES", 3)  # the search's own bound, kept small here
    src = save(always_failing_model(), tmp_path, "always.onnx")
    res = pipeline.run(src, pipeline.RunOptions(require_check=True, provider="cpu"))
    assert res.exit_code == 1 and res.report.check["search"] == {"tried": 3, "found": None}
    assert res.unchecked.startswith("the numeric check did not run: the original model fails on onnxruntime for"
                                    " every input binding tried (2 synthesized; a search of 3 more found none it"
                                    " accepts)")
    assert not (tmp_path / "always.legal.onnx").exists()
    res = pipeline.run(src, pipeline.RunOptions(provider="cpu"))  # the default: a warning, exit 0
    assert res.exit_code == 0 and (tmp_path / "always.legal.onnx").exists()
    assert any(w.startswith("the numeric check did not run: the original model fails") for w in res.report.warnings)


def test_require_check_passes_a_check_that_ran_through_the_search(tmp_path, legalize):
    src = save(window_model(), tmp_path, "window.onnx")
    p = legalize(src, "--require-check", "-q")
    assert p.returncode == 0, p.stdout
    assert legalizer.check(src, tmp_path / "window.legal.onnx", provider="cpu", require_check=True).ok


def test_the_docs_session_of_the_search(tmp_path, legalize):
    text = (ROOT / "docs" / "getting-started.md").read_text()
    block = text.split("```text\n$ legalize audio.onnx\n...\n", 1)[1].split("```", 1)[0].splitlines()
    save(window_model(), tmp_path, "audio.onnx")
    p = legalize("audio.onnx", cwd=tmp_path, isolated=True, env={"COLUMNS": None})
    assert p.returncode == 0, p.stderr
    assert len(block) == 5
    assert p.stdout.replace("CUDAExecutionProvider", "CPUExecutionProvider").splitlines()[-5:] == block


def test_a_probe_runs_under_a_memory_ceiling_and_gets_the_limit_back():
    """A grown size can make an intermediate far bigger than the inputs (attention is
    seq x seq): inside the ceiling an allocation past it fails as MemoryError, which the
    search takes as 'too big'; outside, the process's own limit is back."""
    import resource

    from legalizer.numeric.search import TooBig, _probe, memory_ceiling

    before = resource.getrlimit(resource.RLIMIT_AS)
    with pytest.raises(MemoryError):
        with memory_ceiling(extra=256 << 20):
            np.ones(1 << 30, np.float32)  # 4 GiB
    assert resource.getrlimit(resource.RLIMIT_AS) == before
    with pytest.raises(TooBig):
        _probe(lambda binding: np.ones(binding["n"], np.float32).sum() and None, {"n": 1 << 40})
    assert _probe(lambda binding: None, {"n": 3}) is None
    assert _probe(lambda binding: "Input shape:{3}, requested shape:{512}", {"n": 3}) == \
        "Input shape:{3}, requested shape:{512}"
    with pytest.raises(TooBig):
        _probe(lambda binding: "[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : std::bad_alloc", {"n": 3})
    assert resource.getrlimit(resource.RLIMIT_AS) == before
