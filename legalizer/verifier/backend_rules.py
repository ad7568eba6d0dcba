"""The ops a deployment backend refuses, by its rules (``rules/backends.toml``): what
``--target litert-gpu``/``ethos-u``/``ethos-u55`` cannot make legal is named, with the
backend's own words, before the passes and after (the report's ``target_rules``). Each
rule an op breaks gives one reason, in the table's order: an op the backend never takes,
then rank, dynamic dims, batch, one-sided broadcasting, shape operands.

    backend(name)              -> Backend (the table's record)
    backend_reasons(node, name) -> [the backend's reasons for refusing node]   (targets.Target.refused)

The rules are the backends' documented ones; the backends themselves
(``legalizer.numeric.litert_gpu``, ``legalizer.numeric.vela``) are the judges in the tests.

An ONNX model (to be converted to TFLite) is judged by the same rules: each ONNX op as
the TFLite op the rules table says it converts to (``rules/tflite.toml``'s ``onnx``:
``Expand`` as ``BROADCAST_TO``, ``Unsqueeze`` as ``EXPAND_DIMS``, ``Add`` as ``ADD``,
...), an op the table does not map by the rules that hold for every op (rank, dynamic
dims, batch). The report names the TFLite op (``as``).
"""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Mapping, Optional

from ..ir.graph import CONST, OP, Node
from ..ir.types import all_static
from ..oprules import RuleLookup, builtin_rules, frontend_rules, table_text
from ..kinds.tflite.records import TFLITE_DOMAIN

RESHAPE_LIKE = frozenset({"RESHAPE", "EXPAND_DIMS", "SQUEEZE"})


@dataclass(frozen=True)
class Backend:
    name: str
    tool: str
    max_rank: Optional[int] = None
    rank_reason: str = ""
    dynamic_dims: str = "any"  # "first": only dim 0 may be dynamic
    dynamic_reason: str = ""
    batch_one: bool = False
    batch_reason: str = ""
    one_sided: bool = False
    one_sided_reason: str = ""
    shape_operands: bool = False
    shape_reason: str = ""
    refused: Mapping[str, str] = field(default_factory=dict)
    # "onnx": the backend takes ONNX ops themselves (onnxruntime's QNN EP), judged by their
    # own names; "tflite" (default): TFLite ops, an ONNX op as the one it converts to.
    ops: str = "tflite"
    # rules/NAME: the ranks at which the backend takes each op, as its own validation found
    # them (scripts/qnn_htp_probe.py); an op it lists is judged by it, not by max_rank.
    op_ranks: str = ""
    device: str = "the accelerator"  # where the ops it takes run, as a verdict names it
    dtypes: tuple = ()  # the element types its ops compute in (empty: any)
    dtype_reason: str = ""  # its words for an op in another type


@functools.lru_cache(maxsize=None)
def backends() -> Dict[str, Backend]:
    data = tomllib.loads(table_text("backends.toml"))
    conv = {"refused": dict, "dtypes": tuple}
    return {name: Backend(name=name, **{k: conv.get(k, lambda x: x)(v) for k, v in table.items()})
            for name, table in data.items()}


def backend(name: str) -> Backend:
    return backends()[name]


@functools.lru_cache(maxsize=None)
def converts_to() -> Mapping[str, str]:
    """ONNX op -> the TFLite op it converts to, by the rules table."""
    return {r.onnx: op.split(".", 1)[1] for op, r in frontend_rules(TFLITE_DOMAIN).items() if r.onnx}


@functools.lru_cache(maxsize=None)
def op_ranks(name: str) -> Mapping[str, tuple]:
    """Op (``OP`` or ``OP:variant``, then ``@TYPE`` for an element type other than
    float32) -> (the ranks the backend takes, {rank: its words for refusing the op at that
    rank}), from the table ``rules/NAME``. An op's first row (of a type) also stands for
    the op itself (in that type)."""
    data = tomllib.loads(table_text(name))
    out: Dict[str, tuple] = {}
    for key, row in data.items():
        entry = (frozenset(row.get("takes", ())), {int(r): why for r, why in row.get("refused", {}).items()})
        out[key] = entry
        base, at, dtype = key.partition("@")
        out.setdefault(base.partition(":")[0] + at + dtype, entry)
    return out


