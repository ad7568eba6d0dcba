"""Hostile input: mutated .onnx and .tflite files from models/ (tests/fuzz_cases.py names
the mutations: truncation, flipped bytes, wrong lengths, huge and negative dims, rank-100
shapes, cycles, dangling names, duplicate outputs, bad indices, wild attributes) run
through the whole job, ``legalize MODEL -o OUT -q``, each in a child process with an
address-space limit and a time limit. Every outcome keeps the contract: exit 0, 1 or 2;
at most one stderr line (one ``legalize: error:`` line for exit 2); never a traceback,
an internal error or "out of memory"; no file left but the input and, on exit 0, the
output; the input unchanged.

By default a sample (each mutation kind once, a hypothesis-drawn sample of a quarter of
``FUZZ_EXAMPLES``, and a few cases through a fresh ``python -m legalizer.cli``
subprocess); ``-m slow`` adds each kind's second case and ``FUZZ_EXAMPLES`` (40) drawn
cases; ``FUZZ_EXAMPLES=3000`` draws more. A long campaign that groups failures:
``python tests/fuzz_cases.py --cases 3000``. Below, each crash such campaigns found has a regression test of its own.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import fuzz_cases as fz
from tflite_build import build_tflite, op, tensor

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "40"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck))


def _assert_contract(case, o: fz.Outcome, suffix: str) -> None:
    assert o.problems(suffix) == [], (case, o.code, o.stdout[-2000:], o.stderr[-2000:])


@pytest.mark.parametrize("which", [0, pytest.param(1, marks=pytest.mark.slow)], ids=["first", "second"])
@pytest.mark.parametrize("kind", fz.KINDS)
def test_each_mutation_kind(kind, which):
    """The ``which``-th case (of the seeds tried) that ``kind`` applies to: the first in
    the default run, the second under ``-m slow``."""
    sources = fz.sources_for(kind)
    ran = 0
    for seed in range(12):
        source = sources[(seed * 7) % len(sources)]
        data = fz.mutate(kind, source, seed)
        if data is None:
            continue
        if ran == which:
            suffix = fz.suffix_of(source)
            _assert_contract((kind, source, seed), fz.run_case(data, suffix), suffix)
            return
        ran += 1
    pytest.fail(f"{kind} applied to {ran} of the sources tried, not {which + 1}")


@st.composite
def cases(draw):
    kind = draw(st.sampled_from(fz.KINDS))
    source = draw(st.sampled_from(fz.sources_for(kind)))
    return kind, source, draw(st.integers(0, 2**31))


def _mutated(case) -> None:
    data = fz.mutate(*case)
    assume(data is not None)
    suffix = fz.suffix_of(case[1])
    _assert_contract(case, fz.run_case(data, suffix), suffix)


@settings(FUZZ, max_examples=max(3, EXAMPLES // 4))
@given(cases())
def test_mutated_models(case):
    _mutated(case)


@pytest.mark.slow
@FUZZ
@given(cases())
def test_mutated_models_many(case):
    _mutated(case)


@settings(FUZZ, max_examples=max(3, EXAMPLES // 10))
@given(cases())
def test_mutated_models_as_a_fresh_process(case):
    """The same through ``python -m legalizer.cli`` itself, under the memory limit."""
    data = fz.mutate(*case)
    assume(data is not None)
    suffix = fz.suffix_of(case[1])
    _assert_contract(case, fz.run_case(data, suffix, subprocess_cli=True), suffix)


# -- regressions: each crash a campaign found --------------------------------------------

F = TensorProto.FLOAT


def _onnx(nodes, inputs, outputs, inits=()) -> bytes:
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def _add_with(init: onnx.TensorProto, x_shape=(2, 3)) -> bytes:
    return _onnx([helper.make_node("Add", ["x", init.name], ["y"], name="add")],
                 [helper.make_tensor_value_info("x", F, list(x_shape))],
                 [helper.make_tensor_value_info("y", F, None)], [init])


def _run(data: bytes, suffix: str, *extra) -> fz.Outcome:
    o = fz.run_case(data, suffix, extra)
    _assert_contract("regression", o, suffix)
    return o


def _error(o: fz.Outcome) -> str:
    assert o.code == 2
    (line,) = o.stderr.splitlines()
    return line


def _dims_over_data(dims) -> onnx.TensorProto:
    t = numpy_helper.from_array(np.arange(3, dtype=np.float32), "b")
    del t.dims[:]
    t.dims.extend(dims)
    return t


@pytest.mark.parametrize("dims, expect", [
    # was: ValueError "cannot reshape array of size 3 into shape (2,3,3)" while folding
    ([2, 3, 3], "initializer 'b': its data is 12 bytes, but its dims [2, 3, 3] need 72"),
    # was: an attempt to read 2**40 floats out of 12 bytes
    ([2**40], f"initializer 'b': its data is 12 bytes, but its dims [{2**40}] need {4 * 2**40}"),
    ([-3], "initializer 'b' has a negative dim in its dims [-3]"),
])
def test_onnx_initializer_whose_data_does_not_fit_its_dims(dims, expect):
    assert expect in _error(_run(_add_with(_dims_over_data(dims)), ".onnx"))


@pytest.mark.parametrize("declared", [-4, None], ids=["-4", "?"])
def test_onnx_initializer_declared_with_a_dynamic_dim(declared):
    """was: TypeError ("'NoneType' object cannot be interpreted as an integer") folding
    initializer b[3] whose value_info declared [-4] (once negative dims became dynamic
    ones) or [?]: a constant's dims are its shape, whatever is declared."""
    m = onnx.load_from_string(_add_with(numpy_helper.from_array(np.arange(3, dtype=np.float32), "b")))
    m.graph.value_info.append(helper.make_tensor_value_info("b", F, [declared]))
    o = _run(m.SerializeToString(), ".onnx")
    assert o.code == 0 and o.stdout.endswith("outputs match on CPUExecutionProvider\n"), o.stdout


