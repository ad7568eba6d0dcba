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

from ..ir.graph import OP, Node
from ..ir.types import all_static
from ..oprules import RuleLookup, builtin_rules, frontend_rules, table_text
from ..tflite_records import TFLITE_DOMAIN

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


def _as(node: Node) -> Optional[str]:
    """The TFLite op ``node`` is judged as: itself, or for an ONNX op the one it converts
    to (None: an ONNX op the table does not map); "" for a node of neither."""
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
                op = _as(node)
                if op == "":
                    continue
                why = [reason for _, reason in _broken(node, op, be, lookup)]
                if why:
                    entry = {"node": node.label, "op": node.op, "reasons": why}
                    if op is not None and node.domain != TFLITE_DOMAIN:
                        entry["as"] = op
                    out.append(entry)
    return out


def backend_reasons(node: Node, name: str) -> List[str]:
    """The reasons, in backend ``name``'s words, for which it refuses ``node`` (a TFLite
    op); empty: it takes it."""
    op = _as(node)
    if op == "" or node.graph is None:
        return []
    lookup = RuleLookup(node.graph, builtin_rules())
    return [reason for _, reason in _broken(node, op, backend(name), lookup)]


def _broken(node: Node, op: Optional[str], be: Backend, lookup: RuleLookup) -> Iterator[tuple]:
    if op in be.refused:
        yield "op", be.refused[op]
    values = [v for v in node.inputs if v is not None] + list(node.outputs)
    shapes = [v.type.shape for v in values]
    if be.max_rank is not None and any(s is not None and len(s) > be.max_rank for s in shapes):
        yield "rank", be.rank_reason
    if be.dynamic_dims == "first" and any(s is None or not all_static(s[1:]) for s in shapes):
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
