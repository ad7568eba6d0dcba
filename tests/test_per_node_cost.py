"""What keeps a large graph cheap changes nothing a run gives: shape inference without
data propagation only where none can happen, the nodes streamed into the file, the
shared datum of single-use edges, Kahn's order with its chain shortcut and kept across
removals, the cyclic collector paused and its survivors promoted."""

from __future__ import annotations

import gc
import heapq
import random
from pathlib import Path

import numpy as np
import onnx
import onnx.defs
import pytest
from hypothesis import given, settings, strategies as st
from onnx import AttributeProto, TensorProto, helper, numpy_helper

import legalizer
from legalizer.kinds.onnx.exporter import export_model
from legalizer.kinds.onnx import importer as onnx_importer
from legalizer.kinds.onnx.importer import import_model
from legalizer.ir import CONST, INPUT, OP, OUTPUT, Graph, Node, TensorType, Value
from legalizer.ir.gc import paused_gc
from legalizer.ir.graph import ONE_USE
from legalizer.kinds.onnx.protoutil import parse_types
from legalizer.target_passes import legalize

ROOT = Path(__file__).resolve().parent.parent
WHEEL_LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def chain(nodes: int, with_shape_op: bool = False) -> onnx.ModelProto:
    """The bench's synthetic chain (scripts/bench.py): mixed-rank elementwise ops over
    x:[N,64] (rank-1 and rank-2 constants, a scalar, a unary op)."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(64).astype(np.float32), "bias"),
             numpy_helper.from_array(rng.standard_normal((1, 64)).astype(np.float32), "scale"),
             numpy_helper.from_array(np.array(0.5, np.float32), "half")]
    pattern = [("Add", "bias"), ("Mul", "scale"), ("Tanh", None), ("Sub", "half"), ("Max", "bias")]
    made, prev = [], "x"
    for i in range(nodes):
        op, const = pattern[i % len(pattern)]
        made.append(helper.make_node(op, [prev, const] if const else [prev], [f"v{i}"], name=f"n{i}"))
        prev = f"v{i}"
    if with_shape_op:  # y = Reshape(v, Shape(x)): its dims only data propagation finds
        made += [helper.make_node("Shape", ["x"], ["s"], name="shape"),
                 helper.make_node("Reshape", [prev, "s"], ["y"], name="reshape")]
        prev = "y"
    g = helper.make_graph(made, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
                          [helper.make_tensor_value_info(prev, TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


# ---- shape inference --------------------------------------------------------------

def test_data_propagation_lists_cover_every_onnx_op_they_must():
    """Every op with a data propagation function is a source of data or one that passes
    its operands' data on, and every op with a graph attribute is listed as holding
    subgraphs: an onnx release that adds one fails here, not silently."""
    schemas = onnx.defs.get_all_schemas_with_history()
    propagating = {s.name for s in schemas if s.has_data_propagation_function}
    assert propagating, "onnx.defs lists no op with a data propagation function"
    assert propagating <= set(onnx_importer.DATA_SOURCE_OPS) | set(onnx_importer.DATA_PASSING_OPS), \
        propagating - set(onnx_importer.DATA_SOURCE_OPS) - set(onnx_importer.DATA_PASSING_OPS)
    with_graphs = {s.name for s in schemas
                   if any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for a in s.attributes.values())}
    assert with_graphs <= set(onnx_importer.SUBGRAPH_OPS), with_graphs - set(onnx_importer.SUBGRAPH_OPS)


def _sample_models():
    models = [(p.name, onnx.load(str(p))) for p in sorted((ROOT / "models").glob("*.onnx"))]
    models += [(p.name, onnx.load(str(p), load_external_data=False)) for p in sorted(WHEEL_LIGHT.glob("*.onnx"))]
    return models + [("chain", chain(50)), ("chain+shape", chain(50, with_shape_op=True))]


def test_shape_inference_without_data_propagation_only_where_it_finds_nothing():
    """Where no value has data to propagate, inference without it gives the very bytes
    inference with it gives; the models here fall on both sides."""
    skipped = kept = 0
    for name, model in _sample_models():
        data = model.SerializeToString()
        if onnx_importer._needs_data_propagation(model, data):
            kept += 1
            continue
        skipped += 1
        assert onnx_importer._infer_bytes(data, False) == onnx_importer._infer_bytes(data, True), name
    assert skipped >= 5 and kept >= 5, (skipped, kept)


def test_no_data_propagation_changes_nothing_over_the_onnx_test_suite():
    """Every node test and wheel model (2,033) that needs no data propagation is
    inferred to the same bytes without it (and fails alike where inference fails)."""
    import onnx_suite as suite

    def infer(data: bytes, data_prop: bool):
        try:
            return onnx_importer._infer_bytes(data, data_prop)
        except Exception as e:  # noqa: BLE001 - then both must fail alike
            return type(e).__name__

    skipped = 0
    for case in suite.node_cases() + suite.wheel_cases():
        data = case.model.SerializeToString()
        if not onnx_importer._needs_data_propagation(case.model, data):
            skipped += 1
            assert infer(data, False) == infer(data, True), case.name
    assert skipped >= 1500, skipped


def test_data_propagation_still_runs_where_a_shape_is_computed():
    m = chain(5, with_shape_op=True)
    assert import_model(m).graph.value("y").type == TensorType("float", (2, 64))
    without = parse_types(onnx_importer._infer_bytes(m.SerializeToString(), False))
    y = [vi for vi in without.graph.output if vi.name == "y"][0]
    assert onnx.TypeProto.FromString(y.type).tensor_type.shape.dim[0].dim_value == 0  # unknown without it
    # a small integer constant is data too
    m = chain(5)
    m.graph.initializer.append(numpy_helper.from_array(np.array([2, 64], np.int64), "dims"))
    assert onnx_importer._needs_data_propagation(m, m.SerializeToString())
    assert not onnx_importer._needs_data_propagation(chain(5), chain(5).SerializeToString())


def test_inferred_types_read_as_bytes_are_the_type_protos():
    m = chain(10)
    data = onnx_importer._infer_bytes(m.SerializeToString(), True)
    full, types = onnx.ModelProto.FromString(data), parse_types(data)
    assert [(vi.name, vi.type.SerializeToString()) for vi in full.graph.value_info] == \
        [(vi.name, vi.type) for vi in types.graph.value_info]
    assert len(types.graph.value_info) == 9 and types.graph.output[0].type == full.graph.output[0].type.SerializeToString()


def test_model_is_not_changed_by_import():
    m = chain(20)
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_value = -1  # cleared on a copy for inference
    before = m.SerializeToString()
    import_model(m)
    assert m.SerializeToString() == before


def test_shape_inference_runs_while_the_ir_is_built(monkeypatch):
    """The helper infers shapes while this process builds the IR from what the model
    declares: inference is asked first and answers only once the build has begun (a
    build that waited for inference first would find it never answering)."""
    building = __import__("threading").Event()
    real_infer, real_ops = onnx_importer._infer, onnx_importer._Importer._ops

    def infer(serialized, data_prop=True):
        assert building.wait(30), "the IR was not being built while shape inference ran"
        return real_infer(serialized, data_prop)

    def ops(self, b):
        building.set()
        return real_ops(self, b)

    monkeypatch.setattr(onnx_importer, "_infer", infer)
    monkeypatch.setattr(onnx_importer._Importer, "_ops", ops)
    g = import_model(chain(20)).graph
    # the inferred types are merged in: the chain declares only x and the output
    assert g.value("v7").type == TensorType("float", (2, 64)) and g.value("v19").type == TensorType("float", (2, 64))


def test_inference_note_comes_first_and_a_failed_inference_leaves_declared_types(monkeypatch):
    """What inference reports is the first warning, as when it ran before the build;
    where it gives nothing, the values keep the types the model declares."""
    m = chain(6)
    m.graph.value_info.append(helper.make_tensor_value_info("v2", TensorProto.FLOAT, ["N", 64]))
    m.graph.node[0].domain = "com.example"  # a warning made while the build runs
    m.opset_import.append(helper.make_opsetid("com.example", 1))
    monkeypatch.setattr(onnx_importer, "_infer", lambda serialized, data_prop=True: (None, "inference note"))
    model = import_model(m)
    assert model.warnings[0] == "inference note" and "com.example.Add" in model.warnings[1]
    g = model.graph
    assert g.value("v2").type == TensorType("float", ("N", 64)) and g.value("v3").type.dtype is None
    assert g.value("bias").type == TensorType("float", (64,))


def test_inference_out_of_memory_without_data_propagation_is_said(monkeypatch):
    """Where ONNX shape inference runs out of its memory even without data propagation
    (a 1M-node chain's did at 32 B a byte of the model, and nothing said so: its types
    came from legalize's own rank rules), the helper answers ``M`` and the run warns,
    naming the allowance; a model inference cannot read is still ``-``, said by no one."""
    from legalizer import bounded_helper
    from legalizer.kinds.onnx import infer as onnx_infer

    def out_of_memory(serialized, data_prop):
        raise MemoryError

    monkeypatch.setattr(onnx_infer, "infer_bytes", out_of_memory)
    assert onnx_infer.infer_here(b"", data_prop=False) == b"M"
    assert onnx_infer.infer_here(b"", data_prop=True) == b"M"  # with it, then without it
    monkeypatch.setattr(onnx_infer, "infer_bytes", lambda serialized, data_prop: int("bad"))
    assert onnx_infer.infer_here(b"", data_prop=False) == b"-"

    answers = iter([b"M", b"-"])
    monkeypatch.setattr(bounded_helper, "call", lambda fn, arg, memory, timeout: next(answers))
    assert onnx_importer._infer(b"x" * (40 << 20), False) == (
        None, "ONNX shape inference ran out of its memory (2.5 GiB); the shapes are those the model declares")
    assert onnx_importer._infer(b"x" * 100, False) == (None, None)


def test_a_node_of_a_large_graph_costs_under_1_5_kb():
    """The Python objects an imported chain holds per node: the Node and its Values,
    their lists and names, networkx's successor and predecessor tables; the Node is
    networkx's entry for it, with no attribute dict of its own (1.63 KB before)."""
    import tracemalloc

    m = chain(20_000)
    import_model(chain(10), infer=False)  # what is made once (the op tables)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        model = import_model(m, infer=False)
        gc.collect()
        per_node = (tracemalloc.get_traced_memory()[0] - before) / 20_000
    finally:
        tracemalloc.stop()
    assert len(model.graph) == 20_000 + 5
    assert per_node < 1536, per_node


def test_a_flat_graph_is_not_searched_for_subgraphs(tmp_path):
    """While no graph nested in a node was made in the process, ``Graph.subgraphs``
    looks at no node's attributes (a TFLite chain's every node has some); one made, or
    copied, and the owners are found again."""
    import subprocess
    import sys

    from tflite_build import add_chain

    source = tmp_path / "chain.tflite"
    source.write_bytes(add_chain(50))
    probe = (
        "import sys, legalizer, legalizer.ir.graph as G\n"
        "from legalizer.target_passes import legalize\n"
        "m = legalizer.load(sys.argv[1])\n"
        "looked = []\n"
        "real = G._holds_graph\n"
        "G._holds_graph = lambda attrs: looked.append(1) or real(attrs)\n"
        "legalize(m, 'tosa')\n"
        "print(len(looked), getattr(G.Graph, 'nested', None))\n")
    out = subprocess.run([sys.executable, "-c", probe, str(source)], capture_output=True, text=True,
                         env={**__import__("os").environ, "PYTHONPATH": str(ROOT)}, check=True).stdout
    assert out.split() == ["0", "0"]


def test_subgraphs_are_found_once_a_nested_graph_is_made(monkeypatch):
    then = helper.make_graph([helper.make_node("Neg", ["x"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])])
    other = helper.make_graph([helper.make_node("Abs", ["x"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2])])
    g = helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)], "g",
                          [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                           helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    monkeypatch.setattr(Graph, "nested", 0)  # as in a process that made none before
    graph = import_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])).graph
    assert Graph.nested == 2
    assert [(n.op, attr, sub.name) for n, attr, sub in graph.subgraphs()] == \
        [("If", "else_branch", "else"), ("If", "then_branch", "then")]


