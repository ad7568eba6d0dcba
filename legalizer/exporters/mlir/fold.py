"""Compile-time values: a node whose operands are all known is evaluated at emission time
(onnx's reference evaluator) instead of lowered, within its dialect's named limits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, List, Optional

import numpy as np
from onnx import TensorProto, helper

from ...ir.constdata import attribute_array
from ...ir.graph import Graph, Node, Value
from ...passes.rewrite import constant_array
from ...ir.types import all_static

# Ops whose result is not a function of their operands: never folded.
RANDOM_OPS = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                        "Multinomial", "Bernoulli"})


@dataclass(frozen=True)
class FoldPolicy:
    """What one dialect folds."""

    max_elements: int  # no operand or result larger than this is evaluated
    static_results_only: bool  # a result of unknown or dynamic shape is not folded
    skip: frozenset  # ops never folded
    views: bool  # shapes, splats, reshapes and transposes of constants, at any size, without evaluating


# StableHLO computes at run time whatever is not folded: folding there is the shape
# arithmetic an op reads at compile time (a Reshape's target from Shape/Gather/Concat of
# static dims), so only small, static results; Dropout's mask its lowering writes.
STABLEHLO_FOLDING = FoldPolicy(max_elements=4096, static_results_only=True,
                               skip=RANDOM_OPS | {"Dropout"}, views=False)
# TOSA has no run-time form of many operands (Gather indices, pads, the weights a
# convolution transposes) nor of shapes computed at run time: it folds all it can, and
# reshapes constants of any size (a ConstantOfShape stays a splat, never materialized).
TOSA_FOLDING = FoldPolicy(max_elements=1 << 16, static_results_only=False, skip=RANDOM_OPS, views=True)

_RESHAPES = ("Identity", "Unsqueeze", "Squeeze", "Reshape", "Flatten")


def _static(shape) -> bool:
    return shape is not None and all_static(shape)


def _present(v: Optional[Value]) -> bool:
    return v is not None and v.name != ""


def fold(graph: Graph, node: Node, known: Callable[[Value], Optional[np.ndarray]],
         policy: FoldPolicy) -> Optional[List[np.ndarray]]:
    """The outputs of ``node`` if ``policy`` folds it and they are known at compile
    time, else None. ``known`` gives a value's compile-time array (None if none)."""
    op = node.op
    if op == "Constant":
        c = constant_array(node.outputs[0])
        return None if c is None else [c]
    if policy.views:
        got = _view(node, known)
        if got is not None:
            return got
    if node.domain not in ("", "ai.onnx") or op in policy.skip or any(True for _ in node.subgraphs()):
        return None
    arrays = [known(v) if _present(v) else None for v in node.inputs]
    if any(a is None for v, a in zip(node.inputs, arrays) if _present(v)):
        return None
    if policy.views:
        out = node.outputs[0].type.shape
        if op in _RESHAPES and _static(out):
            return [np.reshape(arrays[0], tuple(out))]
        if op == "Transpose":
            perm = node.attrs.get("perm")
            return [np.transpose(arrays[0], None if perm is None else list(helper.get_attribute_value(perm)))]
    for o in node.outputs:
        shape = o.type.shape
        if not _static(shape):
            if policy.static_results_only:
                return None
        elif int(np.prod(shape)) > policy.max_elements:
            return None
    if any(a is not None and a.size > policy.max_elements for a in arrays):
        return None
    try:
        return [np.asarray(r) for r in evaluate(graph, node, arrays)]
    except Exception:  # noqa: BLE001 - not foldable: lowered as an op instead
        return None


def _view(node: Node, known) -> Optional[List[np.ndarray]]:
    """The folds that evaluate nothing: a ConstantOfShape of a known shape (a splat
    view), Shape and Size of a static value."""
    op = node.op
    if op == "ConstantOfShape":
        shape = known(node.inputs[0]) if node.inputs and node.inputs[0] is not None else None
        if shape is None:
            return None
        fill = np.zeros(1, np.float32) if node.attrs.get("value") is None else attribute_array(node, "value")
        return [np.broadcast_to(fill.reshape(-1)[0], tuple(int(d) for d in np.asarray(shape).reshape(-1)))]
    if op in ("Shape", "Size"):
        s = node.inputs[0].type.shape if node.inputs and node.inputs[0] is not None else None
        if not _static(s):
            return None
        if op == "Size":
            return [np.asarray(int(np.prod(s)), np.int64)]
        start = node.attrs.get("start")
        end = node.attrs.get("end")
        start = 0 if start is None else helper.get_attribute_value(start)
        end = None if end is None else helper.get_attribute_value(end)
        return [np.asarray(s[start:end], np.int64)]
    return None


def evaluate(graph: Graph, node: Node, inputs: List[Optional[np.ndarray]]) -> List[np.ndarray]:
    """Run one node on onnx's reference evaluator, at the graph's opsets."""
    from onnx.reference import ReferenceEvaluator

    names = [f"i{k}" if v is not None else "" for k, v in enumerate(inputs)]
    outs = [f"o{k}" for k in range(len(node.outputs))]
    proto = helper.make_node(node.op_type, names, outs, domain=node.domain)
    proto.attribute.extend(a for a in node.attrs.values() if not isinstance(a, (list, Graph)))
    feeds = {n: a for n, a in zip(names, inputs) if a is not None}
    g = helper.make_graph([proto], "fold",
                          [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
                           for n, a in feeds.items()],
                          [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outs])
    opsets = [helper.make_opsetid(d, v) for d, v in graph.opsets.items()]
    return ReferenceEvaluator(helper.make_model(g, opset_imports=opsets)).run(None, feeds)
