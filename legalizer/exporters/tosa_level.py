"""TOSA levels (the specification's "Levels" table) and the check of emitted TOSA text
against one.

A level bounds what an implementation must take: ranks (MAX_RANK), kernel sizes and
strides, resize scales, tensor sizes (MAX_LOG2_SIZE: a tensor's bytes stay under
2**MAX_LOG2_SIZE), nesting and tensor lists. ``8k`` is the spec's default; ``none``
bounds nothing. The limits are those of MLIR's ``TosaLevel`` (``TargetEnv.h``), which
``tosa-opt --tosa-validate`` applies.

What an elementwise legalizer can meet it meets (rank folding keeps ranks within
MAX_RANK); what it cannot, ``level_violations`` names - op, tensor, limit and level -
so that no out-of-level module is written: ranks, tensor sizes and tensor lists (a
``tosa.concat`` of more than MAX_TENSOR_LIST_SIZE tensors). Kernels, strides, scales
and nesting concern convolutions, pools, resizes and control flow, which ``tosa-opt
--tosa-validate`` checks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Optional


@dataclass(frozen=True)
class Level:
    name: str
    max_rank: Optional[int]  # None: no bound
    max_kernel: Optional[int] = None
    max_stride: Optional[int] = None
    max_scale: Optional[int] = None
    max_log2_size: Optional[int] = None
    max_nesting: Optional[int] = None
    max_tensor_list_size: Optional[int] = None

    @property
    def title(self) -> str:
        """How the spec names it: ``8K``."""
        return self.name.upper()


LEVELS: Dict[str, Level] = {
    "8k": Level("8k", max_rank=6, max_kernel=8192, max_stride=8192, max_scale=256, max_log2_size=31,
                max_nesting=6, max_tensor_list_size=64),
    "none": Level("none", max_rank=None),
}
DEFAULT_LEVEL = "8k"


@dataclass
class LevelViolation:
    op: str  # the TOSA op, or "func.func" for an argument, "return" for a result
    tensor: str  # the SSA name (legalize names values as the model does)
    limit: str  # MAX_RANK, ...
    detail: str  # what exceeds it: "rank 7", "8589934592 bytes"
    bound: int  # the limit's value at the level
    type: str  # the tensor type, MLIR-style: 2x3x1x4x5x1x6xf32
    line: int


_TENSOR = re.compile(r"tensor<([^>]*)>")
_RESULT = re.compile(r"^\s*(%[\w.$-]+)(?::\d+)?\s*=\s*\"?([\w.]+)\"?")
_ARG = re.compile(r"(%[\w.$-]+)\s*:\s*tensor<([^>]*)>")
_ELEMENT_BITS = {"i1": 1, "i4": 4, "i8": 8, "i16": 16, "i32": 32, "i48": 48, "i64": 64, "f16": 16, "bf16": 16,
                 "f32": 32, "f64": 64, "f8E4M3FN": 8, "f8E5M2": 8}


def _dims(body: str):
    """``2x3xf32`` -> ([2, 3], 'f32'); a ``?`` dim is None."""
    parts = body.split("x")
    # an element type may hold an 'x' only in complex<...>, which TOSA has not
    dims = [None if p == "?" else int(p) for p in parts[:-1] if p == "?" or p.isdigit()]
    return dims, parts[-1]


def _check_type(body: str, level: Level, op: str, tensor: str, line: int, out: List[LevelViolation]) -> None:
    dims, element = _dims(body)
    if level.max_rank is not None and len(dims) > level.max_rank:
        out.append(LevelViolation(op, tensor, "MAX_RANK", f"rank {len(dims)}", level.max_rank, body, line))
        return
    bits = _ELEMENT_BITS.get(element)
    if level.max_log2_size is not None and bits and all(d is not None for d in dims):
        size = max(1, bits // 8)  # bytes per element, as tosa-opt counts them (an i4 takes one)
        for d in dims:
            size *= d
        if size >= 1 << level.max_log2_size:
            out.append(LevelViolation(op, tensor, "MAX_LOG2_SIZE", f"{size} bytes", level.max_log2_size, body, line))


# Ops whose operand is a list of tensors (MAX_TENSOR_LIST_SIZE bounds its length).
_LIST_OPS = ("tosa.concat", "tosa.custom")


def _check_list(line: str, level: Level, op: str, tensor: str, k: int, out: List[LevelViolation]) -> None:
    if level.max_tensor_list_size is None or op not in _LIST_OPS:
        return
    start = line.rfind(" : (")
    operands = line[start:line.rfind(") ->")] if start >= 0 else ""
    n = operands.count("tensor<")
    if n > level.max_tensor_list_size:
        out.append(LevelViolation(op, tensor, "MAX_TENSOR_LIST_SIZE", f"a list of {n} tensors",
                                  level.max_tensor_list_size, "", k))


def _results(line: str, name: str) -> List[tuple]:
    """The SSA names and types an op line defines: ``%x = op ... : (...) -> T`` defines
    ``%x : T``; ``%x:2 = ...`` defines ``%x#0``, ``%x#1``. The operands' types are those
    of values defined elsewhere, which are checked there."""
    head, _, tail = line.rpartition("->")
    bodies = _TENSOR.findall(tail if head else line)
    if len(bodies) == 1:
        return [(name, bodies[0])]
    return [(f"{name}#{i}", b) for i, b in enumerate(bodies)]


def level_violations(text: str, level: Level) -> List[LevelViolation]:
    """Every tensor of the emitted module ``text`` over ``level``'s rank or size limits,
    once each: where it is defined (a function or block argument, an op's result), or,
    for a result the function returns, as that graph output; and every tensor list (a
    concat's operands) over its length limit. An argument is named by its SSA name."""
    out: List[LevelViolation] = []
    if level.max_rank is None and level.max_log2_size is None and level.max_tensor_list_size is None:
        return out
    defined: Dict[str, int] = {}  # SSA name -> index of its violation in ``out``

    def check(body: str, op: str, tensor: str, k: int) -> None:
        n = len(out)
        _check_type(body, level, op, tensor, k, out)
        if len(out) > n:
            defined[tensor] = n

    for k, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if line.startswith("func.func") or line.startswith("^"):
            op = "func.func" if line.startswith("func.func") else "block"
            for name, body in _ARG.findall(line.split("->")[0]):
                check(body, op, name, k)
            continue
        m = _RESULT.match(line)
        if m is None:
            if line.startswith("return"):
                names = [t.strip() for t in line[len("return"):].split(":")[0].split(",")]
                for name, body in zip(names, _TENSOR.findall(line)):
                    if name in defined:  # a result the graph returns: named as that output
                        v = out[defined[name]]
                        if v.op != "func.func":
                            v.op = "return"
                            v.line = k
                    else:
                        check(body, "return", name, k)
            continue
        _check_list(line, level, m.group(2), m.group(1), k, out)
        for name, body in _results(line, m.group(1)):
            check(body, m.group(2), name, k)
    return out
