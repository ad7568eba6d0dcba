"""``legalize --target tosa`` over the whole ONNX conformance corpus (issue 4, item 5).

Runs ``scripts/conformance.py`` once (a subprocess, all cores) over every node test and
every model of the onnx wheel's light, pytorch-converted, pytorch-operator and simple
folders, and checks its per-case results: no failure attributable to legalize, and
enough cases legalized and compared equal with their reference outputs that the run
cannot pass vacuously (the bounds sit just under what onnx 1.23 / onnxruntime 1.31
give: 2033 cases legalized, 1623 equal, 295 rewritten of which 275 equal).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "conformance.py"

# Failures of legalize known today, with why; test_known_gaps_are_still_open says when
# one is fixed, so that it leaves this list.
# - The *_expanded RMSNormalization bodies reduce over axes computed at run time
#   (Range(axis, Size(Shape(X)))), so onnx.shape_inference leaves the rank of
#   everything after the ReduceMean unknown; the last Mul(<unranked>, W) keeps an
#   unranked operand and a rank-1 W for a rank-2..4 result: not rank-equal under tosa.
# - FlexAttention's score_mod subgraph is not shape-inferred (an ai.onnx.preview op):
#   Div(scores[B,H,L,S], cap[]) gets an unranked result, and the following
#   Mul(tanh_out <unranked>, cap[]) -> BxHxLxS is left as it is.

# Lower bounds of the cases whose legalized outputs equal the reference, per suite.
MIN_EQUAL = {"node": 1480, "light": 9, "pytorch-converted": 70, "pytorch-operator": 35, "simple": 17}

# Opset-6 models with legacy (broadcast=1 / axis) broadcasting or PRelu-6's channel slope,
# which onnxruntime does not run at opset 6: legalize must raise them to opset 7.
LEGACY = {
    "pytorch-operator/test_operator_add_broadcast": 1,
    "pytorch-operator/test_operator_add_size1_": 3,
    "pytorch-operator/test_operator_addconstant": 1,
    "pytorch-operator/test_operator_addmm": 1,
    "pytorch-converted/test_PReLU_": 6,
    "pytorch-converted/test_Softsign": 1,
}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("conformance") / "results.json"
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, str(SCRIPT), "--json", str(out), "-j", str(os.cpu_count() or 1)],
                          capture_output=True, text=True, cwd=ROOT, timeout=1200)
    seconds = time.perf_counter() - t0
    assert out.exists(), f"conformance.py wrote no results (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
    data = json.loads(out.read_text())
    print(f"\n{proc.stdout}\nconformance.py took {seconds:.1f} s")
    data["returncode"] = proc.returncode
    data["cases_by_name"] = {c["name"]: c for c in data["cases"]}
    return data


def failures(run):
    return {c["name"]: f"{c['reason']}: {c['detail']}" for c in run["cases"] if c["attributable"]}


@pytest.mark.slow
def test_no_failure_attributable_to_legalize(run):
    bad = failures(run)
    assert not bad, f"{len(bad)} failures of legalize:\n" + "\n".join(f"{k}: {v}" for k, v in sorted(bad.items()))
    assert run["returncode"] == 0


@pytest.mark.slow
def test_enough_cases_legalized_and_equal(run):
    total = run["summary"]["total"]
    assert total["cases"] >= 2000
    assert total["legalized"] >= 2000
    assert total["legal_tosa"] == total["cases"]
    assert total["outputs_equal"] >= 1600
    assert total["rewritten"] >= 300 and total["rewritten_and_equal"] >= 280
    for suite, low in MIN_EQUAL.items():
        assert run["summary"][suite]["outputs_equal"] >= low, (suite, run["summary"][suite])
    # Every light model (large real networks) is legalized, rewritten, and equal.
    light = [c for c in run["cases"] if c["suite"] == "light"]
    assert len(light) == 9 and all(c["outputs_equal"] and c["legal_tosa"] for c in light)


@pytest.mark.slow
@pytest.mark.parametrize("prefix,count", sorted(LEGACY.items()))
def test_legacy_broadcast_models_raised_to_opset7_and_equal(run, prefix, count):
    cases = [c for name, c in run["cases_by_name"].items() if name.startswith(prefix)]
    assert len(cases) == count, [c["name"] for c in cases]
    for c in cases:
        assert c["legalized"] and c["legal_tosa"] and c["checker_ok"], c
        assert (c["opset_in"], c["opset_out"]) == (6, 7), c
        assert c["original_runs"] is False  # onnxruntime has no opset-6 kernel for it ...
        assert c["legalized_runs"] and c["outputs_equal"] is True, c  # ... the legalized model runs
        assert c["reference"] == "test_data_set outputs"
