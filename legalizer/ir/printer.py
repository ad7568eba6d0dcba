"""A text form of the IR, for tests and ``-v`` output."""

from __future__ import annotations

from typing import List

from .graph import CONST, INPUT, OUTPUT, Graph, Node


def _operand(v) -> str:
    return "%" + v.name if v is not None else "none"


def _node_line(n: Node, indent: str, lines: List[str]) -> None:
    if n.kind in (INPUT, OUTPUT):
        return
    outs = ", ".join("%" + v.name for v in n.outputs)
    if n.kind == CONST:
        lines.append(f"{indent}{outs} = const : {n.output.type}")
        return
    ins = ", ".join(_operand(v) for v in n.inputs)
    in_types = ", ".join(str(v.type) if v is not None else "none" for v in n.inputs)
    out_types = ", ".join(str(v.type) for v in n.outputs)
    name = f"  // {n.name}" if n.name else ""
    lines.append(f"{indent}{outs} = {n.op}({ins}) : ({in_types}) -> {out_types}{name}")
    for attr, sub in n.subgraphs():
        lines.append(f"{indent}  {attr}:")
        _graph_lines(sub, indent + "    ", lines)


def _graph_lines(g: Graph, indent: str, lines: List[str]) -> None:
    args = ", ".join(f"%{n.output.name}: {n.output.type}" for n in g.inputs)
    lines.append(f"{indent}graph {g.name}({args}) {{")
    for n in g.nodes():
        _node_line(n, indent + "  ", lines)
    rets = ", ".join(_operand(n.inputs[0]) for n in g.outputs)
    lines.append(f"{indent}  return {rets}")
    lines.append(f"{indent}}}")


def format_graph(g: Graph) -> str:
    lines: List[str] = []
    _graph_lines(g, "", lines)
    return "\n".join(lines)
