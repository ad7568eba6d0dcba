"""What a pipeline trips on (issue 32, "the small things"): the default output name
follows the content, options a run would ignore are refused, -q keeps to errors and the
verdict, --profile's help says what it does when legalizing."""

from __future__ import annotations

import shutil
from pathlib import Path

import onnx
from onnx import TensorProto, helper

from helpers import cli_in_process, cli_process, lines

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "models"


def test_a_tflite_model_named_onnx_gets_a_tflite_output(tmp_path):
    src = tmp_path / "net.onnx"
    shutil.copy(MODELS / "tflite/broadcast_add.tflite", src)
    code, out, err = cli_in_process(src, "-q", "--no-check")
    assert code == 0, err
    assert out.strip() == f"{src}: legalized for 'tosa' -> {tmp_path / 'net.legal.tflite'} (not checked: --no-check)"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["net.legal.tflite", "net.onnx"]


def test_options_a_run_would_ignore_are_refused(tmp_path):
    m = MODELS / "mlp_bias.onnx"
    cases = [((m, "--trust-pt2"), f"--trust-pt2 loads a .pt2 with torch's unsafe unpickling; {m} is ONNX, not a .pt2:"
                                  " leave it out"),
             ((m, "--no-check", "--run-timeout", "5"), "--run-timeout limits each run of a model on a runtime, and"
                                                       " none runs: it cannot go with --no-check"),
             ((m, "--verify-only", "--run-memory", "1G"), "--run-memory limits each run of a model on a runtime, and"
                                                          " none runs: it cannot go with --verify-only (except with"
                                                          " --against)"),
             ((m, "--verify-only", "--target", "ethos-u", "--allow-fallback"),
              "--allow-fallback accepts a deployment target's partial placement: --verify-only places nothing")]
    for args, why in cases:
        code, out, err = cli_in_process(*args, "-o", tmp_path / "o.onnx") if "--verify-only" not in args else \
            cli_in_process(*args)
        assert (code, out) == (2, ""), (args, err)
        assert err.strip() == f"legalize: error: {why}"
    assert list(tmp_path.iterdir()) == []


def _violating(tmp_path, n):
    """n Adds whose operands are not broadcast-compatible: n violations."""
    f = TensorProto.FLOAT
    nodes = [helper.make_node("Add", ["a", "b"], [f"y{k}"], name=f"add{k}") for k in range(n)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("a", f, [3, 4]),
                                       helper.make_tensor_value_info("b", f, [2])],
                          [helper.make_tensor_value_info(f"y{k}", f, None) for k in range(n)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(tmp_path / "v.onnx"))
    return tmp_path / "v.onnx"


def test_quiet_prints_only_errors_and_the_verdict(tmp_path):
    src = _violating(tmp_path, 5)
    code, out, err = cli_in_process(src, "--verify-only", "-q")
    assert code == 1 and err == ""
    why = "operands don't have broadcast-compatible shapes: operand #0 '3x4' has 4 at dim 1 but operand #1 '2' has 2 at dim 0"
    assert lines(out) == [f"error: node 'add{k}': 'Add' op {why}" for k in range(3)] + [
        "error: ... and 2 more violations (without -q: each; --report: the list)",
        f"{src}: 5 violations under 'mlir'"]
    code, out, _ = cli_in_process(src, "--verify-only")  # without -q: each
    assert code == 1 and sum(ln.startswith("error: node") for ln in lines(out)) == 5


def test_profile_help_says_what_it_does_when_legalizing():
    p = cli_process("--help", env={"COLUMNS": "2000"})
    assert p.returncode == 0
    text = " ".join(p.stdout.split())
    assert ("It judges the model as given, before any rewrite: an input that violates it is refused, not legalized"
            " (the output is verified under --target's profile). To make a model TOSA-legal, use --target tosa;"
            " --profile tosa with --verify-only asks whether it is already.") in text
