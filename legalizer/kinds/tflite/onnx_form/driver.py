"""The walk: every op of a TFLite graph translated through the op table into one ONNX
graph; ``tflite_to_onnx`` (all of it, or an error naming each op without a form) and
``onnx_form`` (the outputs that have one)."""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple, Union

import onnx
from onnx import helper

from ....errors import CheckUnavailable
from ..records import CUSTOM_DOMAIN, TFLITE_DOMAIN
from ....ir.graph import Graph, Node, Value
from ....ir.types import TensorType
from ....model import Model
from ...onnx.exporter import value_info
from .emitter import Emitter, NoForm, quantization
from .registry import RAW, Stored, translator

# Opset 20 has Gelu. Opset 21 adds int16 Quantize/DequantizeLinear, but onnxruntime
# 1.31 fails to load an int8 DequantizeLinear -> Transpose there (its transpose optimizer
# makes a QuantizeLinear whose output_dtype contradicts its zero point): 21 is used only
# for graphs with int16 quantized tensors.
DEFAULT_OPSET, INT16_OPSET = 20, 21
MIN_OPSET = 18  # axes as inputs of every Reduce*, BitwiseXor, Split's num_outputs


def _boundary_info(v: Value) -> onnx.ValueInfoProto:
    """A graph input's or output's declaration: an anonymous dynamic dim becomes a
    dim_param named after the tensor and the axis."""
    shape = v.type.shape
    if shape is not None:
        shape = tuple(f"{v.name}_d{k}" if d is None else d for k, d in enumerate(shape))
    return value_info(v.name, TensorType(v.type.dtype, shape))


def _op_label(n: Node) -> str:
    if n.domain == CUSTOM_DOMAIN:
        return f"CUSTOM.{n.op_type}"
    return n.op_type if n.domain == TFLITE_DOMAIN else n.op


def _translate(e: Emitter, n: Node) -> None:
    fn = translator(n)
    if fn is None:
        raise NoForm("")
    e.begin(n)
    results = fn(e, n)
    stored = isinstance(results, Stored)
    if "fused_activation_function" in n.attrs and not stored:
        results[0] = e.activation(n, results[0])
    for v, name in zip(n.outputs, results):
        e.bind(v, name, raw=stored or n.op_type in RAW)


def _needs_int16(graph: Graph) -> bool:
    return any(quantization(v) is not None and v.type.dtype == "int16" for n in graph.nodes() for v in n.outputs)


def _reachable(graph: Graph, subgraphs: Sequence[Graph]) -> List[Graph]:
    """``graph`` and the subgraphs it calls (its ops' ``*_subgraph_index`` options), transitively."""
    seen, todo = [graph], [graph]
    while todo:
        for n in todo.pop().ops():
            for key, index in n.attrs.items():
                if (key.endswith("subgraph_index") or key == "subgraph") and isinstance(index, int) \
                        and 0 <= index < len(subgraphs):
                    if all(g is not subgraphs[index] for g in seen):
                        seen.append(subgraphs[index])
                        todo.append(subgraphs[index])
    return seen


def translate_all(e: Emitter) -> Tuple[List[str], Dict[int, List[str]]]:
    """Translate every op of ``e.graph``. An op without a form does not stop the walk
    (later ops are translated, and so checked, too). Returns the labels of the ops with
    no form, and for each value computed from one of them (id -> labels), which."""
    missing: List[str] = []
    tainted: Dict[int, List[str]] = {}
    for n in e.graph.ops():
        why = [w for v in n.inputs if v is not None for w in tainted.get(id(v), ())]
        try:
            _translate(e, n)
        except NoForm as reason:
            label = _op_label(n) + (f" ({reason})" if str(reason) else "")
            if label not in missing:
                missing.append(label)
            why.append(label)
            for v in n.outputs:  # so later ops still translate
                e.names[id(v)] = f"<{v.name}>"
        if why:
            why = list(dict.fromkeys(why))
            for v in n.outputs:
                tainted[id(v)] = why
    return missing, tainted


