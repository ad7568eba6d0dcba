"""Subgraph calls: WHILE as a Loop, IF as an If, CALL as its subgraph written in place;
and the ops with state, which have no form."""

from __future__ import annotations

from typing import List, Sequence

import onnx
from onnx import TensorProto, helper

from ....ir.dtypes import elem_type
from .driver import translate_all
from .emitter import Emitter, NoForm, option
from .registry import op

_MAX_CALL_DEPTH = 16  # WHILE in IF in WHILE ...: deeper than this (or recursion) has no form


def _call(e: Emitter, index: int, args: Sequence[str], nodes: List[onnx.NodeProto], role: str) -> List[str]:
    """Subgraph ``index`` (a WHILE's body, an IF's branch) applied to ``args`` (the
    stored data of its inputs): its nodes are written into ``nodes``; the result is
    a fresh tensor per output (a subgraph output may be one of its inputs, and an
    ONNX body's outputs must be its own)."""
    if not 0 <= index < len(e.subgraphs):
        raise NoForm(f"{role} subgraph {index} is not in the model")
    if e.depth >= _MAX_CALL_DEPTH:
        raise NoForm(f"subgraph calls nested deeper than {_MAX_CALL_DEPTH}")
    sub = e.subgraphs[index]
    if len(args) != len(sub.inputs):
        raise NoForm(f"{role} subgraph '{sub.name}' takes {len(sub.inputs)} inputs, not {len(args)}")
    callee = Emitter(sub, e.opset, e.subgraphs, caller=e, nodes=nodes)
    for n, arg in zip(sub.inputs, args):
        callee.names[id(n.output)] = arg
    missing, _ = translate_all(callee)
    if missing:
        raise NoForm(f"{role} subgraph '{sub.name}': {', '.join(missing)}")
    outs = []
    for o in sub.outputs:
        callee.label = f"{sub.name}/{o.inputs[0].name}"
        out = e.fresh(callee.label)
        callee.add_node("Identity", [callee.raw(o.inputs[0])], [out])
        outs.append(out)
    return outs


def _scalar_bool(e: Emitter, name: str) -> str:
    """A TFLite condition ([] or [1]) as the scalar ONNX's If and Loop take."""
    return e.emit("Reshape", [name, e.ints([])])


def _body(e: Emitter, name: str, nodes, inputs: Sequence[onnx.ValueInfoProto], outputs: Sequence[str],
          types: Sequence[int]) -> onnx.GraphProto:
    """An ONNX subgraph of ``nodes``; its outputs typed by element type only (TFLite lets a
    loop variable change shape from one iteration to the next)."""
    outs = [helper.make_tensor_value_info(o, t, None) for o, t in zip(outputs, types)]
    return helper.make_graph(nodes, e.fresh(name), list(inputs), outs)


@op("WHILE", raw=True)
def _while(e, n):
    """WHILE(vars) -> Loop: the condition subgraph runs on the initial vars before the
    Loop, and on the body's results at the end of each iteration."""
    cond_index, body_index = int(option(n, "cond_subgraph_index")), int(option(n, "body_subgraph_index"))
    init = [e.raw(v) for v in n.inputs]
    cond0 = _scalar_bool(e, _call(e, cond_index, init, e.nodes, "cond")[0])
    nodes: List[onnx.NodeProto] = []
    formal = [e.fresh(f"{v.name}_in") for v in n.inputs]
    results = _call(e, body_index, formal, nodes, "body")
    with e.writing_into(nodes):
        cond = _scalar_bool(e, _call(e, cond_index, results, nodes, "cond")[0])
    types = [elem_type(v.type.dtype) for v in n.outputs]
    inputs = [helper.make_tensor_value_info(e.fresh("iteration"), TensorProto.INT64, []),
              helper.make_tensor_value_info(e.fresh("cond_in"), TensorProto.BOOL, [])]
    inputs += [helper.make_tensor_value_info(f, t, None) for f, t in zip(formal, types)]
    body = _body(e, f"{n.label}_body", nodes, inputs, [cond] + results, [TensorProto.BOOL] + types)
    return e.emit_all("Loop", ["", cond0, *init], len(n.outputs), body=body)


@op("IF", raw=True)
def _if(e, n):
    """IF(cond, args) -> If: each branch calls its subgraph on the args, read from the
    outer scope."""
    args = [e.raw(v) for v in n.inputs[1:]]
    types = [elem_type(v.type.dtype) for v in n.outputs]
    branches = {}
    for key, index in (("then_branch", "then_subgraph_index"), ("else_branch", "else_subgraph_index")):
        nodes: List[onnx.NodeProto] = []
        results = _call(e, int(option(n, index)), args, nodes, key.split("_")[0])
        branches[key] = _body(e, f"{n.label}_{key}", nodes, [], results, types)
    return e.emit_all("If", [_scalar_bool(e, e.raw(n.inputs[0]))], len(n.outputs), **branches)


@op("CALL", raw=True)
def _call_op(e, n):
    return _call(e, int(option(n, "subgraph")), [e.raw(v) for v in n.inputs], e.nodes, "called")


# Resource variables and hash tables live in the interpreter between ops and between
# runs; ONNX has no state to hold them.
@op("VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE", "CALL_ONCE", "HASHTABLE", "HASHTABLE_FIND",
     "HASHTABLE_IMPORT", "HASHTABLE_SIZE")
def _stateful(e, n):
    raise NoForm("ONNX has no state")
