"""The passes as registered records (``legalizer.passes.PASSES``): each names the frontends
it rewrites and the contracts it requires and ensures; the pass manager checks them under
``debug`` and names the pass that broke one. The targets name their passes from the
registry."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import legalizer
from legalizer.kinds.onnx.importer import import_model
from legalizer.importers.reader import read_model
from legalizer.passes import ContractError, PassContext, PassManager, register_pass
from legalizer.target_passes import ALWAYS, _contracts
from legalizer.targets import TARGETS
from legalizer.errors import UsageError
from needs import missing
from slow import sample

ROOT = Path(__file__).resolve().parent.parent
F = TensorProto.FLOAT


def _add(x_shape, c_shape):
    g = helper.make_graph([helper.make_node("Add", ["x", "c"], ["y"], name="add")], "g",
                          [helper.make_tensor_value_info("x", F, x_shape)],
                          [helper.make_tensor_value_info("y", F, None)],
                          [numpy_helper.from_array(np.ones(c_shape, np.float32), "c")])
    return import_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def test_every_target_names_registered_passes():
    for spec in TARGETS.values():
        assert [p.name for p in spec.pipeline()] == [p if isinstance(p, str) else p.__name__ for p in spec.passes]


def test_an_unknown_pass_name_says_which_there_are():
    with pytest.raises(KeyError, match="unknown pass 'fold_rank'; registered: .*fold_ranks"):
        PassManager(["fold_rank"])


def test_a_pass_runs_only_on_the_frontends_it_names(scratch):
    seen = []

    @register_pass(frontends=("tflite",))
    def tflite_only(graph, ctx):
        seen.append(graph.frontend)
        return False

    m = _add([2, 3], [3])
    PassManager(["tflite_only"]).run(m.graph, PassContext())
    assert seen == []
    m.graph.frontend = "tflite"
    PassManager([tflite_only]).run(m.graph, PassContext())
    assert seen == ["tflite"]


def test_a_pass_that_breaks_what_it_ensures_is_named(scratch):
    """A pass that promises equal ranks and leaves Add(2x3, 3) as it is."""

    @register_pass(ensures=("equal-ranks",))
    def lazy_equalize(graph, ctx):
        return False

    m = _add([2, 3], [3])
    with pytest.raises(ContractError, match=r"^after pass 'lazy_equalize': contract 'equal-ranks' broken: .*'add'"):
        PassManager(["lazy_equalize"], _contracts(), ALWAYS).run(m.graph, PassContext())
    PassManager(["equalize_ranks"], _contracts(), ALWAYS).run(m.graph, PassContext())  # the real one keeps it
    assert [len(v.type.shape) for v in next(n for n in m.graph.ops() if n.op == "Add").inputs] == [2, 2]


def test_a_fold_that_adds_a_tensor_over_the_rank_limit_is_named(scratch):
    @register_pass(ensures=("over-rank",))
    def bad_fold(graph, ctx):
        add = next(n for n in graph.ops() if n.op == "Add")
        add.outputs[0].type = add.outputs[0].type.with_shape((1, 1, 1, 1, 2, 3))
        return True

    m = _add([2, 3], [3])
    with pytest.raises(ContractError, match=r"^after pass 'bad_fold': contract 'over-rank' broken: 'y' has rank 6 > 4"
                                            r" \(1 now, 0 before\)$"):
        PassManager(["bad_fold"], _contracts(), ALWAYS).run(m.graph, PassContext(max_rank=4))


def test_what_a_pass_requires_is_checked_before_it_runs(scratch):
    @register_pass(requires=("equal-ranks",))
    def after_equalize(graph, ctx):
        return False

    with pytest.raises(ContractError, match=r"^pass 'after_equalize' requires 'equal-ranks': .*'add'"):
        PassManager(["after_equalize"], _contracts(), ALWAYS).run(_add([2, 3], [3]).graph, PassContext())
    m = _add([2, 3], [3])
    PassManager(["equalize_ranks", "after_equalize"], _contracts(), ALWAYS).run(m.graph, PassContext())


def test_a_contract_no_one_defines_is_refused(scratch):
    @register_pass(ensures=("sorted",))
    def sorts(graph, ctx):
        return False

    with pytest.raises(KeyError, match="pass 'sorts' names an unknown contract 'sorted'"):
        PassManager(["sorts"], _contracts(), ALWAYS)


def _models():
    light = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    return [p for p in sorted([*ROOT.glob("models/*.onnx"), *ROOT.glob("models/tflite/*.tflite"),
                               *ROOT.glob("models/*.pt2"), *light.glob("*.onnx")])
            if "incompatible" not in p.name and ".legal." not in p.name]


@pytest.mark.parametrize("target", sample(sorted(TARGETS), ["qnn-htp"]))
def test_every_target_keeps_its_contracts_on_the_sample_and_light_models(target):
    """Each pass of each target, under debug, on every sample model and the onnx wheel's
    light models: no contract broken (a target that refuses the model up front, as
    Vela refuses float ones, is skipped for it)."""
    ran = 0
    for path in _models():
        if path.suffix == ".pt2" and missing("torch"):  # (read with the torch extra only)
            continue
        model = read_model(path)
        try:
            legalizer.legalize(model, target, debug=True)
        except UsageError:
            continue
        ran += 1
    assert ran >= 3  # (Vela takes the three int8 samples; the others take them all)