def test_ranks_are_inferred_backwards_only_where_a_result_is_unranked(monkeypatch):
    """``infer_ranks``' backward walk (a broadcast's declared result ranks its one
    unranked operand) runs only where an op's result is left unranked: a ranked chain
    is walked once, not twice; the graph that needs it still gets it."""
    from legalizer.shapes import ranks

    walks = []
    real = ranks._from_results
    monkeypatch.setattr(ranks, "_from_results", lambda g, lookup: walks.append(g.name) or real(g, lookup))
    import_model(chain(30))
    assert walks == []
    g = helper.make_graph(
        [helper.make_node("ConstantOfShape", ["s"], ["u"], value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])),
         helper.make_node("Add", ["u", "c"], ["y"])], "declared",
        [helper.make_tensor_value_info("s", TensorProto.INT64, ["K"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b", "c"])],
        [numpy_helper.from_array(np.array(0.5, np.float32), "c")])
    graph = import_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])).graph
    assert walks[0] == "declared" and graph.value("u").type.shape == (None, None, None)


def test_a_model_with_a_subgraph_attribute_has_its_bytes():
    """The operand-count check looks at attributes only where the model's bytes hold a
    GRAPH or GRAPHS attribute type: every model of the onnx test suite and the wheel
    with such an attribute has them, and a flat chain has none."""
    import onnx_suite as suite

    def has_subgraph(g) -> bool:
        return any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for n in g.node for a in n.attribute)

    nested = 0
    for case in suite.node_cases() + suite.wheel_cases():
        if has_subgraph(case.model.graph):
            nested += 1
            assert onnx_importer._SUBGRAPH_ATTRIBUTE.search(case.model.SerializeToString()), case.name
    assert nested >= 20, nested
    assert not onnx_importer._SUBGRAPH_ATTRIBUTE.search(chain(50).SerializeToString())


