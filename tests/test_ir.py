"""The Graph API: building, typed values, mutation, order, printing."""

import pytest
from onnx import TensorProto, helper

from legalizer.errors import BadInput
from legalizer.kinds.onnx.importer import import_model
from legalizer.ir import CONST, INPUT, OP, OUTPUT, Graph, Node, TensorType, Value, format_graph


def small_graph():
    g = Graph("g", {"": 17})
    x = g.add_node(Node(INPUT, "$input", name="x", outputs=[Value("x", TensorType("float", ("N", 3)))]))
    b = g.add_node(Node(CONST, "$const", name="b", outputs=[Value("b", TensorType("float", (3,)))]))
    add = g.add_op("Add", [x.output, b.output], [TensorType("float", ("N", 3))], name="add", output_names=["y"])
    out = g.add_node(Node(OUTPUT, "$output", name="y", inputs=[add.output]))
    return g, x, b, add, out


def test_build_and_print():
    g, x, b, add, out = small_graph()
    assert [n.kind for n in g.nodes()] == [INPUT, CONST, OP, OUTPUT]
    assert g.users(x.output) == [(add, 0)]
    assert g.value("y") is add.output and add.output.producer is add
    assert format_graph(g) == (
        "graph g(%x: tensor<Nx3xfloat>) {\n"
        "  %b = const : tensor<3xfloat>\n"
        "  %y = Add(%x, %b) : (tensor<Nx3xfloat>, tensor<3xfloat>) -> tensor<Nx3xfloat>  // add\n"
        "  return %y\n"
        "}")


def test_same_value_twice_is_two_uses():
    g, x, b, add, out = small_graph()
    mul = g.add_op("Mul", [x.output, x.output], [x.output.type], name="sq")
    assert g.users(x.output) == [(add, 0), (mul, 0), (mul, 1)]
    g.set_input(mul, 1, b.output)
    assert g.users(x.output) == [(add, 0), (mul, 0)]
    g.remove_node(mul)
    assert g.users(x.output) == [(add, 0)]


def test_replace_all_uses_keeps_output_name():
    g, x, b, add, out = small_graph()
    relu = g.add_op("Relu", [add.output], [add.output.type], name="relu")
    assert g.replace_all_uses_with(add.output, relu.output) == 1  # the Relu's own use is kept
    assert out.inputs[0] is relu.output
    assert relu.output.name == "y" and add.output.name != "y"
    assert g.value("y") is relu.output
    assert [n.op for n in g.nodes() if n.kind == OP] == ["Add", "Relu"]


def test_remove_used_node_refused():
    g, x, b, add, out = small_graph()
    with pytest.raises(ValueError):
        g.remove_node(add)


def test_cycle_is_bad_input():
    nodes = [helper.make_node("Relu", ["b"], ["a"], name="r1"), helper.make_node("Relu", ["a"], ["b"], name="r2"),
             helper.make_node("Relu", ["a"], ["y"], name="r3")]
    g = helper.make_graph(nodes, "cyc", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    with pytest.raises(BadInput, match="cycle"):
        import_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def test_subgraph_capture_orders_outer_graph():
    # The If's branch uses 'x2', produced by a node listed after the If in the outer
    # graph: the capture edge must put the producer first.
    then = helper.make_graph([helper.make_node("Add", ["x2", "x2"], ["t"], name="inner_add")], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])])
    other = helper.make_graph([helper.make_node("Neg", ["x2"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2])])
    nodes = [helper.make_node("If", ["c"], ["y"], name="if", then_branch=then, else_branch=other),
             helper.make_node("Relu", ["x"], ["x2"], name="producer")]
    g = helper.make_graph(nodes, "outer", [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                                           helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    m = import_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    assert [n.label for n in m.graph.ops()] == ["producer", "if"]
    inner = [n for n in m.graph.walk() if n.label == "inner_add"][0]
    assert inner.inputs[0] is m.graph.value("x2")
    assert inner.graph.parent is m.graph


def test_fresh_names_go_on_from_the_last_suffix_and_skip_taken_ones():
    # (a pass naming thousands of values after one shared constant stays linear)
    g = Graph("g")
    x = g.add_node(Node(INPUT, "", outputs=[Value("c", TensorType("float32", (2,)))])).output
    g.add_op("Relu", [x], [TensorType("float32", (2,))], name="taken", output_names=["c_3"])
    made = []
    for _ in range(4):
        name = g.fresh_name("c")
        g.add_op("Relu", [x], [TensorType("float32", (2,))], name=name, output_names=[name])
        made.append(name)
    assert made == ["c_1", "c_2", "c_4", "c_5"]
    assert g.fresh_name("other") == "other"
