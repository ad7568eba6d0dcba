"""Where onnx's version converter fails on a model: the opset step and the op.

Its errors are C++ assertions ("...BaseConverter.h:66: adapter_lookup: Assertion `false`
failed: No Adapter From Version $6 for GRU"), some naming no op at all ("required undefined
attribute 'pads'"). Raised one opset at a time, the step that fails is found, and with it
the model's ops whose definition changes at that step: the user learns which node to
rewrite or which opset to export at."""

from __future__ import annotations

import re
from typing import Iterator, List, Optional, Tuple

import onnx
from onnx import defs, version_converter

# the C++ file, line, function and assertion before the converter's own words
_ASSERTION = re.compile(r"^.*?Assertion `.*?` failed: ")
# an op the converter's words name ("... for GRU", "No Adapter For Or")
_NAMED_OP = re.compile(r"\b[Ff]or ([A-Z]\w*)\s*$")


def converter_words(error: BaseException) -> str:
    """The converter's message without its C++ location: its first line."""
    text = str(error).strip()
    first = text.splitlines()[0] if text else type(error).__name__
    return _ASSERTION.sub("", first).strip() or first


def _nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    for node in graph.node:
        yield node
        for attr in node.attribute:
            for g in [attr.g] if attr.HasField("g") else list(attr.graphs):
                yield from _nodes(g)


def _changes_at(op: str, version: int) -> bool:
    """Whether ``op``'s definition in the default domain changes (or ends) at ``version``."""
    try:
        return defs.get_schema(op, version, "").since_version == version
    except defs.SchemaError:
        return True


def failing_step(proto: onnx.ModelProto, old: int, version: int,
                 error: BaseException) -> Tuple[int, Optional[onnx.NodeProto], str]:
    """(the opset the converter cannot reach from the one before, the first node whose op
    changes there (the one the converter's words name, if they name one), its words)."""
    words, step, current = converter_words(error), version, proto
    for v in range(old + 1, version + 1):
        try:
            current = version_converter.convert_version(current, v)
        except Exception as e:  # noqa: BLE001 - the converter's own words are the reason
            words, step = converter_words(e), v
            break
    named = _NAMED_OP.search(words)
    changing: List[onnx.NodeProto] = [n for n in _nodes(current.graph) if n.domain in ("", "ai.onnx")
                                      and _changes_at(n.op_type, step)]
    if named:
        changing = [n for n in changing if n.op_type == named.group(1)] or changing
    return step, (changing[0] if changing else None), words


def why_not_raised(proto: onnx.ModelProto, old: int, version: int, error: BaseException) -> str:
    """One line's worth: the step and the node ("at opset 6 -> 7, node 'rnn' (GRU): ...")."""
    step, node, words = failing_step(proto, old, version, error)
    where = f"at opset {step - 1} -> {step}"
    if node is not None:
        where += f", node '{node.name}' ({node.op_type})" if node.name else f", op {node.op_type}"
    return f"{where}: {words}"
