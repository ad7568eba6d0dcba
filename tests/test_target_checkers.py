"""The deployment targets' own tools, as legalize drives them: Vela (both cores) and
LiteRT's GPU accelerator. Each test skips, naming what is missing, without the tool."""

from __future__ import annotations

import numpy as np
import pytest
from needs import require
from tflite_build import build_tflite, op, tensor

from legalizer.numeric import litert_gpu, vela

Q = {"scale": 0.05, "zero_point": 0}


def _add(path, sa, sb, sy, dtype="INT8"):
    q = Q if dtype == "INT8" else {}
    data = build_tflite(tensors=[tensor("a", dtype, sa, **q), tensor("b", dtype, sb, **q), tensor("y", dtype, sy, **q)],
                        operators=[op("ADD", [0, 1], [2], "AddOptions", fused_activation_function=0)],
                        inputs=[0, 1], outputs=[2])
    path.write_bytes(data)
    return path


def _broadcast_to_add(path, dtype="INT8"):
    q = Q if dtype == "INT8" else {}
    data = build_tflite(
        tensors=[tensor("a", dtype, [1, 4, 1, 8], **q), tensor("s", "int32", [4], data=np.array([1, 4, 8, 8], np.int32)),
                 tensor("bc", dtype, [1, 4, 8, 8], **q), tensor("b", dtype, [1, 4, 8, 8], **q),
                 tensor("y", dtype, [1, 4, 8, 8], **q)],
        operators=[op("BROADCAST_TO", [0, 1], [2], version=2),
                   op("ADD", [2, 3], [4], "AddOptions", fused_activation_function=0)],
        inputs=[0, 3], outputs=[4])
    path.write_bytes(data)
    return path




@pytest.mark.needs("vela")
def test_vela_legacy_core_refuses_rank5_with_its_reason(tmp_path):
    path = _add(tmp_path / "add5.tflite", [1, 2, 4, 8, 8], [1, 2, 4, 8, 8], [1, 2, 4, 8, 8])
    legacy = vela.compile_tflite(str(path), "legacy")
    assert (legacy.npu_ops, legacy.cpu_ops) == (0, 1)
    assert legacy.refused()["y"][0] == "Input(s) and Output tensors must not be greater than 4D"
    default = vela.compile_tflite(str(path), "default")
    assert (default.npu_ops, default.cpu_ops) == (1, 0)
    # One op: its per-layer cycles are the whole estimate.
    assert [(p.op, p.target, p.cycles) for p in default.placements] == [("ADD", "NPU", default.cycles_total)]
    assert default.cycles_total > 0


@pytest.mark.needs("vela")
def test_vela_legacy_core_refuses_two_sided_broadcast(tmp_path):
    path = _add(tmp_path / "bc2.tflite", [1, 4, 1, 8], [1, 1, 8, 8], [1, 4, 8, 8])
    legacy = vela.compile_tflite(str(path), "legacy")
    assert legacy.refused() == {"y": ("At least one Input's shape must match the OFM's shape",
                                      "Op has ifm_shape=[1, 4, 1, 8], ifm2_shape=[1, 1, 8, 8] and ofm_shape=[1, 4, 8, 8]")}
    assert vela.compile_tflite(str(path), "default").cpu_ops == 0


@pytest.mark.needs("vela")
def test_vela_never_places_broadcast_to(tmp_path):
    path = _broadcast_to_add(tmp_path / "bcast.tflite")
    for core, why in (("default", ("Unsupported opType",)), ("legacy", ("CPU only op",))):
        r = vela.compile_tflite(str(path), core)
        assert (r.npu_ops, r.cpu_ops) == (1, 1), core
        assert [(p.op, p.name, p.reasons) for p in r.cpu_placements()] == [("BROADCAST_TO", "bc", why)], core


def test_vela_missing_names_the_extra(monkeypatch):
    import importlib.metadata as md

    def missing(name):
        raise md.PackageNotFoundError(name)
    monkeypatch.setattr(md, "version", missing)
    with pytest.raises(vela.CheckUnavailable, match=r"ethos-u-vela==5\.2\.0 .*legalizer\[vela\]"):
        vela.compile_tflite("x.tflite")



@pytest.fixture(scope="module")
def gpu():
    require("litert", "litert-gpu")


def test_gpu_names_each_refused_op_with_the_delegate_reason(gpu, tmp_path):
    r = litert_gpu.gpu_compile(str(_broadcast_to_add(tmp_path / "bcast.tflite", "float32")))
    assert not r.ok
    assert r.refused == {"BROADCAST_TO": "Operation is not supported."}
    r5 = litert_gpu.gpu_compile(str(_add(tmp_path / "add5.tflite", *[[1, 2, 4, 8, 8]] * 3, dtype="float32")))
    # The delegate names the first tensor over the limit after its reason.
    assert r5.refused == {"ADD": "Tensor dimensions must be less than 5. a"}


def test_gpu_runs_the_whole_graph_and_returns_its_outputs(gpu, tmp_path):
    path = _add(tmp_path / "add.tflite", [1, 4, 8, 8], [1, 1, 1, 8], [1, 4, 8, 8], dtype="float32")
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((1, 4, 8, 8), np.float32), rng.standard_normal((1, 1, 1, 8), np.float32)
    r = litert_gpu.gpu_compile(str(path), {"a": a, "b": b})
    assert r.ok, r.message
    np.testing.assert_allclose(r.outputs["y"], a + b, rtol=1e-6, atol=1e-6)


def test_refused_ops_parses_the_delegate_block():
    log = ("INFO: x\nERROR: Following operations are not supported by GPU delegate:\n"
           "BROADCAST_TO: Operation is not supported.\nEXPAND_DIMS: Operation is not supported.\n"
           "1 operations will run on the GPU, and the remaining 2 operations will run on the CPU.\n")
    assert litert_gpu.refused_ops(log) == {"BROADCAST_TO": "Operation is not supported.",
                                           "EXPAND_DIMS": "Operation is not supported."}


def test_gpu_feeds_and_returns_by_tensor_name_under_a_signature(gpu):
    """A converter's model: its signature names its tensors otherwise (``keras_tensor`` for
    ``serving_default_keras_tensor:0``); inputs and outputs go by tensor name, as
    LiteRT's interpreter names them."""
    data = build_tflite(tensors=[tensor("a", "float32", [1, 8]), tensor("b", "float32", [1, 8]),
                                 tensor("y", "float32", [1, 8])],
                        operators=[op("MUL", [0, 1], [2], "MulOptions", fused_activation_function=0)],
                        inputs=[0, 1], outputs=[2],
                        signatures=[{"key": "serving_default", "subgraph": 0, "inputs": {"in_a": 0, "in_b": 1},
                                     "outputs": {"out": 2}}])
    a, b = np.arange(8, dtype=np.float32).reshape(1, 8), np.full((1, 8), 2, np.float32)
    r = litert_gpu.gpu_compile(data, {"a": a, "b": b})
    assert r.ok, r.message
    assert list(r.outputs) == ["y"]
    np.testing.assert_array_equal(r.outputs["y"], a * b)