def test_onnx_initializer_with_typed_data_that_does_not_fit_its_dims():
    t = helper.make_tensor("b", F, [3], [1.0, 2.0, 3.0])
    t.dims[:] = [2, 3]
    assert "initializer 'b': it holds 3 values, but its dims [2, 3] need 6" in _error(_run(_add_with(t), ".onnx"))


def test_tflite_constant_with_a_negative_dim():
    """was: TypeError ("'NoneType' object cannot be interpreted as an integer") folding a
    constant whose shape held -1 (read as a dynamic dim)."""
    c = tensor("c", "float32", [3], data=np.array([1, 2, 3], np.float32))
    c["shape"] = [-1]
    data = build_tflite([tensor("x", "float32", [1, 2, 3]), c, tensor("y", "float32", [1, 2, 3])],
                        [op("ADD", [0, 1], [2], "AddOptions", fused_activation_function=0)], inputs=[0], outputs=[2])
    assert "constant tensor 'c' has a dynamic or negative dim in its shape (?)" in _error(_run(data, ".tflite"))


def test_tflite_constant_of_an_unknown_element_type():
    """was: ValueError ("cannot reshape array of size 12 into shape (1,1,3)") folding
    the raw bytes kept for a type code the importer does not know; a code TFLite does
    not define is now rejected at import."""
    c = tensor("c", 100, [3], data=np.array([1, 2, 3], np.float32))
    data = build_tflite([tensor("x", "float32", [1, 2, 3]), c, tensor("y", "float32", [1, 2, 3])],
                        [op("ADD", [0, 1], [2], "AddOptions", fused_activation_function=0)], inputs=[0], outputs=[2])
    assert "subgraph 0: tensor 1 'c' has type code 100, which TFLite does not define" in _error(_run(data, ".tflite"))


