"""The verifier (profile ``mlir``) over the ONNX conformance corpus and crafted invalid
models.

A model onnxruntime runs is legal by definition, so every violation the verifier
reports on one is a verifier bug. The node tests are also all checked (their outputs
come from ONNX's reference implementation); the count of those onnxruntime ran is
asserted, so the suite cannot pass vacuously.
"""

from __future__ import annotations

import collections
import functools
from pathlib import Path
from typing import Dict, List, Tuple

import onnx
import pytest

import legalizer
from legalizer.kinds.onnx.importer import import_model

import onnx_suite as suite
from helpers import op_model, verify_proto
from slow import sample

# Wheel models the verifier rejects, with why. PRelu-1/6 documents only a slope of
# size 1 ("shared across channels"); PyTorch 0.3 exported a per-channel slope [C] for
# X [N, C, ...], which Caffe2 (and the onnx reference runtime, by guessing the axis)
# apply along the channel axis. rules/onnx.toml reads PRelu < 7 as unidirectional
# numpy broadcasting, which puts [3] on the last axis: the rule table, not the
# verifier, would have to learn the channel form. onnxruntime has no PRelu < 7.
def violations(case: suite.Case) -> List[str]:
    model = import_model(case.model, Path(case.path).parent if case.path else None)
    return [str(d) for d in legalizer.verify(model.graph, "mlir").violations]


@functools.lru_cache(maxsize=None)
def node_group(letter: str) -> Tuple[Tuple[str, ...], Dict[str, bool]]:
    """(failures, {case: whether onnxruntime ran it}) of one group of node tests."""
    failures, ran = [], {}
    for case in suite.node_groups()[letter]:
        ran[case.name] = suite.original_run(case.name).outputs is not None
        try:
            found = violations(case)
        except Exception as e:  # noqa: BLE001 - a crash is a failure of this case too
            found = [f"{type(e).__name__}: {e}"]
        if found:
            where = "ran on onnxruntime" if ran[case.name] else "onnxruntime cannot run it"
            failures.append(f"{case.name} ({where}): " + "; ".join(found[:3]))
    return tuple(failures), ran


WHEEL = [c.name for c in suite.wheel_cases()]

# The default run's sample of the corpus (tests/slow.py): a real network, PRelu's
# per-channel slope, a legacy opset-6 broadcast, Expand; and the node tests of Mul, Max,
# Min, Mod, MatMul..., Where.
WHEEL_SAMPLE = ["light/light_squeezenet", "pytorch-converted/test_PReLU_2d_multiparam",
                "pytorch-operator/test_operator_add_broadcast", "simple/test_expand_shape_model1"]
NODE_SAMPLE = ["m", "w"]


@pytest.mark.parametrize("name", sample(WHEEL, WHEEL_SAMPLE))
def test_wheel_model_is_legal(name):
    assert violations(suite.case_by_name(name)) == []


@pytest.mark.parametrize("letter", sample(suite.node_groups(), NODE_SAMPLE))
def test_node_tests_are_legal(letter):
    failures, _ = node_group(letter)
    assert not failures, f"{len(failures)} with violations:\n" + "\n".join(failures)


@pytest.mark.slow
def test_enough_node_tests_ran_on_onnxruntime():
    ran = collections.Counter()
    for letter in suite.node_groups():
        ran.update(node_group(letter)[1].values())
    print(f"\nverified {sum(ran.values())} node tests, {ran[True]} of which onnxruntime runs")
    assert ran[True] > 1400


# ---- crafted invalid models ------------------------------------------------------------
def codes(model: onnx.ModelProto, profile: str = "mlir") -> List[Tuple[str, str]]:
    return [(d.code, d.node) for d in verify_proto(model, profile).violations]


def test_incompatible_add():
    m = op_model("Add", ["3x4xf32", "2xf32"], "3x4xf32")
    with pytest.raises(Exception, match="(?i)incompatible|broadcast"):
        onnx.shape_inference.infer_shapes(m, check_type=True, strict_mode=True)
    (d,) = verify_proto(m).violations
    assert (d.code, d.node, d.op, d.dim) == ("incompatible-operands", "n0", "Add", 1)
    assert d.message == ("operands don't have broadcast-compatible shapes: "
                         "operand #0 '3x4' has 4 at dim 1 but operand #1 '2' has 2 at dim 0")


def test_where_three_incompatible_operands():
    m = op_model("Where", ["2x3xi1", "4x3xf32", "5x3xf32"], "?x3xf32")
    (d,) = verify_proto(m).violations
    assert (d.code, d.node, d.op) == ("incompatible-operands", "n0", "Where")
    assert "operand #0 '2x3' has 2 at dim 0 but operand #1 '4x3' has 4 at dim 0" in d.message
    # Any two of the three clash, including the two values.
    assert codes(op_model("Where", ["1x3xi1", "4x3xf32", "5x3xf32"], "?x3xf32")) == \
        [("incompatible-operands", "n0")]
    assert codes(op_model("Where", ["1x1xi1", "4x1xf32", "1x3xf32"], "4x3xf32")) == []


