"""ONNX attributes as the lowerings read them: values, axes, and the operand lists that
were attributes before some opset (the ONNX operator changelog:
https://github.com/onnx/onnx/blob/main/docs/Changelog.md)."""

from __future__ import annotations

from onnx import helper

from ...ir.graph import Graph, Node

# The first opset at which an op takes its int-list parameters (axes, starts/ends,
# pads, split sizes, Clip's bounds) as operands instead of attributes.
OPERANDS_SINCE = {"Slice": 10, "Pad": 11, "Clip": 11, "Unsqueeze": 13, "Squeeze": 13, "Split": 13,
                  "ReduceSum": 13, "ReduceMean": 18, "ReduceMax": 18, "ReduceMin": 18, "ReduceProd": 18}
# Before this opset, Softmax and LogSoftmax flatten their input to 2-D at ``axis``
# (default 1) and normalize over every dim from ``axis`` on; from it, over ``axis``
# alone (default -1).
SOFTMAX_ONE_AXIS_SINCE = 13


def attr(node: Node, name: str, default=None):
    """The attribute's Python value (a string decoded), or ``default``."""
    a = node.attrs.get(name)
    if a is None:
        return default
    value = helper.get_attribute_value(a)
    return value.decode() if isinstance(value, bytes) else value


def axis_index(a: int, rank: int) -> int:
    """A possibly negative axis, counted from the front."""
    return a + rank if a < 0 else a


def params_are_operands(graph: Graph, node: Node) -> bool:
    """Whether ``node`` reads its int-list parameters from operands (``OPERANDS_SINCE``)."""
    return graph.opset_of(node) >= OPERANDS_SINCE[node.op]


def softmax_axes(graph: Graph, node: Node, rank: int) -> list:
    """The axes a Softmax / LogSoftmax normalizes over, at the node's opset."""
    if graph.opset_of(node) < SOFTMAX_ONE_AXIS_SINCE:
        return list(range(axis_index(attr(node, "axis", 1), rank), rank))
    return [axis_index(attr(node, "axis", -1), rank)]