def _emitter(model: Union[Model, Graph], opset: Optional[int], subgraph: int) -> Emitter:
    graph = model.graphs[subgraph] if isinstance(model, Model) else model
    if graph.frontend != TFLITE_DOMAIN:
        raise ValueError(f"graph '{graph.name}' is not a TFLite graph (frontend {graph.frontend!r})")
    subgraphs = model.graphs if isinstance(model, Model) else [graph]
    if opset is None:
        opset = INT16_OPSET if any(_needs_int16(g) for g in _reachable(graph, subgraphs)) else DEFAULT_OPSET
    if opset < MIN_OPSET:
        raise ValueError(f"opset {opset}: the TFLite translation needs opset {MIN_OPSET} or later")
    e = Emitter(graph, opset, subgraphs)
    e.reserve_boundary()
    return e


def _model(e: Emitter, outputs: Sequence[Node]) -> onnx.ModelProto:
    # (filled in place: make_graph and make_model would copy every weight twice more)
    opsets = [helper.make_opsetid("", e.opset)]
    m = onnx.ModelProto(ir_version=helper.find_min_ir_version_for(opsets), producer_name="legalize")
    m.opset_import.extend(opsets)
    gp = m.graph
    gp.node.extend(e.nodes)
    gp.name = e.graph.name or "main"
    gp.input.extend([_boundary_info(n.output) for n in e.graph.inputs])
    gp.output.extend([_boundary_info(n.inputs[0]) for n in outputs])
    gp.initializer.extend(e.inits)
    return m


def tflite_to_onnx(model: Union[Model, Graph], opset: Optional[int] = None, subgraph: int = 0,
                   results: Optional[Dict[str, Value]] = None) -> onnx.ModelProto:
    """The ONNX model computing what TFLite subgraph ``subgraph`` of ``model`` (a
    ``Model`` or one ``Graph``) computes, at ``opset`` (by default 20, or 21 for int16
    quantization). Raises ``CheckUnavailable`` naming every op that has no ONNX form.
    ``results``, if given, is filled as ``onnx_form`` fills it."""
    e = _emitter(model, opset, subgraph)
    missing, _ = translate_all(e)
    if missing:
        raise CheckUnavailable("no ONNX form for TFLite ops: " + ", ".join(missing))
    e.give_out(e.graph.outputs)
    _give_results(e, results)
    return _model(e, e.graph.outputs)


def _give_results(e: Emitter, results: Optional[Dict[str, Value]]) -> None:
    """Each ONNX tensor of the form that holds an op's result as TFLite stores it (int8
    for a quantized one) -> that result's IR value: what the op-by-op check compares."""
    if results is not None:
        made = {name for node in e.nodes for name in node.output}
        results.update({name: v for name, v in e.results.items() if name in made})


def onnx_form(model: Union[Model, Graph], subgraph: int = 0, opset: Optional[int] = None,
              results: Optional[Dict[str, Value]] = None) -> Tuple[Optional[onnx.ModelProto], Dict[str, str]]:
    """What of subgraph ``subgraph`` has an ONNX form: the ONNX model of the outputs
    computed without any op that has none (None if no output is), and for each other
    output, why not (the ops it depends on that have no form). ``results``, if given, is
    filled with the form's tensors that hold an op's result (``_give_results``)."""
    e = _emitter(model, opset, subgraph)
    _, tainted = translate_all(e)
    left_out = {n.inputs[0].name: "no ONNX form for TFLite ops: " + ", ".join(tainted[id(n.inputs[0])])
                for n in e.graph.outputs if id(n.inputs[0]) in tainted}
    kept = [n for n in e.graph.outputs if n.inputs[0].name not in left_out]
    if not kept:
        return None, left_out
    e.give_out(kept)
    _prune(e, [n.inputs[0].name for n in kept])
    _give_results(e, results)
    return _model(e, kept), left_out


def _used_names(node: onnx.NodeProto) -> List[str]:
    """The tensors ``node`` reads, its subgraphs' reads from the outer scope included."""
    names = list(node.input)
    for a in node.attribute:
        for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
            for inner in g.node:
                names.extend(_used_names(inner))
    return names


def _prune(e: Emitter, outputs: Sequence[str]) -> None:
    """Keep the nodes and initializers that ``atomic_files`` are computed from."""
    needed = set(outputs)
    kept = []
    for node in reversed(e.nodes):
        if needed.intersection(node.output):
            kept.append(node)
            needed.update(_used_names(node))
    e.nodes[:] = reversed(kept)
    e.inits[:] = [t for t in e.inits if t.name in needed]
