"""Every example of the LLVM RFC "TOSA-to-Linalg lowering of element-wise ops"
(discourse.llvm.org) as an ONNX model: the
"Combination" cases of its first section and the cases of its lowering strategy.

Each legal case is legalized to both targets, in the default mode and in strict
symbolic mode (``assume_dynamic_not_one``); the result must be legal under the target's
profile, pass onnx.checker's full check, and compute on onnxruntime exactly what numpy
computes, for every binding of its dynamic dims in {1, k, k'} that numpy accepts
(strict mode: only bindings with every dynamic dim > 1 are inputs). Every binding numpy
rejects must make onnxruntime raise on the legalized model, as it does on the original:
a legalized model never computes something for an input the original refuses.

The RFC's "incorrect" lowerings (<2x?>+<?x?>, <2x2>+<?x?>, <?x2>+<2x?>) are the bug class
these tests guard against: a dynamic dim that is 1 at run time must still broadcast.
"""

import itertools
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest

import legalizer
from helpers import op_model, save
from runtime_forms import check_legal_at_run_time, probe, session
from legalizer.kinds.onnx.importer import import_model
from legalizer.pipeline import EXIT_VIOLATIONS, RunOptions, run

CPU = ["CPUExecutionProvider"]


NUMPY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Abs": np.abs, "Where": np.where}
BROADCASTING = {"Add", "Sub", "Mul", "Where"}

# name: (op, operand types, result type), types MLIR-style as in the RFC.
COMBINATIONS = {
    "<?x?>+<?x?>": ("Add", ["?x?xf32", "?x?xf32"], "?x?xf32"),
    "<1x?>+<?x?>": ("Add", ["1x?xf32", "?x?xf32"], "?x?xf32"),
    "<1x5>+<3x5>": ("Add", ["1x5xf32", "3x5xf32"], "?x?xf32"),
    "<3x5>+<3x5>": ("Add", ["3x5xf32", "3x5xf32"], "?x?xf32"),
    # the RFC's three incorrect lowerings
    "<2x?>+<?x?>": ("Add", ["2x?xf32", "?x?xf32"], "?x?xf32"),
    "<2x2>+<?x?>": ("Add", ["2x2xf32", "?x?xf32"], "?x?xf32"),
    "<?x2>+<2x?>": ("Add", ["?x2xf32", "2x?xf32"], "?x?xf32"),
}
INCOMPATIBLE = {"<2x3>+<4x3>": ("Add", ["2x3xf32", "4x3xf32"], "?x?xf32")}

LOWERING = {
    # "Lowering strategy", in the RFC's order (its function names)
    "add_1d_matching_static": ("Add", ["3xf32", "3xf32"], "3xf32"),
    "abs_1d_dynamic": ("Abs", ["?xf32"], "?xf32"),
    "abs_1d_cast_result": ("Abs", ["5xf32"], "?xf32"),
    "add_1d_broadcast_static_to_static": ("Add", ["1xf32", "3xf32"], "3xf32"),
    "add_1d_broadcast_dynamic_to_static": ("Add", ["5xf32", "?xf32"], "5xf32"),
    "add_1d_broadcast_static_to_dynamic": ("Add", ["1xf32", "?xf32"], "?xf32"),
    "add_1d_all_dynamic": ("Add", ["?xf32", "?xf32"], "?xf32"),
    "add_2d_all_dynamic": ("Add", ["?x?xf32", "?x?xf32"], "?x?xf32"),
    "add_0d": ("Add", ["f32", "f32"], "f32"),
    "add_2d_different_ranks": ("Add", ["3x4xf32", "2x3x4xf32"], "2x3x4xf32"),
    "select_2d_one_dynamic": ("Where", ["2x?xi1", "2x?xf32", "2x?xf32"], "2x?xf32"),
    # the same strategies with dynamic dims where the RFC's examples are static
    "sub_0d_and_dynamic": ("Sub", ["f32", "?x?xf32"], "?x?xf32"),
    "mul_0d_and_static": ("Mul", ["2x3xf32", "f32"], "2x3xf32"),
    "add_different_ranks_dynamic": ("Add", ["?x4xf32", "2x?x4xf32"], "2x?x4xf32"),
    "mul_different_ranks_all_dynamic": ("Mul", ["?xf32", "?x?x?xf32"], "?x?x?xf32"),
    "select_different_ranks_dynamic": ("Where", ["?xi1", "2x?xf32", "?x1xf32"], "2x?xf32"),
    "select_all_dynamic": ("Where", ["?x?xi1", "?x?xf32", "?x?xf32"], "?x?xf32"),
    # the thread's symbolic shapes: one symbol is one size (no check), two may differ
    "add_same_symbol": ("Add", ["Nx?xf32", "Nx1xf32"], "Nx?xf32"),
    "add_different_symbols": ("Add", ["NxMxf32", "MxNxf32"], "?x?xf32"),
}
LEGAL = {**COMBINATIONS, **LOWERING}

