"""Every run of a model happens in a bounded child process (``legalizer/numeric/child.py``):
a model that runs forever ends at its time limit, one that crashes its runtime ends in
one line, and a signal stops the run at once with nothing left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T, helper

from legalizer.numeric.settings import CheckSettings

from needs import require
from helpers import assert_clean, cli_command, cli_env, lines
from tflite_build import add_chain


def _interrupted_within_a_second(proc) -> None:
    """SIGTERM to a running ``legalize``: it exits 130 within a second, saying so (killed
    if it did not end at all)."""
    try:
        if proc.poll() is not None:
            raise AssertionError(f"legalize ended before the signal: {proc.returncode}")
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert took < 1.5, took
    assert proc.returncode == 130
    assert lines(err) == ["legalize: interrupted"]


def _loop_forever(path: Path) -> Path:
    """A 300-byte ONNX model whose Loop counts to 1e15 (onnxruntime runs it for days)."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Add", ["v_in", "one"], ["v_out"])],
        "body",
        [helper.make_tensor_value_info("i", T.INT64, []), helper.make_tensor_value_info("cond_in", T.BOOL, []),
         helper.make_tensor_value_info("v_in", T.FLOAT, [1])],
        [helper.make_tensor_value_info("cond_out", T.BOOL, []), helper.make_tensor_value_info("v_out", T.FLOAT, [1])],
        [helper.make_tensor("one", T.FLOAT, [1], [1.0])])
    g = helper.make_graph(
        [helper.make_node("Loop", ["M", "c", "x"], ["y"], body=body)], "loop",
        [helper.make_tensor_value_info("x", T.FLOAT, [1])], [helper.make_tensor_value_info("y", T.FLOAT, [1])],
        [helper.make_tensor("M", T.INT64, [], [10**15]), helper.make_tensor("c", T.BOOL, [], [True])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path.write_bytes(m.SerializeToString())
    return path


def test_a_loop_of_1e15_trips_ends_at_the_time_limit(tmp_path, legalize):
    model = _loop_forever(tmp_path / "loop.onnx")
    t0 = time.monotonic()
    p = legalize(model, tmp_path / "out.onnx", "--run-timeout", "2", timeout=120)
    took = time.monotonic() - t0
    assert_clean(p)
    assert p.returncode == 0, p.stderr  # legal; the check did not run, and says why
    why = f"{model} on onnxruntime: it did not finish within its time limit of 2 s (--run-timeout)"
    assert lines(p.stderr) == [f"legalize: warning: the numeric check did not run: {why}"]
    assert lines(p.stdout)[-1] == f"{model}: legalized for 'tosa' -> {tmp_path / 'out.onnx'} (not checked: {why})"
    assert took < 60
    # --require-check makes a check that did not run a failure: nothing written
    p = legalize(model, tmp_path / "req.onnx", "--run-timeout", "2", "--require-check", "-q", timeout=120)
    assert p.returncode == 1, p.stderr
    assert not (tmp_path / "req.onnx").exists()


def test_a_loop_of_1e15_trips_under_against_is_exit_2(tmp_path, legalize):
    model = _loop_forever(tmp_path / "loop.onnx")
    legal = tmp_path / "loop.legal.onnx"
    legal.write_bytes(model.read_bytes())
    p = legalize(legal, "--verify-only", "--against", model, "--run-timeout", "2", "-q", timeout=120)
    assert_clean(p)
    assert p.returncode == 2, p.stdout + p.stderr
    assert lines(p.stderr) == [f"legalize: error: {model} on onnxruntime: it did not finish within its time limit"
                               " of 2 s (--run-timeout)"]
    assert "match" not in p.stdout


def test_sigterm_stops_a_run_within_a_second_and_leaves_nothing(tmp_path):
    model = _loop_forever(tmp_path / "loop.onnx")
    proc = subprocess.Popen(cli_command(model, tmp_path / "out.onnx"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env())
    try:
        # the run reaches the check: its child exists and runs the model
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not _children(proc.pid):
            time.sleep(0.2)
        children = _children(proc.pid)
        assert children, "the check's child never started"
        time.sleep(2.0)  # well inside onnxruntime's Loop
    except BaseException:
        proc.kill()
        raise
    _interrupted_within_a_second(proc)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["loop.onnx"]
    for pid in children:  # the parent killed the child that ran the model
        assert _state(pid) in ("gone", "Z")


def _children(pid: int):
    require("ps")
    out = subprocess.run(["ps", "--ppid", str(pid), "-o", "pid="], capture_output=True, text=True).stdout
    return [int(x) for x in out.split() if "legalizer.numeric.serve" in _cmdline(int(x))]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def _gather_ref(path: Path, row: int = 0) -> Path:
    g = helper.make_graph([helper.make_node("Gather", ["x", "i"], ["y"], axis=1)], "g",
                          [helper.make_tensor_value_info("x", T.FLOAT, [1, 4, 4])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [1, 1, 4])],
                          [helper.make_tensor("i", T.INT64, [1], [row])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path.write_bytes(m.SerializeToString())
    return path


def _scatter_ref(path: Path, row=None) -> Path:
    """The ONNX model a scatter of 7.0 into ``row`` of a [1,4,4] input computes (its
    input as it is, if ``row`` is None: a scatter out of the buffer changes nothing in it)."""
    if row is None:
        nodes, inits = [helper.make_node("Identity", ["x"], ["y"])], []
    else:
        nodes = [helper.make_node("ScatterND", ["x", "i", "u"], ["y"])]
        inits = [helper.make_tensor("i", T.INT64, [1, 2], [0, row]),
                 helper.make_tensor("u", T.FLOAT, [1, 4], [7.0] * 4)]
    g = helper.make_graph(nodes, "s", [helper.make_tensor_value_info("x", T.FLOAT, [1, 4, 4])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [1, 4, 4])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path.write_bytes(m.SerializeToString())
    return path


def _indexed(op: str, index, computed: bool) -> str:
    """A module whose ``op`` (tosa.gather or tosa.scatter of 7.0) indexes dim 1 of its
    [1,4,4] argument at ``index``: a constant, or (``computed``) known only at run time,
    the argument's sum plus 2e9 clamped to [0, index] and cast to i32."""
    body = []
    if computed:
        body += ['  %s = "tosa.reduce_sum"(%arg0) <{axis = 2 : i32}> : (tensor<1x4x4xf32>) -> tensor<1x4x1xf32>',
                 '  %s2 = "tosa.reduce_sum"(%s) <{axis = 1 : i32}> : (tensor<1x4x1xf32>) -> tensor<1x1x1xf32>',
                 '  %shape = "tosa.const_shape"() <{values = dense<[1, 1]> : tensor<2xindex>}> : () -> !tosa.shape<2>',
                 '  %r = "tosa.reshape"(%s2, %shape) : (tensor<1x1x1xf32>, !tosa.shape<2>) -> tensor<1x1xf32>',
                 '  %b = "tosa.const"() <{values = dense<2.0e+09> : tensor<1x1xf32>}> : () -> tensor<1x1xf32>',
                 '  %a = "tosa.add"(%r, %b) : (tensor<1x1xf32>, tensor<1x1xf32>) -> tensor<1x1xf32>',
                 f'  %c = "tosa.clamp"(%a) <{{min_val = 0.0 : f32, max_val = {float(index)!r} : f32}}>'
                 ' : (tensor<1x1xf32>) -> tensor<1x1xf32>',
                 '  %idx = "tosa.cast"(%c) : (tensor<1x1xf32>) -> tensor<1x1xi32>']
    else:
        body += [f'  %idx = "tosa.const"() <{{values = dense<{index}> : tensor<1x1xi32>}}> : () -> tensor<1x1xi32>']
    if op == "tosa.gather":
        body += ['  %0 = tosa.gather %arg0, %idx : (tensor<1x4x4xf32>, tensor<1x1xi32>) -> tensor<1x1x4xf32>']
        result = "tensor<1x1x4xf32>"
    else:
        body += ['  %in = "tosa.const"() <{values = dense<7.0> : tensor<1x1x4xf32>}> : () -> tensor<1x1x4xf32>',
                 '  %0 = tosa.scatter %arg0, %idx, %in : (tensor<1x4x4xf32>, tensor<1x1xi32>, tensor<1x1x4xf32>)'
                 ' -> tensor<1x4x4xf32>']
        result = "tensor<1x4x4xf32>"
    return (f"func.func @main(%arg0: tensor<1x4x4xf32>) -> {result} {{\n" + "\n".join(body)
            + f"\n  return %0 : {result}\n}}\n")


_OUT_OF_RANGE = [("tosa.scatter", 64), ("tosa.scatter", 4096), ("tosa.scatter", 1000000), ("tosa.gather", 64),
                 ("tosa.gather", 2000000000)]
_IDS = [f"{op[5:]}_{i:g}" for op, i in _OUT_OF_RANGE]


def _run_indexed(op: str, index, computed: bool, tmp_path, legalize):
    """The module indexing at ``index`` run --against its ONNX reference: (module,
    reference, the finished process), which left nothing behind."""
    module = tmp_path / "m.mlir"
    module.write_text(_indexed(op, index, computed=computed))
    ref = _gather_ref(tmp_path / "ref.onnx") if op == "tosa.gather" else _scatter_ref(tmp_path / "ref.onnx")
    p = legalize(module, "--verify-only", "--against", ref, "-q", timeout=300)
    assert_clean(p)
    return module, ref, p


@pytest.mark.needs("iree")
@pytest.mark.parametrize("op,index", _OUT_OF_RANGE, ids=_IDS)
def test_a_constant_index_out_of_the_buffer_is_the_comparisons_error(op, index, tmp_path, legalize):
    """IREE does not check a gather's or scatter's index: at 64, 4096 or 1e6 a scatter
    wrote 7.0 past its buffer and the run ended "results match"; a gather at 2e9 killed
    the run (SIGSEGV). A constant index out of range is found before IREE compiles the
    module: one line naming it, exit 2, no "match"."""
    module, ref, p = _run_indexed(op, index, False, tmp_path, legalize)
    assert p.returncode == 2, p.stdout + p.stderr
    does = "read" if op == "tosa.gather" else "write"
    assert lines(p.stderr) == [
        f"legalize: error: {module}: the comparison with {ref} did not run: a '{op}' of the module has constant"
        f" index {index} out of range [0, 3] of its values' dim K: TOSA leaves its result undefined, and IREE would"
        f" {does} outside the buffer"]
    assert "match" not in p.stdout


@pytest.mark.needs("iree")
@pytest.mark.parametrize("op,index", _OUT_OF_RANGE, ids=_IDS)
def test_an_index_out_of_the_buffer_at_run_time_stays_inside_it(op, index, tmp_path, legalize):
    """The same indices computed at run time: clamped to [0, K-1] before IREE compiles
    the module, they read or write row 3, inside the buffer; the results then differ
    from the reference's (exit 1), never "results match"."""
    module, ref, p = _run_indexed(op, index, True, tmp_path, legalize)
    assert p.returncode == 1, p.stdout + p.stderr
    assert lines(p.stdout)[-1] == f"{module}: legal under 'tosa', results DIFFER (IREE llvm-cpu vs onnxruntime)"
    assert "match" not in p.stdout


@pytest.mark.needs("iree")
@pytest.mark.parametrize("op", ["tosa.gather", "tosa.scatter"])
@pytest.mark.parametrize("computed", [False, True], ids=["constant", "computed"])
def test_an_index_in_range_gives_the_same_results_as_before(op, computed, tmp_path, legalize):
    """Index 3, the last of K = 4, as a constant or computed at run time: the clamp
    leaves it as it is, and the module matches its reference exactly."""
    module = tmp_path / "m.mlir"
    module.write_text(_indexed(op, 3, computed))
    ref = _gather_ref(tmp_path / "ref.onnx", 3) if op == "tosa.gather" else _scatter_ref(tmp_path / "ref.onnx", 3)
    p = legalize(module, "--verify-only", "--against", ref, "-q", timeout=300)
    assert_clean(p)
    assert p.returncode == 0, p.stdout + p.stderr
    assert lines(p.stdout)[-1] == f"{module}: legal under 'tosa', results match (IREE llvm-cpu vs onnxruntime)"


_POSITION = ('  %c0 = arith.constant 0 : index\n  %e = tensor.extract %i[%c0] : tensor<1xi32>\n'
             '  %at = arith.index_cast %e : i32 to index\n')
_TENSOR_INDEXING = {
    "tensor.extract": ('  %v = tensor.extract %arg0[%at] : tensor<4xf32>\n'
                       '  %r = tensor.from_elements %v, %v, %v, %v : tensor<4xf32>\n'),
    "tensor.insert": '  %v = arith.constant 7.0 : f32\n  %r = tensor.insert %v into %arg0[%at] : tensor<4xf32>\n',
    "tensor.extract_slice": ('  %s = tensor.extract_slice %arg0[%at] [2] [1] : tensor<4xf32> to tensor<2xf32>\n'
                             '  %r = tensor.concat dim(0) %s, %s : (tensor<2xf32>, tensor<2xf32>) -> tensor<4xf32>\n'),
    "tensor.insert_slice": ('  %s = arith.constant dense<7.0> : tensor<2xf32>\n'
                            '  %r = tensor.insert_slice %s into %arg0[%at] [2] [1]'
                            ' : tensor<2xf32> into tensor<4xf32>\n'),
}


@pytest.mark.needs("iree")
@pytest.mark.parametrize("op", list(_TENSOR_INDEXING))
def test_a_tensor_op_at_a_position_given_as_a_value_is_refused(op, tmp_path, legalize):
    """The tensor dialect's ops that address a tensor at an index value are not checked by
    IREE either: tensor.extract at 1e8 read outside the buffer (SIGSEGV), tensor.insert_slice
    at 64 wrote outside it and the run went on. They are refused before IREE sees them:
    one line, exit 2."""
    module = tmp_path / "m.mlir"
    module.write_text("func.func @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {\n"
                      "  %i = \"tosa.const\"() <{values = dense<64> : tensor<1xi32>}> : () -> tensor<1xi32>\n"
                      + _POSITION + _TENSOR_INDEXING[op] + "  return %r : tensor<4xf32>\n}\n")
    ref = _identity_ref(tmp_path / "ref.onnx", [4])
    p = legalize(module, "--verify-only", "--against", ref, "-q", timeout=300)
    assert_clean(p)
    assert p.returncode == 2, p.stdout + p.stderr
    assert lines(p.stderr) == [f"legalize: error: {module}: --against runs no '{op}' whose position is a value: IREE"
                               " checks no such position against the tensor's bounds"]
    assert "match" not in p.stdout


def _embedding(tmp_path: Path):
    """A TFLite model of two GATHERs (a [10,8] table looked up at input ids, an input
    gathered at constant indices along axis 1), written by legalize's TFLite writer, and
    the TOSA module tosa-converter-for-tflite 2026.2 makes of it (generic form)."""
    from legalizer.kinds.tflite.exporter import to_tflite
    from tflite_models import NONE, Builder, _model

    table = np.random.default_rng(0).standard_normal((10, 8)).astype(np.float32)
    b = Builder("gather")
    ids, x = b.input("ids", "int32", [1, 5]), b.input("x", "float", [2, 6, 4])
    e = b.op("GATHER", [b.const("table", table), ids], [1, 5, 8], axis=0, batch_dims=0)
    e = b.op("MUL", [e, b.const("two", np.float32(2.0).reshape(()))], [1, 5, 8], fused_activation_function=NONE)
    g = b.op("GATHER", [x, b.const("idx", np.array([5, 0, 3, 3], np.int32))], [2, 4, 4], axis=1, batch_dims=0)
    g = b.op("ADD", [g, b.const("one", np.float32(1.0).reshape(()))], [2, 4, 4], fused_activation_function=NONE)
    b.output(g)
    b.output(e)
    reference = tmp_path / "gather.tflite"
    reference.write_bytes(to_tflite(_model(b)))
    data = np.array2string(table.reshape(1, 10, 8), separator=", ", threshold=10**6, floatmode="unique",
                           max_line_width=10**6)
    module = tmp_path / "gather.mlir"
    signature = "(%arg0: tensor<1x5xi32>, %arg1: tensor<2x6x4xf32>) -> (tensor<2x4x4xf32>, tensor<1x5x8xf32>)"
    module.write_text(f"""func.func @main{signature} {{
  %0 = "tosa.const"() <{{values = dense<1.0> : tensor<1x1x1xf32>}}> : () -> tensor<1x1x1xf32>
  %1 = "tosa.const_shape"() <{{values = dense<[4, 2, 4]> : tensor<3xindex>}}> : () -> !tosa.shape<3>
  %2 = "tosa.const"() <{{values = dense<[[5, 0, 3, 3]]> : tensor<1x4xi32>}}> : () -> tensor<1x4xi32>
  %3 = "tosa.const_shape"() <{{values = dense<[1, 6, 8]> : tensor<3xindex>}}> : () -> !tosa.shape<3>
  %4 = "tosa.const"() <{{values = dense<0> : tensor<1xi8>}}> : () -> tensor<1xi8>
  %5 = "tosa.const"() <{{values = dense<2.0> : tensor<1x1x1xf32>}}> : () -> tensor<1x1x1xf32>
  %6 = "tosa.const"() <{{values = dense<{data}> : tensor<1x10x8xf32>}}> : () -> tensor<1x10x8xf32>
  %7 = "tosa.gather"(%6, %arg0) : (tensor<1x10x8xf32>, tensor<1x5xi32>) -> tensor<1x5x8xf32>
  %8 = "tosa.mul"(%7, %5, %4) : (tensor<1x5x8xf32>, tensor<1x1x1xf32>, tensor<1xi8>) -> tensor<1x5x8xf32>
  %9 = "tosa.transpose"(%arg1) <{{perms = array<i32: 1, 0, 2>}}> : (tensor<2x6x4xf32>) -> tensor<6x2x4xf32>
  %10 = "tosa.reshape"(%9, %3) : (tensor<6x2x4xf32>, !tosa.shape<3>) -> tensor<1x6x8xf32>
  %11 = "tosa.gather"(%10, %2) : (tensor<1x6x8xf32>, tensor<1x4xi32>) -> tensor<1x4x8xf32>
  %12 = "tosa.reshape"(%11, %1) : (tensor<1x4x8xf32>, !tosa.shape<3>) -> tensor<4x2x4xf32>
  %13 = "tosa.transpose"(%12) <{{perms = array<i32: 1, 0, 2>}}> : (tensor<4x2x4xf32>) -> tensor<2x4x4xf32>
  %14 = "tosa.add"(%13, %0) : (tensor<2x4x4xf32>, tensor<1x1x1xf32>) -> tensor<2x4x4xf32>
  return %14, %8 : tensor<2x4x4xf32>, tensor<1x5x8xf32>
}}
""")
    return module, reference


@pytest.mark.needs("iree", "litert")
def test_a_converted_embedding_lookup_still_matches_exactly(tmp_path, legalize):
    """A real model's gathers (the converter's output of a TFLite embedding lookup and a
    gather at constant indices): with their indices clamped, the module still matches
    LiteRT exactly (max abs err 0, as before the clamp), at ids across the whole table;
    an id past the table is the reference's own error (exit 2), never "results match"."""
    module, reference = _embedding(tmp_path)
    np.save(tmp_path / "ids.npy", np.array([[0, 9, 3, 7, 5]], np.int32))
    p = legalize(module, "--verify-only", "--against", reference, "--input", f"ids={tmp_path / 'ids.npy'}", timeout=300)
    assert_clean(p)
    assert p.returncode == 0, p.stdout + p.stderr
    assert [ln for ln in lines(p.stdout) if ln.startswith("PASSED")] == [
        f"PASSED | Output: 'result #{i}' | static shapes | max abs err 0, max rel err 0" for i in (0, 1)]
    assert lines(p.stdout)[-1] == f"{module}: legal under 'tosa', results match (IREE llvm-cpu vs LiteRT)"
    np.save(tmp_path / "ids.npy", np.array([[0, 9, 3, 10, 5]], np.int32))
    p = legalize(module, "--verify-only", "--against", reference, "--input", f"ids={tmp_path / 'ids.npy'}", timeout=300)
    assert_clean(p)
    assert p.returncode == 2, p.stdout + p.stderr
    assert lines(p.stderr) == [f"legalize: error: {module}: the comparison with {reference} did not run: {reference}"
                               " fails on LiteRT: LiteRT invoke failed: gather index out of bounds; Node number 0"
                               " (GATHER) failed to invoke."]
    assert "match" not in p.stdout


_WHILE_TRUE = """func.func @main(%arg0: tensor<1xf32>) -> tensor<1xf32> {
  %0 = tosa.while_loop (%a = %arg0) : (tensor<1xf32>) -> tensor<1xf32> {
    %t = "tosa.const"() <{values = dense<true> : tensor<i1>}> : () -> tensor<i1>
    tosa.yield %t : tensor<i1>
  } do {
  ^bb0(%b: tensor<1xf32>):
    %one = "tosa.const"() <{values = dense<1.0> : tensor<1xf32>}> : () -> tensor<1xf32>
    %n = tosa.add %b, %one : (tensor<1xf32>, tensor<1xf32>) -> tensor<1xf32>
    tosa.yield %n : tensor<1xf32>
  }
  return %0 : tensor<1xf32>
}
"""

_RECURSIVE_CALL = """func.func @f(%x: tensor<1xf32>) -> tensor<1xf32> {
  %0 = func.call @f(%x) : (tensor<1xf32>) -> tensor<1xf32>
  return %0 : tensor<1xf32>
}
func.func @main(%arg0: tensor<1xf32>) -> tensor<1xf32> {
  %0 = func.call @f(%arg0) : (tensor<1xf32>) -> tensor<1xf32>
  return %0 : tensor<1xf32>
}
"""


def _identity_ref(path: Path, shape=(1,)) -> Path:
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", T.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", T.FLOAT, list(shape))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path.write_bytes(m.SerializeToString())
    return path


@pytest.mark.needs("iree")
@pytest.mark.parametrize("text,why", [
    (_WHILE_TRUE, " on IREE llvm-cpu: it did not finish within its time limit of 3 s (--run-timeout)"),
    (_RECURSIVE_CALL, ": --against compiles no recursive call graph: @f -> @f; IREE's compiler does not end on one"),
], ids=["while_loop_true", "recursive_call"])
def test_a_tosa_module_that_never_ends_stops_at_the_time_limit(text, why, tmp_path, legalize):
    """A tosa.while_loop whose condition stays true runs forever on IREE: under --against it
    ends at --run-timeout. A self-recursive func.call would make iree-compile never return:
    it is refused before the compiler starts. Each is one line naming the module and the
    cause, exit 2."""
    module = tmp_path / "m.mlir"
    module.write_text(text)
    ref = _identity_ref(tmp_path / "ref.onnx")
    t0 = time.monotonic()
    p = legalize(module, "--verify-only", "--against", ref, "--run-timeout", "3", timeout=300)
    took = time.monotonic() - t0
    assert_clean(p)
    assert p.returncode == 2, p.stdout + p.stderr
    assert lines(p.stderr) == [f"legalize: error: {module}{why}"]
    assert "match" not in p.stdout
    assert took < 120
    assert sorted(x.name for x in tmp_path.iterdir()) == ["m.mlir", "ref.onnx"]


@pytest.mark.needs("iree")
def test_sigterm_stops_a_tosa_while_loop_within_a_second(tmp_path):
    """SIGTERM while IREE runs a loop that never ends (or compiles it, on a slow
    machine): legalize stops within a second, its children (and their tools) gone,
    nothing written beside the inputs."""
    module = tmp_path / "m.mlir"
    module.write_text(_WHILE_TRUE)
    ref = _identity_ref(tmp_path / "ref.onnx")
    proc = subprocess.Popen(cli_command(module, "--verify-only", "--against", ref, "--report", tmp_path / "r.json"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env())
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(_children(proc.pid)) < 2:  # the compiler's child, then the run's
            time.sleep(0.2)
        children = _children(proc.pid)
        assert len(children) >= 2, "the module never reached IREE"
        time.sleep(8.0)  # compiled (a few seconds), and in the loop
    except BaseException:
        proc.kill()
        raise
    _interrupted_within_a_second(proc)
    assert sorted(x.name for x in tmp_path.iterdir()) == ["m.mlir", "ref.onnx"]
    for pid in children:
        assert _state(pid) in ("gone", "Z")


def test_the_child_answers_in_plain_values_only():
    """A reply is JSON and array bytes, never a pickle: what a compromised child could
    send is read back as data or refused."""
    from legalizer.numeric import wire
    from legalizer.numeric.inputs import InputSpec

    value = {"ok": {"y": np.arange(6, dtype=np.float32).reshape(2, 3), "n": [1, 2.5, "s", None, True],
                    "spec": InputSpec("x", 1, (2, "N"), False, "")}}
    back = wire.decode(bytearray(wire.encode(value)))
    np.testing.assert_array_equal(back["ok"]["y"], value["ok"]["y"])
    assert back["ok"]["y"].dtype == np.float32
    assert back["ok"]["n"] == [1, 2.5, "s", None, True]
    assert back["ok"]["spec"] == InputSpec("x", 1, (2, "N"), False, "")
    with pytest.raises(TypeError):
        wire.encode({"ok": np.array([object()])})
    forged = bytearray(wire.encode({"ok": np.zeros(2)}))
    forged = forged.replace(b'"<f8"', b'"|O8"')
    with pytest.raises(wire.BadReply):
        wire.decode(forged)
    short = bytearray(wire.encode({"ok": np.zeros(4)}))[:-8]
    with pytest.raises(wire.BadReply):
        wire.decode(short)


def test_run_limits_are_checked_before_the_work(tmp_path, legalize):
    model = _loop_forever(tmp_path / "loop.onnx")
    for flag, value, want in [("--run-memory", "lots", "--run-memory must be a size such as 4G or 512M, not 'lots'"),
                              ("--run-memory", "0", "--run-memory must be a size such as 4G or 512M, not '0'"),
                              ("--run-timeout", "0", "--run-timeout must be a number of seconds above 0, not '0'")]:
        p = legalize(model, tmp_path / "o.onnx", flag, value)
        assert p.returncode == 2
        assert lines(p.stderr) == [f"legalize: error: {want}"]
    assert sorted(x.name for x in tmp_path.iterdir()) == ["loop.onnx"]


def test_a_run_past_its_memory_is_one_line(tmp_path, legalize):
    """A model that asks for more than --run-memory: onnxruntime's allocation fails in
    the child, and the check does not run, saying why."""
    # Expand to 1e5 x 1e4 float32 (4 GB) from a 1-element input
    g = helper.make_graph([helper.make_node("Expand", ["x", "s"], ["y"])], "big",
                          [helper.make_tensor_value_info("x", T.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [100000, 10000])],
                          [helper.make_tensor("s", T.INT64, [2], [100000, 10000])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    model = tmp_path / "big.onnx"
    model.write_bytes(m.SerializeToString())
    p = legalize(model, tmp_path / "o.onnx", "--run-memory", "1G", timeout=300)
    assert_clean(p)
    assert p.returncode == 0, p.stderr
    [line] = lines(p.stderr)
    assert line.startswith("legalize: warning: the numeric check did not run: "), line
    assert "match" not in p.stdout
    assert os.path.exists(tmp_path / "o.onnx")


def test_what_a_sigkill_leaves_the_next_run_into_the_folder_removes(tmp_path, legalize):
    """SIGKILL gives a run no chance to clean up: its temporary output stays, named
    with its host and process; its child dies with it. The next run that writes into
    the folder removes it (and keeps a live process's temporary file)."""
    from legalizer.atomic_files import temp_name

    model = _loop_forever(tmp_path / "loop.onnx")
    proc = subprocess.Popen(cli_command(model, tmp_path / "out.onnx"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env())
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not _children(proc.pid):
            time.sleep(0.2)
        children = _children(proc.pid)
        assert children
        while time.monotonic() < deadline and not any(x.name.endswith(".tmp") for x in tmp_path.iterdir()):
            time.sleep(0.2)  # the output's temporary file is written before the check (later on a loaded machine)
        time.sleep(1.0)
        proc.kill()
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    left = sorted(p.name for p in tmp_path.iterdir() if p.name != "loop.onnx")
    assert left and all(n.startswith(".out.onnx.legalize-") and n.endswith(".tmp") for n in left), left
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(_state(pid) not in ("gone", "Z") for pid in children):
        time.sleep(0.1)
    assert all(_state(pid) in ("gone", "Z") for pid in children)  # it died with its parent
    live = tmp_path / temp_name("other.onnx")  # this test's own process: alive, so kept
    live.write_bytes(b"")
    p = legalize(_gather_ref(tmp_path / "small.onnx"), tmp_path / "small.legal.onnx", "-q")
    assert p.returncode == 0, p.stderr
    assert sorted(x.name for x in tmp_path.iterdir()) == sorted(["loop.onnx", "small.onnx", "small.legal.onnx",
                                                                 live.name])


@pytest.mark.needs("sandbox")
def test_the_run_child_can_compute_but_not_write_run_or_connect(tmp_path):
    """The run child's syscall filter (legalizer/sandbox.py): what code that a
    runtime's memory bug reached could try there fails with EPERM; reading and
    computing work."""
    import pathlib

    from legalizer.numeric import child

    assert child.sandbox().startswith("seccomp")
    readable = tmp_path / "in.txt"
    readable.write_text("data")
    f = child.Remote(pathlib.Path, str(readable), model="a test", runtime="python")
    assert f.call("read_text") == "data"
    target = child.Remote(pathlib.Path, str(tmp_path / "made.txt"), model="a test", runtime="python")
    with pytest.raises(child.ChildError, match="Operation not permitted"):
        target.call("write_text", "x")
    with pytest.raises(child.ChildError, match="Operation not permitted"):
        f.call("chmod", 0o777)
    with pytest.raises(child.ChildError, match="Operation not permitted"):
        child.Remote(subprocess.Popen, ["/bin/true"], model="a test", runtime="python")
    import socket

    with pytest.raises(child.ChildError, match="Operation not permitted"):
        child.Remote(socket.socket, model="a test", runtime="python")
    assert sorted(x.name for x in tmp_path.iterdir()) == ["in.txt"]
    # threads still start (clone with CLONE_THREAD)
    import threading

    t = child.Remote(threading.Thread, model="a test", runtime="python")
    t.call("start")
    t.call("join")


@pytest.mark.needs("sandbox")
def test_the_run_child_cannot_raise_its_memory_limit():
    """The parent sets the run child's address-space limit from outside (prlimit); the
    filter refuses the child setrlimit and prlimit64 with a new limit, so code that a
    runtime's memory bug reached there cannot raise it (it could before: the limit was
    the child's own soft limit, under an unlimited hard one)."""
    import resource

    from legalizer.numeric import child

    with child.limited(memory=1 << 30):
        assert child.sandbox().startswith("seccomp")
        proc = child._processes[child.RUN]  # noqa: SLF001 - the child this test asks of
        soft, hard = resource.prlimit(proc.popen.pid, resource.RLIMIT_AS)
        assert soft != resource.RLIM_INFINITY and soft < (1 << 30) + (8 << 30)
        # (the kernel lets any process raise its soft limit up to its hard one: EPERM
        # here is the filter's; Python words it "not allowed to raise maximum limit")
        for raise_it in ((resource.setrlimit, resource.RLIMIT_AS, (hard, hard)),
                         (resource.prlimit, 0, resource.RLIMIT_AS, (hard, hard))):
            with pytest.raises(child.ChildError, match="not allowed to raise|Operation not permitted"):
                child.Remote(*raise_it, model="a test", runtime="python")
        # not raised (the parent sets it anew before each request, from what the child
        # maps then: on a GPU machine, CUDA's mappings grow it between requests)
        now, now_hard = resource.prlimit(proc.popen.pid, resource.RLIMIT_AS)
        assert now_hard == hard and now != resource.RLIM_INFINITY and now < (1 << 30) + (8 << 30)
        # reading its limits still works
        child.Remote(resource.getrlimit, resource.RLIMIT_AS, model="a test", runtime="python")
        # and the limit holds: an allocation past it is the one-line fault
        with pytest.raises(child.RunFault, match="ran out of its memory"):
            child.Remote(bytearray, 2 << 30, model="a test", runtime="python")


def _chain(n: int, values: int, wrong_at: int = -1) -> onnx.ModelProto:
    """x[1] expanded to n floats, then ``values`` Add/Mul steps (step ``wrong_at`` adds
    2 instead of 1: where a candidate built so differs from the reference)."""
    nodes = [helper.make_node("Expand", ["x", "s"], ["v0"])]
    for i in range(values):
        nodes.append(helper.make_node("Add", [f"v{i}", "two" if i == wrong_at else "one"], [f"v{i + 1}"]))
    nodes.append(helper.make_node("ReduceSum", [f"v{values}"], ["y"], keepdims=0))
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", T.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [])],
                          [helper.make_tensor("s", T.INT64, [1], [n]), helper.make_tensor("one", T.FLOAT, [1], [1.0]),
                           helper.make_tensor("two", T.FLOAT, [1], [2.0])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_localize_holds_a_chunk_of_values_at_a_time(monkeypatch):
    """Localization compares an ONNX model's values a chunk at a time: no call for
    values asks for more than the budget (or one value), and it finds what comparing
    them all at once finds: the first value that differs, and every later one."""
    from legalizer.numeric import localize as lz
    from legalizer.numeric.child import ChildRunner
    from legalizer.numeric.runtimes import runner_for

    n = 1 << 20  # 4 MiB a value (8 MiB as the size run counts them)
    asked = []
    values = ChildRunner.values

    def recorded(self, feeds, names=None):
        got = values(self, feeds, names)
        asked.append(sum(a.nbytes for a in got.values()))
        return got

    monkeypatch.setattr(ChildRunner, "values", recorded)
    cand, ref = _chain(n, 6, wrong_at=3), _chain(n, 6)
    feeds = {"x": np.ones(1, np.float32)}
    cpu = CheckSettings("cpu", rtol=1e-4, atol=1e-5)
    loc = lz.localize_onnx(cand, ref, feeds, cpu)
    assert loc.culprit.value == "v4"
    assert [d.value for d in loc.divergence] == ["v4", "v5", "v6", "y"]
    assert loc.compared == 8  # v0..v6 and y
    assert asked and max(asked) <= lz.CHUNK_BYTES  # 4 MiB values: 8 a chunk at most
    asked.clear()
    ort = runner_for("onnx", "cpu")
    loc = lz.localize_chunked(lz.onnx_steps(cand), ort.runner(cand, "cpu"), ort.runner(ref, "cpu"),
                              feeds, cpu, budget=10 << 20)
    assert [d.value for d in loc.divergence] == ["v4", "v5", "v6", "y"]
    assert max(asked) <= 2 * (4 << 20) + 16  # a chunk: one 8 MiB-counted value
    # what reduce reads: fetched when asked for
    cand_values, ref_values, pairs = loc.values
    assert "v3" in cand_values and pairs["v3"] == "v3"
    np.testing.assert_array_equal(cand_values["v3"], np.full(n, 4.0, np.float32))
    np.testing.assert_array_equal(ref_values["v4"], np.full(n, 5.0, np.float32))
    np.testing.assert_array_equal(cand_values["v4"], np.full(n, 6.0, np.float32))


def _recorded(monkeypatch, cls):
    """The bytes of values each ``cls.values`` call gave, as a list the test reads."""
    asked = []
    values = cls.values

    def recorded(self, feeds, names=None):
        got = values(self, feeds, names)
        asked.append(sum(np.asarray(a).nbytes for a in got.values()))
        return got

    monkeypatch.setattr(cls, "values", recorded)
    return asked


@pytest.mark.needs("litert")
def test_localize_tflite_holds_a_chunk_of_values_at_a_time(monkeypatch, tmp_path):
    """TFLite localization asks LiteRT for a chunk of values a run (the model's copy
    with them as outputs; it kept every tensor before, 3.3 GB for 24 values of 16 MB)
    and finds the same culprit and later values."""
    import legalizer
    from legalizer.numeric import localize as lz
    from legalizer.numeric.child import ChildRunner

    n, k = 1 << 20, 24  # 4 MiB a value, 96 MiB in all
    (tmp_path / "bad.tflite").write_bytes(add_chain(k, n, wrong_at=11))
    (tmp_path / "good.tflite").write_bytes(add_chain(k, n))
    asked = _recorded(monkeypatch, ChildRunner)
    graph = legalizer.load(tmp_path / "bad.tflite").graph
    x = (np.arange(n) % 7).astype(np.float32)  # whole numbers: every sum exact
    loc = lz.localize_tflite(tmp_path / "bad.tflite", tmp_path / "good.tflite", graph, {"x": x},
                             CheckSettings(rtol=1e-4, atol=1e-5))
    assert [d.value for d in loc.divergence] == [f"v{i}" for i in range(12, k + 1)]
    assert loc.compared == k and loc.runtimes == "LiteRT vs LiteRT"
    assert len(asked) >= 4 and max(asked) <= lz.CHUNK_BYTES  # two chunks a side at least
    cand, ref, pairs = loc.values
    np.testing.assert_array_equal(cand["v12"], x + 13)
    np.testing.assert_array_equal(ref["v12"], x + 12)


@pytest.mark.needs("litert")
def test_litert_runner_values_run_a_chunk_up_to_its_last_value(tmp_path):
    """A chunk's copy of the model ends at the last op that computes a value asked for
    (LiteRT runs every op of its plan: an early chunk ran the whole model before), and
    gives those values as the whole model computes them."""
    import tflite

    from legalizer.numeric.litert import LiteRTRunner
    from legalizer.kinds.tflite.schema import read

    n, k = 1 << 10, 24
    (tmp_path / "chain.tflite").write_bytes(add_chain(k, n, wrong_at=11))
    probe = LiteRTRunner(tmp_path / "chain.tflite")
    cut = read(tflite.Model.GetRootAs(probe._cut(["v3", "v5"]), 0))  # noqa: SLF001 - the copy the run takes
    sg = cut.fields["subgraphs"][0]
    assert len(sg.fields["operators"]) == 5 and sg.fields["outputs"].tolist() == [5, 7]
    x = (np.arange(n) % 7).astype(np.float32)
    got = probe.values({"x": x}, ["v3", "v5", "v12"])
    np.testing.assert_array_equal(got["v3"], x + 3)
    np.testing.assert_array_equal(got["v5"], x + 5)
    np.testing.assert_array_equal(got["v12"], x + 13)  # past the op that adds 2


@pytest.mark.needs("iree")
@pytest.mark.needs("litert")
def test_localize_a_tosa_module_a_chunk_at_a_time(monkeypatch):
    """A TOSA module whose values do not fit a chunk is cut at a chunk of them per IREE
    run (matched on sketches of both sides, then compared a chunk at a time): the same
    culprit, region and count as the run that returns them all."""
    from legalizer.numeric import localize as lz
    from legalizer.numeric.against import module_text
    from legalizer.numeric.iree_run import IreeRunner

    root = Path(__file__).resolve().parent.parent
    ref = root / "models/tflite/transformer_like.tflite"
    text = module_text(root / "models/tosa_converter/transformer_like.mlirbc")
    rng = np.random.default_rng(0)
    from legalizer.numeric.litert import LiteRTModel

    feeds = {s.name: rng.standard_normal([max(d, 1) for d in s.shape_signature]).astype(s.dtype)
             for s in LiteRTModel(str(ref)).input_specs()}
    got = {}
    for chunk in (lz.CHUNK_BYTES, 20_000):  # all of them (52 kB); then a fifth a run at most
        asked = _recorded(monkeypatch, IreeRunner)
        loc = lz.localize_mlir(text, ref, feeds, CheckSettings("cpu", rtol=1e-4, atol=1e-5), differing=[0],
                               chunk=chunk)
        got[chunk] = ([(d.value, d.reference) for d in loc.divergence], [s.op for s in loc.region], loc.compared)
        assert max(asked) <= max(chunk, 16_384), asked  # (a value bigger than the chunk alone)
        monkeypatch.undo()
    assert got[20_000] == got[lz.CHUNK_BYTES]
    assert got[20_000][0][0] == ("75", "gelu") and got[20_000][2] == 33


def test_chunks_pack_values_up_to_the_budget():
    from legalizer.numeric.localize import chunks

    sizes = {"a": 4, "b": 4, "c": 10, "d": 1, "e": 1}
    assert chunks(["a", "b", "c", "d", "e", "f"], sizes, budget=8) == [["a", "b"], ["c"], ["d", "e"]]
    assert chunks([], sizes) == []