# ---- export -------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["chain", "mlp.dynamo.onnx", "small_cnn.torchscript.onnx",
                                  "transformer_block.dynamo.onnx", "dynamic_broadcast.onnx"])
def test_streamed_save_writes_what_onnx_save_writes(tmp_path, name):
    """The nodes and initializers streamed one at a time into the file (legalize's
    save) give the bytes onnx.save writes for the exported model, legalized or not."""
    if name == "chain":
        source = tmp_path / "chain.onnx"
        onnx.save(chain(200), str(source))
    else:
        source = ROOT / "models" / name
    for rewrite in (False, True):
        model = legalizer.load(source)
        if rewrite:
            legalize(model, "tosa")
        out = tmp_path / f"out_{rewrite}.onnx"
        legalizer.save(model, out, force=True)
        want = export_model(model.graph, model.proto).SerializeToString()
        assert out.read_bytes() == want, (name, rewrite)
        if not rewrite:
            assert out.read_bytes() == source.read_bytes(), name


def test_the_save_holds_the_node_bytes_once(tmp_path):
    """The nodes streamed into the file are serialized into one buffer as they come: at
    its peak the save of a legalized chain holds under 200 B of Python objects a node
    (a list of three pieces a node, joined at the end, held 440 B)."""
    import tracemalloc

    source = tmp_path / "chain.onnx"
    onnx.save(chain(20_000), str(source))
    model = legalizer.load(source)
    legalize(model, "tosa")
    gc.collect()
    tracemalloc.start()
    try:
        legalizer.save(model, tmp_path / "out.onnx", force=True)
        peak = tracemalloc.get_traced_memory()[1] / 20_000
    finally:
        tracemalloc.stop()
    assert (tmp_path / "out.onnx").read_bytes() == export_model(model.graph, model.proto).SerializeToString()
    assert peak < 200, peak