def test_prelu_slope_of_higher_rank():
    m = op_model("PRelu", ["3xf32", "2x3xf32"], "3xf32", opset=16)
    (d,) = verify_proto(m).violations
    assert (d.code, d.node, d.op) == ("not-unidirectional", "n0", "PRelu")
    assert d.message == ("operand #1 is not unidirectionally broadcastable to operand #0: "
                         "'2x3' has a higher rank than '3'")
    assert codes(op_model("PRelu", ["2x3x4xf32", "3x1xf32"], "2x3x4xf32", opset=16)) == []


def legacy_add(a: str, b: str, result: str, **attrs) -> onnx.ModelProto:
    m = op_model("Add", [a, b], result, opset=6, attrs=attrs)
    m.ir_version = 3
    return m


def test_legacy_add_axis():
    # Opset < 7: operand 1 is placed into operand 0 at `axis` (an InDim broadcast).
    assert codes(legacy_add("2x3x4xf32", "3xf32", "2x3x4xf32", broadcast=1, axis=1)) == []
    assert codes(legacy_add("2x3x4xf32", "3x4xf32", "2x3x4xf32", broadcast=1)) == []  # axis: trailing
    (d,) = verify_proto(legacy_add("2x3x4xf32", "4xf32", "2x3x4xf32", broadcast=1, axis=1)).violations
    assert (d.code, d.node, d.op, d.dim) == ("not-unidirectional", "n0", "Add", 1)
    assert d.message.endswith("dim 1 is 4 in '4' but 3 in '2x3x4'")
    # The same [4] without an axis is trailing, and legal (numpy-style at opset 7).
    assert codes(legacy_add("2x3x4xf32", "4xf32", "2x3x4xf32", broadcast=1)) == []
    assert codes(legacy_add("2x3x4xf32", "4xf32", "2x3x4xf32", broadcast=1, axis=3)) == [("legacy-axis", "n0")]


def test_legacy_add_without_broadcast():
    assert codes(legacy_add("2x3xf32", "3xf32", "2x3xf32", broadcast=0)) == [("shape-mismatch", "n0")]
    assert codes(legacy_add("2x3xf32", "3xf32", "2x3xf32")) == [("shape-mismatch", "n0")]  # default 0
    assert codes(legacy_add("2x3xf32", "2x3xf32", "2x3xf32")) == []


def test_legacy_sum_of_unequal_shapes():
    assert codes(op_model("Sum", ["2x3xf32", "2x3xf32", "2x1xf32"], "2x3xf32", opset=6)) == \
        [("shape-mismatch", "n0")]
    assert codes(op_model("Sum", ["2x3xf32", "3xf32"], "2x3xf32", opset=6)) == [("shape-mismatch", "n0")]
    assert codes(op_model("Sum", ["2x3xf32", "2x3xf32", "2x3xf32"], "2x3xf32", opset=6)) == []
    # Sum-8 broadcasts.
    assert codes(op_model("Sum", ["2x3xf32", "2x1xf32", "3xf32"], "2x3xf32", opset=8)) == []


def test_unranked_operand_is_left_out_of_the_inference():
    """The spec's Verify discards unranked operands, then the result must have the
    ranked operands' broadcast rank and dims (issue 16, item 4). This used to pin the
    opposite: an unranked operand widened the inferred shape (ONNX runs Mul(*, 3x4x5)
    -> 2x3x4x5), found on test_rms_normalization_*_expanded, whose unranked operand now
    gets its rank at import (shapes/ranks.py). MLIR's C++ still accepts the extra
    leading dims (docs/profiles-and-targets.md)."""
    (d,) = verify_proto(op_model("Mul", ["*xf32", "3x4x5xf32"], "2x3x4x5xf32")).violations
    assert (d.code, d.node, d.op) == ("result-rank-mismatch", "n0", "Mul")
    assert str(d) == ("error: node 'n0': 'Mul' op result type '2x3x4x5' not broadcast compatible with"
                      " broadcasted operands's shapes '3x4x5': rank 4 vs 3")
    assert codes(op_model("Mul", ["*xf32", "1x5xf32"], "7x5xf32")) == [("result-incompatible", "n0")]
    assert codes(op_model("Mul", ["*xf32", "3x5xf32"], "?x5xf32")) == []
    assert codes(op_model("Mul", ["*xf32", "3x5xf32"], "2x4x5xf32")) == [("result-rank-mismatch", "n0")]
    assert codes(op_model("Mul", ["*xf32", "2x3x5xf32"], "3x5xf32")) == [("result-rank-mismatch", "n0")]
    assert codes(op_model("Mul", ["*xf32", "3x5xf32"], "2x3x5xf32"), "strict") == \
        [("result-rank-mismatch", "n0")]


def test_prelu6_slope_runs_along_channels():
    # PRelu-1/6 (Caffe2): a rank-1 slope of size C lies along axis 1, not the last axis.
    from helpers import op_model, verify_proto
    ok = verify_proto(op_model("PRelu", ["2x3x5xf32", "3xf32"], "2x3x5xf32", opset=6))
    assert ok.violations == []
    bad = verify_proto(op_model("PRelu", ["2x3x5xf32", "5xf32"], "2x3x5xf32", opset=6))
    assert [(d.code, d.dim) for d in bad.violations] == [("not-unidirectional", 1)]
    numpy_style = verify_proto(op_model("PRelu", ["2x3x5xf32", "3xf32"], "2x3x5xf32", opset=7))
    assert [d.code for d in numpy_style.violations] == ["not-unidirectional"]