@pytest.mark.parametrize("x_shape, why", [
    # was: numpy's "array is too big" or MemoryError making the check's input
    ([2**40, 3], "would take 1.23e+04 GiB, more than the check makes (1 GiB)"),
    ([2**31, 2**31, 3], "GiB, more than the check makes"),
    # was: numpy's "maximum supported dimension for an ndarray is currently 64, found 100",
    # folding b to rank 100, then making x
    ([1] * 99 + [3], "has rank 100, more than the check makes (32)"),
])
def test_onnx_input_too_big_to_check_is_legalized_unchecked(tmp_path, x_shape, why):
    from legalizer.pipeline import RunOptions, run

    b = numpy_helper.from_array(np.arange(3, dtype=np.float32), "b")
    src = tmp_path / "m.onnx"
    src.write_bytes(_add_with(b, x_shape))
    res = run(src, RunOptions(output=tmp_path / "out.onnx"))
    assert res.exit_code == 0 and (tmp_path / "out.onnx").exists()
    assert res.report.check["ran"] is False and why in res.report.check["error"]
    o = _run(src.read_bytes(), ".onnx")  # and under the memory limit, as a whole run
    assert o.code == 0


def test_tflite_input_of_rank_100_is_legalized_unchecked(tmp_path):
    """was: numpy's "maximum supported dimension" folding the constant to rank 100."""
    from legalizer.pipeline import RunOptions, run

    data = build_tflite([tensor("x", "float32", [1] * 99 + [3]),
                         tensor("c", "float32", [3], data=np.array([1, 2, 3], np.float32)),
                         tensor("y", "float32", [1] * 99 + [3])],
                        [op("ADD", [0, 1], [2], "AddOptions", fused_activation_function=0)], inputs=[0], outputs=[2])
    src = tmp_path / "m.tflite"
    src.write_bytes(data)
    res = run(src, RunOptions(output=tmp_path / "out.tflite"))
    assert res.exit_code == 0
    # LiteRT refuses it ("too many dimensions"); were it run, the check would not make the input
    assert res.report.check["ran"] is False and res.report.check["error"]


def test_tflite_input_that_also_has_constant_data():
    """was: a segfault (exit -11, a temporary file left) in LiteRT's set_tensor, writing
    the check's input into the read-only buffer of a graph input that is a constant."""
    c = tensor("y", "float32", [3], data=np.array([1, 2, 3], np.float32))
    data = build_tflite([tensor("x", "float32", [1, 2, 3]), c, tensor("z", "float32", [1, 2, 3])],
                        [op("ADD", [0, 1], [2], "AddOptions", fused_activation_function=0)], inputs=[0, 1],
                        outputs=[2])
    assert "subgraph 0: input tensor 'y' also has constant data (buffer 1)" in _error(_run(data, ".tflite"))


def test_tflite_operator_reading_a_tensor_a_later_operator_writes():
    """was: LiteRT aborting (SIGABRT, a temporary file left) invoking an original whose
    operator 0 reads what operator 1 writes: TFLite runs operators in the order listed."""
    f = "float32"
    data = build_tflite([tensor("x", f, [2, 3]), tensor("y", f, [3]), tensor("a", f, [2, 3]),
                         tensor("b", f, [2, 3])],
                        [op("ADD", [0, 3], [2], "AddOptions", fused_activation_function=0),
                         op("ADD", [0, 1], [3], "AddOptions", fused_activation_function=0)],
                        inputs=[0, 1], outputs=[2])
    assert ("subgraph 0: operator 0 (tflite.ADD) reads tensor 'b' before operator 1 writes it"
            in _error(_run(data, ".tflite")))


def test_onnx_value_of_an_element_type_onnx_does_not_define():
    """was: ValueError "Enum DataType has no value defined for name 'DTYPE1048576'"
    writing the legalized model."""
    b = numpy_helper.from_array(np.arange(3, dtype=np.float32), "b")
    m = onnx.load_from_string(_add_with(b))
    m.graph.input[0].type.tensor_type.elem_type = 2**20
    line = _error(_run(m.SerializeToString(), ".onnx"))
    assert f"graph input 'x' has element type {2**20}, which ONNX does not define" in line
