"""Model Explorer overlays (--overlay): node ids as the viewer's adapters give them, and
node data that Model Explorer's own builder accepts. The comparisons with the adapters
run when the viewer extra is installed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T, helper, numpy_helper

from needs import require
from legalizer.explorer_ids import onnx_ids, tflite_ids

ROOT = Path(__file__).resolve().parents[1]


def _save(m: onnx.ModelProto, path: Path) -> Path:
    m.ir_version = 8
    onnx.save(m, str(path))
    return path


def ids_model(graph_name: str = "") -> onnx.ModelProto:
    """Named, unnamed and duplicate-named nodes; an If (both branches with unnamed
    nodes, one named like an unnamed one is renamed) and a Loop body."""
    vi = helper.make_tensor_value_info
    then_g = helper.make_graph([helper.make_node("Add", ["x", "b"], ["t1"]), helper.make_node("Relu", ["t1"], ["t_out"])],
                               "then", [], [vi("t_out", T.FLOAT, [2, 3])])
    else_g = helper.make_graph([helper.make_node("Sub", ["x", "b"], ["e_out"], name="node")], "else", [],
                               [vi("e_out", T.FLOAT, [2, 3])])
    body = helper.make_graph([helper.make_node("Identity", ["cond_in"], ["cond_out"]),
                              helper.make_node("Add", ["v_in", "b"], ["v_out"]),
                              helper.make_node("Mul", ["v_out", "b"], ["v2"], name="dup")], "body",
                             [vi("i", T.INT64, []), vi("cond_in", T.BOOL, []), vi("v_in", T.FLOAT, [2, 3])],
                             [vi("cond_out", T.BOOL, []), vi("v_out", T.FLOAT, [2, 3])])
    nodes = [helper.make_node("Add", ["x", "b"], ["s"]),
             helper.make_node("Mul", ["s", "b"], ["m"], name="dup"),
             helper.make_node("Mul", ["m", "b"], ["m2"], name="dup"),
             helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g),
             helper.make_node("Constant", [], ["n"], value=helper.make_tensor("n", T.INT64, [], [2])),
             helper.make_node("Loop", ["n", "c", "m2"], ["z"], name="loop", body=body)]
    g = helper.make_graph(nodes, graph_name, [vi("x", T.FLOAT, [2, 3]), vi("b", T.FLOAT, [3]), vi("c", T.BOOL, [])],
                          [vi("y", T.FLOAT, [2, 3]), vi("z", T.FLOAT, [2, 3])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_onnx_ids_follow_the_adapters_rules():
    graphs = {g.id: [(n.id, n.label) for n in g.nodes] for g in onnx_ids(ids_model("main"))}
    assert graphs == {
        "main": [("node", "s"), ("dup", "dup"), ("dup_1", "dup"), ("node_1", "y"),
                 ("node_1/else_branch/node", "node"), ("node_1/then_branch/node", "t1"),
                 ("node_1/then_branch/node_2", "t_out"), ("node_3", "n"), ("loop", "loop")],
        "loop/body": [("node", "cond_out"), ("node_4", "v_out"), ("dup", "dup")]}
    paths = {g.id: g.path for g in onnx_ids(ids_model("main"))}
    assert paths == {"main": "", "loop/body": "loop.body"}


def _adapter_graphs(path: Path) -> dict:
    require("viewer")
    import model_explorer_onnx.main as main

    return {g.id: [n.id for n in g.nodes] for g in main.ONNXAdapter().convert(str(path), {})["graphs"]}


@pytest.mark.parametrize("graph_name", ["", "main"])
def test_onnx_ids_exist_in_the_graph_model_explorer_onnx_builds(tmp_path, graph_name):
    path = _save(ids_model(graph_name), tmp_path / "ids.onnx")
    theirs = _adapter_graphs(path)
    ours = {g.id: [n.id for n in g.nodes] for g in onnx_ids(onnx.load(str(path)))}
    assert set(ours) == set(theirs)
    for gid, ids in ours.items():
        assert [i for i in ids if i not in theirs[gid]] == []
        # and every op node the adapter draws is one of ours (not its value, phi and capture nodes)
        drawn = [i for i in theirs[gid] if not i.startswith("[value] ") and not i.endswith(("_phi", "_capture"))]
        assert sorted(drawn) == sorted(ids)


@pytest.mark.parametrize("name", ["two_signatures", "transformer_like", "broadcast_add", "mobilenet_like_int8"])
def test_tflite_ids_exist_in_the_graph_the_builtin_adapter_builds(name):
    require("viewer")
    import ai_edge_model_explorer_adapter as convert

    path = ROOT / "models" / "tflite" / f"{name}.tflite"
    (collection,) = json.loads(convert.ConvertFlatbufferDirectlyToJson(convert.VisualizeConfig(), str(path)))
    theirs = {g["id"]: {n["id"]: n["label"] for n in g["nodes"]} for g in collection["subgraphs"]}
    ours = tflite_ids(path)
    assert [g.id for g in ours] == [g["id"] for g in collection["subgraphs"]]
    for g in ours:
        for n in g.nodes:
            assert n.id in theirs[g.id]
            assert theirs[g.id][n.id] == n.op.split(".", 1)[1].lower()  # the adapter labels ops by name
        assert len(g.nodes) == sum(1 for label in theirs[g.id].values()
                                   if label not in ("GraphInputs", "GraphOutputs", "pseudo_const"))


# -- overlays -------------------------------------------------------------------------

def bias_model() -> onnx.ModelProto:
    """Add(x[Nx4x5], b[5]) named, Mul(t, c[4x1]) and Relu unnamed: two reshapes inserted."""
    vi = helper.make_tensor_value_info
    nodes = [helper.make_node("Add", ["x", "b"], ["t"], name="add_bias"), helper.make_node("Mul", ["t", "c"], ["u"]),
             helper.make_node("Relu", ["u"], ["y"])]
    g = helper.make_graph(nodes, "g", [vi("x", T.FLOAT, ["N", 4, 5]), vi("b", T.FLOAT, [5]), vi("c", T.FLOAT, [4, 1])],
                          [vi("y", T.FLOAT, ["N", 4, 5])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _results(path: Path) -> dict:
    return {g: d["results"] for g, d in json.loads(path.read_text()).items()}


def _loads_with_node_data_builder(path: Path) -> None:
    """The file is what Model Explorer's builder writes for the same data."""
    require("viewer")
    import model_explorer.node_data_builder as ndb

    data = json.loads(path.read_text())
    graphs = {}
    for gid, g in data.items():
        fields = dict(g)
        results = {k: ndb.NodeDataResult(**v) for k, v in fields.pop("results").items()}
        gradient = [ndb.GradientItem(**x) for x in fields.pop("gradient")]
        thresholds = [ndb.ThresholdItem(**x) for x in fields.pop("thresholds")]
        graphs[gid] = ndb.GraphNodeData(results=results, gradient=gradient, thresholds=thresholds, **fields)
    assert json.loads(ndb.ModelNodeData(graphsData=graphs).to_json_string()) == data


