"""The graph IR: a typed wrapper around a networkx ``DiGraph``.

Every value has a producer node: graph inputs, constants and graph outputs are nodes too
(kinds ``input``, ``const``, ``output``; ordinary operators are kind ``op``). The ordered
operand list lives on each ``Node``; the networkx graph holds one edge per (producer,
consumer) pair with a use count, which is what topological order and reachability need.
A value of an outer graph used inside a subgraph (If/Loop/Scan bodies) also links its
producer to the node owning that subgraph, so outer order stays correct.

An edge may also only order two nodes (``Graph.order``: ops with effects run in the
order they came in). Passes change a graph only through ``Graph`` methods. The edge
data is ``{"uses": n}`` (and ``"order": True``), or, for a single use, ``ONE_USE``. A
node's entry in networkx's node table is the ``Node`` itself, not an attribute dict
holding it (a dict a node was a seventh of a large graph's memory).
"""

from __future__ import annotations

import enum
import heapq
import itertools
from types import MappingProxyType
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

import networkx as nx

from .types import TensorType, UNKNOWN

class NodeKind(str, enum.Enum):
    """What a node is: an operator, or a graph's input, constant or output. Equal to
    its lower-case name as a string (``OP == "op"``), as files and reports spell it."""

    OP = "op"
    INPUT = "input"
    CONST = "const"
    OUTPUT = "output"

    __str__ = str.__str__
    __format__ = str.__format__
    __hash__ = str.__hash__  # Enum's own hashes the member name, in Python


OP, INPUT, CONST, OUTPUT = NodeKind.OP, NodeKind.INPUT, NodeKind.CONST, NodeKind.OUTPUT

# The data of an edge that carries one use and orders nothing (most edges): one mapping
# shared by all of them (a dict each would be a third of a large graph's memory), read
# only; an edge that gains a use or an order gets a dict of its own.
ONE_USE = MappingProxyType({"uses": 1})


@dataclass(eq=False, slots=True)
class Value:
    """One SSA value: the ``index``-th output of ``producer``."""

    name: str
    type: TensorType = UNKNOWN
    producer: Optional["Node"] = None
    index: int = 0
    # The ValueInfoProto the model declared for this value, kept for a lossless export,
    # and its position among the graph's value_info entries.
    info: Any = None
    info_index: int = -1
    # Quantization parameters (TFLite tensors): an ``ir.types.Quantization`` or None.
    quant: Any = None

    @property
    def shape(self):
        return self.type.shape

    def __repr__(self) -> str:
        return f"%{self.name}: {self.type}"


def op_name(domain: str, op_type: str) -> str:
    """How an op is named (``Node.op``): ``Add`` for the default ONNX domain,
    ``domain.op_type`` otherwise."""
    if domain in ("", "ai.onnx"):
        return op_type
    return f"{domain}.{op_type}"


@dataclass(eq=False, slots=True)
class Node:
    """An operator (``kind == "op"``) or a graph input, constant or output.

    ``attrs`` maps attribute names, in their original order, to the attribute's proto,
    or to a ``Graph`` / list of ``Graph`` for subgraph attributes. ``proto`` is what the
    node came from (NodeProto, ValueInfoProto, TensorProto), kept for lossless export.
    """

    kind: NodeKind
    op_type: str
    domain: str = ""
    name: str = ""
    inputs: List[Optional[Value]] = field(default_factory=list)
    outputs: List[Value] = field(default_factory=list)
    attrs: Dict[str, Any] = field(default_factory=dict)
    proto: Any = None
    data: Any = None  # constants: a ConstData
    id: int = -1
    graph: Optional["Graph"] = None

    @property
    def op(self) -> str:
        """``Add`` for the default ONNX domain, ``domain.op_type`` otherwise."""
        return op_name(self.domain, self.op_type)

    @property
    def output(self) -> Value:
        return self.outputs[0]

    @property
    def label(self) -> str:
        """How diagnostics name the node: its name, or its first output's."""
        if self.name:
            return self.name
        for v in self.outputs:
            if v.name:
                return v.name
        if self.kind == OUTPUT and self.inputs and self.inputs[0] is not None:
            return self.inputs[0].name
        return f"#{self.id}"

    def subgraphs(self) -> Iterator[Tuple[str, "Graph"]]:
        for name, a in self.attrs.items():
            if isinstance(a, Graph):
                yield name, a
            elif isinstance(a, list):  # (a TFLite attr may be a list of numbers)
                for g in a:
                    if isinstance(g, Graph):
                        yield name, g

    def __repr__(self) -> str:
        return f"<{self.kind} {self.op} {self.label!r}>"


