"""Where two models start to differ (``--localize``), the smallest subgraph that still
differs (``--reduce``), ``--against`` for every format, per-output tolerances and error
statistics: on the committed sample models with one weight perturbed mid-graph, on the
main job with a rewritten constant broken on purpose, and on what
tosa-converter-for-tflite made of the TFLite samples (models/tosa_converter/)."""

from __future__ import annotations

import json
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import legalizer
from legalizer.numeric.localize import Localization, Step, bisect, by_content, loc_name
from legalizer.numeric.runner import Runner
from legalizer.numeric.settings import CheckSettings
from legalizer.numeric.reduce import ddmin
from helpers import assert_clean, cli_process, lines
from needs import require
from slow import sample

ROOT = Path(__file__).resolve().parent.parent
TFLITE = ROOT / "models/tflite"
CONVERTER = ROOT / "models/tosa_converter"


def _perturbed_onnx(src: Path, dst: Path, pick: int = None):
    """``src`` with one float weight (the one read by the middle of the nodes that read
    one, or initializer ``pick``) moved by 1 in its first element: (path, its readers)."""
    m = onnx.load(str(src))
    floats = {t.name: t for t in m.graph.initializer
              if numpy_helper.to_array(t).dtype.kind == "f" and numpy_helper.to_array(t).size > 1}
    readers = [n for n in m.graph.node if any(x in floats for x in n.input)]
    node = readers[len(readers) // 2]
    t = floats[next(x for x in node.input if x in floats)]
    a = numpy_helper.to_array(t).copy()
    a.flat[0] += 1.0
    t.CopyFrom(numpy_helper.from_array(a, t.name))
    onnx.save(m, str(dst))
    return dst, {n.name or n.output[0] for n in m.graph.node if t.name in n.input}, t.name


def _perturbed_tflite(src: Path, dst: Path, weight: str):
    from legalizer.ir.constdata import ConstData
    from legalizer.ir.graph import CONST

    model = legalizer.load(src)
    node = next(n for n in model.graph.nodes() if n.kind == CONST and n.output.name == weight)
    a = np.array(node.data.array, copy=True)
    a.flat[0] += 1 if a.dtype.kind == "f" else 60
    node.data = ConstData.from_array(a)
    readers = {u.label for u, _ in model.graph.users(node.output)}
    legalizer.save(model, dst, force=True)
    return dst, readers


def _report(path: Path) -> dict:
    return json.loads(path.read_text())


DIVERGENCE_KEYS = ["value", "node", "op", "max_abs_err", "max_rel_err", "mismatched", "total"]


# -- ONNX against ONNX, TFLite against TFLite -----------------------------------------------

@pytest.mark.parametrize("name", ["mlp_bias.onnx", "small_cnn.dynamo.onnx", "transformer_block.dynamo.onnx",
                                  "transformer_block.torchscript.onnx"])
def test_localize_names_the_node_that_reads_a_perturbed_weight(name, tmp_path, legalize):
    bad, readers, weight = _perturbed_onnx(ROOT / "models" / name, tmp_path / "bad.onnx")
    p = legalize(bad, "--verify-only", "--against", ROOT / "models" / name, "--localize",
                 "--report", tmp_path / "r.json")
    assert_clean(p)
    assert p.returncode == 1, p.stdout + p.stderr
    check = _report(tmp_path / "r.json")["check"]
    culprit = check["divergence"][0]
    assert culprit["node"] in readers, (weight, culprit, readers)
    assert list(culprit)[:7] == DIVERGENCE_KEYS and 0 < culprit["mismatched"] <= culprit["total"]
    assert check["localize"]["culprit"] == culprit["value"] and check["localize"]["runtimes"] == \
        "onnxruntime vs onnxruntime"
    line = next(ln for ln in lines(p.stdout) if ln.startswith("culprit:"))
    value = "" if culprit["node"] == culprit["value"] else f" value '{culprit['value']}'"
    assert line.startswith(f"culprit: node '{culprit['node']}' ({culprit['op']}){value}: max abs err ")
    # (on the provider the comparison ran on: CUDA's where onnxruntime has it)
    assert lines(p.stdout)[-1] == f"{bad}: legal under 'mlir', results DIFFER ({check['provider']})"
    assert check["provider"] in ("CPUExecutionProvider", "CUDAExecutionProvider")


def test_the_same_model_against_itself_matches_and_nothing_differs(tmp_path, legalize):
    model = ROOT / "models/mlp_bias.onnx"
    p = legalize(model, "--verify-only", "--against", model, "--localize", "--report", tmp_path / "r.json")
    assert_clean(p)
    assert p.returncode == 0, p.stdout
    check = _report(tmp_path / "r.json")["check"]
    assert check["ok"] and check["divergence"] == [] and check["localize"]["compared"] == 6
    assert "localize: no intermediate value differs (all 6 matched values agree)" in lines(p.stdout)


def test_against_without_localize_names_no_culprit(tmp_path, legalize):
    bad, _, _ = _perturbed_onnx(ROOT / "models/mlp_bias.onnx", tmp_path / "bad.onnx")
    p = legalize(bad, "--verify-only", "--against", ROOT / "models/mlp_bias.onnx", "--report", tmp_path / "r.json")
    assert p.returncode == 1
    assert "divergence" not in _report(tmp_path / "r.json")["check"]
    assert not any(ln.startswith("culprit:") for ln in lines(p.stdout))


@pytest.mark.parametrize("name,weight", [("transformer_like.tflite", "up_w"), ("mobilenet_like.tflite", "pw_w"),
                                         ("mobilenet_like_int8.tflite", "pw_w")])
def test_tflite_against_tflite_localizes_on_litert(name, weight, tmp_path, legalize):
    require("litert")
    bad, readers = _perturbed_tflite(TFLITE / name, tmp_path / "bad.tflite", weight)
    p = legalize(bad, "--verify-only", "--against", TFLITE / name, "--localize", "--report", tmp_path / "r.json")
    assert_clean(p)
    assert p.returncode == 1, p.stdout + p.stderr
    rep = _report(tmp_path / "r.json")
    assert rep["check"]["provider"] == "LiteRT"  # no ONNX form: two TFLite models on LiteRT
    assert rep["check"]["divergence"][0]["node"] in readers
    assert rep["check"]["localize"]["runtimes"] == "LiteRT vs LiteRT"
    assert lines(p.stdout)[-1] == f"{bad}: legal under 'mlir', results DIFFER (LiteRT)"


# -- the main job ----------------------------------------------------------------------------

def _break_a_rewrite(monkeypatch, const_name: str):
    """The passes go wrong on purpose: constant ``const_name`` they made is off by one
    in its first element. Returns the labels of the nodes that read it."""
    import legalizer.pipeline as pipeline
    from legalizer.ir.constdata import ConstData
    from legalizer.ir.graph import CONST

    real, readers = pipeline.legalize_for, set()

    def broken(model, *args, **kwargs):
        done = real(model, *args, **kwargs)
        node = next(n for n in model.graph.nodes() if n.kind == CONST and n.output.name == const_name)
        a = np.array(node.data.array, copy=True)
        a.flat[0] += 1.0
        node.data = ConstData.from_array(a)
        readers.update(u.label for u, _ in model.graph.users(node.output))
        return done

    monkeypatch.setattr(pipeline, "legalize_for", broken)
    return readers


def test_main_job_localizes_when_its_check_fails(monkeypatch, tmp_path):
    from legalizer import html_report
    from legalizer.pipeline import RunOptions, run

    readers = _break_a_rewrite(monkeypatch, "qkv_bias_r3")
    model = tmp_path / "tb.onnx"
    shutil.copy(ROOT / "models/transformer_block.dynamo.onnx", model)
    res = run(model, RunOptions(regions=True))
    assert res.exit_code == 1 and not (tmp_path / "tb.legal.onnx").exists()
    culprit = res.report.check["divergence"][0]
    assert readers == {"node_add_8"} and culprit["node"] == "node_add_8" and culprit["op"] == "Add"
    assert res.localization.line().startswith("culprit: node 'node_add_8' (Add) value 'add_8': max abs err 1,")
    page = html_report.render(res.report, res.regions, res.culprit_picture)
    # the culprit is red in its own picture and in both pictures of the region it belongs to
    assert page.count('<g class="node culprit op" data-name="node_add_8">') == 3
    assert '<span class="tag culprit">culprit</span>' in page and '<section id="divergence">' in page
    for svg in re.findall(r'<svg xmlns.*?</svg>', page, re.S):
        ET.fromstring(svg)


def test_main_job_check_failure_on_the_command_line_names_the_rewritten_node(monkeypatch, tmp_path):
    """The same, through the printer: one culprit line before the verdict."""
    from legalizer.cli import main

    _break_a_rewrite(monkeypatch, "b1_r2")
    model = tmp_path / "m.onnx"
    shutil.copy(ROOT / "models/mlp_bias.onnx", model)
    with pytest.raises(SystemExit) as e:
        main([str(model), "-q", "--report", str(tmp_path / "r.json")])
    assert e.value.code == 1
    check = _report(tmp_path / "r.json")["check"]
    assert [d["node"] for d in check["divergence"]] == ["fc1_bias", "act", "fc2", "fc2_bias", "out_scale"]


def test_no_localize_turns_it_off(monkeypatch, tmp_path):
    from legalizer.pipeline import RunOptions, run

    _break_a_rewrite(monkeypatch, "b1_r2")
    model = tmp_path / "m.onnx"
    shutil.copy(ROOT / "models/mlp_bias.onnx", model)
    res = run(model, RunOptions(localize=False))
    assert res.exit_code == 1 and res.localization is None and "divergence" not in res.report.check


# -- TOSA modules of tosa-converter-for-tflite ----------------------------------------------

def _against(stem: str, tmp_path: Path, *extra):
    require("iree")
    require("litert")
    p = cli_process(CONVERTER / f"{stem}.mlirbc", "--verify-only", "--against", TFLITE / f"{stem}.tflite",
                    "--localize", "--report", tmp_path / "r.json", *extra)
    assert_clean(p)
    assert p.returncode == 1, p.stdout + p.stderr
    return p, _report(tmp_path / "r.json")["check"]


def test_converter_floor_mod_is_its_lowering_sub(tmp_path):
    """FLOOR_MOD(x, y) = x - floor(x / y) * y; the converter computes x/y - floor(x/y)
    (reciprocal, mul, floor, sub) and never multiplies back by y."""
    p, check = _against("broadcast_floor_mod", tmp_path)
    c = check["divergence"][0]
    assert (c["node"], c["op"], c["reference"], c["reference_op"]) == ("%9", "tosa.sub", "out0", "FLOOR_MOD")
    assert c["mismatched"] == c["total"] == 120 and 0.8 < c["max_abs_err"] < 0.9
    assert [r["op"] for r in check["localize"]["region"]] == ["tosa.reciprocal", "tosa.reshape", "tosa.mul",
                                                              "tosa.floor"]
    assert [d["node"] for d in check["divergence"]] == ["%9", "%16"]  # out1 too; out_y matches
    assert "culprit: node '%9' (tosa.sub), the reference's 'out0' (FLOOR_MOD): max abs err 0.84, 120 of" \
           " 120 elements differ; computed from matching values through tosa.reciprocal %5, tosa.reshape %6," \
           " tosa.mul %7, tosa.floor %8 (1 later value differs too)" in lines(p.stdout)


def test_converter_pow_is_tosa_pow_itself(tmp_path):
    _, check = _against("broadcast_pow", tmp_path)
    c = check["divergence"][0]
    assert (c["node"], c["op"], c["reference_op"], c["detail"]) == ("%3", "tosa.pow", "POW",
                                                                    "NaNs at different positions")
    assert check["localize"]["region"] == []  # tosa.pow reads the argument and a constant


def test_converter_transformer_is_its_gelu(tmp_path):
    """The TFLite GELU (approximate=False, erf) lowered to the tanh approximation: the
    first value that differs is the GELU's last mul, found by content (the converter
    writes no location names), through the ops of the tanh formula."""
    _, check = _against("transformer_like", tmp_path)
    c = check["divergence"][0]
    assert (c["node"], c["op"], c["reference"], c["reference_op"]) == ("%75", "tosa.mul", "gelu", "GELU")
    assert 1e-4 < c["max_abs_err"] < 1e-3
    assert [r["op"] for r in check["localize"]["region"]] == ["tosa.pow", "tosa.mul", "tosa.add", "tosa.mul",
                                                              "tosa.tanh", "tosa.add", "tosa.mul"]
    assert check["localize"]["runs"] == 2  # one IREE run with every value, one LiteRT run


def test_a_module_with_location_names_is_matched_by_them(tmp_path, legalize):
    """An intermediate value named by its op's loc is matched to the reference tensor
    of that name, though its content agrees with none: it is the culprit, not the
    result computed from it."""
    require("iree")
    require("litert")
    t, s = "tensor<2x3x4x5xf32>", "tensor<1x1x1x5xf32>"
    module = tmp_path / "m.mlir"
    module.write_text(f"""func.func @main(%x: {t}, %y: tensor<5xf32>) -> ({t}, {t}) {{
  %s = "tosa.const_shape"() <{{values = dense<[1, 1, 1, 5]> : tensor<4xindex>}}> : () -> !tosa.shape<4>
  %one = "tosa.const"() <{{values = dense<1.0> : tensor<1x1x1x1xf32>}}> : () -> tensor<1x1x1x1xf32>
  %r = tosa.reshape %y, %s : (tensor<5xf32>, !tosa.shape<4>) -> {s}
  %sum = tosa.add %x, %r : ({t}, {s}) -> {t} loc("x_plus_y")
  %off = tosa.add %sum, %one : ({t}, tensor<1x1x1x1xf32>) -> {t} loc("out0")
  %n1 = tosa.maximum %off, %off : ({t}, {t}) -> {t}
  %n2 = tosa.maximum %n1, %n1 : ({t}, {t}) -> {t}
  return %n2, %n2 : {t}, {t}
}}
""")
    assert loc_name('loc("out_y")') == "out_y" and loc_name('loc("a"("f":1:2))') == "a"
    assert loc_name('loc(fused["b", "f":1:2])') == "b"
    assert loc_name('loc("m.mlir":3:7)') == "" and loc_name(None) == ""  # a file's line names nothing
    p = legalize(module, "--verify-only", "--against", TFLITE / "broadcast_add.tflite", "--localize",
                 "--report", tmp_path / "r.json")
    assert_clean(p)
    assert p.returncode == 1
    check = _report(tmp_path / "r.json")["check"]
    c = check["divergence"][0]
    assert (c["node"], c["op"], c["reference"]) == ("%4", "tosa.add", "out0") and abs(c["max_abs_err"] - 1) < 1e-5
    assert check["localize"]["region"] == []  # %sum agrees with out0 by content


class _FusedRunner(Runner):
    """A module whose values all agree when it returns them all, and where cutting it
    at value k gives the true value plus 1 from ``first`` on (fusion changed them)."""

    name = "fake"

    def __init__(self, names, first):
        super().__init__()
        self.names, self.first = names, first

    def values(self, feeds, names=None):
        self.runs += 1
        return {n: np.full(4, float(self.names.index(n)) + (self.names.index(n) >= self.first and names is not None))
                for n in (names or self.names)}


@pytest.mark.parametrize("budget,found", [(8, "v5"), (1, "v7")])
def test_bisection_cuts_the_module_one_value_at_a_time_within_the_budget(budget, found):
    names = [f"v{k}" for k in range(8)]
    steps = [Step(f"n{k}", "tosa.add", [names[k - 1]] if k else ["arg0"], [names[k]]) for k in range(8)]
    ref = {n: np.full(4, float(k)) for k, n in enumerate(names)}
    probe = _FusedRunner(names, first=5)
    loc = Localization("fake vs fake")
    bisect(loc, steps, probe, {}, ref, {n: n for n in names}, ["v7"], budget, CheckSettings(rtol=1e-4, atol=1e-5))
    assert loc.culprit.value == found and probe.runs <= budget
    if budget == 8:
        assert probe.runs == 3 and loc.note.endswith("bisected over 8 values the differing result is computed from")
    else:  # out of runs: the earliest known to differ, and how far the search got
        assert "the budget ran out: it lies among" in loc.note


def test_content_matching_places_a_value_that_differs_a_little_not_a_shifted_one():
    rng = np.random.default_rng(0)
    gelu = rng.standard_normal(64).astype(np.float32)
    masked = np.where(np.arange(64) % 3 == 0, -1e4, rng.standard_normal(64)).astype(np.float32)
    cand = {"near": gelu * (1 + 1e-4), "shifted": masked - 3.0, "tiny": np.ones(2, np.float32)}
    assert by_content(cand, {"gelu": gelu, "masked": masked, "ones": np.ones(2, np.float32)}) == {"near": "gelu"}


# -- --reduce --------------------------------------------------------------------------------

def test_ddmin_finds_a_minimal_failing_subset():
    items = [object() for _ in range(16)]
    kept, tests = ddmin(items, lambda sub: items[3] in sub and items[11] in sub)
    assert kept == [items[3], items[11]] and tests < 40


def test_reduce_onnx_writes_one_node_that_still_differs(tmp_path, legalize):
    ref = ROOT / "models/transformer_block.dynamo.onnx"
    bad, readers, _ = _perturbed_onnx(ref, tmp_path / "bad.onnx")
    out = tmp_path / "small.onnx"
    p = legalize(bad, "--verify-only", "--against", ref, "--reduce", out, "--report", tmp_path / "r.json")
    assert_clean(p)
    assert p.returncode == 1
    rep = _report(tmp_path / "r.json")
    assert rep["reduced"]["nodes"] == [rep["check"]["divergence"][0]["node"]] and rep["reduced"]["nodes"][0] in readers
    assert rep["reduced"]["files"] == {"model": str(out), "reference": str(tmp_path / "small.reference.onnx"),
                                       "inputs": str(tmp_path / "small.inputs.npz")}
    assert len(onnx.load(str(out)).graph.node) == 1
    line = next(ln for ln in lines(p.stdout) if ln.startswith("reduced:"))
    assert line.startswith(f"reduced: 1 node ({rep['reduced']['nodes'][0]}) still shows: value ")
    # the three files rerun as a bug report: still a mismatch
    again = legalize(out, "--verify-only", "--against", tmp_path / "small.reference.onnx",
                     "--input", tmp_path / "small.inputs.npz")
    assert_clean(again)
    assert again.returncode == 1 and "results DIFFER" in lines(again.stdout)[-1]


@pytest.mark.parametrize("stem,nodes", sample([("transformer_like", 8), ("broadcast_floor_mod", 5), ("broadcast_pow", 1)],
                                               ["broadcast_pow"], key=lambda v: v[0]))
def test_reduce_tosa_keeps_the_converter_ops_that_differ(stem, nodes, tmp_path):
    from legalizer.numeric.iree_run import run as iree

    out = tmp_path / "small.mlir"
    _, _ = _against(stem, tmp_path, "--reduce", out)
    rep = _report(tmp_path / "r.json")
    assert len(rep["reduced"]["nodes"]) == nodes
    assert rep["reduced"]["nodes"][-1] == "%" + rep["check"]["localize"]["culprit"]
    assert len(legalizer.load(out).graph.ops()) == nodes
    inputs = np.load(tmp_path / "small.inputs.npz")
    expected = np.load(tmp_path / "small.expected.npz")
    got = iree(out.read_text(), [inputs[k] for k in inputs.files])
    want = expected[expected.files[0]]
    assert got[0].shape == want.shape or got[0].size == want.size
    close = np.allclose(got[0].reshape(want.shape), want, rtol=1e-4, atol=1e-5, equal_nan=False)
    assert not close  # the part alone still differs from the reference


def test_reduce_a_violation_to_its_node(tmp_path, legalize):
    out = tmp_path / "v.onnx"
    p = legalize(ROOT / "models/incompatible_add.onnx", "--verify-only", "--reduce", out)
    assert_clean(p)
    assert p.returncode == 1
    small = onnx.load(str(out))
    assert [n.name for n in small.graph.node] == ["bad_add"]
    again = legalize(out, "--verify-only")
    assert again.returncode == 1
    first = [ln for ln in lines(p.stdout) if ln.startswith("error:")]
    assert first and first[0] in lines(again.stdout)


def test_reduce_refuses_what_it_cannot_write(tmp_path, legalize):
    p = legalize(TFLITE / "broadcast_add.tflite", "--verify-only", "--reduce", tmp_path / "x.tflite")
    assert p.returncode == 2
    assert lines(p.stderr) == ["legalize: error: --reduce writes ONNX or TOSA MLIR subgraphs: a tflite model is not"
                               " reduced"]
    (tmp_path / "x.onnx").write_bytes(b"keep")
    p = legalize(ROOT / "models/incompatible_add.onnx", "--verify-only", "--reduce", tmp_path / "x.onnx")
    assert p.returncode == 2 and (tmp_path / "x.onnx").read_bytes() == b"keep"
    assert lines(p.stderr) == [f"legalize: error: {tmp_path / 'x.onnx'}: already exists (use --force to replace it)"]


# -- tolerances and statistics ---------------------------------------------------------------

def test_per_output_tolerances_as_polygraphy_writes_them(tmp_path, legalize):
    bad, _, _ = _perturbed_onnx(ROOT / "models/mlp_bias.onnx", tmp_path / "bad.onnx")
    ref = ROOT / "models/mlp_bias.onnx"
    p = legalize(bad, "--verify-only", "--against", ref, "--atol", "y:10", "--atol", "1e-6", "-q")
    assert p.returncode == 0, p.stdout  # y may be 10 off; nothing else is compared
    p = legalize(bad, "--verify-only", "--against", ref, "--atol", "z:10")
    assert p.returncode == 2
    assert lines(p.stderr) == ["legalize: error: --atol z:...: the model has no output 'z' (its outputs: y)"]
    p = legalize(bad, "--verify-only", "--against", ref, "--rtol", "y:much")
    assert p.returncode == 2
    assert lines(p.stderr) == ["legalize: error: --rtol expects a non-negative number or OUTPUT:NUMBER, not 'y:much'"]


def test_per_output_tolerance_reads_the_reference_once(tmp_path, legalize_in_process, monkeypatch):
    """Its output names come from the one read the comparison uses: the reference file
    is parsed once in this process (its runs on onnxruntime are the child's)."""
    bad, _, _ = _perturbed_onnx(ROOT / "models/mlp_bias.onnx", tmp_path / "bad.onnx")
    ref = tmp_path / "ref.onnx"
    shutil.copyfile(ROOT / "models/mlp_bias.onnx", ref)
    parsed = []
    load_model = onnx.load_model

    def counted(f, *args, **kwargs):
        parsed.append(Path(str(f)))
        return load_model(f, *args, **kwargs)

    monkeypatch.setattr(onnx, "load_model", counted)
    code, out, err = legalize_in_process(bad, "--verify-only", "--against", ref, "--atol", "y:10", "--atol", "1e-6",
                                         "-q")
    assert code == 0, out + err
    assert parsed.count(ref) == 1, parsed


def test_error_statistics_per_output(tmp_path, legalize):
    bad, _, _ = _perturbed_onnx(ROOT / "models/mlp_bias.onnx", tmp_path / "bad.onnx")
    p = legalize(bad, "--verify-only", "--against", ROOT / "models/mlp_bias.onnx", "-v", "--report",
                 tmp_path / "r.json", "--html", tmp_path / "r.html")
    out = _report(tmp_path / "r.json")["check"]["bindings"][0]["outputs"][0]
    st = out["stats"]
    assert set(st) == {"mismatched", "total", "mean_abs_err", "p50_abs_err", "p90_abs_err", "p99_abs_err",
                       "mean_rel_err", "histogram"}
    assert st["total"] == 24 and sum(st["histogram"]["counts"]) == 24
    assert len(st["histogram"]["counts"]) == len(st["histogram"]["edges"]) + 1
    assert st["p50_abs_err"] <= st["p90_abs_err"] <= st["p99_abs_err"] <= out["max_abs_err"]
    assert f"  abs err: mean {st['mean_abs_err']:.3g}, p50 {st['p50_abs_err']:.3g}, p90 {st['p90_abs_err']:.3g}," \
           f" p99 {st['p99_abs_err']:.3g}; {st['mismatched']} of 24 elements outside the tolerances" in p.stdout
    page = (tmp_path / "r.html").read_text()
    hist = re.findall(r'<svg xmlns="http://www.w3.org/2000/svg" class="histogram".*?</svg>', page, re.S)
    assert len(hist) == 1 and ET.fromstring(hist[0]) is not None