def test_overlay_of_a_legalized_model(tmp_path, legalize_in_process):
    model = _save(bias_model(), tmp_path / "bias.onnx")
    out = tmp_path / "ov"
    code, _, err = legalize_in_process(model, "--overlay", out, "--localize")
    assert code == 0, err
    assert sorted(p.name for p in out.iterdir()) == [
        "bias.abs-error.json", "bias.legal.abs-error.json", "bias.legal.rel-error.json", "bias.legal.verdict.json",
        "bias.rel-error.json", "bias.verdict.json"]
    assert _results(out / "bias.verdict.json") == {"g": {
        "add_bias": {"value": "rewritten: reshape inserted", "bgColor": "#fdd663"},
        "node": {"value": "rewritten: reshape inserted", "bgColor": "#fdd663"}}}
    assert _results(out / "bias.legal.verdict.json") == {"g": {
        "b_r3": {"value": "inserted: reshape", "bgColor": "#aecbfa"},
        "add_bias": {"value": "rewritten: reshape inserted", "bgColor": "#fdd663"},
        "c_r3": {"value": "inserted: reshape", "bgColor": "#aecbfa"},
        "node": {"value": "rewritten: reshape inserted", "bgColor": "#fdd663"}}}
    # the outputs agree: every compared value's error is 0
    assert _results(out / "bias.legal.abs-error.json") == {"g": {n: {"value": 0.0} for n in
                                                                 ("add_bias", "node", "node_1")}}
    for f in out.iterdir():
        _loads_with_node_data_builder(f)
    for f, m in (("bias.verdict.json", model), ("bias.legal.verdict.json", tmp_path / "bias.legal.onnx")):
        theirs = _adapter_graphs(m)
        for gid, results in _results(out / f).items():
            assert set(results) <= set(theirs[gid])


