"""The op table: each TFLite op's translation, a small function registered under the
op's name (``@op``; custom ops under their custom code, ``@custom_op``), or for an
elementwise op with an ONNX twin, its ``onnx`` key in ``rules/tflite.toml``.

A translation takes the ``Emitter`` and the node and returns the ONNX tensors of the
node's results: real values, which binding quantizes where a result is quantized;
stored data for a ``raw`` op or a ``Stored`` list."""

from __future__ import annotations

from functools import partial
from typing import Callable, Dict, List, Optional

from ..records import CUSTOM_DOMAIN, TFLITE_DOMAIN
from ....ir.graph import Node
from ....oprules import frontend_rules
from .emitter import Emitter, option

_ELEMENTWISE = ("unary", "binary", "ternary", "unidirectional")  # rule categories the table translates

OpFn = Callable[[Emitter, Node], List[str]]
OPS: Dict[str, OpFn] = {}
RAW: set = set()  # ops whose results are stored data, never quantized on the way out


def op(*names: str, raw: bool = False):
    def register(fn: OpFn) -> OpFn:
        for name in names:
            OPS[name] = fn
            if raw:
                RAW.add(name)
        return fn
    return register


# Custom ops whose semantics are known (MediaPipe's, which LiteRT's default delegate runs).
CUSTOM_OPS: Dict[str, OpFn] = {}


def custom_op(name: str):
    def register(fn: OpFn) -> OpFn:
        CUSTOM_OPS[name] = fn
        return fn
    return register


# ONNX attributes of table-driven ops that TFLite keeps in its options.
_TABLE_ATTRS: Dict[str, Callable[[Node], dict]] = {
    "LEAKY_RELU": lambda n: {"alpha": float(option(n, "alpha", 0.0))},
}


def _elementwise(onnx_op: str, e: Emitter, n: Node) -> List[str]:
    extra = _TABLE_ATTRS.get(n.op_type, lambda n: {})(n)
    return [e.emit(onnx_op, e.reals(n), **extra)]


def translator(n: Node) -> Optional[OpFn]:
    if n.domain == CUSTOM_DOMAIN:
        return CUSTOM_OPS.get(n.op_type)
    if n.domain != TFLITE_DOMAIN:
        return None
    fn = OPS.get(n.op_type)
    if fn is not None:
        return fn
    rule = frontend_rules("tflite").get(n.op)
    if rule is not None and rule.onnx and rule.category in _ELEMENTWISE:
        return partial(_elementwise, rule.onnx)
    return None


class Stored(list):
    """Results that are already the outputs' stored data, fused activation included."""