# Runtime broadcast checks the xla target emits for each case in the default mode: one
# per extra operand that may be 1 at a result dim between dynamic operand dims. In strict
# symbolic mode exactly these are elided. The tosa target leaves broadcasting to the op.
XLA_CHECKS = {
    "<?x?>+<?x?>": 2, "<1x?>+<?x?>": 1, "<1x5>+<3x5>": 0, "<3x5>+<3x5>": 0,
    "<2x?>+<?x?>": 1, "<2x2>+<?x?>": 0, "<?x2>+<2x?>": 0,
    "add_1d_matching_static": 0, "abs_1d_dynamic": 0, "abs_1d_cast_result": 0,
    "add_1d_broadcast_static_to_static": 0, "add_1d_broadcast_dynamic_to_static": 0,
    "add_1d_broadcast_static_to_dynamic": 0, "add_1d_all_dynamic": 1, "add_2d_all_dynamic": 2,
    "add_0d": 0, "add_2d_different_ranks": 0, "select_2d_one_dynamic": 2,
    "sub_0d_and_dynamic": 0, "mul_0d_and_static": 0, "add_different_ranks_dynamic": 1,
    "mul_different_ranks_all_dynamic": 1, "select_different_ranks_dynamic": 1, "select_all_dynamic": 4,
    "add_same_symbol": 0, "add_different_symbols": 2,
}
# The cases whose every binding broadcasts: static, unary, or a dynamic dim met only by 1s.
NEVER_REJECTED = {"<1x5>+<3x5>", "<3x5>+<3x5>", "add_1d_matching_static", "abs_1d_dynamic", "abs_1d_cast_result",
                  "add_1d_broadcast_static_to_static", "add_1d_broadcast_static_to_dynamic", "add_0d",
                  "sub_0d_and_dynamic", "mul_0d_and_static", "add_2d_different_ranks", "add_same_symbol"}


def build(case) -> onnx.ModelProto:
    op, operands, result = case
    return op_model(op, operands, result)


def dyn_dims(model: onnx.ModelProto):
    """(input, axis, key) of each dynamic input dim; the key is the dim's symbol or
    ``input[axis]`` for an anonymous one (a variable of its own)."""
    out = []
    for v in model.graph.input:
        for k, d in enumerate(v.type.tensor_type.shape.dim):
            if not d.HasField("dim_value"):
                out.append((v.name, k, d.dim_param or f"{v.name}[{k}]"))
    return out


def sizes_for(model: onnx.ModelProto):
    """{1, k, k'}: 1, the case's static sizes other than 1 (so a dynamic dim meets its
    static partner's size) and 2 and 3 (so equal and unequal sizes > 1 both occur)."""
    static = {d.dim_value for v in model.graph.input for d in v.type.tensor_type.shape.dim
              if d.HasField("dim_value") and d.dim_value != 1}
    return sorted(static | {1, 2, 3})


def bindings(model: onnx.ModelProto, strict: bool):
    keys = sorted({key for _, _, key in dyn_dims(model)})
    sizes = [s for s in sizes_for(model) if not (strict and s == 1)]
    for combo in itertools.product(sizes, repeat=len(keys)):
        yield dict(zip(keys, combo))


