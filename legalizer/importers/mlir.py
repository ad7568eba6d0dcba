"""TOSA MLIR -> IR: ``load_mlir(path)`` and ``parse_mlir(text)``. Translates; never rewrites.

Text is read in two steps: a hand-written lexer and recursive-descent parser (one
function per construct) build a small syntax tree of operations, regions and blocks;
then each function becomes a ``Graph``. Bytecode (``.mlirbc``) is printed as generic text
first by iree-base-compiler's MLIR bindings, when they are installed.

The parser reads MLIR's generic form (``%0 = "tosa.add"(%a, %b) : (...) -> ...``) in full,
and the pretty forms TOSA producers print (tosa-converter-for-tflite, IREE, tf-opt):
``func.func`` with block arguments, ``%0 = tosa.add %a, %b : (T, T) -> T``, attribute
dicts ``{...}`` and property dicts ``<{...}>``, IREE's ``keyword(value)`` attributes
(``axis(1)``, ``values(dense<...>)``), multi-result ops (``%0:2``, ``%0#1``),
``func.return``, locations ``loc(...)``, aliases (``#loc = ...``, ``!t = ...``) and
comments. A pretty op whose syntax this parser does not know is read generically: its
``%`` uses are its operands, its trailing ``: (types) -> types`` its types.

Conventions of the MLIR IR:

- An op is a node of its dialect as domain and the rest as op type: ``tosa.add`` is
  domain ``tosa``, op type ``add`` (``node.op == "tosa.add"``); unqualified ops inside a
  function are ``func`` ops (``return``). Ops of unknown dialects are kept opaque.
- Values are named by their SSA names without ``%`` (``0``, ``arg0``; the results of
  ``%0:2`` are ``0#0`` and ``0#1``); a node is named by its first result (``%0``), and
  ``node.proto`` is an ``OpSource`` with its line, column and location.
- Types: ``tensor<1x?x16xf32>`` is ``TensorType("float", (1, None, 16))``, ``tensor<*xf32>``
  is unranked; element types map to the IR's (ONNX's) names (``i1`` -> ``bool``,
  ``bf16`` -> ``bfloat16``); ``!quant.uniform`` elements give their storage type and
  ``Value.quant``. Non-tensor types (``!tosa.shape<4>``, scalars) are unknown tensor types,
  their text kept in ``Value.info``.
- ``tosa.const`` / ``tosa.const_shape`` / ``arith.constant`` with a readable ``dense<...>`` are constant nodes
  holding the array (a splat is a zero-copy broadcast view); attributes are Python values
  (``int``, ``float``, ``bool``, ``str``, lists, dicts, numpy arrays for ``dense``) or
  ``MlirAttr`` holding the text of what the IR does not model.
- Every function with a body is a graph (``Model.subgraphs``); ``Model.graph`` is
  ``@main`` (else the first function). Block arguments are graph inputs, the terminator's
  operands graph outputs; an op's regions are subgraphs in ``attrs["region0"]``, ...
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import numpy as np

from ..errors import BadInput
from ..ir.constdata import ConstData
from ..ir.dtypes import DTYPE_OF_MLIR, MLIR_FLOATS, numpy_dtype
from ..ir.graph import CONST, INPUT, OP, OUTPUT, Graph, Node, Value
from ..ir.types import UNKNOWN, Quantization, TensorType
from ..model import Model

TOSA_DOMAIN = "tosa"
BYTECODE_MAGIC = b"ML\xefR"

# The TOSA dialect's ops (as of TOSA 1.0 and IREE 3.x): others in domain tosa are warned about.
TOSA_OPS = frozenset("""
abs add apply_scale argmax arithmetic_right_shift avg_pool2d avg_pool2d_adaptive bitwise_and bitwise_not
bitwise_or bitwise_xor cast cast_from_block_scaled cast_to_block_scaled ceil clamp clz concat concat_shape
cond_if const const_shape conv2d conv2d_block_scaled conv3d cos custom depthwise_conv2d dim div div_ceil_shape
div_floor_shape equal erf exp exp2_shape fft2d floor fully_connected gather greater greater_equal identity intdiv
log log2_ceil_shape log2_floor_shape logical_and logical_left_shift logical_not logical_or logical_right_shift
logical_xor matmul matmul_t matmul_t_block_scaled max_pool2d max_pool2d_adaptive max_shape maximum min_shape
minimum mod_shape mul mul_shape negate pad pow reciprocal reduce_all reduce_any reduce_max reduce_min
reduce_product reduce_sum rescale reshape reshape_block_scaled resize reverse rfft2d row_gather
row_gather_block_scaled rsqrt scatter select sigmoid sin slice slice_shape sub sub_shape table tanh tile
transpose transpose_conv2d variable variable_read variable_write while_loop yield add_shape assert_equal_shape
""".split())
KNOWN_DIALECTS = ("tosa", "func", "arith", "builtin", "tensor", "quant", "ml_program")
TERMINATORS = frozenset({"func.return", "tosa.yield", "scf.yield", "cf.br", "ml_program.return"})
CONSTANT_OPS = frozenset({"tosa.const", "tosa.const_shape", "arith.constant"})
PUNCT = "(){}[]<>,:=*?+"


@dataclass(frozen=True)
class MlirAttr:
    """An attribute the IR keeps as text (``#tosa.xxx<...>``, ``affine_map<...>``, types)."""

    text: str

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class OpSource:
    """``Node.proto`` of an imported op: where it is in the text, and its location."""

    line: int
    column: int
    loc: Optional[str] = None


@dataclass
class MlirSource:
    """``Model.proto`` of an MLIR model: the form it was read from, the module's
    attributes and the aliases the text defined."""

    form: str  # "text" | "bytecode"
    module_attrs: Dict[str, Any] = field(default_factory=dict)
    aliases: Dict[str, str] = field(default_factory=dict)
    functions: List[str] = field(default_factory=list)


# ---- lexer -------------------------------------------------------------------------------

class Tok(NamedTuple):
    """A token: kind is one of eof, percent, caret, at, hash, bang, bare, int, float,
    string, punct, arrow, metadata; ``nl`` tells that a line break precedes it."""

    kind: str
    text: str
    pos: int
    nl: bool


class Lexer:
    """Tokens of MLIR text on demand, with lookahead, positions, and raw ``<...>`` bodies."""

    def __init__(self, text: str, source: str, base: int = 0, lines: Optional[List[int]] = None,
                 full: Optional[str] = None):
        self.text = text
        self.source = source
        self.i = 0
        self.base = base  # offset of ``text`` in the whole source (a sub-lexer of a dense body)
        self.full = full if full is not None else text
        self.line_starts = lines if lines is not None else _line_starts(text)
        self.buf: List[Tok] = []
        self.last_end = 0  # where the last consumed token ends

    # -- positions and errors ------------------------------------------------------------
    def line_col(self, pos: int) -> Tuple[int, int]:
        pos += self.base
        line = bisect.bisect_right(self.line_starts, pos)
        return line, pos - self.line_starts[line - 1] + 1

    def error(self, message: str, pos: Optional[int] = None) -> BadInput:
        if pos is None:
            pos = self.peek().pos
        line, col = self.line_col(pos)
        return BadInput(f"{self.source}:{line}:{col}: {message}")

    # -- tokens --------------------------------------------------------------------------
    def peek(self, k: int = 0) -> Tok:
        while len(self.buf) <= k:
            self.buf.append(self._scan())
        return self.buf[k]

    def next(self) -> Tok:
        tok = self.peek()
        self.buf.pop(0)
        self.last_end = tok.pos + len(tok.text)
        return tok

    def at(self, text: str, k: int = 0) -> bool:
        t = self.peek(k)
        return t.text == text and t.kind in ("punct", "arrow", "bare")

    def accept(self, text: str) -> bool:
        if self.at(text):
            self.next()
            return True
        return False

    def expect(self, text: str, what: str = "") -> Tok:
        tok = self.peek()
        if not self.at(text):
            raise self.error(f"expected '{text}'{' ' + what if what else ''}, found {describe(tok)}", tok.pos)
        return self.next()

    def _skip_space(self) -> bool:
        text, i, n, nl = self.text, self.i, len(self.text), False
        while i < n:
            c = text[i]
            if c == "\n":
                nl = True
                i += 1
            elif c in " \t\r":
                i += 1
            elif text.startswith("//", i):
                end = text.find("\n", i)
                i = n if end < 0 else end
            else:
                break
        self.i = i
        return nl

    def _scan(self) -> Tok:
        nl = self._skip_space()
        text, i = self.text, self.i
        if i >= len(text):
            return Tok("eof", "", i, nl)
        c = text[i]
        if c in "%^@#!":
            return self._prefixed(c, i, nl)
        if c == '"':
            return self._string(i, nl)
        if c.isdigit():
            return self._number(i, nl)
        if c.isalpha() or c == "_":
            j = i + 1
            while j < len(text) and (text[j].isalnum() or text[j] in "_$."):
                j += 1
            self.i = j
            return Tok("bare", text[i:j], i, nl)
        if text.startswith("->", i):
            self.i = i + 2
            return Tok("arrow", "->", i, nl)
        if text.startswith("{-#", i):
            end = text.find("#-}", i)
            if end < 0:
                raise self.error("unterminated file metadata '{-#'", i)
            self.i = end + 3
            return Tok("metadata", text[i:end + 3], i, nl)
        if text.startswith("::", i):
            self.i = i + 2
            return Tok("punct", "::", i, nl)
        if c in PUNCT or c == "-":
            self.i = i + 1
            return Tok("punct", c, i, nl)
        raise self.error(f"unexpected character {c!r}", i)

    _KINDS = {"%": "percent", "^": "caret", "@": "at", "#": "hash", "!": "bang"}

    def _prefixed(self, c: str, i: int, nl: bool) -> Tok:
        text, j = self.text, i + 1
        if c == "@" and j < len(text) and text[j] == '"':
            tok = self._string(j, nl)
            return Tok("at", "@" + tok.text, i, nl)
        while j < len(text) and (text[j].isalnum() or text[j] in "_$.-"):
            j += 1
        if j == i + 1:
            raise self.error(f"expected an identifier after '{c}'", i)
        self.i = j
        return Tok(self._KINDS[c], text[i:j], i, nl)

    def _string(self, i: int, nl: bool) -> Tok:
        end = self._string_end(i)
        if self.text.find("\n", i, end) >= 0:
            raise self.error("unterminated string", i)
        self.i = end
        return Tok("string", self.text[i:end], i, nl)

    def _number(self, i: int, nl: bool) -> Tok:
        text, j = self.text, i
        if text.startswith(("0x", "0X"), i) and i + 2 < len(text) and _is_hex(text[i + 2]):
            j = i + 2
            while j < len(text) and _is_hex(text[j]):
                j += 1
            self.i = j
            return Tok("int", text[i:j], i, nl)
        while j < len(text) and text[j].isdigit():
            j += 1
        kind = "int"
        if j < len(text) and text[j] == "." and (j + 1 >= len(text) or text[j + 1] != "."):
            kind, j = "float", j + 1
            while j < len(text) and text[j].isdigit():
                j += 1
            if j < len(text) and text[j] in "eE":
                k = j + 1
                if k < len(text) and text[k] in "+-":
                    k += 1
                if k < len(text) and text[k].isdigit():
                    j = k
                    while j < len(text) and text[j].isdigit():
                        j += 1
        self.i = j
        return Tok(kind, text[i:j], i, nl)

    def raw_angle(self) -> Tuple[str, int]:
        """The text between the ``<`` that is the next token and its matching ``>``
        (nesting, strings and ``->`` respected), consumed; and its position."""
        tok = self.peek()
        if tok.text != "<":
            raise self.error(f"expected '<', found {describe(tok)}", tok.pos)
        self.buf.clear()
        text, j, depth = self.text, tok.pos + 1, 1
        while True:  # jump from one of < > " to the next (bodies may be megabytes of hex)
            hits = [k for k in (text.find("<", j), text.find(">", j), text.find('"', j)) if k >= 0]
            if not hits:
                raise self.error("unbalanced '<'", tok.pos)
            j = min(hits)
            c = text[j]
            if c == '"':
                j = self._string_end(j)
                continue
            if c == "<":
                depth += 1
            elif text[j - 1] != "-":
                depth -= 1
                if depth == 0:
                    self.i = self.last_end = j + 1
                    return text[tok.pos + 1:j], tok.pos + 1
            j += 1

    def _string_end(self, j: int) -> int:
        """The end of the string literal starting at ``j`` (its closing quote + 1)."""
        text, k = self.text, j + 1
        while True:
            q = text.find('"', k)
            if q < 0:
                raise self.error("unterminated string", j)
            b = text.find("\\", k, q)
            if b < 0:
                return q + 1
            k = b + 2

    def sub(self, text: str, pos: int) -> "Lexer":
        """A lexer over a piece of this text (a raw body) that reports positions in the whole."""
        return Lexer(text, self.source, self.base + pos, self.line_starts, self.full)


def _line_starts(text: str) -> List[int]:
    starts, k = [0], text.find("\n")
    while k >= 0:
        starts.append(k + 1)
        k = text.find("\n", k + 1)
    return starts


def _is_hex(c: str) -> bool:
    return c.isdigit() or c in "abcdefABCDEF"


def describe(tok: Tok) -> str:
    return "end of input" if tok.kind == "eof" else f"'{tok.text}'"


def _unquote(s: str) -> str:
    """An MLIR string literal's value (escapes: \\n \\t \\" \\\\ and two hex digits)."""
    body, out, i = s[1:-1], [], 0
    if "\\" not in body:
        return body
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            n = body[i + 1]
            if n in "nt\"\\":
                out.append({"n": "\n", "t": "\t", '"': '"', "\\": "\\"}[n])
                i += 2
                continue
            if i + 2 < len(body) and _is_hex(n) and _is_hex(body[i + 2]):
                out.append(chr(int(body[i + 1:i + 3], 16)))
                i += 3
                continue
        out.append(c)
        i += 1
    return "".join(out)


# ---- syntax tree -------------------------------------------------------------------------

@dataclass(frozen=True)
class MType:
    """A parsed type: its text, and the IR's view of it."""

    text: str
    tensor: TensorType = UNKNOWN
    quant: Optional[Quantization] = None
    is_tensor: bool = False


@dataclass
class Block:
    label: Optional[str]
    args: List[Tuple[str, MType, int]]  # (name, type, position)
    ops: List["Op"] = field(default_factory=list)


@dataclass
class Region:
    blocks: List[Block]


@dataclass
class Op:
    name: str
    results: List[str]
    operands: List[Tuple[str, int]]  # (value name, position)
    attrs: Dict[str, Any]
    result_types: List[Optional[MType]]
    regions: List[Region]
    pos: int
    loc: Optional[str] = None


# ---- parser ------------------------------------------------------------------------------

class Parser:
    def __init__(self, lexer: Lexer):
        self.lx = lexer
        self.type_aliases: Dict[str, MType] = {}
        self.attr_aliases: Dict[str, str] = {}

    # -- top level -------------------------------------------------------------------------
    def parse_top(self) -> List[Op]:
        ops: List[Op] = []
        lx = self.lx
        while lx.peek().kind != "eof":
            tok = lx.peek()
            if tok.kind == "metadata":
                lx.next()
            elif tok.kind in ("hash", "bang") and lx.peek(1).text == "=":
                self.parse_alias()
            else:
                ops.append(self.parse_op())
        return ops

    def parse_alias(self) -> None:
        lx = self.lx
        tok = lx.next()
        lx.expect("=")
        start = lx.peek().pos
        if tok.kind == "bang":
            self.type_aliases[tok.text] = self.parse_type()
        else:
            self.parse_attr_value()
            self.attr_aliases[tok.text] = lx.text[start:self._end_pos()].strip()

    def _end_pos(self) -> int:
        """Where the last consumed token ends."""
        return self.lx.last_end

    # -- operations ------------------------------------------------------------------------
    def parse_op(self, default_dialect: str = "") -> Op:
        lx = self.lx
        results = self.parse_results() if lx.peek().kind == "percent" else []
        tok = lx.peek()
        if tok.kind == "string":
            op = self.parse_generic_op(results)
        elif tok.kind == "bare":
            name = tok.text
            if name in ("func.func", "func") and lx.peek(1).kind in ("at", "bare"):
                op = self.parse_func(results)
            elif name in ("module", "builtin.module"):
                op = self.parse_module(results)
            elif name == "arith.constant":
                op = self.parse_constant_op(results)
            else:
                op = self.parse_custom_op(results, default_dialect)
        else:
            raise lx.error(f"expected an operation, found {describe(tok)}", tok.pos)
        op.loc = self.parse_trailing_location() or op.loc
        return op

    def parse_results(self) -> List[str]:
        """``%a, %b:2 =`` -> ["a", "b#0", "b#1"]."""
        lx, names = self.lx, []
        while True:
            tok = lx.next()
            if tok.kind != "percent":
                raise lx.error(f"expected a result name, found {describe(tok)}", tok.pos)
            count = 1
            if lx.at(":"):
                lx.next()
                n = lx.next()
                if n.kind != "int":
                    raise lx.error(f"expected a result count after ':', found {describe(n)}", n.pos)
                count = int(n.text, 0)
            base = tok.text[1:]
            names.extend([base] if count == 1 else [f"{base}#{k}" for k in range(count)])
            if not lx.accept(","):
                break
        lx.expect("=", "after the result names")
        return names

    def parse_use(self) -> Tuple[str, int]:
        """``%name`` or ``%name#k`` -> (name, position)."""
        lx = self.lx
        tok = lx.next()
        if tok.kind != "percent":
            raise lx.error(f"expected an SSA value, found {describe(tok)}", tok.pos)
        name = tok.text[1:]
        nxt = lx.peek()
        if nxt.kind == "hash" and nxt.pos == tok.pos + len(tok.text) and nxt.text[1:].isdigit():
            lx.next()
            name = f"{name}#{nxt.text[1:]}"
        return name, tok.pos

    def parse_generic_op(self, results: List[str]) -> Op:
        """``"dialect.op"(uses) [successors] <{props}> (regions) {attrs} : (T) -> (T)``."""
        lx = self.lx
        tok = lx.next()
        name = _unquote(tok.text)
        lx.expect("(", "after the op name")
        operands = []
        if not lx.at(")"):
            operands.append(self.parse_use())
            while lx.accept(","):
                operands.append(self.parse_use())
        lx.expect(")", "to close the operand list")
        if lx.at("["):
            self.skip_balanced()  # successors: branches are not modelled
        attrs: Dict[str, Any] = {}
        if lx.at("<") and lx.peek(1).text == "{":
            attrs.update(self.parse_property_dict())
        regions = []
        if lx.at("(") and lx.peek(1).text == "{":
            lx.next()
            regions.append(self.parse_region())
            while lx.accept(","):
                regions.append(self.parse_region())
            lx.expect(")", "to close the region list")
        if lx.at("{"):
            attrs.update(self.parse_attr_dict())
        lx.expect(":", "before the op's function type")
        ins, outs = self.parse_function_type()
        if len(outs) != len(results):
            raise lx.error(f"'{name}' has {len(results)} result name(s) but {len(outs)} result type(s)", tok.pos)
        return Op(name, results, operands, attrs, outs, regions, tok.pos)

    def parse_custom_op(self, results: List[str], default_dialect: str) -> Op:
        """A pretty-printed op read generically: ``%`` uses are operands, ``{...}`` /
        ``<{...}>`` / ``keyword(value)`` are attributes, ``{ ^bb...`` regions, and the
        trailing ``: types`` (a function type or a list) its types. It ends at that type
        list, or without one where a new statement starts on a new line."""
        lx = self.lx
        tok = lx.next()
        name = tok.text if "." in tok.text or not default_dialect else f"{default_dialect}.{tok.text}"
        operands: List[Tuple[str, int]] = []
        attrs: Dict[str, Any] = {}
        regions: List[Region] = []
        types: Optional[Tuple[List[MType], List[MType], bool]] = None
        while True:
            t = lx.peek()
            if t.kind == "eof" or (t.kind == "punct" and t.text in ")]}"):
                break
            if t.nl and types is None and self._starts_statement():
                break
            if t.kind == "bare" and t.text == "loc" and lx.peek(1).text == "(":
                break
            if t.kind == "percent":
                operands.append(self.parse_use())
            elif t.text == "<" and lx.peek(1).text == "{":
                attrs.update(self.parse_property_dict())
            elif t.text == "{":
                if self._looks_like_attr_dict():
                    attrs.update(self.parse_attr_dict())
                else:
                    regions.append(self.parse_region())
            elif t.text == ":" and types is None:
                lx.next()
                types = self.parse_trailing_types()
                if not (lx.at("{") or (lx.peek().kind == "bare" and lx.peek(1).text == "{")):
                    break
            elif t.kind == "bare" and lx.peek(1).text == "(" and lx.peek(1).pos == t.pos + len(t.text):
                lx.next()
                self.parse_keyword_attr(t.text, attrs, operands)
            elif t.kind == "punct" and t.text in ("(", "["):
                operands.extend(self.skip_balanced(collect_uses=True))
            elif t.text == "<":
                lx.raw_angle()
            else:
                lx.next()  # keywords and literals of the op's own syntax
        result_types: List[Optional[MType]] = [None] * len(results)
        if types is not None:
            ins, outs, functional = types
            if functional:
                if len(outs) != len(results):
                    raise lx.error(f"'{name}' has {len(results)} result name(s) but {len(outs)} result type(s)",
                                   tok.pos)
                result_types = list(outs)
            elif results:
                if len(ins) == len(results):
                    result_types = list(ins)
                elif len(ins) == 1:
                    result_types = [ins[0]] * len(results)
        return Op(name, results, operands, attrs, result_types, regions, tok.pos)

    def parse_constant_op(self, results: List[str]) -> Op:
        """``arith.constant {attrs} dense<...> : tensor<...>`` (or ``1.0 : f32``): the value's
        type is the result's."""
        lx = self.lx
        tok = lx.next()
        attrs: Dict[str, Any] = self.parse_attr_dict() if lx.at("{") else {}
        value, ty = self.parse_typed_value()
        attrs["value"] = value
        return Op(tok.text, results, [], attrs, [ty] * len(results), [], tok.pos)

    def parse_typed_value(self) -> Tuple[Any, Optional[MType]]:
        lx = self.lx
        if lx.peek().text == "dense" and lx.peek(1).text == "<":
            return self.parse_dense_typed()
        value = self.parse_attr_value_untyped()
        ty = None
        if lx.accept(":"):
            ty = self.parse_type()
        return value, ty

    def _starts_statement(self) -> bool:
        """Whether the next token (first on its line) begins a new op or ends a region."""
        lx = self.lx
        t = lx.peek()
        if t.kind in ("string", "caret", "metadata"):
            return True
        if t.kind == "punct" and t.text == "}":
            return True
        if t.kind == "percent":  # results: "%0 =", "%a, %b =", "%0:2 ="
            nxt = lx.peek(1)
            if nxt.text == ":":
                return lx.peek(2).kind == "int" and lx.peek(3).text in ("=", ",")
            return nxt.text == "=" or (nxt.text == "," and lx.peek(2).kind == "percent" and
                                       lx.peek(3).text in ("=", ",", ":"))
        return t.kind == "bare"

    def _looks_like_attr_dict(self) -> bool:
        """``{`` starts an attribute dict (``{}``, ``{a = 1}``, ``{unit, b}``) rather than a region."""
        lx = self.lx
        first, second = lx.peek(1), lx.peek(2)
        if first.text == "}":
            return True
        if first.kind in ("bare", "string"):
            return second.text in ("=", ",", "}")
        return False

    def parse_keyword_attr(self, key: str, attrs: Dict[str, Any], operands: List[Tuple[str, int]]) -> None:
        """IREE's ``axis(1)`` / ``values(dense<...> : T)``; a group of uses is operands."""
        lx = self.lx
        if lx.peek(1).kind == "percent":
            operands.extend(self.skip_balanced(collect_uses=True))
            return
        lx.expect("(")
        attrs[key] = self.parse_attr_value() if not lx.at(")") else True
        lx.expect(")", f"to close attribute '{key}'")

    def parse_trailing_types(self) -> Tuple[List[MType], List[MType], bool]:
        """After ``:``: ``(T, T) -> T`` / ``(T) -> (T, T)`` (functional: operand and result
        types), or ``T, T`` / ``T -> T`` / ``T to T`` (a list: returned as ins)."""
        lx = self.lx
        if lx.at("("):
            ins, outs = self.parse_function_type()
            return ins, outs, True
        types = [self.parse_type()]
        while lx.accept(","):
            types.append(self.parse_type())
        if lx.at("->") or (lx.peek().kind == "bare" and lx.peek().text == "to"):
            lx.next()
            outs = self.parse_result_types()
            return types, outs, True
        return types, [], False

    def parse_function_type(self) -> Tuple[List[MType], List[MType]]:
        lx = self.lx
        lx.expect("(", "to open the function type")
        ins = []
        if not lx.at(")"):
            ins.append(self.parse_type())
            while lx.accept(","):
                ins.append(self.parse_type())
        lx.expect(")", "to close the function type's inputs")
        lx.expect("->", "in the function type")
        return ins, self.parse_result_types()

    def parse_result_types(self) -> List[MType]:
        lx = self.lx
        if lx.at("("):
            lx.next()
            outs = []
            if not lx.at(")"):
                outs.append(self.parse_type())
                if lx.at("{"):
                    self.parse_attr_dict()
                while lx.accept(","):
                    outs.append(self.parse_type())
                    if lx.at("{"):
                        self.parse_attr_dict()
            lx.expect(")", "to close the result types")
            return outs
        return [self.parse_type()]

    def parse_trailing_location(self) -> Optional[str]:
        lx = self.lx
        t = lx.peek()
        if t.kind == "bare" and t.text == "loc" and lx.peek(1).text == "(":
            start = t.pos
            lx.next()
            self.skip_balanced()
            return lx.text[start:self._end_pos()].strip()
        return None

    def skip_balanced(self, collect_uses: bool = False) -> List[Tuple[str, int]]:
        """Consume a ``(...)``/``[...]``/``{...}`` group; the ``%`` uses inside, if asked
        (``%a = %b`` binds ``%a`` to ``%b``: only ``%b`` is a use)."""
        lx = self.lx
        open_tok = lx.next()
        pairs = {"(": ")", "[": "]", "{": "}"}
        if open_tok.text not in pairs:
            raise lx.error(f"expected a bracket, found {describe(open_tok)}", open_tok.pos)
        stack = [pairs[open_tok.text]]
        uses: List[Tuple[str, int]] = []
        while stack:
            t = lx.peek()
            if t.kind == "eof":
                raise lx.error(f"unbalanced '{open_tok.text}'", open_tok.pos)
            if t.kind == "percent":
                use = self.parse_use()
                if lx.at("="):
                    continue  # a binding: what follows is the use
                if collect_uses:
                    uses.append(use)
                continue
            lx.next()
            if t.kind == "punct" and t.text in pairs:
                stack.append(pairs[t.text])
            elif t.kind == "punct" and t.text in ")]}":
                if t.text != stack[-1]:
                    raise lx.error(f"expected '{stack[-1]}', found '{t.text}'", t.pos)
                stack.pop()
        return uses

    # -- functions and modules -----------------------------------------------------------
    def parse_func(self, results: List[str]) -> Op:
        """``func.func [private] @name(%a: T {attrs} loc(..), ...) [-> T | (T, ...)]
        [attributes {...}] [{ body }]``: an op whose region's entry block takes the arguments."""
        lx = self.lx
        tok = lx.next()
        attrs: Dict[str, Any] = {}
        if lx.peek().kind == "bare":
            attrs["sym_visibility"] = lx.next().text
        sym = lx.next()
        if sym.kind != "at":
            raise lx.error(f"expected the function's @name, found {describe(sym)}", sym.pos)
        attrs["sym_name"] = _symbol(sym.text)
        lx.expect("(", "to open the argument list")
        args: List[Tuple[str, MType, int]] = []
        while not lx.at(")"):
            if lx.peek().kind == "percent":
                name, pos = self.parse_use()
                lx.expect(":", "after the argument name")
            else:  # a declaration lists types only
                name, pos = f"arg{len(args)}", lx.peek().pos
            ty = self.parse_type()
            if lx.at("{"):
                self.parse_attr_dict()
            self.parse_trailing_location()
            args.append((name, ty, pos))
            if not lx.accept(","):
                break
        lx.expect(")", "to close the argument list")
        result_types: List[MType] = []
        if lx.accept("->"):
            result_types = self.parse_result_types()
        if lx.peek().kind == "bare" and lx.peek().text == "attributes":
            lx.next()
            attrs.update(self.parse_attr_dict())
        regions = []
        if lx.at("{"):
            region = self.parse_region(entry_args=args, default_dialect="func")
            regions.append(region)
        attrs["result_types"] = [t.text for t in result_types]
        return Op("func.func", results, [], attrs, [], regions, tok.pos)

    def parse_module(self, results: List[str]) -> Op:
        lx = self.lx
        tok = lx.next()
        attrs: Dict[str, Any] = {}
        if lx.peek().kind == "at":
            attrs["sym_name"] = _symbol(lx.next().text)
        if lx.peek().kind == "bare" and lx.peek().text == "attributes":
            lx.next()
            attrs.update(self.parse_attr_dict())
        region = self.parse_region(top=True)
        return Op("builtin.module", results, [], attrs, [], [region], tok.pos)

    # -- regions and blocks --------------------------------------------------------------
    def parse_region(self, entry_args: Optional[List[Tuple[str, MType, int]]] = None,
                     default_dialect: str = "", top: bool = False) -> Region:
        lx = self.lx
        lx.expect("{", "to open a region")
        blocks: List[Block] = []
        block: Optional[Block] = None
        while not lx.at("}"):
            t = lx.peek()
            if t.kind == "eof":
                raise lx.error("expected '}' to close the region", t.pos)
            if t.kind == "caret":
                block = self.parse_block_header()
                blocks.append(block)
                continue
            if block is None:
                block = Block(None, list(entry_args or []))
                blocks.append(block)
            if top and t.kind in ("hash", "bang") and lx.peek(1).text == "=":
                self.parse_alias()
                continue
            block.ops.append(self.parse_op(default_dialect))
        lx.expect("}")
        if not blocks and entry_args is not None:
            blocks.append(Block(None, list(entry_args)))
        return Region(blocks)

    def parse_block_header(self) -> Block:
        """``^bb0(%a: T loc(..), ...):``."""
        lx = self.lx
        label = lx.next().text
        args: List[Tuple[str, MType, int]] = []
        if lx.accept("("):
            while not lx.at(")"):
                name, pos = self.parse_use()
                lx.expect(":", "after the block argument name")
                ty = self.parse_type()
                self.parse_trailing_location()
                args.append((name, ty, pos))
                if not lx.accept(","):
                    break
            lx.expect(")", "to close the block arguments")
        lx.expect(":", "after the block label")
        return Block(label, args)

    # -- attributes ----------------------------------------------------------------------
    def parse_property_dict(self) -> Dict[str, Any]:
        lx = self.lx
        lx.expect("<")
        d = self.parse_attr_dict()
        lx.expect(">", "to close the property dict")
        return d

    def parse_attr_dict(self) -> Dict[str, Any]:
        lx = self.lx
        lx.expect("{", "to open an attribute dict")
        out: Dict[str, Any] = {}
        while not lx.at("}"):
            key_tok = lx.next()
            if key_tok.kind == "string":
                key = _unquote(key_tok.text)
            elif key_tok.kind == "bare":
                key = key_tok.text
            else:
                raise lx.error(f"expected an attribute name, found {describe(key_tok)}", key_tok.pos)
            out[key] = self.parse_attr_value() if lx.accept("=") else True
            if not lx.accept(","):
                break
        lx.expect("}", "to close the attribute dict")
        return out

    def parse_attr_value(self) -> Any:
        """An attribute value; a typed literal's type (``1 : i32``,
        ``#tosa.block_size<BLOCK_SIZE_1> : i32``) is read and dropped."""
        lx = self.lx
        value = self.parse_attr_value_untyped()
        if lx.accept(":"):
            ty = self.parse_type()
            if ty.text in MLIR_FLOATS and isinstance(value, int) and not isinstance(value, bool):
                value = _float_from_bits(value, ty.text)
        return value

    def parse_attr_value_untyped(self) -> Any:
        lx = self.lx
        t = lx.peek()
        if t.kind in ("int", "float") or (t.text == "-" and t.kind == "punct"):
            return self.parse_number()
        if t.kind == "string":
            lx.next()
            return _unquote(t.text)
        if t.kind == "bare":
            if t.text in ("true", "false"):
                lx.next()
                return t.text == "true"
            if t.text == "unit":
                lx.next()
                return True
            if t.text == "dense" and lx.peek(1).text == "<":
                return self.parse_dense()
            if t.text == "array" and lx.peek(1).text == "<":
                return self.parse_array()
            if lx.peek(1).text == "<" and not _is_type_keyword(t.text):
                lx.next()
                body, _ = lx.raw_angle()
                return MlirAttr(f"{t.text}<{body}>")
        if t.text == "[":
            lx.next()
            items = []
            while not lx.at("]"):
                items.append(self.parse_attr_value())
                if not lx.accept(","):
                    break
            lx.expect("]", "to close the array attribute")
            return items
        if t.text == "{":
            return self.parse_attr_dict()
        if t.kind == "hash":
            lx.next()
            text = t.text
            if lx.at("<") and lx.peek().pos == t.pos + len(t.text):
                body, _ = lx.raw_angle()
                text += f"<{body}>"
            return MlirAttr(self.attr_aliases.get(text, text))
        if t.kind == "at":
            lx.next()
            text = t.text
            while lx.at("::"):
                lx.next()
                text += "::" + lx.next().text
            return MlirAttr(text)
        if t.kind == "bare" and t.text == "loc" and lx.peek(1).text == "(":
            return MlirAttr(self.parse_trailing_location() or "")
        return MlirAttr(self.parse_type().text)  # a type attribute: f32, tensor<...>, (T) -> T

    def parse_number(self) -> Any:
        lx = self.lx
        neg = lx.accept("-")
        t = lx.next()
        if t.kind == "int":
            v = int(t.text, 0)
        elif t.kind == "float":
            v = float(t.text)
        elif t.kind == "bare" and t.text in ("inf", "nan"):
            v = float(t.text)
        else:
            raise lx.error(f"expected a number, found {describe(t)}", t.pos)
        return -v if neg else v

    def parse_array(self) -> List[Any]:
        """``array<i64: 1, 2>`` -> [1, 2]."""
        lx = self.lx
        lx.next()
        body, pos = lx.raw_angle()
        sub = Parser(lx.sub(body, pos))
        sub.parse_type()
        out: List[Any] = []
        if sub.lx.accept(":"):
            while sub.lx.peek().kind != "eof":
                out.append(sub.parse_attr_value())
                if not sub.lx.accept(","):
                    break
        if sub.lx.peek().kind != "eof":
            raise sub.lx.error(f"unexpected {describe(sub.lx.peek())} in array attribute")
        return out

    def parse_dense(self) -> Any:
        return self.parse_dense_typed()[0]

    def parse_dense_typed(self) -> Tuple[Any, MType]:
        """``dense<...> : tensor<...>`` -> a numpy array of the tensor's type (a splat is a
        broadcast view; an ``MlirAttr`` where the element type has no numpy form), and the type."""
        lx = self.lx
        lx.next()
        body, pos = lx.raw_angle()
        lx.expect(":", "after dense<...>")
        ty = self.parse_type()
        text = f"dense<{body}> : {ty.text}"
        t = ty.tensor
        if not ty.is_tensor or t.shape is None or any(not isinstance(d, int) for d in t.shape):
            return MlirAttr(text), ty
        try:
            dtype = numpy_dtype(t.dtype)
        except (ValueError, KeyError, TypeError):
            return MlirAttr(text), ty
        return DenseParser(lx.sub(body, pos), dtype, tuple(t.shape)).parse(), ty

    # -- types -------------------------------------------------------------------------
    def parse_type(self) -> MType:
        lx = self.lx
        t = lx.peek()
        if t.kind == "bang":
            lx.next()
            text = t.text
            if lx.at("<") and lx.peek().pos == t.pos + len(t.text):
                body, _ = lx.raw_angle()
                text += f"<{body}>"
            elif text in self.type_aliases:
                return self.type_aliases[text]
            return MType(text)
        if t.text == "(":  # a function type
            start = t.pos
            self.parse_function_type()
            return MType(lx.text[start:self._end_pos()].strip())
        if t.kind == "bare":
            lx.next()
            if lx.at("<") and lx.peek().pos == t.pos + len(t.text):
                body, pos = lx.raw_angle()
                return self._type_from_text(f"{t.text}<{body}>", body, pos)
            return MType(t.text)
        raise lx.error(f"expected a type, found {describe(t)}", t.pos)

    def _type_from_text(self, text: str, body: Optional[str] = None, pos: int = 0) -> MType:
        if text.startswith(("tensor<", "vector<", "memref<")) and body is not None:
            return parse_shaped(text, body, self.lx, pos)
        return MType(text)


def _symbol(text: str) -> str:
    name = text[1:]
    return _unquote(name) if name.startswith('"') else name


def _is_type_keyword(word: str) -> bool:
    return word in ("tensor", "vector", "memref", "complex", "tuple")


def _float_from_bits(bits: int, elem: str) -> float:
    """``0x7F800000 : f32``: a float attribute written as its bits."""
    np_type = {"f32": (np.uint32, np.float32), "f16": (np.uint16, np.float16),
               "f64": (np.uint64, np.float64)}.get(elem)
    if np_type is None:  # bf16: the top half of an f32
        return float(np.array([bits << 16], np.uint32).view(np.float32)[0])
    return float(np.array([bits], np_type[0]).view(np_type[1])[0])


# ---- shaped types --------------------------------------------------------------------------

def parse_shaped(text: str, body: str, lexer: Lexer, pos: int) -> MType:
    """``tensor<1x?x16xf32>``, ``tensor<*xf32>``, ``tensor<f32>``, ``tensor<4xf32, #enc>``,
    ``tensor<2x!quant.uniform<i8:f32, 0.5:-1>>``."""
    i, n = 0, len(body)
    dims: Optional[List[Optional[int]]] = []
    while i < n:
        j = i
        while j < n and body[j].isdigit():
            j += 1
        if j > i and j < n and body[j] == "x":
            dims.append(int(body[i:j]))
            i = j + 1
        elif body.startswith("?x", i):
            dims.append(None)
            i += 2
        elif body.startswith("*x", i):
            dims = None
            i += 2
        else:
            break
    elem = _top_level_split(body[i:])[0].strip()
    if not elem:
        raise lexer.error(f"no element type in '{text}'", pos + i)
    dtype, quant = element_dtype(elem, lexer, pos + i)
    if not text.startswith("tensor<"):
        return MType(text)  # vectors and memrefs are not tensor values
    shape = None if dims is None else tuple(dims)
    return MType(text, TensorType(dtype, shape), quant, True)


def _top_level_split(s: str) -> List[str]:
    """Split at commas outside ``<...>`` / ``(...)`` / ``{...}`` / strings."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(s):
        c = s[i]
        if c == '"':
            i += 1
            while i < len(s) and s[i] != '"':
                i += 2 if s[i] == "\\" else 1
        elif c in "<({[":
            depth += 1
        elif c in ">)}]" and not (c == ">" and i > 0 and s[i - 1] == "-"):
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(s[start:i])
            start = i + 1
        i += 1
    parts.append(s[start:])
    return parts


def element_dtype(elem: str, lexer: Lexer, pos: int) -> Tuple[Optional[str], Optional[Quantization]]:
    """An element type's IR dtype name, and the quantization of a ``!quant.uniform``."""
    if elem.startswith("!quant.uniform<"):
        return _quant_uniform(elem[len("!quant.uniform<"):-1], lexer, pos)
    if elem.startswith("!quant."):
        storage = elem.split("<", 1)[1].split(":", 1)[0] if "<" in elem else ""
        return _storage_dtype(storage.split("<")[0].strip()), None
    return DTYPE_OF_MLIR.get(elem.replace(" ", "")), None


def _quant_uniform(body: str, lexer: Lexer, pos: int) -> Tuple[Optional[str], Optional[Quantization]]:
    """``i8<-127:127>:f32:3, {0.1:0, 0.2:1}`` or ``i8:f32, 0.5:-1``."""
    head, _, params = body.partition(",")
    storage = head.split(":")[0].split("<")[0].strip()
    fields = [f.strip() for f in _strip_range(head).split(":")]
    axis = int(fields[2]) if len(fields) > 2 and fields[2].lstrip("-").isdigit() else 0
    params = params.strip()
    scales, zps = [], []
    try:
        items = params[1:-1].split(",") if params.startswith("{") else [params]
        for item in items:
            s, _, z = item.strip().partition(":")
            scales.append(float(s))
            zps.append(int(z) if z.strip() else 0)
    except ValueError:
        raise lexer.error(f"cannot read the quantization parameters '{params}'", pos) from None
    return _storage_dtype(storage), Quantization(tuple(scales), tuple(zps), axis)


def _storage_dtype(storage: str) -> Optional[str]:
    """A quant type's storage type: ``i8``, ``u8`` (the quant dialect's unsigned spelling)."""
    if storage.startswith("u") and not storage.startswith("ui"):
        storage = "ui" + storage[1:]
    return DTYPE_OF_MLIR.get(storage)


def _strip_range(head: str) -> str:
    """``i8<-127:127>:f32`` -> ``i8:f32``."""
    if "<" in head:
        a, _, rest = head.partition("<")
        return a + rest.partition(">")[2]
    return head


# ---- dense literals ----------------------------------------------------------------------

class DenseParser:
    """The body of ``dense<...>``: a splat, a nested list, or a ``"0x..."`` hex string."""

    def __init__(self, lexer: Lexer, dtype: np.dtype, shape: Tuple[int, ...]):
        self.lx, self.dtype, self.shape = lexer, np.dtype(dtype), shape

    def parse(self) -> np.ndarray:
        lx = self.lx
        t = lx.peek()
        if t.kind == "eof":  # dense<> : tensor<0xf32>
            return np.zeros(self.shape, self.dtype)
        if t.kind == "string":
            lx.next()
            out = self.hex(_unquote(t.text), t.pos)
        else:
            value = self.element_or_list()
            out = self.shaped(value, t.pos)
        if lx.peek().kind != "eof":
            raise lx.error(f"unexpected {describe(lx.peek())} in dense literal")
        return out

    def element_or_list(self) -> Any:
        lx = self.lx
        if lx.accept("["):
            items = []
            while not lx.at("]"):
                items.append(self.element_or_list())
                if not lx.accept(","):
                    break
            lx.expect("]", "in dense literal")
            return items
        t = lx.peek()
        if t.kind == "bare" and t.text in ("true", "false"):
            lx.next()
            return t.text == "true"
        if t.text == "(":  # a complex number
            lx.next()
            re_ = self.number()
            lx.expect(",")
            im = self.number()
            lx.expect(")")
            return complex(re_, im)
        return self.number()

    def number(self) -> Any:
        lx = self.lx
        neg = lx.accept("-")
        t = lx.next()
        if t.kind == "int":
            v: Any = int(t.text, 0)
            if t.text.lower().startswith("0x") and self.dtype.kind == "f":
                v = np.array([v], f"u{self.dtype.itemsize}").view(self.dtype)[0]
        elif t.kind == "float":
            v = float(t.text)
        elif t.kind == "bare" and t.text in ("inf", "nan"):
            v = float(t.text)
        else:
            raise lx.error(f"expected a number in dense literal, found {describe(t)}", t.pos)
        return -v if neg else v

    def shaped(self, value: Any, pos: int) -> np.ndarray:
        count = int(np.prod(self.shape)) if self.shape else 1
        try:
            arr = np.asarray(value, dtype=self.dtype)
        except (ValueError, OverflowError, TypeError) as e:
            raise self.lx.error(f"bad dense literal: {e}", pos) from None
        if arr.ndim == 0:
            return np.broadcast_to(arr, self.shape)
        if arr.size != count:
            raise self.lx.error(f"dense literal has {arr.size} elements but the type has {count}", pos)
        return arr.reshape(self.shape)

    def hex(self, text: str, pos: int) -> np.ndarray:
        if not text.lower().startswith("0x"):
            raise self.lx.error("expected a hex string \"0x...\" in dense literal", pos)
        try:
            data = bytes.fromhex(text[2:])
        except ValueError:
            raise self.lx.error("bad hex string in dense literal", pos) from None
        count = int(np.prod(self.shape)) if self.shape else 1
        item = self.dtype.itemsize
        if self.dtype == np.bool_ and len(data) == (count + 7) // 8 and len(data) != count:
            bits = np.unpackbits(np.frombuffer(data, np.uint8), bitorder="little")[:count]
            return bits.astype(np.bool_).reshape(self.shape)
        if len(data) == item:
            return np.broadcast_to(np.frombuffer(data, self.dtype.newbyteorder("<"))[0], self.shape)
        if len(data) != item * count:
            raise self.lx.error(f"hex dense literal has {len(data)} bytes, the type needs {item * count}", pos)
        return np.frombuffer(data, self.dtype.newbyteorder("<")).reshape(self.shape)


# ---- syntax tree -> IR -------------------------------------------------------------------

class _Builder:
    """Functions of the syntax tree -> graphs; each op's uses resolved in its scope."""

    def __init__(self, lexer: Lexer):
        self.lx = lexer
        self.opsets = {TOSA_DOMAIN: 1}
        self.warnings: List[str] = []
        self._warned: set = set()

    def function_graph(self, fn: Op) -> Graph:
        name = fn.attrs.get("sym_name", "main")
        region = fn.regions[0]
        if len(region.blocks) != 1:
            raise self.lx.error(f"function @{name} has {len(region.blocks)} blocks; only single-block"
                                " functions (as TOSA producers write) are supported", fn.pos)
        return self.graph(str(name), region.blocks[0], None, [])

    def graph(self, name: str, block: Block, owner: Optional[Node], outer: List[Dict[str, Value]]) -> Graph:
        g = Graph(name, self.opsets, owner)
        g.frontend = TOSA_DOMAIN
        defined: Dict[str, Value] = {}
        scopes = [defined] + outer
        nodes: List[Node] = []
        pending: List[Tuple[Node, Op]] = []

        def define(vname: str, ty: Optional[MType], pos: int) -> Value:
            if vname in defined or any(vname in s for s in outer):
                raise self.lx.error(f"redefinition of SSA value '%{vname}'", pos)
            v = Value(vname, ty.tensor if ty is not None else UNKNOWN,
                      info=None if ty is None or ty.is_tensor else ty.text,
                      quant=ty.quant if ty is not None else None)
            defined[vname] = v
            return v

        def use(vname: str, pos: int) -> Value:
            for s in scopes:
                v = s.get(vname)
                if v is not None:
                    return v
            if "#" not in vname and f"{vname}#0" in defined:
                return defined[f"{vname}#0"]
            base, _, k = vname.partition("#")
            if k == "0" and base in defined:
                return defined[base]
            raise self.lx.error(f"use of undefined value '%{vname}'", pos)

        for arg, ty, pos in block.args:
            nodes.append(Node(INPUT, "$input", name=arg, outputs=[define(arg, ty, pos)]))
        for op in block.ops:
            if op.name in TERMINATORS:
                for vname, pos in op.operands:
                    v = use(vname, pos)
                    nodes.append(Node(OUTPUT, "$output", name=v.name, inputs=[v]))
                continue
            inputs = [use(vname, pos) for vname, pos in op.operands]
            outputs = [define(r, t, op.pos) for r, t in zip(op.results, op.result_types)]
            line, col = self.lx.line_col(op.pos)
            source = OpSource(line, col, op.loc)
            label = f"%{op.results[0].split('#')[0]}" if op.results else f"{op.name}@{line}:{col}"
            const = self.constant(op, outputs, label, source) if op.name in CONSTANT_OPS else None
            if const is not None:
                nodes.append(const)
                continue
            self.check_op(op.name)
            domain, _, op_type = op.name.partition(".")
            node = Node(OP, op_type, domain, label, inputs, outputs, dict(op.attrs), proto=source)
            nodes.append(node)
            if op.regions:
                pending.append((node, op))
        g.add_nodes(nodes)
        for node, op in pending:  # subgraphs link to outer values: outer nodes first
            for k, region in enumerate(op.regions):
                if len(region.blocks) != 1:
                    raise self.lx.error(f"'{op.name}' has a region of {len(region.blocks)} blocks; only"
                                        " single-block regions are supported", op.pos)
                node.attrs[f"region{k}"] = self.graph(f"{node.label}.region{k}", region.blocks[0], node, scopes)
        return g

    def constant(self, op: Op, outputs: List[Value], label: str, source: OpSource) -> Optional[Node]:
        """A constant op whose ``dense`` literal is read: a constant node holding it."""
        value = op.attrs.get("values", op.attrs.get("value"))
        if not isinstance(value, np.ndarray) or len(outputs) != 1:
            return None
        v = outputs[0]
        if v.type.shape is None and v.info is None:  # a tensor of unranked type: the data's shape
            v.type = TensorType(v.type.dtype, tuple(value.shape))
        return Node(CONST, "$const", name=label, outputs=[v], proto=source,
                    data=ConstData.from_array(value), attrs={k: a for k, a in op.attrs.items()
                                                            if k not in ("values", "value")})

    def check_op(self, name: str) -> None:
        domain, _, op_type = name.partition(".")
        if domain == TOSA_DOMAIN and op_type in TOSA_OPS:
            return
        if domain in KNOWN_DIALECTS and domain != TOSA_DOMAIN:
            return
        if name not in self._warned:
            self._warned.add(name)
            what = "an op the TOSA dialect does not have" if domain == TOSA_DOMAIN else \
                f"from dialect '{domain}', which legalize does not know"
            self.warnings.append(f"op '{name}' is {what}; kept as an opaque node")


def _functions(ops: List[Op]) -> Tuple[List[Op], Dict[str, Any]]:
    """The func.func ops at the top level or in (nested) modules, and the module's attrs."""
    funcs: List[Op] = []
    module_attrs: Dict[str, Any] = {}
    for op in ops:
        if op.name == "func.func":
            funcs.append(op)
        elif op.name == "builtin.module":
            module_attrs.update({k: v for k, v in op.attrs.items() if k != "sym_name"})
            for region in op.regions:
                for block in region.blocks:
                    inner, attrs = _functions(block.ops)
                    funcs.extend(inner)
                    module_attrs.update(attrs)
    return funcs, module_attrs


# Bounds on MLIR input, checked before anything parses or prints it recursively: this
# parser (Python's stack: about 1000 frames), MLIR's own parser and printer (a 366 KB
# bytecode file of 20,000 nested regions crashes MLIR's printer with SIGSEGV). TOSA
# producers nest a few levels: a cond_if in a while_loop, a quantized type in a tensor.
MAX_NESTING = 128  # brackets ( [ { < open at once, in text
MAX_REGION_DEPTH = MAX_NESTING // 2  # ops with regions inside one another, in bytecode
MAX_OPERATIONS = 2_000_000  # in bytecode, before it is printed as text

# A string literal (its escapes skipped at C speed: hex blobs run to megabytes), a
# comment, an arrow, or a bracket.
_NESTING_TOKEN = re.compile(r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"|//[^\n]*|->|[()\[\]{}<>]')
_CLOSES = {")": "(", "]": "[", "}": "{", ">": "<"}


def check_nesting(text: str, source: str) -> None:
    """BadInput if brackets nest deeper than ``MAX_NESTING`` anywhere in ``text``
    (regions, attributes, types, dense literals): found by one scan of its brackets,
    before any recursive parse. A ``>`` closes only a ``<`` (``-> >= `` are not
    brackets); a closer that matches nothing open is skipped."""
    open_: List[str] = []
    for m in _NESTING_TOKEN.finditer(text):
        tok = m.group()
        if tok in "([{<":
            open_.append(tok)
            if len(open_) > MAX_NESTING:
                line = text.count("\n", 0, m.start()) + 1
                col = m.start() - (text.rfind("\n", 0, m.start()) + 1) + 1
                raise BadInput(f"{source}:{line}:{col}: brackets nest deeper than {MAX_NESTING} levels"
                               " (regions, attributes or types); legalize reads no deeper")
        elif tok in _CLOSES:
            want = _CLOSES[tok]
            if open_ and open_[-1] == want:
                open_.pop()
            elif tok != ">" and want in open_:  # recover: close what it matches
                while open_.pop() != want:
                    pass


def parse_mlir(text: str, source: str = "<string>", form: str = "text") -> Model:
    """MLIR text -> Model (format ``mlir``)."""
    check_nesting(text, source)
    lexer = Lexer(text, source)
    parser = Parser(lexer)
    ops = parser.parse_top()
    funcs, module_attrs = _functions(ops)
    bodies = [f for f in funcs if f.regions and f.regions[0].blocks]
    if not bodies:
        raise BadInput(f"{source}: no function with a body (expected func.func @main(...) {{ ... }})")
    bodies.sort(key=lambda f: f.attrs.get("sym_name") != "main")  # @main first, then file order
    builder = _Builder(lexer)
    graphs = [builder.function_graph(f) for f in bodies]
    aliases = {**{k: t.text for k, t in parser.type_aliases.items()}, **parser.attr_aliases}
    proto = MlirSource(form, module_attrs, aliases,
                       [str(f.attrs.get("sym_name", "")) for f in bodies])
    return Model(graphs[0], "mlir", proto=proto, warnings=builder.warnings,
                 subgraphs=graphs if len(graphs) > 1 else [])


# What printing a bytecode module may take beyond the helper's own memory (``bounded``).
PRINT_MEMORY = 2 << 30
PRINT_MEMORY_PER_BYTE = 16
PRINT_TIMEOUT_S = 300.0


def bytecode_to_text(data: bytes, source: str) -> str:
    """MLIR bytecode printed as generic text by iree-base-compiler's MLIR bindings, in
    the bounded helper (``bounded``): its size and nesting checked first
    (``MAX_OPERATIONS``, ``MAX_REGION_DEPTH``), and a printer that crashes or runs out
    of memory on it costs the helper, not the run."""
    try:
        from iree.compiler import ir  # noqa: F401 - only to say what is missing
    except ImportError:
        raise BadInput(f"{source}: is MLIR bytecode; reading it needs the MLIR bindings of iree-base-compiler"
                       " (pip install 'legalize[iree]')") from None
    from .. import bounded

    try:
        out = bounded.call(_print_bytecode, data, timeout=PRINT_TIMEOUT_S,
                           memory=PRINT_MEMORY + PRINT_MEMORY_PER_BYTE * len(data))
    except bounded.Failed as e:
        raise BadInput(f"{source}: MLIR bytecode that MLIR's printer cannot print ({e})") from None
    if out[:1] == b"!":
        raise BadInput(f"{source}: {out[1:].decode()}")
    return out[1:].decode("utf-8")


def _print_bytecode(data: bytes) -> bytes:
    """``bytecode_to_text``'s work, in the helper: ``"`` and the text, or ``!`` and what
    is wrong with the file."""
    from iree.compiler import ir

    ctx = ir.Context()
    ctx.allow_unregistered_dialects = True
    try:
        module = ir.Module.parse(data, ctx)
    except Exception as e:  # noqa: BLE001 - MLIR's diagnostics are the reason
        first = str(e).strip().splitlines()
        return b"!" + f"not readable MLIR bytecode ({first[-1].strip() if first else type(e).__name__})".encode()
    too_big = check_module_size(module.operation)
    if too_big is not None:
        return b"!" + too_big.encode()
    return b'"' + module.operation.get_asm(print_generic_op_form=True, enable_debug_info=True).encode("utf-8")


def check_module_size(top) -> Optional[str]:
    """What makes the parsed module ``top`` (an ``ir.Operation``) too big or too deep
    to print or read (``MAX_OPERATIONS``, ``MAX_REGION_DEPTH``), or None: a walk with a
    stack of its own, as MLIR's printer recurses."""
    stack = [(top, 0)]
    count = 0
    while stack:
        op, depth = stack.pop()
        count += 1
        if count > MAX_OPERATIONS:
            return f"more than {MAX_OPERATIONS:,} operations; legalize reads no more"
        if depth > MAX_REGION_DEPTH:
            return (f"regions nested deeper than {MAX_REGION_DEPTH} levels (at '{op.name}');"
                    " legalize reads no deeper")
        for region in op.regions:
            for block in region.blocks:
                stack.extend((inner.operation, depth + 1) for inner in block.operations)
    return None


def load_mlir(path) -> Model:
    """A TOSA MLIR file (``.mlir`` text or ``.mlirbc`` bytecode) -> Model (format ``mlir``)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise BadInput(f"{path}: cannot read: {e.strerror}") from None
    form = "text"
    if data.startswith(BYTECODE_MAGIC):
        text, form = bytecode_to_text(data, str(path)), "bytecode"
    else:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise BadInput(f"{path}: is not UTF-8 text (byte {e.start}), nor MLIR bytecode") from None
    model = parse_mlir(text, str(path), form)
    model.source = path
    return model
