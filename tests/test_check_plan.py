"""The one check loop (``numeric/plan.py``): every artifact of a plan is loaded once per
run, however many comparisons read it; a refusal to load, a feed the check cannot make
and a reference's rejection each give the result they gave in each driver; and a TFLite
model of N subgraphs is loaded into LiteRT once, not once per subgraph."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest

import legalizer
from legalizer.errors import CheckUnavailable
from legalizer.numeric.compare import Pairing
from legalizer.numeric.plan import Artifact, Comparison, Feed, Plan, run_plan, stored
from legalizer.numeric.results import CheckResult
from legalizer.numeric.runner import Runner

ROOT = Path(__file__).resolve().parent.parent


class Scaled(Runner):
    """A toy model of two parts: part k gives ``x * (k + 1) * factor``; it counts its loads."""

    name = "toy"

    def __init__(self, factor: float, log: List[str]):
        super().__init__()
        self.factor, self.log, self.part = factor, log, 0

    def activate_impl(self):
        self.log.append("load")

    def deactivate_impl(self):
        self.log.append("close")

    def select(self, part: int) -> None:
        self.part = part

    def infer_impl(self, feed):
        if feed["x"].shape[0] == 7:
            raise ValueError("rejects 7 rows")
        return {"y": feed["x"] * (self.part + 1) * self.factor}


def _feeds(rows) -> List[Feed]:
    return [Feed({"n": n}, lambda n=n: {"x": np.ones((n, 2), np.float32)}) for n in rows]


def _plan(ref_log, new_log, factor=1.0, rows=(3, 1), **plan) -> Plan:
    made = Counter()

    def make(which, log, f):
        def build():
            made[which] += 1
            return Scaled(f, log)
        return build

    comparisons = [Comparison(Artifact("the original", make("ref", ref_log, 1.0), key="ref", part=k),
                              Artifact("the legalized model", make("new", new_log, factor), key="new", part=k),
                              _feeds(rows), Pairing(label=lambda i, n, k=k: f"part{k}/{n}"))
                   for k in range(2)]
    p = Plan(comparisons, 1e-5, 1e-6, "toy", **plan)
    p.made = made
    return p


def test_each_artifact_loads_once_and_closes_once_across_comparisons():
    ref_log, new_log = [], []
    plan = _plan(ref_log, new_log)
    result = run_plan(plan)
    assert result.ran and result.ok and result.provider == "toy"
    assert [(b.dims, [(o.name, o.ok) for o in b.outputs]) for b in result.bindings] == [
        ({"n": 3}, [("part0/y", True)]), ({"n": 1}, [("part0/y", True)]),
        ({"n": 3}, [("part1/y", True)]), ({"n": 1}, [("part1/y", True)])]
    assert plan.made == {"ref": 1, "new": 1}
    assert ref_log == new_log == ["load", "close"]


def test_a_candidate_that_differs_fails_per_part_and_binding():
    result = run_plan(_plan([], [], factor=2.0))
    assert not result.ok
    assert [o.name for b in result.bindings for o in b.outputs if not o.ok] == ["part0/y", "part0/y", "part1/y",
                                                                                 "part1/y"]
    assert result.bindings[0].outputs[0].max_abs_err == 1.0  # 2x - x at x = 1, part 0


def test_a_refusal_to_load_is_the_result_and_what_loaded_is_let_go():
    log = []

    def broken():
        raise RuntimeError("not a model\nsecond line")

    made, given = [], []

    def original():
        made.append(Scaled(1.0, log))
        return made[-1]

    def refused(e, reference):  # (given the original's runner, loaded first: what ran it names the result)
        given.append(reference)
        return CheckResult(True, f"{reference.name} {reference.factor}", error=f"the legalized model does not load: {e}")

    plan = Plan([Comparison(Artifact("the original", original), Artifact("the legalized model", broken,
                                                                           refused=refused), _feeds([3]))],
                1e-5, 1e-6, "plan")
    result = run_plan(plan)
    assert (result.ran, result.provider, result.error, result.bindings) == (
        True, "toy 1.0", "the legalized model does not load: not a model\nsecond line", [])
    assert given == made and len(made) == 1
    assert log == ["load", "close"]


def test_a_refusal_that_gives_no_result_propagates():
    def broken():
        raise KeyError("k")

    given = []
    # (the candidate loads: only the reference's refusal, which gives no result, can raise)
    plan = Plan([Comparison(Artifact("the original", broken, refused=lambda e, reference: given.append(reference)),
                            Artifact("x", lambda: Scaled(1.0, [])), _feeds([3]))], 1e-5, 1e-6, "toy")
    with pytest.raises(KeyError):
        run_plan(plan)
    assert given == [None]  # (no reference loaded before it: it is the reference)


def test_a_rejected_binding_is_skipped_and_more_feeds_follow_when_all_are():
    asked: List[List[str]] = []

    def more(ref, errors):
        asked.append(errors)
        return [Feed({"n": 2}, lambda: {"x": np.ones((2, 2), np.float32)}, "search")]

    plan = Plan([Comparison(Artifact("a", lambda: Scaled(1.0, [])), Artifact("b", lambda: Scaled(1.0, [])),
                            _feeds([7]), more=more)], 1e-5, 1e-6, "toy")
    result = run_plan(plan)
    assert asked == [["rejects 7 rows"]]
    assert [(b.dims, b.source, b.skipped) for b in result.bindings] == [
        ({"n": 7}, "synthesized", "original fails: rejects 7 rows"), ({"n": 2}, "search", "")]
    assert result.ok


def test_a_feed_the_check_cannot_make_names_its_sample():
    def unmade():
        raise CheckUnavailable("input 'x' is a sequence")

    plan = Plan([Comparison(Artifact("a", lambda: Scaled(1.0, [])), Artifact("b", lambda: Scaled(1.0, [])),
                            [*_feeds([3]), Feed({}, unmade, "user", sample=1, prefix="sample 1: ")])],
                1e-5, 1e-6, "toy")
    result = run_plan(plan)
    assert (result.ran, result.provider, result.error) == (False, "toy", "sample 1: input 'x' is a sequence")


def test_stored_outputs_are_indexed_by_the_sample_fed():
    outputs = [{"y": np.full((3, 2), 1.0, np.float32)}, {"y": np.full((3, 2), 5.0, np.float32)}]
    feeds = [Feed({}, lambda: {"x": np.ones((3, 2), np.float32)}, "user", sample=k) for k in range(2)]
    # (the candidate's ``select`` picks a part: it is not told the sample, or sample 1 would be 3 off, not 4)
    plan = Plan([Comparison(stored(outputs, ["y"]), Artifact("b", lambda: Scaled(1.0, [])), feeds)],
                1e-5, 1e-6, "toy")
    result = run_plan(plan)
    assert [(b.sample, b.ok) for b in result.bindings] == [(0, True), (1, False)]
    assert result.bindings[1].outputs[0].max_abs_err == 4.0


@pytest.mark.needs("litert")
def test_a_tflite_model_of_two_subgraphs_loads_once_per_runtime(tmp_path, monkeypatch):
    """``two_signatures.tflite``: each subgraph's outputs compared on LiteRT and on its
    ONNX form, with the original and the legalized model each loaded into LiteRT once
    (the old check loaded both once per subgraph: 4 loads)."""
    from legalizer.kinds.tflite.exporter import to_tflite
    from legalizer.numeric import child
    from legalizer.numeric.tflite import check_tflite

    src = tmp_path / "two.tflite"
    src.write_bytes((ROOT / "models/tflite/two_signatures.tflite").read_bytes())
    model = legalizer.load(src)
    out = tmp_path / "two.legal.tflite"
    out.write_bytes(to_tflite(model))
    built: Dict[tuple, int] = Counter()
    real = child.Remote.__init__

    def counting(self, factory, *args, **kwargs):
        built[(factory.__name__, str(args[0]) if factory.__name__ == "LiteRTRunner" else "")] += 1
        real(self, factory, *args, **kwargs)

    monkeypatch.setattr(child.Remote, "__init__", counting)
    res = check_tflite(src, out, model, provider="cpu")
    assert res.ran and res.ok, res.to_json()
    assert [[(o.name, o.ok) for o in b.outputs] for b in res.bindings] == [
        [("scale/scaled (LiteRT)", True), ("scale/scaled (onnxruntime)", True)],
        [("shift/shifted (LiteRT)", True), ("shift/shifted (onnxruntime)", True)]]
    assert dict(built) == {("LiteRTRunner", str(src)): 1, ("LiteRTRunner", str(out)): 1, ("OrtRunner", ""): 2}


@pytest.mark.needs("torch")
def test_a_pt2_check_loads_the_legalized_model_once_for_both_references(monkeypatch):
    """The check of a program from PyTorch compares the legalized model with the ONNX
    export and with PyTorch running the program: two plans in one session, the
    legalized model loaded into onnxruntime once (the old checks loaded it once each)."""
    from legalizer.numeric import child

    model = legalizer.load(ROOT / "models/mlp.pt2")
    legalizer.legalize(model, "tosa")
    built: Dict[str, int] = Counter()
    real = child.Remote.__init__

    def counting(self, factory, *args, **kwargs):
        built[factory.__name__] += 1
        real(self, factory, *args, **kwargs)

    monkeypatch.setattr(child.Remote, "__init__", counting)
    result = legalizer.check(model)
    assert result.ok and result.provider == "CPUExecutionProvider" and result.torch.ok, result.to_json()
    assert [b.dims for b in result.torch.bindings] == [b.dims for b in result.bindings] and result.bindings
    assert dict(built) == {"OrtRunner": 2}  # the export and the legalized model


def test_a_session_keeps_keyed_artifacts_for_its_next_plan_and_lets_the_rest_go():
    from legalizer.numeric.plan import Session

    shared_log, own_log, made = [], [], Counter()

    def shared():
        made["shared"] += 1
        return Scaled(1.0, shared_log)

    def plan_of():
        return Plan([Comparison(Artifact("own", lambda: Scaled(1.0, own_log)), Artifact("shared", shared, key="s"),
                                _feeds([3]))], 1e-5, 1e-6, "toy")

    with Session() as session:
        assert run_plan(plan_of(), session).ok
        assert own_log == ["load", "close"] and shared_log == ["load"]  # the unkeyed one went with its plan
        assert run_plan(plan_of(), session).ok
        assert made == {"shared": 1} and shared_log == ["load"]
    assert shared_log == ["load", "close"] and own_log == ["load", "close"] * 2