def feeds_for(model: onnx.ModelProto, binding, rng):
    feeds = {}
    for v in model.graph.input:
        tt = v.type.tensor_type
        shape = tuple(d.dim_value if d.HasField("dim_value") else binding[d.dim_param or f"{v.name}[{k}]"]
                      for k, d in enumerate(tt.shape.dim))
        if tt.elem_type == onnx.TensorProto.BOOL:
            feeds[v.name] = np.asarray(rng.random(shape) < 0.5)
        else:
            feeds[v.name] = np.asarray(rng.standard_normal(shape), np.float32)
    return feeds


def numpy_accepts(feeds) -> bool:
    try:
        np.broadcast_shapes(*(a.shape for a in feeds.values()))
        return True
    except ValueError:
        return False


def raises(sess, feeds) -> bool:
    try:
        sess.run(None, feeds)
    except Exception as e:  # noqa: BLE001 - onnxruntime's error classes are not public
        assert "onnxruntime" in type(e).__module__, repr(e)
        return True
    return False


def legalize_case(model: onnx.ModelProto, target: str, strict: bool):
    """legalize() into ``target``: legal under the target's profile, onnx.checker clean,
    graph inputs and outputs unchanged. Returns the written model and the stats."""
    m = import_model(model)
    assert legalizer.verify(m.graph, "mlir", assume_dynamic_not_one=strict).violations == []
    done = legalizer.legalize(m, target, assume_dynamic_not_one=strict).legalized
    bad = legalizer.verify(m.graph, target).violations
    assert bad == [], [str(d) for d in bad]
    out = legalizer.to_onnx(m)
    onnx.checker.check_model(out, full_check=True)
    assert list(out.graph.input) == list(model.graph.input)
    assert list(out.graph.output) == list(model.graph.output)
    return out, done.stats


def run_all_bindings(case, model, out, target, strict):
    """Run ``out`` for every binding; returns (compared, rejected) counts."""
    op = case[0]
    out, nodes = probe(out, BROADCASTING)
    assert nodes or op == "Abs"
    ref, new = session(model, CPU), session(out, CPU)
    names = [o.name for o in new.get_outputs()]
    rng = np.random.default_rng(0)
    compared = rejected = 0
    for binding in bindings(model, strict):
        feeds = feeds_for(model, binding, rng)
        if not numpy_accepts(feeds):
            # The original refuses it; the legalized model must too, never compute.
            assert raises(ref, feeds), f"the original computes for a binding numpy rejects: {binding}"
            assert raises(new, feeds), f"the legalized model computes for a binding numpy rejects: {binding}"
            rejected += 1
            continue
        expected = NUMPY[op](*feeds.values())
        results = new.run(None, feeds)
        check_legal_at_run_time(target, nodes, names, results, binding)
        got = results[0]
        assert got.shape == expected.shape, (binding, got.shape, expected.shape)
        assert got.dtype == expected.dtype, binding
        np.testing.assert_array_equal(got, expected, err_msg=str(binding))
        compared += 1
    return compared, rejected


@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict"])
@pytest.mark.parametrize("target", ["tosa", "xla"])
@pytest.mark.parametrize("name", list(LEGAL))
def test_rfc_case(name, target, strict):
    case = LEGAL[name]
    model = build(case)
    out, stats = legalize_case(model, target, strict)
    compared, rejected = run_all_bindings(case, model, out, target, strict)
    assert compared > 0
    # Every case whose dynamic dims meet other operands' dims has bindings numpy rejects.
    assert (rejected == 0) == (name in NEVER_REJECTED), rejected
    emitted, elided = stats["runtime_broadcast_checks"], stats["runtime_broadcast_checks_elided"]
    if target == "tosa":
        assert (emitted, elided) == (0, 0)
    elif strict:
        assert (emitted, elided) == (0, XLA_CHECKS[name])
    else:
        assert (emitted, elided) == (XLA_CHECKS[name], 0)


