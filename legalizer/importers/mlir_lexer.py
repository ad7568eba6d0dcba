"""The MLIR text importer's lexer: tokens on demand, with lookahead, positions
(line and column in the whole text, for one-line errors) and raw ``<...>`` bodies."""

from __future__ import annotations

import bisect
from typing import List, NamedTuple, Optional, Tuple

from ..errors import BadInput

PUNCT = "(){}[]<>,:=*?+"


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
