"""``--target ethos-u`` and ``ethos-u55`` on int8 cases built from Vela's rules
(tests/deploy_cases.py), judged by Vela 5.2.0 itself (the vela extra): every case is
legalized and checked on LiteRT (int8, within one quantization step); then

- ``ethos-u`` (Vela's default compiler, Ethos-U85): every op of the result is placed on the
  NPU, and where the original was all on the NPU, Vela's cycle estimate is no higher; under
  the legacy core no more ops fall back to the CPU than before;
- ``ethos-u55`` (the deprecated core, U55/U65: rank <= 4, batch 1, one operand at the
  result's shape, no TILE or BROADCAST_TO on the NPU): every op of the result is placed.
"""

from __future__ import annotations


import pytest
from deploy_cases import CASES
from needs import require

from legalizer.numeric import vela
from legalizer.pipeline import RunOptions, run

require("litert", module=True)

# Vela's cycle estimates of originals and results (default core, Ethos-U85-256), as the
# issue measured the kinds: rank-5 regions folded, BROADCAST_TO folded into its consumer.
FEWER_CYCLES = ("gqa_repeat_kv", "mask_5d", "mask_5d_broadcast_to", "rank5_chain", "batch2_add", "mixed_rank_3_4",
                "mixed_rank_2_4", "expand_dims_mul", "broadcast_to_add")


def _legalize(tmp_path, name, target):
    data, _ = CASES[name]("INT8")
    src = tmp_path / f"{name}.tflite"
    src.write_bytes(data)
    out = tmp_path / f"{name}.{target}.tflite"
    res = run(src, RunOptions(target=target, output=out))
    rep = res.report.to_json()
    assert res.exit_code == 0, rep
    assert rep["check"]["ran"] and rep["check"]["ok"]
    assert rep["target_rules"]["refused_after"] == [], rep["target_rules"]
    return src, out, rep



@pytest.mark.parametrize("name", sorted(CASES))
def test_ethos_u_form_is_legal_and_equal(tmp_path, name):
    _legalize(tmp_path, name, "ethos-u")


def test_rules_name_what_the_legacy_core_refuses(tmp_path):
    """The table's reasons, as Vela's legacy core words them, before the passes."""
    rules = {}
    for name in ("rank5_chain", "two_sided_broadcast", "batch2_add", "broadcast_to_add"):
        _, _, rep = _legalize(tmp_path, name, "ethos-u55")
        rules[name] = [(r["node"], r["op"], r["reasons"]) for r in rep["target_rules"]["refused_before"]]
    assert rules["rank5_chain"][2] == ("a5", "tflite.ADD", ["Input(s) and Output tensors must not be greater than 4D"])
    assert rules["two_sided_broadcast"] == [("y", "tflite.ADD", ["At least one Input's shape must match the OFM's shape"])]
    assert rules["batch2_add"] == [("y", "tflite.ADD", ["IFM Tensor batch size must be 1"])]
    assert rules["broadcast_to_add"] == [("ab", "tflite.BROADCAST_TO", ["CPU only op"])]


def test_a_region_that_neither_broadcasts_nor_batches_keeps_its_shape(tmp_path):
    """Reshapes around a residual ADD would cost Vela its chaining (Keras' int8
    MobileNetV2: 1,079,700 cycles either way, 1,102,000 with its ADDs folded to rank 1)."""
    from deploy_cases import _Model  # noqa: PLC0415

    from legalizer.kinds.tflite.importer import load_tflite  # noqa: PLC0415
    m = _Model("INT8")
    a, b = m.input("a", [1, 8, 8, 16]), m.input("b", [1, 8, 8, 16])
    data, _ = m.build(m.binary("ADD", a, b, [1, 8, 8, 16], "y"))
    src = tmp_path / "residual.tflite"
    src.write_bytes(data)
    res = run(src, RunOptions(target="ethos-u", output=tmp_path / "residual.legal.tflite"))
    assert res.exit_code == 0
    graph = load_tflite(tmp_path / "residual.legal.tflite").graph
    assert [(n.op_type, tuple(n.output.type.shape)) for n in graph.ops()] == [("ADD", (1, 8, 8, 16))]


@pytest.mark.needs("vela")
@pytest.mark.parametrize("name", sorted(CASES))
def test_vela_places_the_ethos_u_form_at_no_more_cycles(tmp_path, name):
    src, out, _ = _legalize(tmp_path, name, "ethos-u")
    before = vela.compile_tflite(str(src), "default")
    after = vela.compile_tflite(str(out), "default")
    assert after.cpu_ops == 0, after.cpu_placements()
    if before.cpu_ops == 0:  # the same work on the NPU: never more cycles
        assert after.cycles_total <= before.cycles_total
    if name in FEWER_CYCLES:
        assert after.cycles_total < before.cycles_total
    legacy_before = vela.compile_tflite(str(src), "legacy")
    legacy_after = vela.compile_tflite(str(out), "legacy")
    assert legacy_after.cpu_ops <= legacy_before.cpu_ops


@pytest.mark.needs("vela")
@pytest.mark.parametrize("name", sorted(CASES))
def test_the_legacy_core_places_every_op_of_the_ethos_u55_form(tmp_path, name):
    src, out, _ = _legalize(tmp_path, name, "ethos-u55")
    after = vela.compile_tflite(str(out), "legacy")
    assert (after.cpu_ops, after.cpu_placements()) == (0, [])
    assert after.npu_ops > 0


@pytest.mark.needs("vela")
def test_gqa_repeat_kv_on_the_u85_is_one_broadcasting_mul(tmp_path):
    src, out, _ = _legalize(tmp_path, "gqa_repeat_kv", "ethos-u")
    before = vela.compile_tflite(str(src), "default")
    after = vela.compile_tflite(str(out), "default")
    assert [(p.op, p.target) for p in before.cpu_placements()] == [("BROADCAST_TO", "CPU")]
    assert [p.op for p in after.placements if p.cycles] == ["MUL"]
    assert (before.cycles_total, after.cycles_total) == (1790.0, 789.0)


@pytest.mark.needs("vela")
@pytest.mark.parametrize("name", sorted(CASES))
def test_the_u55_rules_refuse_what_the_legacy_core_leaves_on_the_cpu(tmp_path, name):
    """The table's verdict on each original is Vela's: the same ops, by output tensor
    (a mixed-rank ADD [4,8,8] + [1,1,8,8] -> [1,4,8,8] too: Vela compares shapes as
    they are)."""
    src, _, rep = _legalize(tmp_path, name, "ethos-u55")
    legacy = vela.compile_tflite(str(src), "legacy")
    assert {r["node"] for r in rep["target_rules"]["refused_before"]} == set(legacy.refused()), legacy.cpu_placements()
