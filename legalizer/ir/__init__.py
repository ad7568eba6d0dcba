"""The graph IR."""

from .graph import CONST, INPUT, OP, OUTPUT, Graph, Node, Value
from .printer import format_graph
from .types import UNKNOWN, Dim, Quantization, Shape, TensorType, dim_str, shape_str, shape_strs

__all__ = [
    "Graph", "Node", "Value", "TensorType", "Quantization", "Dim", "Shape", "UNKNOWN",
    "OP", "INPUT", "CONST", "OUTPUT", "format_graph", "dim_str", "shape_str", "shape_strs",
]
