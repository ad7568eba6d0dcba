"""Import then export, with no pass in between, over every model of the onnx wheel's
backend test data and every ONNX node test:

(a) the exported model serializes byte-identical to the original;
(b) ``onnx.checker.check_model(full_check=True)`` passes on it whenever it passes on the
    original;
(c) onnxruntime (CPU) gives identical outputs, NaN-aware, for both, whenever it can
    create a session for the original and run it on the case's own input data (wheel
    models without data get inputs synthesized from their declared types, fixed seed).

Cases onnxruntime cannot run are counted with their reason, never skipped; the totals
test asserts enough ran that the suite cannot pass vacuously.
"""

from __future__ import annotations

import collections
import functools
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np
import onnx
import pytest

from legalizer.kinds.onnx.exporter import export_model
from legalizer.kinds.onnx.importer import import_model

import onnx_suite as suite
from onnx_suite import Case
from slow import sample

NONDETERMINISTIC = "nondeterministic outputs (compared by dtype and shape)"


def roundtrip(case: Case) -> Optional[str]:
    """Check one case; None when onnxruntime ran it and the outputs matched, else the
    reason onnxruntime could not run the original. Failures raise AssertionError."""
    original = case.model
    data = original.SerializeToString()
    base = Path(case.path).parent if case.path else None
    model = import_model(original, base)
    exported = export_model(model.graph, model.proto)
    out = exported.SerializeToString()
    assert out == data, f"export differs from the original ({len(out)} vs {len(data)} bytes)"

    try:
        onnx.checker.check_model(original, full_check=True)
        checked = True
    except Exception:  # noqa: BLE001 - then nothing is required of the export
        checked = False
    if checked:
        onnx.checker.check_model(exported, full_check=True)

    want = suite.original_run(case.name)
    if want.outputs is None:
        return f"{want.stage}: {want.reason}"
    got = suite.ort_run(out, case.feeds())
    assert got.outputs is not None, f"onnxruntime fails on the export ({got.stage}): {got.reason}"
    try:
        for i, (g, w) in enumerate(zip(got.outputs, want.outputs)):
            suite.assert_outputs_equal(g, w, f"data set {i}")
    except AssertionError:
        # Random ops without a seed (RandomNormal, Bernoulli, ...) differ run to run:
        # only if the original disagrees with itself is that the reason.
        again = suite.ort_run(data, case.feeds())
        if again.outputs is None or _same(again.outputs, want.outputs):
            raise
        _assert_same_structure(got.outputs, want.outputs)
        return NONDETERMINISTIC
    return None


def _same(a, b) -> bool:
    try:
        for x, y in zip(a, b):
            suite.assert_outputs_equal(x, y, "")
    except AssertionError:
        return False
    return True


def _assert_same_structure(got, want) -> None:
    for g, w in zip(got, want):
        assert [(np.asarray(x).dtype, np.shape(x)) for x in g] == [(np.asarray(x).dtype, np.shape(x)) for x in w]


@functools.lru_cache(maxsize=None)
def group_result(kind: str, key: str) -> Tuple[Tuple[str, ...], Dict[str, Optional[str]]]:
    """(failures, {case: None if it ran on onnxruntime else why not}) of one group,
    once per session (the totals test reuses it)."""
    cases = WHEEL[key] if kind == "wheel" else NODE[key]
    failures: List[str] = []
    status: Dict[str, Optional[str]] = {}
    for case in cases:
        try:
            status[case.name] = roundtrip(case)
        except Exception as e:  # noqa: BLE001 - report every failing case of the group
            failures.append(f"{case.name}: {type(e).__name__}: {str(e).strip()[:600]}")
    return tuple(failures), status


WHEEL = {c.name: [c] for c in suite.wheel_cases()}
NODE = suite.node_groups()

# The default run's sample of the corpus (tests/slow.py): a real network, PRelu's
# per-channel slope, a legacy opset-6 broadcast, Expand; and the node tests of Mul, Max,
# Min, Mod, MatMul..., Where.
WHEEL_SAMPLE = ["light/light_squeezenet", "pytorch-converted/test_PReLU_2d_multiparam",
                "pytorch-operator/test_operator_add_broadcast", "simple/test_expand_shape_model1"]
NODE_SAMPLE = ["m", "w"]


def _check_group(kind: str, key: str) -> None:
    failures, _ = group_result(kind, key)
    assert not failures, f"{len(failures)} failing:\n" + "\n".join(failures)


@pytest.mark.parametrize("name", sample(WHEEL, WHEEL_SAMPLE))
def test_wheel_model(name):
    _check_group("wheel", name)


@pytest.mark.parametrize("letter", sample(NODE, NODE_SAMPLE))
def test_node_tests(letter):
    """Node tests whose op starts with ``letter`` (a group, so each failure names its test)."""
    _check_group("node", letter)


def _totals(kind: str, groups) -> Tuple[int, collections.Counter]:
    ran, why = 0, collections.Counter()
    for key in groups:
        failures, status = group_result(kind, key)
        assert not failures, f"{kind} group {key!r} fails (see its own test)"
        for reason in status.values():
            if reason is None:
                ran += 1
            else:
                why[reason] += 1
    return ran, why


# Reasons that would mean this harness fed onnxruntime wrongly, not that it lacks
# something: none may occur.
HARNESS_ERRORS = ("Unable to handle object of type", "can't be converted to MLDataType",
                  "Unexpected input data type", "input name cannot be empty", "Required inputs")


@pytest.mark.slow
@pytest.mark.parametrize("kind,minimum", [("node", 1400), ("wheel", 100)])
def test_enough_cases_ran_on_onnxruntime(kind, minimum):
    groups = NODE if kind == "node" else WHEEL
    total = sum(len(v) for v in groups.values())
    ran, why = _totals(kind, groups)
    summary = "\n".join(f"{n:5d}  {r}" for r, n in why.most_common())
    print(f"\n{kind}: {total} cases, {ran} ran on onnxruntime, {total - ran} not:\n{summary}")
    assert ran + sum(why.values()) == total
    assert ran > minimum, f"only {ran} of {total} {kind} cases ran on onnxruntime:\n{summary}"
    bad = [r for r in why if any(h in r for h in HARNESS_ERRORS)]
    assert not bad, f"inputs fed wrongly: {bad}"