def _holds_graph(attrs: Dict[str, Any]) -> bool:
    """Whether ``Node.subgraphs`` yields anything for these attrs (asked of every node of
    a graph, each time the passes walk its subgraphs: without a generator a node)."""
    for a in attrs.values():
        if isinstance(a, Graph) or (isinstance(a, list) and any(isinstance(g, Graph) for g in a)):
            return True
    return False


class Graph:
    """A (sub)graph of nodes. ``opsets`` maps domain to opset version; a subgraph
    shares its model's. ``owner`` is the node whose attribute holds a subgraph."""

    # How many graphs were made with an owner in this process: every graph nested in a
    # node's attribute is (the importers make them so, and nothing else nests one). While
    # none is, no node holds a subgraph, and ``subgraphs`` need not look at every node's
    # attributes (asked ten times a run: 6% of a flat 100k-op TFLite chain's profile).
    nested = 0

    def __init__(self, name: str = "", opsets: Optional[Dict[str, int]] = None,
                 owner: Optional[Node] = None):
        if owner is not None:
            Graph.nested += 1
        self.name = name
        self.opsets: Dict[str, int] = opsets if opsets is not None else {"": 21}
        self.owner = owner
        self.proto: Any = None  # the GraphProto this came from, for its header fields
        # The model's IR version: below 4, every initializer must also be a graph input,
        # so new constants are Constant ops there (see passes.rewrite.add_const).
        self.ir_version: int = 10
        # The op set the graph's nodes come from: "onnx", or "tflite" (ops in domain
        # "tflite", named as the flatbuffer's BuiltinOperator). Passes build new nodes
        # in this frontend's ops (see passes.rewrite).
        self.frontend: str = owner.graph.frontend if owner is not None and owner.graph is not None else "onnx"
        # value_info entries naming no value of this graph (an outer or inner value, or
        # nothing), kept with their positions so an export gives them back.
        self.foreign_value_info: List[Tuple[int, Any]] = []
        # Where the model's external data lies (its folder), for tensors held in node
        # attributes (a Constant's value); initializers' ConstData know it themselves.
        self.base_dir: Any = owner.graph.base_dir if owner is not None and owner.graph is not None else None
        self._nx = nx.DiGraph()
        self._ids = itertools.count()
        self._inputs: List[Node] = []
        self._outputs: List[Node] = []
        self._names: Dict[str, Value] = {}
        self._fresh: Dict[str, int] = {}  # base name -> the last suffix fresh_name gave it
        self._order: Optional[List[int]] = None  # cached topological order
        # Nodes removed since it was computed that no node used: still in it, to be
        # filtered out (their removal changes nothing else in it).
        self._dropped: set = set()

    # ---- reading ------------------------------------------------------------------
    def __len__(self) -> int:
        return self._nx.number_of_nodes()

    @property
    def inputs(self) -> List[Node]:
        return list(self._inputs)

    @property
    def outputs(self) -> List[Node]:
        return list(self._outputs)

    @property
    def parent(self) -> Optional["Graph"]:
        return self.owner.graph if self.owner is not None else None

    def node(self, node_id: int) -> Node:
        return self._nx._node[node_id]

    def nodes(self) -> List[Node]:
        """All nodes in deterministic topological order (ties by creation order)."""
        data = self._nx._node
        return [data[i] for i in self._topo_ids()]

    def ops(self) -> List[Node]:
        return [n for n in self.nodes() if n.kind == OP]

    def unordered_nodes(self) -> Iterator[Node]:
        """Every node, in creation order rather than topological order: what a scan that
        looks for a few nodes needs, without the sort (order what it finds with
        ``nodes()``, or by id)."""
        return iter(self._nx._node.values())

    def constants(self) -> List[Node]:
        return [n for n in self._nx._node.values() if n.kind == CONST]

    def walk(self) -> Iterator[Node]:
        """Every node of this graph and of the graphs nested in it (``graphs``' order)."""
        for g in self.graphs():
            yield from g.nodes()

    def graphs(self) -> List["Graph"]:
        """This graph and every graph nested in it: a node's subgraphs together, as the
        walk meets the node, each followed (later) by those nested in it. The one walk
        over subgraphs: passes run in this order."""
        out = [self]

        def visit(g: "Graph") -> None:
            for _, group in itertools.groupby(g.subgraphs(), key=lambda t: t[0]):
                mine = [sub for _, _, sub in group]
                out.extend(mine)
                for sub in mine:
                    visit(sub)

        visit(self)
        return out

    def value(self, name: str) -> Optional[Value]:
        """The value of this name, here or in an enclosing graph."""
        g: Optional[Graph] = self
        while g is not None:
            v = g._names.get(name)
            if v is not None:
                return v
            g = g.parent
        return None

    def users(self, value: Value) -> List[Tuple[Node, int]]:
        """(node, operand index) for every use of ``value``: in this graph, then inside
        its nodes' subgraphs (captured values)."""
        prod = value.producer
        if prod is None or prod.graph is not self:
            raise ValueError(f"{value!r} is not produced in graph {self.name!r}")
        out = []
        for succ in self._nx.successors(prod.id):
            n = self.node(succ)
            out.extend((n, i) for i, v in enumerate(n.inputs) if v is value)
            # a use inside n's subgraphs links the value to n: find those uses too
            for _, sub in n.subgraphs():
                for inner in sub.walk():
                    out.extend((inner, i) for i, v in enumerate(inner.inputs) if v is value)
        out.sort(key=lambda t: (t[0].graph is not self, t[0].id, t[1]))
        return out

    def _topo_ids(self) -> List[int]:
        """Kahn's algorithm, smallest id first among ready nodes; cached until the
        graph changes. Imported graphs are usually already in order: that is checked
        in one pass over the edges and costs no sort."""
        if self._order is not None:
            if self._dropped:
                dropped = self._dropped
                self._order = [i for i in self._order if i not in dropped]
                dropped.clear()
            return self._order
        self._dropped.clear()
        succ = self._nx._succ
        if all(u < v for u, nbrs in succ.items() for v in nbrs):
            self._order = sorted(succ)
            return self._order
        pred = self._nx._pred
        indegree = {n: len(p) for n, p in pred.items()}
        ready = [n for n, d in indegree.items() if d == 0]
        heapq.heapify(ready)
        order: List[int] = []
        append, push, pop, pushpop = order.append, heapq.heappush, heapq.heappop, heapq.heappushpop
        n = pop(ready) if ready else None
        while n is not None:
            append(n)
            # The nodes n makes ready: all but one into the heap; that one goes through
            # heappushpop, which hands it straight back when it is the smallest ready
            # node (a chain's next node, most of the time) without touching the heap.
            made = None
            for m in succ[n]:
                indegree[m] -= 1
                if indegree[m] == 0:
                    if made is not None:
                        push(ready, made)
                    made = m
            if made is not None:
                n = pushpop(ready, made)
            else:
                n = pop(ready) if ready else None
        if len(order) != len(indegree):
            cycle = nx.find_cycle(self._nx, [n for n, d in indegree.items() if d > 0])
            names = " -> ".join(self.node(a).label for a, _ in cycle)
            from ..errors import BadInput
            raise BadInput(f"graph '{self.name}' has a cycle: {names}")
        self._order = order
        return order

    # ---- building -------------------------------------------------------------------
    def opset_of(self, node: Node) -> int:
        """The opset version ``node`` is read at ("ai.onnx" is the default domain)."""
        return self.opset_for(node.domain)

    def opset_for(self, domain: str) -> int:
        """The opset version of ``domain`` ("ai.onnx" is the default domain)."""
        domain = "" if domain == "ai.onnx" else domain
        return self.opsets.get(domain, self.opsets.get("", 1) if domain == "" else 1)

    def fresh_name(self, base: str) -> str:
        """A value name not used in this graph or any enclosing one."""
        if self.value(base) is None:
            return base
        # from the last suffix given: a pass that names many values after one (a shared
        # constant's) would otherwise try every earlier suffix again, quadratic in them
        for i in itertools.count(self._fresh.get(base, 0) + 1):
            cand = f"{base}_{i}"
            if self.value(cand) is None:
                self._fresh[base] = i
                return cand
        raise AssertionError

    def add_nodes(self, nodes: Iterable[Node]) -> List[Node]:
        """Add many nodes at once (the importers' bulk path). Operands may refer to
        values of nodes later in the batch; edges are made after all are registered."""
        self._order = None
        nodes = list(nodes)
        # Registered, and written into networkx's node and adjacency dicts, in one loop:
        # what DiGraph.add_nodes_from would make (empty successor and predecessor dicts
        # per node; the Node where it would put an attribute dict), without its per-node
        # calls.
        ids, names = self._ids, self._names
        node_attrs, succ, pred = self._nx._node, self._nx._succ, self._nx._pred
        for n in nodes:
            nid = n.id = next(ids)
            n.graph = self
            for i, v in enumerate(n.outputs):
                v.producer, v.index = n, i
                if v.name:
                    names[v.name] = v
            node_attrs[nid] = n
            succ[nid] = {}
            pred[nid] = {}
            if n.kind != OP:
                if n.kind == INPUT:
                    self._inputs.append(n)
                elif n.kind == OUTPUT:
                    self._outputs.append(n)
        # Edges in bulk: uses counted per (producer, user) pair, then written straight
        # into networkx's adjacency (one dict per edge, shared by _succ and _pred, as
        # DiGraph.add_edge makes it). Uses from another graph (a subgraph capturing an
        # outer value) go through _link, which finds the edge that orders them.
        succ, pred = self._nx._succ, self._nx._pred
        for n in nodes:
            nid = n.id
            for v in n.inputs:
                if v is None:
                    continue
                prod = v.producer
                if prod is None or prod.graph is not self:
                    self._link(v, n, +1)
                    continue
                out = succ[prod.id]
                data = out.get(nid)
                if data is None:
                    out[nid] = pred[nid][prod.id] = ONE_USE
                elif data is ONE_USE:
                    out[nid] = pred[nid][prod.id] = {"uses": 2}
                else:
                    data["uses"] += 1
        return nodes

    def add_node(self, node: Node) -> Node:
        return self.add_nodes([node])[0]

    def add_op(self, op_type: str, inputs: List[Optional[Value]], output_types: List[TensorType],
               *, domain: str = "", name: str = "", attrs: Optional[Dict[str, Any]] = None,
               output_names: Optional[List[str]] = None) -> Node:
        """Create an operator node; output value names are made fresh from
        ``output_names`` (or the node name)."""
        base = name or op_type.lower()
        names = output_names or [f"{base}_out{i}" if i else f"{base}_out" for i in range(len(output_types))]
        outs = [Value(self.fresh_name(nm), t) for nm, t in zip(names, output_types)]
        node = Node(OP, op_type, domain, name, list(inputs), outs, dict(attrs or {}))
        return self.add_node(node)

    def _link(self, value: Value, user: Node, delta: int) -> None:
        """Count a use of ``value`` by ``user`` on the edge that orders them: in the
        producer's graph, from the producer to ``user`` or to the ancestor of ``user``
        that owns the subgraph it sits in."""
        prod = value.producer
        if prod is None:
            raise ValueError(f"value {value.name!r} has no producer")
        target = user
        while target.graph is not prod.graph:
            owner = target.graph.owner
            if owner is None:
                raise ValueError(f"value {value.name!r} is not visible from node {user.label!r}")
            target = owner
        graph = prod.graph
        graph._order = None
        g = graph._nx
        out = g._succ[prod.id]
        data = out.get(target.id)
        if delta > 0:
            if data is None:
                out[target.id] = g._pred[target.id][prod.id] = ONE_USE
            elif data is ONE_USE:
                out[target.id] = g._pred[target.id][prod.id] = {"uses": 2}
            else:
                data["uses"] += 1
        else:
            if data is ONE_USE:
                uses = 0
            else:
                data["uses"] -= 1
                uses = data["uses"]
            if uses == 0 and not data.get("order"):
                # the edge goes (what DiGraph.remove_edge does, without its checks)
                del out[target.id]
                del g._pred[target.id][prod.id]

    def order(self, before: Node, after: Node) -> None:
        """Make ``after`` run after ``before`` though it uses none of its values (ops
        with effects keep their order): an edge with no uses, which also keeps
        ``before`` from being dead code."""
        if before.graph is not self or after.graph is not self:
            raise ValueError(f"{before!r} and {after!r} are not both nodes of graph {self.name!r}")
        self._order = None
        data = self._nx._succ[before.id].get(after.id)
        if data is None or data is ONE_USE:
            self._nx._succ[before.id][after.id] = self._nx._pred[after.id][before.id] = \
                {"uses": 0 if data is None else 1, "order": True}
        else:
            data["order"] = True

    # ---- mutating -------------------------------------------------------------------
    def set_input(self, node: Node, index: int, value: Optional[Value]) -> None:
        old = node.inputs[index]
        if old is value:
            return
        if old is not None:
            self._link(old, node, -1)
        node.inputs[index] = value
        if value is not None:
            self._link(value, node, +1)

    def replace_all_uses_with(self, old: Value, new: Value,
                              keep: Callable[[Node], bool] = lambda n: False) -> int:
        """Point every use of ``old`` in this graph at ``new`` (except users for which
        ``keep`` is true). A graph output keeps its name: ``new`` takes it over."""
        count = 0
        for user, i in self.users(old):
            if user is new.producer or keep(user):
                continue
            if user.kind == OUTPUT and new.name != old.name:
                name = old.name
                self.rename(old, self.fresh_name(name + "_orig"))
                self.rename(new, name)
            user.graph.set_input(user, i, new)
            count += 1
        return count

    def rename(self, value: Value, name: str) -> None:
        if self._names.get(value.name) is value:
            del self._names[value.name]
        value.name = name
        value.info = None  # the declared ValueInfoProto named the old value
        self._names[name] = value

    def remove_node(self, node: Node) -> None:
        """Remove a node whose outputs are unused."""
        for v in node.outputs:
            if v.name and self._names.get(v.name) is v:
                if any(True for _ in self._nx.successors(node.id)):
                    raise ValueError(f"cannot remove {node!r}: its outputs are still used")
                del self._names[v.name]
        # A node that nothing uses frees no other node by going: the order of the others
        # stays what Kahn's algorithm would make of them (their in-edges are as they were).
        order = self._order if not self._nx._succ[node.id] else None
        for v in node.inputs:
            if v is not None:
                self._link(v, node, -1)
        self._nx.remove_node(node.id)
        self._order = order
        if order is not None:
            self._dropped.add(node.id)
        if node.kind == INPUT:
            self._inputs.remove(node)
        elif node.kind == OUTPUT:
            self._outputs.remove(node)
        node.graph = None

    def has_uses(self, node: Node) -> bool:
        return bool(self._nx._succ[node.id])

    def subgraphs(self) -> List[Tuple[Node, str, "Graph"]]:
        """(owner, attribute, subgraph) for this graph's nodes' subgraphs (not nested
        ones), owners in topological order."""
        if not Graph.nested:
            return []
        owners = [n for n in self._nx._node.values() if n.attrs and _holds_graph(n.attrs)]
        if not owners:  # most graphs: no topological order needed
            return []
        if len(owners) > 1:
            pos = {i: k for k, i in enumerate(self._topo_ids())}
            owners.sort(key=lambda n: pos[n.id])
        return [(n, attr, g) for n in owners for attr, g in n.subgraphs()]