def test_overlay_of_a_violation_and_of_constraints(tmp_path, legalize_in_process):
    out = tmp_path / "ov"
    code, _, _ = legalize_in_process(ROOT / "models" / "incompatible_add.onnx", tmp_path / "x.onnx", "--overlay", out)
    assert code == 1
    assert _results(out / "incompatible_add.verdict.json") == {
        "incompatible_add": {"bad_add": {"value": "violation: incompatible-operands", "bgColor": "#f28b82"}}}
    code, _, _ = legalize_in_process(ROOT / "models" / "dynamic_broadcast.onnx", tmp_path / "d.legal.onnx",
                                     "--overlay", out)
    assert code == 0
    assert _results(out / "dynamic_broadcast.constraints.json")["dynamic_broadcast"]["sub_N_M"] == {
        "value": "M == N or M == 1 or N == 1", "bgColor": "#e6c9a8"}
    assert (out / "d.legal.verdict.json").exists()
    _loads_with_node_data_builder(out / "dynamic_broadcast.constraints.json")


def _scaled(bias: float, path: Path) -> Path:
    vi = helper.make_tensor_value_info
    inits = [numpy_helper.from_array(np.full((3,), 2, np.float32), "w"),
             numpy_helper.from_array(np.full((3,), bias, np.float32), "c")]
    nodes = [helper.make_node("Mul", ["x", "w"], ["m"], name="scale"), helper.make_node("Add", ["m", "c"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"], name="act")]
    g = helper.make_graph(nodes, "g", [vi("x", T.FLOAT, [2, 3])], [vi("y", T.FLOAT, [2, 3])], inits)
    return _save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_error_overlay_makes_the_culprit_the_hottest_node(tmp_path, legalize_in_process):
    """Two models that differ in the Add's constant, compared with --against and
    localized: the Add (unnamed: the adapter's ``node``) has the largest relative error."""
    old, new = _scaled(0.5, tmp_path / "old.onnx"), _scaled(0.75, tmp_path / "new.onnx")
    out = tmp_path / "ov"
    code, stdout, _ = legalize_in_process(new, "--verify-only", "--against", old, "--localize", "--overlay", out)
    assert code == 1 and "culprit: node 'a' (Add)" in stdout
    abs_err = _results(out / "new.abs-error.json")["g"]
    assert abs_err == {"scale": {"value": 0.0}, "node": {"value": 0.25}, "act": {"value": 0.25}}
    rel = _results(out / "new.rel-error.json")["g"]
    assert max(rel, key=lambda k: rel[k]["value"]) == "node"
    assert set(abs_err) <= set(_adapter_graphs(new)["g"])
    _loads_with_node_data_builder(out / "new.rel-error.json")


def test_overlay_tflite(tmp_path, legalize_in_process):
    src = ROOT / "models" / "tflite" / "broadcast_add.tflite"
    out = tmp_path / "ov"
    code, _, err = legalize_in_process(src, tmp_path / "b.legal.tflite", "--overlay", out, "--no-check")
    assert code == 0, err
    before, after = _results(out / "broadcast_add.verdict.json"), _results(out / "b.legal.verdict.json")
    assert set(before) == set(after) == {"broadcast_add"}
    assert before["broadcast_add"]["0"]["value"] == "rewritten: reshape inserted"
    assert {k: v["value"] for k, v in after["broadcast_add"].items()} == {
        "0": "inserted: reshape", "1": "rewritten: reshape inserted", "2": "rewritten: constant reshaped"}
    ids = {n.id for g in tflite_ids(tmp_path / "b.legal.tflite") for n in g.nodes}
    assert set(after["broadcast_add"]) <= ids


def test_overlay_folder_usage_errors(tmp_path, legalize_in_process):
    model = _save(bias_model(), tmp_path / "bias.onnx")
    (tmp_path / "afile").write_text("x")
    code, _, err = legalize_in_process(model, "--overlay", tmp_path / "afile")
    assert code == 2 and "--overlay names a folder (made if missing), not a file" in err
    assert not (tmp_path / "bias.legal.onnx").exists()
    (tmp_path / "ov").mkdir()
    (tmp_path / "ov" / "bias.verdict.json").write_text("{}")
    code, _, err = legalize_in_process(model, "--overlay", tmp_path / "ov")
    assert code == 2 and "bias.verdict.json: already exists (use --force to replace it)" in err
    assert (tmp_path / "ov" / "bias.verdict.json").read_text() == "{}"


def test_library_overlays_from_a_report_file(tmp_path, legalize_in_process):
    import legalizer

    model = _save(bias_model(), tmp_path / "bias.onnx")
    report = tmp_path / "r.json"
    code, _, err = legalize_in_process(model, "--report", report)
    assert code == 0, err
    data = legalizer.overlays(model, report, tmp_path / "bias.legal.onnx")
    assert sorted(data) == ["input", "output"] and sorted(data["output"]) == ["verdict"]
    assert data["output"]["verdict"]["g"]["results"]["b_r3"] == {"value": "inserted: reshape", "bgColor": "#aecbfa"}
    assert data["input"]["verdict"]["g"]["results"]["add_bias"]["value"] == "rewritten: reshape inserted"


def if_loop_model() -> onnx.ModelProto:
    """An unnamed If whose then-branch adds a rank-1 bias (a reshape is inserted there),
    and a Loop whose body does the same."""
    vi = helper.make_tensor_value_info
    then_g = helper.make_graph([helper.make_node("Add", ["x", "b"], ["t_out"])], "then", [],
                               [vi("t_out", T.FLOAT, [2, 3])])
    else_g = helper.make_graph([helper.make_node("Identity", ["x"], ["e_out"])], "else", [],
                               [vi("e_out", T.FLOAT, [2, 3])])
    body = helper.make_graph([helper.make_node("Identity", ["cond_in"], ["cond_out"]),
                              helper.make_node("Mul", ["v_in", "b"], ["v_out"], name="scale")], "body",
                             [vi("i", T.INT64, []), vi("cond_in", T.BOOL, []), vi("v_in", T.FLOAT, [2, 3])],
                             [vi("cond_out", T.BOOL, []), vi("v_out", T.FLOAT, [2, 3])])
    nodes = [helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g),
             helper.make_node("Constant", [], ["n"], value=helper.make_tensor("n", T.INT64, [], [2])),
             helper.make_node("Loop", ["n", "c", "y"], ["z"], name="loop", body=body)]
    g = helper.make_graph(nodes, "main", [vi("x", T.FLOAT, [2, 3]), vi("b", T.FLOAT, [3]), vi("c", T.BOOL, [])],
                          [vi("z", T.FLOAT, [2, 3])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_overlay_lands_in_if_branches_and_loop_bodies(tmp_path, legalize_in_process):
    model = _save(if_loop_model(), tmp_path / "sub.onnx")
    out = tmp_path / "ov"
    code, _, err = legalize_in_process(model, "--overlay", out)
    assert code == 0, err
    before = _results(out / "sub.verdict.json")
    assert before == {"main": {"node/then_branch/node": {"value": "rewritten: reshape inserted", "bgColor": "#fdd663"}},
                      "loop/body": {"scale": {"value": "rewritten: reshape inserted", "bgColor": "#fdd663"}}}
    after = _results(out / "sub.legal.verdict.json")
    assert {g: sorted(v["value"] for v in r.values()) for g, r in after.items()} == {
        "main": ["inserted: reshape", "rewritten: reshape inserted"],
        "loop/body": ["inserted: reshape", "rewritten: reshape inserted"]}
    for f, m in (("sub.verdict.json", model), ("sub.legal.verdict.json", tmp_path / "sub.legal.onnx")):
        theirs = _adapter_graphs(m)
        for gid, results in _results(out / f).items():
            assert set(results) <= set(theirs[gid]), (f, gid)