# ---- the Graph's bookkeeping ---------------------------------------------------------

def _graph_with(n_ops: int):
    g = Graph("g", {"": 17})
    x = g.add_node(Node(INPUT, "$input", name="x", outputs=[Value("x", TensorType("float", (3,)))]))
    return g, x.output


def test_single_use_edges_share_one_read_only_datum():
    g, x = _graph_with(0)
    a = g.add_op("Neg", [x], [x.type], name="a")
    b = g.add_op("Add", [a.output, x], [x.type], name="b")
    succ = g._nx._succ
    assert succ[a.id][b.id] is ONE_USE and succ[x.producer.id][a.id] is ONE_USE
    with pytest.raises(TypeError):
        ONE_USE["uses"] = 2  # never written to
    g.set_input(b, 1, a.output)  # b uses a twice: a dict of its own
    assert succ[a.id][b.id] == {"uses": 2} and b.id not in succ[x.producer.id]
    assert g._nx._pred[b.id][a.id] is succ[a.id][b.id]
    g.set_input(b, 0, x)  # down to one use: the edge stays, counted
    assert succ[a.id][b.id] == {"uses": 1}
    g.set_input(b, 1, x)  # no use: the edge goes
    assert b.id not in succ[a.id] and a.id not in g._nx._pred[b.id]
    c = g.add_op("Neg", [a.output], [x.type], name="c")
    g.order(c, b)  # an ordering edge on a single-use one... and on none
    g.order(a, c)
    assert succ[a.id][c.id] == {"uses": 1, "order": True} and succ[c.id][b.id] == {"uses": 0, "order": True}
    g.set_input(c, 0, x)  # the use goes, the order stays
    assert succ[a.id][c.id] == {"uses": 0, "order": True}
    assert ONE_USE == {"uses": 1}