def test_strict_mode_elides_every_check_the_default_mode_emits():
    """The report's counts, over all RFC cases: xla emits runtime broadcast checks by
    default and elides exactly those in strict symbolic mode."""
    totals = Counter()
    for name, case in LEGAL.items():
        for strict in (False, True):
            m = import_model(build(case))
            stats = legalizer.legalize(m, "xla", assume_dynamic_not_one=strict).legalized.stats
            totals[strict, "emitted"] += stats["runtime_broadcast_checks"]
            totals[strict, "elided"] += stats["runtime_broadcast_checks_elided"]
    assert totals[False, "emitted"] == sum(XLA_CHECKS.values()) > 0
    assert totals[False, "elided"] == 0
    assert totals[True, "emitted"] == 0
    assert totals[True, "elided"] == totals[False, "emitted"]


@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict"])
def test_report_counts_runtime_checks(strict, tmp_path: Path):
    """The same counts in the run's report (``--assume-dynamic-not-one``), with the
    numeric check on: <?x?>+<?x?> needs a runtime check per dim, unless no dim is 1."""
    path = save(build(COMBINATIONS["<?x?>+<?x?>"]), tmp_path / "dyn.onnx")
    res = run(path, RunOptions(target="xla", provider="cpu", assume_dynamic_not_one=strict))
    assert res.exit_code == 0 and res.check.ok, res.report.to_json()
    stats = res.report.to_json()["stats"]
    counts = stats["runtime_broadcast_checks"], stats["runtime_broadcast_checks_elided"]
    assert counts == ((0, 2) if strict else (2, 0))


def test_rfc_incorrect_lowering_with_dynamic_ones():
    """<2x?>+<?x?> with the dynamic dims 1 at run time: the case the RFC's lowering got
    wrong. Both targets broadcast both operands' 1s."""
    model = build(COMBINATIONS["<2x?>+<?x?>"])
    a = np.arange(2, dtype=np.float32).reshape(2, 1)
    b = np.arange(3, dtype=np.float32).reshape(1, 3)
    for target in ("tosa", "xla"):
        out, _ = legalize_case(model, target, False)
        (got,) = session(out, CPU).run(None, {"arg0": a, "arg1": b})
        np.testing.assert_array_equal(got, a + b)


@pytest.mark.parametrize("strict", [False, True], ids=["default", "strict"])
@pytest.mark.parametrize("target", ["tosa", "xla"])
@pytest.mark.parametrize("name", list(INCOMPATIBLE))
def test_rfc_incompatible_is_a_violation(name, target, strict, tmp_path: Path):
    """<2x3>+<4x3>: the operands cannot broadcast. The verifier says so, in MLIR's words,
    the run ends with exit status 1 and nothing is legalized or written."""
    model = build(INCOMPATIBLE[name])
    for profile in ("mlir", "strict", "tosa", "xla"):
        bad = legalizer.verify(import_model(model).graph, profile, assume_dynamic_not_one=strict).violations
        # (xla also names the implicit broadcast of the input, which is not in its legal form)
        assert [d.code for d in bad] == ["incompatible-operands"] + (["implicit-broadcast"] if profile == "xla" else [])
        assert bad[0].message == ("operands don't have broadcast-compatible shapes: "
                                  "operand #0 '2x3' has 2 at dim 0 but operand #1 '4x3' has 4 at dim 0")
    path = save(model, tmp_path / "incompatible.onnx")
    res = run(path, RunOptions(target=target, check=False, assume_dynamic_not_one=strict))
    assert res.exit_code == EXIT_VIOLATIONS
    assert [d["code"] for d in res.report.violations] == ["incompatible-operands"]
    assert res.output_verification is None and res.report.output is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["incompatible.onnx"]
    assert res.model is not None and [n.op for n in res.model.graph.ops()] == ["Add"]
    # onnxruntime refuses the original already when it loads it
    with pytest.raises(Exception, match="Incompatible dimensions"):
        session(model, CPU)