def _dtype(node: Node) -> Optional[str]:
    """The element type ``node`` computes in, as the probe typed it: its first operand's
    (Where's first value operand; a node without operands, its result's)."""
    values = node.inputs[1:2] if node.op_type == "Where" else node.inputs[:1]
    values = [v for v in values if v is not None] or list(node.outputs)
    return values[0].type.dtype if values else None


def _probed(table: Mapping[str, tuple], node: Node, op: str, lookup: RuleLookup) -> Optional[tuple]:
    """The table's verdict for ``node``: its row in its own element type where the backend
    was probed in it, else its float32 row."""
    variant = _variant(node, op, lookup)
    dtype = _dtype(node)
    keys = [variant, op] if dtype in (None, "float32") else [f"{variant}@{dtype}", f"{op}@{dtype}", variant, op]
    return next((table[k] for k in keys if k in table), None)


def _variant(node: Node, op: str, lookup: RuleLookup) -> str:
    """The table's row for ``node``: a MatMul with a constant matrix as its second operand
    is what the QNN EP makes a FullyConnected (``MatMul:weights``), another a MatMul of
    activations; a broadcasting binary op is judged as its one-sided form (what the legal
    forms leave) unless its operands have the result's shape."""
    if op == "MatMul":
        w = node.inputs[1] if len(node.inputs) > 1 else None
        const = w is not None and w.producer is not None and w.producer.kind == CONST and \
            w.type.shape is not None and len(w.type.shape) == 2
        return "MatMul:weights" if const else "MatMul:activations"
    if _binary(node, lookup):
        same = all(v is not None and v.type.shape == node.outputs[0].type.shape for v in node.inputs)
        return f"{op}:same" if same else f"{op}:one-sided"
    if op == "Erf" and _in_gelu(node):
        return "Erf:gelu"
    return op


def _in_gelu(erf: Node) -> bool:
    """Whether ``erf`` is the Erf of a Gelu as onnxruntime fuses it, ``x * 0.5 * (1 +
    Erf(x / sqrt 2))`` (the QNN EP takes the fused Gelu, and no Erf alone): its operand a
    ``Div`` (or ``Mul``) by a constant, its one user an ``Add`` of a constant, whose user
    is a ``Mul``."""
    def const_operand(node: Node) -> bool:
        return any(v is not None and v.producer is not None and
                   (v.producer.kind == CONST or v.producer.op == "Constant") for v in node.inputs)

    graph, src = erf.graph, erf.inputs[0] if erf.inputs else None
    if graph is None or src is None or src.producer is None or src.producer.op not in ("Div", "Mul") \
            or not const_operand(src.producer):
        return False
    users = [u for u, _ in graph.users(erf.outputs[0])]
    if len(users) != 1 or users[0].op != "Add" or not const_operand(users[0]):
        return False
    return any(u.op == "Mul" for u, _ in graph.users(users[0].outputs[0]))


def _as(node: Node, be: Optional[Backend] = None) -> Optional[str]:
    """The op ``node`` is judged as: itself, or for an ONNX op the TFLite op it converts
    to (None: an ONNX op the table does not map), unless ``be`` takes ONNX ops; "" for a
    node of neither."""
    if be is not None and be.ops == "onnx":
        return node.op_type if node.domain in ("", "ai.onnx") else ""
    if node.domain == TFLITE_DOMAIN:
        return node.op_type
    if node.domain in ("", "ai.onnx"):
        return converts_to().get(node.op_type)
    return ""


def refused_ops(graphs, name: str) -> List[dict]:
    """Every TFLite op of ``graphs`` (and their subgraphs) that backend ``name`` refuses:
    ``{"node", "op", "reasons"}``, the reasons in its words (``Target.refused``)."""
    be = backend(name)
    rules = builtin_rules()
    out = []
    for top in graphs:
        for g in top.graphs():
            lookup = RuleLookup(g, rules)
            for node in g.nodes():
                if node.kind != OP:
                    continue
                op = _as(node, be)
                if op == "":
                    continue
                why = [reason for _, reason in _broken(node, op, be, lookup)]
                if why:
                    entry = {"node": node.label, "op": node.op, "reasons": why}
                    if op is not None and node.domain != TFLITE_DOMAIN and be.ops != "onnx":
                        entry["as"] = op
                    out.append(entry)
    return out


