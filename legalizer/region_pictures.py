"""The rewritten regions of a run: each elementwise node the passes changed, with its
operands before the passes and the nodes that feed it after, for the HTML report.

Take a ``snapshot(model)`` before ``legalize`` and call ``snapshot.regions(model)``
after it. Nodes are matched by the names of their output values, which the passes keep
stable (a variadic op split into a chain hands its name to the chain's last node; a
model raised to a newer opset is re-imported with the same names). A node of the result
whose output names did not exist before is one the passes inserted.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Dict, Iterator, List, Mapping, Optional, Set, Tuple

from .ir.graph import CONST, INPUT, OP, OUTPUT, Graph, Node
from .ir.types import shape_str
from .oprules import OpRule, builtin_rules

# How far back from a rewritten node the "after" picture follows inserted nodes, and
# how many nodes it holds at most (a dynamic xla broadcast computes its shape with a
# handful of Shape/Gather/Where/Concat nodes; more than this is not one picture).
MAX_DEPTH = 8
MAX_NODES = 40
# How many regions a run keeps pictures of (the HTML report draws these; a model with
# thousands of rewrites gets the first ones and a count of the rest).
PICTURE_LIMIT = 100


@dataclass
class PNode:
    """A node of a picture. ``kind``: op, input, const, or value (the result value,
    drawn as its name). ``role``: center (the elementwise node), inserted (made by
    the passes), original (there before, outside the rewrite) or result."""

    id: str
    kind: str
    op: str
    name: str
    role: str


@dataclass
class PEdge:
    src: str
    dst: str
    shape: str  # MLIR-style, "*" unranked
    port: int = 0  # operand index at dst


@dataclass
class Picture:
    nodes: List[PNode] = field(default_factory=list)
    edges: List[PEdge] = field(default_factory=list)
    truncated: bool = False  # more inserted nodes than MAX_NODES / MAX_DEPTH


@dataclass
class Region:
    graph: str  # subgraph path, "" for the main graph (as in the report's violations)
    node: str  # the elementwise node's label
    op: str
    before: Picture
    after: Picture

    @property
    def inserted(self) -> List[PNode]:
        return [n for n in self.after.nodes if n.role == "inserted"]

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class Regions:
    """The rewritten regions, in graph order: ``region_pictures`` holds the first ``limit``
    with their pictures, ``total`` counts them all."""

    regions: List[Region] = field(default_factory=list)
    total: int = 0
    by_op: Dict[str, int] = field(default_factory=dict)  # rewritten nodes per op, all of them

    @property
    def omitted(self) -> int:
        return self.total - len(self.regions)


def _key(node: Node) -> Optional[str]:
    for v in node.outputs:
        if v.name:
            return v.name
    return None


def _graphs(model) -> Iterator[Tuple[str, Graph]]:
    """Every graph of the model (``Graph.graphs``' walk) with its path: the owner's
    label and attribute from the top graph down (``[k]`` where one attribute holds
    several graphs)."""
    for k, top in enumerate(model.graphs):
        paths = {top: top.name if k else ""}
        for g in top.graphs():
            if g is not top:
                subs = list(g.owner.subgraphs())
                attr = next(a for a, sub in subs if sub is g)
                name = f"{g.owner.label}.{attr}"
                if sum(a == attr for a, _ in subs) > 1:
                    name += f"[{[sub for a, sub in subs if a == attr].index(g)}]"
                parent = paths[g.owner.graph]
                paths[g] = f"{parent}/{name}" if parent else name
            yield paths[g], g


def _pnode(node: Node, nid: str, role: str) -> PNode:
    kind = node.kind if node.kind in (INPUT, CONST) else OP
    return PNode(nid, kind, node.op_type if kind == OP else kind, node.label, role)


@dataclass
class _Before:
    node: str
    op: str
    operands: List[Tuple[Optional[str], str, Optional[PNode]]]  # (value name, shape, producer)
    result: Tuple[str, str]


class Snapshot:
    """What each elementwise node looked like before the passes."""

    def __init__(self, model, rules: Optional[Mapping[str, OpRule]] = None):
        rules = builtin_rules() if rules is None else rules
        self.names: Dict[str, Set[str]] = {}
        self.nodes: Dict[str, Dict[str, _Before]] = {}
        for path, g in _graphs(model):
            names = self.names[path] = set()
            before = self.nodes[path] = {}
            for n in g.nodes():
                names.update(v.name for v in n.outputs if v.name)
                key = _key(n)
                if n.kind != OP or key is None or rules.get(n.op) is None:
                    continue
                ops = []
                for v in n.inputs:
                    if v is None:
                        ops.append((None, "", None))
                        continue
                    p = v.producer
                    ops.append((v.name, shape_str(v.type.shape),
                                _pnode(p, "", "original") if p is not None else None))
                before[key] = _Before(n.label, n.op_type, ops, (key, shape_str(n.outputs[0].type.shape)))

    def regions(self, model, limit: Optional[int] = None) -> Regions:
        """The nodes whose operands the passes changed, with pictures for the first
        ``limit`` (all when None)."""
        out = Regions()
        for path, g in _graphs(model):
            before = self.nodes.get(path)
            if not before:
                continue
            old_names = self.names[path]
            for n in g.nodes():
                key = _key(n)
                b = before.get(key) if n.kind == OP and key is not None else None
                if b is None:
                    continue
                now = [v.name if v is not None else None for v in n.inputs]
                if now == [name for name, _, _ in b.operands] and n.op_type == b.op:
                    continue
                out.total += 1
                out.by_op[b.op] = out.by_op.get(b.op, 0) + 1
                if limit is None or len(out.regions) < limit:
                    out.regions.append(Region(path, b.node, b.op, _before_picture(b), _after_picture(n, old_names)))
        return out


def snapshot(model, rules: Optional[Mapping[str, OpRule]] = None) -> Snapshot:
    return Snapshot(model, rules)


def _before_picture(b: _Before) -> Picture:
    pic = Picture()
    pic.nodes.append(PNode("c", OP, b.op, b.node, "center"))
    seen: Dict[str, str] = {}
    for i, (name, shape, prod) in enumerate(b.operands):
        if name is None or prod is None:
            continue
        nid = seen.get(prod.name)
        if nid is None:
            nid = seen[prod.name] = f"p{len(seen)}"
            pic.nodes.append(PNode(nid, prod.kind, prod.op, prod.name, "original"))
        pic.edges.append(PEdge(nid, "c", shape, i))
    pic.nodes.append(PNode("r", "value", "result", b.result[0], "result"))
    pic.edges.append(PEdge("c", "r", b.result[1]))
    return pic


def _after_picture(center: Node, old_names: Set[str]) -> Picture:
    pic = Picture()
    ids: Dict[int, str] = {id(center): "c"}
    pic.nodes.append(PNode("c", OP, center.op_type, center.label, "center"))
    stack: List[Tuple[Node, int]] = [(center, 0)]
    while stack:
        node, depth = stack.pop(0)
        for i, v in enumerate(node.inputs):
            if v is None or v.producer is None or v.producer.kind == OUTPUT:
                continue
            p = v.producer
            if id(p) not in ids:
                new = p.kind in (OP, CONST) and not any(o.name in old_names for o in p.outputs if o.name)
                if len(pic.nodes) >= MAX_NODES or (new and depth + 1 > MAX_DEPTH):
                    pic.truncated = True
                    continue
                ids[id(p)] = f"n{len(ids)}"
                pic.nodes.append(_pnode(p, ids[id(p)], "inserted" if new else "original"))
                if new:
                    stack.append((p, depth + 1))
            pic.edges.append(PEdge(ids[id(p)], ids[id(node)], shape_str(v.type.shape), i))
    out = center.outputs[0]
    pic.nodes.append(PNode("r", "value", "result", out.name, "result"))
    pic.edges.append(PEdge("c", "r", shape_str(out.type.shape)))
    return pic



def culprit_picture(graph: Graph, node: str, region: List[str] = ()) -> Optional[Picture]:
    """The node a localization names as the culprit (its label ``node``), the ops of
    ``region`` it is computed through, and what feeds them: the culprit drawn as the
    center, the region's ops as inserted ones (they have no counterpart in the
    reference), their other operands as context. None if ``node`` is not in ``graph``."""
    by_label = {n.label: n for n in graph.nodes() if n.kind == OP}
    center = by_label.get(node)
    if center is None:
        return None
    pic = Picture()
    ids: Dict[int, str] = {id(center): "c"}
    pic.nodes.append(PNode("c", OP, center.op_type, center.label, "center"))
    inner = [by_label[r] for r in region if r in by_label][: MAX_NODES // 2]
    for n in inner:
        ids[id(n)] = f"n{len(ids)}"
        pic.nodes.append(PNode(ids[id(n)], OP, n.op_type, n.label, "inserted"))
    for n in [center, *inner]:
        for i, v in enumerate(n.inputs):
            if v is None or v.producer is None or v.producer.kind == OUTPUT:
                continue
            p = v.producer
            if id(p) not in ids:
                if len(pic.nodes) >= MAX_NODES:
                    pic.truncated = True
                    continue
                ids[id(p)] = f"n{len(ids)}"
                pic.nodes.append(_pnode(p, ids[id(p)], "original"))
            pic.edges.append(PEdge(ids[id(p)], ids[id(n)], shape_str(v.type.shape), i))
    out = center.outputs[0]
    pic.nodes.append(PNode("r", "value", "result", out.name, "result"))
    pic.edges.append(PEdge("c", "r", shape_str(out.type.shape)))
    return pic
