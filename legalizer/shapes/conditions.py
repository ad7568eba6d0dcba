"""The value of an ``If``'s condition where the shapes alone fix it.

PyTorch exports ``x.squeeze(d)`` of a dim whose size it does not know as
``If(Equal(Gather(Shape(x), d), 1), then: Squeeze(x, d), else: Identity(x))``, and a
module's "batched or not" test as ``If(Not(Equal(Size(Shape(x)), 2)), ...)``. The two
branches differ in rank, so ONNX's inference gives the result no rank, nor anything
after it (Silero VAD's LSTM state). Where the dims and ranks the condition reads are
known (an LSTM's ``num_directions`` of 1, a batch bound by ``--dim``), the condition
is a constant, the branch taken is known, and so is the result's rank.

``condition(value)`` evaluates the shape arithmetic such conditions are made of -
constants, ``Shape``, ``Size``, ``Gather``, comparisons, logic, ``Cast``,
``(Un)Squeeze``, ``Identity`` - over what the types know. A ``Shape`` of symbolic dims
is known only in its static elements; anything that reads an unknown one is unknown.
"""

from __future__ import annotations

from typing import Callable, Dict, Optional

import numpy as np
from onnx import helper

from ..ir.constdata import attribute_array
from ..ir.graph import CONST, OP, Value

# A partly known int vector: an object array whose unknown elements are None.
Known = Optional[np.ndarray]
_EVAL: Dict[str, Callable] = {}
_CONSTANT_ATTRS = {"value_int": np.int64, "value_ints": np.int64, "value_float": np.float32,
                   "value_floats": np.float32}
MAX_DEPTH = 16  # conditions are a few ops deep; deeper is not one of these


def _op(*names: str):
    def register(fn):
        for n in names:
            _EVAL[n] = fn
        return fn
    return register


def _attr(node, name: str, default=None):
    a = node.attrs.get(name)
    return default if a is None else helper.get_attribute_value(a)


def _full(a: Known) -> bool:
    return a is not None and not any(x is None for x in a.reshape(-1).tolist())


def _ints(a: np.ndarray) -> np.ndarray:
    return np.asarray(a.tolist(), np.int64) if a.dtype == object else a


@_op("Shape")
def _shape(node, args):
    s = node.inputs[0].type.shape
    if s is None:
        return None
    start, end = _attr(node, "start", 0), _attr(node, "end", len(s))
    return np.asarray([d if isinstance(d, int) else None for d in s], object)[start:end]


@_op("Size")
def _size(node, args):
    s = node.inputs[0].type.shape  # Size(Shape(x)): x's rank, known though its dims are not
    if s is None or not all(isinstance(d, int) for d in s):
        return None
    return np.asarray(int(np.prod(s, dtype=np.int64)), np.int64)


@_op("Gather")
def _gather(node, args):
    data, idx = args
    if data is None or not _full(idx) or data.ndim != 1 or _attr(node, "axis", 0) != 0:
        return None
    idx = _ints(idx)
    if np.any(idx < -len(data)) or np.any(idx >= len(data)):
        return None
    return data[idx]


def _elementwise(fn):
    def run(node, args):
        if not all(_full(a) for a in args):
            return None
        return np.asarray(fn(*[_ints(a) for a in args]))
    return run


for _name, _fn in {"Equal": np.equal, "Greater": np.greater, "Less": np.less, "GreaterOrEqual": np.greater_equal,
                   "LessOrEqual": np.less_equal, "And": np.logical_and, "Or": np.logical_or,
                   "Xor": np.logical_xor, "Not": np.logical_not}.items():
    _EVAL[_name] = _elementwise(_fn)


@_op("Cast")
def _cast(node, args):
    # a condition casts ints and bools to bool or int: values keep their truth
    return args[0] if _full(args[0]) and np.asarray(_ints(args[0])).dtype.kind in "biu" else None


@_op("Identity")
def _identity(node, args):
    return args[0]


@_op("Squeeze", "Unsqueeze", "Reshape")
def _reshaped(node, args):
    # the few elements of a shape computation keep their order; their count decides
    a = args[0]
    out = node.outputs[0].type.shape
    if a is None or out is None or not all(isinstance(d, int) for d in out) or int(np.prod(out)) != a.size:
        return None
    return a.reshape(tuple(out))


def known_value(v: Optional[Value], depth: int = 0) -> Known:
    """What the types and constants fix of ``v``'s value (module docstring), or None."""
    if v is None or v.producer is None or depth > MAX_DEPTH:
        return None
    node = v.producer
    if node.kind == CONST:
        if node.data is None or node.data.sparse or node.data.is_external:
            return None
        a = np.asarray(node.data.array)
        return a if a.size <= 64 else None
    if node.kind != OP or v.index != 0:
        return None
    if node.op == "Constant" and len(node.attrs) == 1:
        (name, attr), = node.attrs.items()
        if name == "value":
            a = attribute_array(node, "value")
            return a if a.size <= 64 else None
        if name in _CONSTANT_ATTRS:  # how exporters write scalars: value_int, value_ints, ...
            return np.asarray(helper.get_attribute_value(attr), _CONSTANT_ATTRS[name])
        return None
    fn = _EVAL.get(node.op)
    if fn is None:
        return None
    return fn(node, [known_value(x, depth + 1) for x in node.inputs])


def condition(v: Optional[Value]) -> Optional[bool]:
    """An ``If``'s condition ``v`` where the shapes fix it; None where they do not."""
    a = known_value(v)
    if not _full(a) or a.size != 1:
        return None
    return bool(_ints(a).reshape(-1)[0])