def backend_reasons(node: Node, name: str) -> List[str]:
    """The reasons, in backend ``name``'s words, for which it refuses ``node`` (a TFLite
    op); empty: it takes it."""
    be = backend(name)
    op = _as(node, be)
    if op == "" or node.graph is None:
        return []
    lookup = RuleLookup(node.graph, builtin_rules())
    return [reason for _, reason in _broken(node, op, be, lookup)]


def refused_for_rank(node: Node, name: str) -> bool:
    """Whether backend ``name`` refuses ``node`` at its rank and takes it at a lower one
    (what a rank fold can fix)."""
    be = backend(name)
    op = _as(node, be)
    if op == "" or node.graph is None:
        return False
    return any(kind == "rank" for kind, _ in _broken(node, op, be, RuleLookup(node.graph, builtin_rules())))


def _broken(node: Node, op: Optional[str], be: Backend, lookup: RuleLookup) -> Iterator[tuple]:
    if op in be.refused:
        yield "op", be.refused[op]
    values = [v for v in node.inputs if v is not None] + list(node.outputs)
    shapes = [v.type.shape for v in values]
    rank = max((len(s) for s in shapes if s is not None), default=0)
    table = op_ranks(be.op_ranks) if be.op_ranks and op else {}
    probed = _probed(table, node, op, lookup) if table else None
    if probed is not None:  # the backend's own verdict at this rank, in its words
        takes, refused = probed
        if rank not in takes and (rank in refused or (be.max_rank is not None and rank > be.max_rank)):
            # (an op it takes at no lower rank is refused as an op: no fold helps it)
            yield "rank" if any(r < rank for r in takes) else "op", \
                refused.get(rank, be.rank_reason).replace("{node}", node.label)
    elif be.max_rank is not None and rank > be.max_rank:
        yield "rank", be.rank_reason
    if be.dynamic_dims == "first" and any(s is None or not all_static(s[1:]) for s in shapes):
        yield "dynamic", be.dynamic_reason
    if be.dynamic_dims == "none" and any(s is None or not all_static(s) for s in shapes):
        yield "dynamic", be.dynamic_reason
    # Vela checks the input feature maps (IFM, and IFM2 of a binary elementwise op), not
    # weights nor results; a dynamic batch is compiled at the tensor's shape (1, where
    # converters write -1 in shape_signature): only a static batch other than 1 is refused
    ifms = [v.type.shape for v in node.inputs[:2 if _binary(node, lookup) else 1] if v is not None]
    if be.batch_one and op not in RESHAPE_LIKE and \
            any(s is not None and len(s) == 4 and isinstance(s[0], int) and s[0] != 1 for s in ifms):
        yield "batch", be.batch_reason
    if be.one_sided and len(node.inputs) == 2 and _two_sided(node, lookup):
        yield "one_sided", be.one_sided_reason
    if be.shape_operands and op == "RESHAPE" and len(node.inputs) > 1 and node.inputs[1] is not None \
            and node.inputs[1].producer is not None and node.inputs[1].producer.kind == OP \
            and node.inputs[1].producer.op != "Constant":  # (ONNX's constant op)
        yield "shape_operand", be.shape_reason


def _binary(node: Node, lookup: RuleLookup) -> bool:
    """A numpy-broadcasting op of two operands (Vela's IFM and IFM2)."""
    found = lookup(node)
    return found is not None and found[1] == "numpy" and found[0].broadcast == "multidirectional" \
        and len(node.inputs) == 2


def _two_sided(node: Node, lookup: RuleLookup) -> bool:
    if not _binary(node, lookup):
        return False
    result = node.outputs[0].type.shape
    if result is None or any(v is None or v.type.shape is None for v in node.inputs):
        return False
    # Vela compares the shapes as they are: [4,8,8] does not match an OFM [1,4,8,8]
    # ("Op has ifm_shape=[4, 8, 8], ifm2_shape=[1, 1, 8, 8] and ofm_shape=[1, 4, 8, 8]")
    result = tuple(result)
    return all(tuple(v.type.shape) != result for v in node.inputs)
