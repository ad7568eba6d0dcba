"""Ranks where ONNX shape inference gives up.

ONNX infers no shape for an op whose axes, shape or repeats come at run time
(``ReduceMean(x, axes)``), nor for anything computed from such a value. Many ops fix
their result's rank whatever those values are: an elementwise op keeps its operand's
shape, a ``keepdims=1`` reduction its operand's rank, a broadcasting op has the
largest rank of its operands. ``infer_ranks`` gives such results a ranked type, its
dims ``?`` where unknown, so that the verifier can judge them and the passes rewrite
them. It never changes a value that has a rank.

Each op's rule is a small function of the node and its operand shapes, registered in
``_RULES``; it returns the shape of the node's first result, or None if it cannot tell.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence

from onnx import helper

from ..ir.graph import OP, Graph, Node
from ..ir.types import Shape, TensorType
from ..oprules import RuleLookup, builtin_rules
from .broadcast import IncompatibleDims, infer_result_shape
from .conditions import condition, known_value

Rule = Callable[[Node, Sequence[Shape]], Shape]
_RULES: Dict[str, Rule] = {}


def _rule(*ops: str):
    def register(fn: Rule) -> Rule:
        for op in ops:
            _RULES[op] = fn
        return fn
    return register


def _attr(node: Node, name: str, default=None):
    a = node.attrs.get(name)
    return default if a is None else helper.get_attribute_value(a)


def _length(shape: Shape) -> Optional[int]:
    """The static length of a 1-D operand (axes, a shape), or None."""
    if shape is not None and len(shape) == 1 and isinstance(shape[0], int):
        return shape[0]
    return None


def _unknown(rank: Optional[int]) -> Shape:
    return None if rank is None or rank < 0 else (None,) * rank


# Elementwise and normalizing ops: the result has operand 0's shape.
@_rule("Identity", "Abs", "Neg", "Reciprocal", "Floor", "Ceil", "Round", "Sign", "Sqrt", "Exp", "Log",
       "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Tanh",
       "Sigmoid", "Relu", "LeakyRelu", "Elu", "Selu", "Celu", "Gelu", "HardSigmoid", "HardSwish", "Softplus",
       "Softsign", "Mish", "ThresholdedRelu", "Erf", "Not", "IsNaN", "IsInf", "BitwiseNot", "Cast", "CastLike",
       "Dropout", "Softmax", "LogSoftmax", "Hardmax", "Clip", "Shrink", "LRN", "InstanceNormalization",
       "LayerNormalization", "BatchNormalization", "MeanVarianceNormalization", "LpNormalization",
       "QuantizeLinear", "DequantizeLinear", "CumSum", "Trilu", "RandomNormalLike", "RandomUniformLike",
       "Bernoulli")
def _same_shape(node: Node, shapes: Sequence[Shape]) -> Shape:
    return shapes[0] if shapes else None


# Ops that keep operand 0's rank but whose dims come at run time.
@_rule("Pad", "Resize", "Upsample", "Tile", "Slice", "ReverseSequence")
def _same_rank(node: Node, shapes: Sequence[Shape]) -> Shape:
    return _unknown(len(shapes[0])) if shapes and shapes[0] is not None else None


@_rule("Transpose")
def _transpose(node: Node, shapes: Sequence[Shape]) -> Shape:
    x = shapes[0] if shapes else None
    if x is None:
        return None
    perm = _attr(node, "perm") or list(range(len(x)))[::-1]
    return tuple(x[p] for p in perm) if sorted(perm) == list(range(len(x))) else None


@_rule("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
       "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")
def _reduce(node: Node, shapes: Sequence[Shape]) -> Shape:
    """keepdims=1: the operand's rank, whatever the axes are (a dim of 1 stays 1);
    keepdims=0: as many fewer dims as there are axes (ONNX's axes are distinct)."""
    x = shapes[0] if shapes else None
    if x is None:
        return None
    if _attr(node, "keepdims", 1):
        return tuple(1 if d == 1 else None for d in x)
    axes = _attr(node, "axes")
    n = len(axes) if axes is not None else (_length(shapes[1]) if len(shapes) > 1 and node.inputs[1] is not None else 0)
    if n is None:
        return None
    if n == 0:
        return _unknown(len(x)) if _attr(node, "noop_with_empty_axes", 0) else ()
    return _unknown(len(x) - n)


@_rule("Reshape", "ConstantOfShape")
def _to_shape(node: Node, shapes: Sequence[Shape]) -> Shape:
    """The rank is the length of the shape operand (the last one)."""
    return _unknown(_length(shapes[-1])) if shapes else None


@_rule("Expand")
def _expand(node: Node, shapes: Sequence[Shape]) -> Shape:
    if len(shapes) < 2 or shapes[0] is None or _length(shapes[1]) is None:
        return None
    return _unknown(max(len(shapes[0]), _length(shapes[1])))


@_rule("Unsqueeze", "Squeeze")
def _squeeze(node: Node, shapes: Sequence[Shape]) -> Shape:
    x = shapes[0] if shapes else None
    axes = _attr(node, "axes")
    if axes is None and len(node.inputs) > 1:  # opset 13: an operand, most often a constant
        known = known_value(node.inputs[1])
        axes = known.reshape(-1).tolist() if known is not None and None not in known.reshape(-1).tolist() else None
    n = len(axes) if axes is not None else (_length(shapes[1]) if len(shapes) > 1 else None)
    if x is None or n is None or (node.op_type == "Squeeze" and n == 0):  # no axes: every 1 goes
        return None
    rank = len(x) + (n if node.op_type == "Unsqueeze" else -n)
    if axes is not None and rank >= 0:  # the dims too, where the axes are constant
        at = sorted(a % (rank if node.op_type == "Unsqueeze" else len(x)) for a in axes)
        if node.op_type == "Squeeze":
            return tuple(d for k, d in enumerate(x) if k not in at)
        rest = iter(x)
        return tuple(1 if k in at else next(rest) for k in range(rank))
    return _unknown(rank)


@_rule("MatMul")
def _matmul(node: Node, shapes: Sequence[Shape]) -> Shape:
    """numpy's matmul: a 1-D operand loses its dim; the batch dims broadcast."""
    if len(shapes) < 2 or shapes[0] is None or shapes[1] is None:
        return None
    a, b = len(shapes[0]), len(shapes[1])
    if a == 0 or b == 0:
        return None
    if a == 1 and b == 1:
        return ()
    return _unknown(max(a, b) - (a == 1 or b == 1))


def _broadcast(node: Node, shapes: Sequence[Shape], found) -> Shape:
    """A broadcasting op (``rules/``): numpy-style, the operands' broadcast; else (a
    unidirectional or legacy rule) operand 0's shape, which the others broadcast onto."""
    rule, mode, _ = found
    if mode == "numpy" and rule.broadcast == "multidirectional":
        picked = [s for i, s in enumerate(shapes)
                  if node.inputs[i] is not None and (rule.operands is None or i in rule.operands)]
        if not picked or any(s is None for s in picked):
            return None
        try:
            return infer_result_shape(picked).shape
        except IncompatibleDims:  # the verifier reports it, on the node as the model has it
            return None
    if rule.onto == "result":
        return None
    return shapes[0] if shapes else None


# Ops whose every result has the rule's shape (Split's pieces keep the operand's rank).
_ALL_RESULTS = {"Split"}


@_rule("Split")
def _split(node: Node, shapes: Sequence[Shape]) -> Shape:
    x = shapes[0] if shapes else None
    if x is None:
        return None
    axis = _attr(node, "axis", 0)
    return tuple(None if k == axis % max(len(x), 1) else d for k, d in enumerate(x))


def _body_inputs(node: Node, shapes: Sequence[Shape]) -> Optional[List[Shape]]:
    """The shapes a Loop's or Scan's body is called with, from the node's operands: a
    Loop's iteration number and condition are scalars, its carried values come in as
    they are; a Scan's states likewise, its scanned operands less the scan axis."""
    if node.op == "Loop":
        return [(), ()] + [_unknown(len(s)) if s is not None else None for s in shapes[2:]]
    if node.op == "Scan" and node.graph.opset_of(node) >= 9:
        n_scan = _attr(node, "num_scan_inputs", 0)
        states, scanned = shapes[:len(shapes) - n_scan], shapes[len(shapes) - n_scan:]
        return [_unknown(len(s)) if s is not None else None for s in states] + \
            [_unknown(len(s) - 1) if s is not None else None for s in scanned]
    return None


def _body_results(node: Node, body: Graph) -> List[Shape]:
    """A Loop's or Scan's results from its body's: the carried values (after the
    Loop's condition) keep their rank, the scan outputs gain the iteration axis."""
    outs = [n.inputs[0].type.shape if n.inputs and n.inputs[0] is not None else None for n in body.outputs]
    if node.op == "Loop":
        outs = outs[1:]
        n_states = len(node.inputs) - 2
    else:
        n_states = len(node.inputs) - _attr(node, "num_scan_inputs", 0)
    return [None if s is None else _unknown(len(s) + (k >= n_states)) for k, s in enumerate(outs)]


def _body_dtypes(node: Node) -> List[Optional[str]]:
    """The element types of a Loop's or Scan's results, from its body's outputs."""
    body = node.attrs.get("body") if node.op in ("Loop", "Scan") else None
    if not isinstance(body, Graph):
        return []
    outs = [n.inputs[0].type.dtype if n.inputs and n.inputs[0] is not None else None for n in body.outputs]
    return outs[1:] if node.op == "Loop" else outs


# Ops whose every result's shape a rule fixes: the rule returns them all.
_RESULTS_RULES: Dict[str, Callable[[Node, Sequence[Shape]], List[Shape]]] = {}


def _recurrent(node: Node, shapes: Sequence[Shape]) -> List[Shape]:
    """LSTM-like ops (layout 0): Y (seq, directions, batch, hidden), Y_h and Y_c
    (directions, batch, hidden). onnxruntime's contrib DynamicQuantizeLSTM has LSTM's
    results; neither inference knows it."""
    x = shapes[0]
    if x is None or len(x) != 3 or _attr(node, "layout", 0) != 0:
        return []
    hidden = _attr(node, "hidden_size")
    direction = _attr(node, "direction", b"forward")
    dirs = 2 if (direction.decode() if isinstance(direction, bytes) else direction) == "bidirectional" else 1
    seq, batch = x[0], x[1]
    state = (dirs, batch, hidden)
    return [(seq, dirs, batch, hidden), state, state]


_RESULTS_RULES["com.microsoft.DynamicQuantizeLSTM"] = _recurrent


def _branches(node: Node) -> List[Shape]:
    """An If's results: the branch's where the shapes fix the condition
    (``conditions``: PyTorch's squeeze of a dim of known size), else a rank both
    branches agree on, the dims they agree on."""
    then, other = node.attrs.get("then_branch"), node.attrs.get("else_branch")
    if not isinstance(then, Graph) or not isinstance(other, Graph):
        return []
    taken = condition(node.inputs[0]) if node.inputs else None
    if taken is not None:
        return [n.inputs[0].type.shape if n.inputs and n.inputs[0] is not None else None
                for n in (then if taken else other).outputs]
    out = []
    for a, b in zip(then.outputs, other.outputs):
        sa, sb = (n.inputs[0].type.shape if n.inputs and n.inputs[0] is not None else None for n in (a, b))
        out.append(tuple(x if x == y else None for x, y in zip(sa, sb))
                   if sa is not None and sb is not None and len(sa) == len(sb) else None)
    return out


def infer_ranks(graph: Graph) -> int:
    """Give a ranked type to each unranked result of a node, in ``graph`` and its
    subgraphs, whose rank its rule fixes; return how many were given one."""
    lookup = RuleLookup(graph, builtin_rules())
    made = 0
    unranked = False  # a named result of an op here left unranked: only then can _from_results rank one
    for node in graph.nodes():
        if node.kind != OP or not node.outputs:
            continue
        if not node.attrs and all(v.type.shape is not None or not v.name for v in node.outputs):
            continue  # most nodes: every result ranked, no subgraph to look into
        shapes: List[Shape] = [v.type.shape if v is not None else None for v in node.inputs]
        results: List[Shape] = []
        if node.attrs:
            for _, sub in node.subgraphs():
                made += _given(node, sub, _body_inputs(node, shapes) or [])
                made += infer_ranks(sub)
            if node.op in ("Loop", "Scan") and isinstance(node.attrs.get("body"), Graph):
                results = _body_results(node, node.attrs["body"])
            elif node.op == "If":
                results = _branches(node)
        if not results and any(v.type.shape is None and v.name for v in node.outputs):
            found = lookup(node)
            if found is not None:
                shape = _broadcast(node, shapes, found)
            else:
                fn = _RULES.get(node.op)
                shape = fn(node, shapes) if fn is not None and node.inputs and node.inputs[0] is not None else None
            results = [shape] * (len(node.outputs) if node.op in _ALL_RESULTS else 1)
            many = _RESULTS_RULES.get(node.op)
            if many is not None and node.inputs and node.inputs[0] is not None:
                results = many(node, shapes)
        made += _given_values(node.outputs, results, _body_dtypes(node))
        unranked = unranked or any(v.type.shape is None and v.name for v in node.outputs)
    # (a subgraph's ops may read an outer op's unranked result: looked for there always)
    back = _from_results(graph, lookup) if unranked or graph.owner is not None else 0
    return made + back + (infer_ranks(graph) if back else 0)


def _computed(value) -> bool:
    producer = getattr(value, "producer", None)
    return producer is not None and producer.kind == OP


def _from_results(graph: Graph, lookup: RuleLookup) -> int:
    """Backwards, from a broadcasting op's ranked result (a declared graph output):
    the broadcast rank is the largest operand rank, so where one operand is unranked
    and every other has a lower rank than the result, that operand has the result's
    (Silero VAD's ``stateN = Concat(...) + scalar``, declared rank 3)."""
    made = 0
    for node in graph.nodes():
        if node.kind != OP or not node.outputs or node.outputs[0].type.shape is None or \
                all(v is None or v.type.shape is not None for v in node.inputs):
            continue
        found = lookup(node)
        if found is None or found[1] != "numpy" or found[0].broadcast != "multidirectional":
            continue
        rule, rank = found[0], len(node.outputs[0].type.shape)
        operands = [v for i, v in enumerate(node.inputs)
                    if v is not None and (rule.operands is None or i in rule.operands)]
        unranked = [v for v in operands if v.type.shape is None]
        # (an op's result only: a graph input declared unranked stays so, as MLIR's trait
        # leaves an unranked operand out of the inference)
        if len(unranked) == 1 and unranked[0].name and _computed(unranked[0]) and \
                all(v.type.shape is None or len(v.type.shape) < rank for v in operands):
            made += _given_values(unranked, [_unknown(rank)])
    return made


def _given(node: Node, sub: Graph, shapes: Sequence[Shape]) -> int:
    """A Loop's or Scan's body inputs: their shapes, and their element types where the
    body does not declare them (a Loop's counter and condition, else the operand's)."""
    values = [n.outputs[0] for n in sub.inputs]
    operands = node.inputs[2:] if node.op == "Loop" else node.inputs
    dtypes = (["int64", "bool"] if node.op == "Loop" else []) + [v.type.dtype if v is not None else None
                                                                  for v in operands]
    return _given_values(values, shapes, dtypes)


def _given_values(values, shapes: Sequence[Shape], dtypes: Sequence[Optional[str]] = ()) -> int:
    """Give each unranked value its shape, where one is known, and its element type
    from ``dtypes`` where it has none."""
    made = 0
    for k, (v, shape) in enumerate(zip(values, shapes)):
        dtype = v.type.dtype or (dtypes[k] if k < len(dtypes) else None)
        if shape is not None and v.name and v.type.shape is None:
            v.type = TensorType(dtype, tuple(shape))
            made += 1
    return made