def _reference_order(g: Graph) -> list:
    """Kahn's algorithm with a plain heap, smallest id first: the order nodes() keeps."""
    succ, pred = g._nx._succ, g._nx._pred
    indegree = {n: len(p) for n, p in pred.items()}
    ready = [n for n, d in indegree.items() if d == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        n = heapq.heappop(ready)
        order.append(n)
        for m in succ[n]:
            indegree[m] -= 1
            if indegree[m] == 0:
                heapq.heappush(ready, m)
    return order


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 40), st.integers(0, 2**32 - 1))
def test_order_is_kahns_smallest_id_first_after_rewrites_and_removals(n, seed):
    """Random DAGs, rewired so that ids are out of order (the chain shortcut and the
    heap both at work), then unused nodes removed (the cached order kept): nodes() is
    always what a plain Kahn's algorithm gives."""
    rnd = random.Random(seed)
    g, x = _graph_with(0)
    values = [x]
    for i in range(n):
        ins = [rnd.choice(values) for _ in range(rnd.randint(1, 3))]
        values.append(g.add_op("Sum", ins, [x.type], name=f"s{i}").output)
    ops = [v.producer for v in values[1:]]
    for _ in range(n // 2):  # a later node's value into an earlier node (no cycle: reversed ids)
        late, early = rnd.sample(ops, 2)
        if late.id < early.id:
            late, early = early, late
        if not any(v is early.output for v in g._nx._pred) and early.id not in _ancestors(g, late.id):
            g.set_input(late, 0, early.output)
    assert [m.id for m in g.nodes()] == _reference_order(g)
    for node in reversed(g.nodes()):
        if node.kind == OP and not g.has_uses(node) and rnd.random() < 0.7:
            g.remove_node(node)
            assert [m.id for m in g.nodes()] == _reference_order(g)


def _ancestors(g: Graph, nid: int) -> set:
    seen, todo = set(), [nid]
    while todo:
        for p in g._nx._pred[todo.pop()]:
            if p not in seen:
                seen.add(p)
                todo.append(p)
    return seen


def test_removing_an_unused_node_keeps_the_cached_order():
    g, x = _graph_with(0)
    a = g.add_op("Neg", [x], [x.type], name="a")
    b = g.add_op("Neg", [x], [x.type], name="b")
    order = g.nodes()
    g.remove_node(b)
    assert g._order is not None  # kept, b filtered out of it
    assert g.nodes() == [n for n in order if n is not b]


# ---- the cyclic collector ------------------------------------------------------------

def test_paused_gc_promotes_what_it_made_and_leaves_others_frozen_objects_alone():
    assert gc.isenabled()
    with paused_gc():
        assert not gc.isenabled()
        with paused_gc():  # nested: the outer one resumes it
            pass
        assert not gc.isenabled()
        made = [[i] for i in range(1000)]
        assert any(obj is made for obj in gc.get_objects(0))
    assert gc.isenabled() and gc.get_freeze_count() == 0
    assert any(obj is made for obj in gc.get_objects(2)), "what was made is in the oldest generation"
    try:
        gc.freeze()  # someone else's frozen objects: not unfrozen by a pause
        frozen = gc.get_freeze_count()
        with paused_gc():
            more = [[i] for i in range(10)]
        assert gc.get_freeze_count() == frozen and gc.isenabled() and more
    finally:
        gc.unfreeze()


# ---- the xla form of shared values -------------------------------------------------------

def _symbolic_chain(nodes: int) -> onnx.ModelProto:
    m = chain(nodes)
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    out = m.graph.output[0]
    out.CopyFrom(helper.make_tensor_value_info(out.name, TensorProto.FLOAT, ["N", 64]))
    return m


@pytest.mark.parametrize("nodes", [10, 200])
def test_xla_form_of_a_chain_broadcasts_each_shared_value_once(nodes):
    """The xla form of the chain: one broadcast per shared constant and one runtime shape
    (of the symbol N, from x), whatever the chain's length: the pass and its output
    grow with the distinct broadcasts, not with their uses (each use once had its own
    Shape, Gather, Concat, Expand and two index constants)."""
    from legalizer.numeric.ort import check

    proto = _symbolic_chain(nodes)
    model = import_model(proto)
    done = legalize(model, "xla")
    ops = {}
    for n in model.graph.ops():
        ops[n.op] = ops.get(n.op, 0) + 1
    made = {"Shape": 1, "Gather": 1, "Concat": 1, "Expand": 3}
    elementwise = {"Add": (nodes + 4) // 5, "Mul": (nodes + 3) // 5, "Tanh": (nodes + 2) // 5,
                   "Sub": (nodes + 1) // 5, "Max": nodes // 5}
    assert ops == {**made, **{k: v for k, v in elementwise.items() if v}}
    assert done.stats["broadcasts_made_explicit"] == 3
    assert [n.inputs[0].name for n in model.graph.ops() if n.op == "Shape"] == ["x"]
    assert legalizer.verify(model.graph, "xla").violations == []
    out = legalizer.to_onnx(model)
    onnx.checker.check_model(out, full_check=True)
    res = check(proto, out, provider="cpu", dims={"N": 3})
    assert res.ok and res.ran, res.to_json()


def test_xla_shares_a_runtime_broadcast_check_between_nodes(onnx_model):
    """Two nodes broadcasting the same two dynamic dims share one ``Where(a == 1, b, a)``
    and its shape; the report counts the check once, and both run right when a dim is 1."""
    from legalizer.numeric.ort import check

    vi = helper.make_tensor_value_info
    proto = onnx_model([helper.make_node("Add", ["a", "b"], ["s"], name="add"),
                        helper.make_node("Mul", ["a", "b"], ["p"], name="mul")],
                       [vi("a", TensorProto.FLOAT, ["M", 4]), vi("b", TensorProto.FLOAT, [None, 4])],
                       [vi("s", TensorProto.FLOAT, None), vi("p", TensorProto.FLOAT, None)])
    model = import_model(proto)
    done = legalize(model, "xla")
    ops = [n.op for n in model.graph.ops()]
    assert ops.count("Where") == 1 and done.stats["runtime_broadcast_checks"] == 1
    assert ops.count("Expand") == 2 and ops.count("Shape") == 2  # a and b, each once for both nodes
    assert legalizer.verify(model.graph, "xla").violations == []
    res = check(proto, legalizer.to_onnx(model), provider="cpu")
    assert res.ok and res.ran, res.to_json()
    assert (1, 3) in {tuple(sorted(b.dims.values())) for b in res.bindings if not b.skipped}  # one dim 1, the other 3


def _tflite_chain(tmp_path, ops: int) -> Path:
    import sys

    sys.path.insert(0, str(ROOT / "tests"))
    from tflite_build import add_chain

    path = tmp_path / f"chain{ops}.tflite"
    path.write_bytes(add_chain(ops))
    return path


def test_a_tflite_op_costs_under_1_5_kb_as_an_onnx_node_does(tmp_path):
    """The Python objects an imported TFLite chain holds per op (an ADD and its output
    tensor): no field kept at its default, no table where none is left, one type per
    dtype and shape (2.03 KB before; the ONNX chain's node is under 1.5 KB too)."""
    import tracemalloc

    from legalizer.kinds.tflite.importer import load_tflite

    small, big = _tflite_chain(tmp_path, 10), _tflite_chain(tmp_path, 20_000)
    load_tflite(small)  # what is made once (the schema's tables, the readers)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        model = load_tflite(big)
        gc.collect()
        per_op = (tracemalloc.get_traced_memory()[0] - before) / 20_000
    finally:
        tracemalloc.stop()
    assert len(list(model.graph.ops())) == 20_000
    assert per_op < 1536, per_op


def test_tflite_tables_kept_for_writing_back_leave_defaults_out(tmp_path):
    """An imported operator keeps of its table only the fields not at their default,
    a tensor none at all when nothing is left; written back, the file is the same as
    with every default put back (the writer leaves a default out)."""
    from legalizer.kinds.tflite.exporter import to_tflite
    from legalizer.kinds.tflite.importer import load_tflite
    from legalizer.kinds.tflite.schema import FbTable, _defaults

    model = load_tflite(_tflite_chain(tmp_path, 5))
    ops = list(model.graph.ops())
    assert [n.proto.rest.fields for n in ops] == [{}] * 5
    assert {v.info for n in ops for v in n.inputs + n.outputs} == {None}
    written = to_tflite(model)
    for n in ops:
        n.proto.rest = FbTable("Operator", dict(_defaults("Operator")))
        for v in n.outputs:
            v.info = FbTable("Tensor", {k: d for k, d in _defaults("Tensor").items() if k != "type" and k != "buffer"})
    assert to_tflite(model) == written


# ---- the bench's profile ----------------------------------------------------------

def test_bench_profile_names_the_stages_and_where_the_memory_goes(tmp_path):
    """``scripts/bench.py --profile`` (issue 31's tables of where the time and memory of a
    node go): a 300-node chain, its cProfile run and its traced import, in JSON."""
    import json
    import subprocess
    import sys

    out = tmp_path / "profile.json"
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench.py"), "--profile", "--sizes", "300",
                           "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(out.read_text())["profile"]
    assert row["nodes"] == 300 and row["tree"] == "this"
    run = row["cprofile"]
    assert run["exit"] == 0 and set(run["stages"]) >= {"load", "verify", "passes", "save"}
    assert len(run["top"]) == 8 and all(f["own_s"] >= 0 and f["calls"] >= 1 for f in run["top"])
    traced = row["tracemalloc"]
    # the chain's 300 ops, its input, output and three constants
    assert traced["nodes"] == 305
    assert traced["traced_b"] > 305 * 500  # the IR's objects: ~1.4 KB a node
    assert any(x["line"].startswith(("ir/graph.py:", "onnx/importer.py:"))
               for x in traced["top"])
    assert "under cProfile" in done.stdout and "under tracemalloc" in done.stdout


def test_bench_each_once_measures_the_bound_a_networkx_topology_sets(tmp_path):
    """``scripts/bench.py --each-once``: beside the I/O floor and legalize's runs, the
    least an IR whose topology networkx holds costs (the file's nodes as a DiGraph, in
    order), and issue 31's ratios of both to the floor."""
    import json
    import subprocess
    import sys

    out = tmp_path / "each.json"
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench.py"), "--each-once", "--sizes", "300",
                           "--repeat", "1", "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(out.read_text())["each_once"]
    assert row["nodes"] == 300
    assert list(row["runs"]) == ["onnx.load+save", "networkx topology alone", "tosa", "xla", "tflite tosa"]
    assert all(r["s"] > 0 and r["maxrss_mb"] > 0 for r in row["runs"].values())
    ratios = row["ratios"]
    assert set(ratios) == {"bound/floor s", "bound/floor rss", "tosa/floor s", "tosa/floor rss", "xla/tosa s",
                           "tflite/onnx s", "tflite/onnx cpu"}
    assert ratios["bound/floor s"] == row["runs"]["networkx topology alone"]["s"] / row["runs"]["onnx.load+save"]["s"]
    assert "topology alone / floor" in done.stdout


def test_bench_light_times_whole_processes_and_the_run_inside(tmp_path):
    """``scripts/bench.py --light``: a small model's onnx.load + onnx.save and the
    legalize command as whole processes and in process, and their ratios."""
    import json
    import subprocess
    import sys

    out = tmp_path / "light.json"
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench.py"), "--light", "--only", "light_squeezenet",
                           "--repeat", "1", "--json", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(out.read_text())["light"]
    assert row["model"] == "light_squeezenet.onnx" and row["nodes"] == 105  # its ops
    s = row["s"]
    assert {"floor process", "legalize process", "floor in process", "legalize in process"} <= set(s)
    assert s["floor process"] > s["floor in process"] > 0 and s["legalize process"] > s["legalize in process"] > 0
    assert row["legalize/floor (process)"] == s["legalize process"] / s["floor process"]
    light = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    assert not list(light.glob("light_squeezenet.onnx.bench-copy*"))  # its output, removed


def test_op_counts_name_each_op_of_every_graph_once():
    """The report's op counts (before and after the passes) are counted by (kind, domain,
    op type) and named as ``Node.op`` names them: every graph's ops, a subgraph's too, a
    domain's ops under their domain, and no input, constant or output."""
    from collections import Counter

    from legalizer.pipeline import _op_counts

    branch = helper.make_graph([helper.make_node("Neg", ["x"], ["b"]), helper.make_node("Abs", ["b"], ["c"])], "then",
                               [], [helper.make_tensor_value_info("c", TensorProto.FLOAT, [2])])
    m = chain(4)
    g = m.graph
    g.node.append(helper.make_node("Foo", ["v3"], ["f"], domain="com.example"))
    g.node.append(helper.make_node("Add", ["f", "bias"], ["h"], domain="ai.onnx"))
    g.input.append(helper.make_tensor_value_info("cond", TensorProto.BOOL, []))
    g.node.append(helper.make_node("If", ["cond"], ["y"], then_branch=branch, else_branch=branch))
    m.opset_import.append(helper.make_opsetid("com.example", 1))
    model = import_model(m)
    counts = _op_counts(model)
    assert counts == Counter({"Add": 2, "Mul": 1, "Tanh": 1, "Sub": 1, "com.example.Foo": 1, "If": 1, "Neg": 2, "Abs": 2})
    assert counts == Counter(n.op for top in model.graphs for n in top.walk() if n.kind == OP)
