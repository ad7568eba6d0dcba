"""The ids Model Explorer gives a model's graphs and nodes, worked out from the file
alone (the viewer need not be installed), so that an overlay lands on the nodes the
viewer draws. Each node is also named as legalize's reports name it (its ``label``:
its name, else its first output's; the graph by the verifier's path), which is how an
overlay's data finds its node.

ONNX, as ``model-explorer-onnx`` (0.4) builds the graph:

- unnamed nodes and duplicate names are fixed first, as onnx_ir's ``NameFixPass``
  fixes them: a node with no name becomes ``node``, ``node_1``, ... and a duplicate
  ``name`` becomes ``name_1``, ... (one counter per base name over the whole model,
  the names in use counted per graph);
- an ``If``'s branches are drawn inside the graph that holds the If: a node of branch
  ``then_branch`` of If ``cond`` gets the id ``cond/then_branch/<its name>``;
- every other graph attribute of a node of the main graph (a ``Loop`` or ``Scan``
  body) is a graph of its own, ``<node>/<attribute>`` (bodies nested deeper are not
  drawn, so they have no ids here);
- the main graph is the model's graph name (empty when it has none); model-local
  functions are graphs of their own, not covered here.

TFLite, as the built-in flatbuffer adapter builds it: one graph per subgraph, named
by the subgraph, and an operator's id is its index in its subgraph's operator list.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Set

import onnx

from .kinds.base import Kind, resolve
from .kinds.registry import DEFAULT


@dataclass
class NodeId:
    id: str  # the viewer's
    op: str  # as legalize's IR spells it (``Add``, ``com.microsoft.Gelu``, ``tflite.ADD``)
    label: str  # as legalize's reports name the node
    inputs: List[str] = field(default_factory=list)
    outputs: List[str] = field(default_factory=list)


@dataclass
class GraphIds:
    id: str  # the viewer's
    path: str  # as legalize's diagnostics name the graph ("" for the main graph)
    nodes: List[NodeId] = field(default_factory=list)

    def by_label(self) -> Dict[str, NodeId]:
        return {n.label: n for n in self.nodes}

    def by_output(self) -> Dict[str, NodeId]:
        return {v: n for n in self.nodes for v in n.outputs if v}


# -- ONNX ---------------------------------------------------------------------------

def _unique(preferred: str, used: Set[str], counter: Counter) -> str:
    name = preferred
    while name in used:
        counter[preferred] += 1
        name = f"{preferred}_{counter[preferred]}"
    used.add(name)
    return name


def _graph_attrs(node: onnx.NodeProto) -> Iterator[onnx.AttributeProto]:
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            yield a


Key = tuple  # where a node is: (node index, attribute, graph index, node index, ...)


def _fixed_names(graph: onnx.GraphProto, counter: Counter, names: Dict[Key, str], at: Key = ()) -> None:
    """NameFixPass's node names, by where each node is, depth first."""
    used: Set[str] = set()
    for k, node in enumerate(graph.node):
        if not node.name:
            names[at + (k,)] = _unique("node", used, counter)
        elif node.name in used:
            names[at + (k,)] = _unique(node.name, used, counter)
        else:
            used.add(node.name)
            names[at + (k,)] = node.name
        for a in node.attribute:
            subs = [a.g] if a.type == onnx.AttributeProto.GRAPH else \
                list(a.graphs) if a.type == onnx.AttributeProto.GRAPHS else []
            for j, sub in enumerate(subs):
                _fixed_names(sub, counter, names, at + (k, a.name, j))


def _label(node: onnx.NodeProto) -> str:
    if node.name:
        return node.name
    return next((o for o in node.output if o), "")


def _op(node: onnx.NodeProto) -> str:
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"


def _embedded(graph: onnx.GraphProto, path: str, prefix: str, names: Dict[Key, str],
              into: List[NodeId], bodies: Optional[list], at: Key = ()) -> None:
    """The nodes of ``graph`` as drawn in one viewer graph: an If's branches inlined
    (``prefix``: the ids the inlining prepends); other graph attributes of the nodes
    collected into ``bodies`` (None: not drawn)."""
    for k, node in enumerate(graph.node):
        nid = prefix + names[at + (k,)]
        into.append(NodeId(nid, _op(node), _label(node), list(node.input), list(node.output)))
        label = _label(node)
        for a in _graph_attrs(node):
            sub_path = f"{path}/{label}.{a.name}" if path else f"{label}.{a.name}"
            if node.op_type == "If" and node.domain in ("", "ai.onnx"):
                _embedded(a.g, sub_path, f"{nid}/{a.name}/", names, into, bodies, at + (k, a.name, 0))
            elif bodies is not None:
                bodies.append((f"{nid}/{a.name}", sub_path, a.g, at + (k, a.name, 0)))


def onnx_ids(model: onnx.ModelProto) -> List[GraphIds]:
    """The graphs ``model-explorer-onnx`` draws for ``model``, each with its nodes' ids."""
    names: Dict[Key, str] = {}
    _fixed_names(model.graph, Counter(), names)
    main = GraphIds(model.graph.name, "")
    bodies: list = []
    _embedded(model.graph, "", "", names, main.nodes, bodies)
    graphs = [main]
    for gid, path, g, at in bodies:
        body = GraphIds(gid, path)
        _embedded(g, path, "", names, body.nodes, None, at)
        graphs.append(body)
    return graphs


# -- TFLite -------------------------------------------------------------------------

def tflite_ids(path: Path) -> List[GraphIds]:
    """The graphs the built-in TFLite adapter draws: per subgraph, its operators by
    index. (Read with the ``tflite`` package, as the importer reads the file.)"""
    import tflite

    from .kinds.tflite.schema import builtin_name

    buf = Path(path).read_bytes()
    model = tflite.Model.GetRootAs(buf, 0)
    codes = [model.OperatorCodes(i) for i in range(model.OperatorCodesLength())]
    graphs = []
    for s in range(model.SubgraphsLength()):
        sg = model.Subgraphs(s)
        name = (sg.Name() or b"").decode("utf-8", "replace")
        tensors = [(sg.Tensors(i).Name() or b"").decode("utf-8", "replace") for i in range(sg.TensorsLength())]
        g = GraphIds(name, name if s else "")
        for k in range(sg.OperatorsLength()):
            op = sg.Operators(k)
            code = codes[op.OpcodeIndex()] if op.OpcodeIndex() < len(codes) else None
            builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode()) if code is not None else -1
            kind = builtin_name(builtin) or "CUSTOM"
            outs = [tensors[i] if 0 <= i < len(tensors) else "" for i in op.OutputsAsNumpy().tolist()] \
                if not op.OutputsIsNone() else []
            ins = [tensors[i] if 0 <= i < len(tensors) else "" for i in op.InputsAsNumpy().tolist()] \
                if not op.InputsIsNone() else []
            g.nodes.append(NodeId(str(k), f"tflite.{kind}", next((o for o in outs if o), f"#{k}"), ins, outs))
        graphs.append(g)
    return graphs


def onnx_file_ids(path: Path) -> List[GraphIds]:
    return onnx_ids(onnx.load_model(str(path), load_external_data=False))


def model_ids(path: Path, kind: Optional[Kind]) -> List[GraphIds]:
    """The viewer's graphs of the model file ``path``, in its kind's id scheme
    (``Kind.explorer_ids``; ONNX's for a kind without one)."""
    scheme = kind.explorer_ids if kind is not None and kind.explorer_ids else DEFAULT.explorer_ids
    return resolve(scheme)(path)
