"""Bounds on untrusted MLIR, checked before anything parses or prints it recursively;
MLIR bytecode printed as text under them, in the bounded helper (``bounded_helper``); and the
text's explicit locations blanked, for MLIR's parser to record positions."""

from __future__ import annotations

import re
from typing import List, Optional, Tuple

from ...errors import BadInput
from .tool import bindings

# Bounds on MLIR input, checked before anything parses or prints it recursively: MLIR's
# parser, printer and bytecode writer (a 366 KB bytecode file of 20,000 nested regions
# crashes the printer and the writer with SIGSEGV), the importer's walk of regions
# (Python's stack: about 1000 frames). TOSA producers nest a few levels: a cond_if in a
# while_loop, a quantized type in a tensor.
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


# Aliases (``#a = [#b, #b]``, ``!t = ...``) are text that MLIR's parser, and whatever
# walks what it parsed, expand: 40 levels that double make a 989-byte module terabytes
# wide. Each alias's expanded size is counted from the text before anything parses it.
MIN_EXPANDED = 1 << 20  # the expanded text may reach this, or EXPANSION times the text
EXPANSION = 64
_ALIAS_DEF = re.compile(r"^[ \t]*([#!][A-Za-z_][\w$.-]*)[ \t]*=", re.M)
_ALIAS_REF = re.compile(r"[#!][A-Za-z_][\w$.-]*")


def _alias_body(text: str, start: int) -> Tuple[int, int]:
    """The span of the alias definition whose value starts at ``start``: up to the
    first newline where every bracket it opened is closed."""
    depth, pos = 0, start
    for m in _NESTING_TOKEN.finditer(text, start):
        gap_newline = text.find("\n", pos, m.start())
        if depth == 0 and gap_newline != -1 and text[start:gap_newline].strip():
            return start, gap_newline
        tok = m.group()
        if tok in "([{<":
            depth += 1
        elif tok in _CLOSES and depth:
            depth -= 1
        pos = m.end()
    end = text.find("\n", pos)
    return start, len(text) if end == -1 else end


def _refs(body: str) -> List[str]:
    return _ALIAS_REF.findall(_LITERAL_OR_COMMENT.sub('""', body))


def check_aliases(text: str, source: str) -> None:
    """BadInput if the text, its aliases expanded where they are used, would be larger
    than ``MIN_EXPANDED`` or ``EXPANSION`` times the text; counted without expanding
    anything (an alias used before it is defined, or by itself, counts as its name)."""
    limit = max(MIN_EXPANDED, EXPANSION * len(text))
    bodies, spans = {}, []
    for m in _ALIAS_DEF.finditer(text):
        span = _alias_body(text, m.end())
        bodies.setdefault(m.group(1), _refs(text[span[0]:span[1]]) + [text[span[0]:span[1]]])
        spans.append((m.start(), span[1]))
    if not bodies:
        return
    sizes: dict = {}

    def size(name: str, seen: frozenset) -> int:
        if name not in bodies or name in seen:
            return len(name)
        if name not in sizes:
            *refs, body = bodies[name]
            sizes[name] = len(body) + sum(size(r, seen | {name}) - len(r) for r in refs)
            if sizes[name] > limit:
                raise BadInput(f"{source}: alias {name} expands to {sizes[name]:,} bytes of text, more than the"
                               f" limit of {limit:,} ({EXPANSION} times the file, or {MIN_EXPANDED >> 20} MiB);"
                               " legalize reads no such module")
        return sizes[name]

    rest, pos = [], 0
    for start, end in spans:
        rest.append(text[pos:start])
        pos = end
    rest.append(text[pos:])
    total = len(text) + sum(size(r, frozenset()) - len(r) for r in _refs("".join(rest)))
    if total > limit:
        raise BadInput(f"{source}: its aliases expand it to {total:,} bytes of text, more than the limit of"
                       f" {limit:,} ({EXPANSION} times the file, or {MIN_EXPANDED >> 20} MiB); legalize reads no"
                       " such module")


def check_text(text: str, source: str) -> None:
    """The bounds MLIR text is held to before MLIR's parser reads it: its nesting
    (``check_nesting``) and its expanded size (``check_aliases``)."""
    check_nesting(text, source)
    check_aliases(text, source)


# A generic op's name is a string literal before its operands' "(": MLIR takes any bytes
# in it (escaped \XX), and its bindings abort the process on a name that is not UTF-8
# (they cannot make it a str). Such a literal is refused before MLIR reads the text.
# (An attribute's name is read where the bindings raise instead; a dictionary with such
# a literal is kept as text: ``types``.)
_LITERAL_OR_COMMENT = re.compile(r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"|//[^\n]*')
_CALL = re.compile(r"\s*\(")
_ESCAPE = re.compile(r"\\([0-9A-Fa-f]{2}|.)", re.S)
_ESCAPED = {"n": b"\n", "t": b"\t", '"': b'"', "\\": b"\\"}


def non_utf8_literal(text: str, call: bool = False) -> Optional["re.Match"]:
    """The first string literal of ``text`` whose bytes are not UTF-8 text (only those
    before a ``(`` with ``call``), or None."""
    for m in _LITERAL_OR_COMMENT.finditer(text):
        tok = m.group()
        if not tok.startswith('"') or "\\" not in tok or (call and not _CALL.match(text, m.end())):
            continue
        try:
            _literal_bytes(tok[1:-1]).decode("utf-8")
        except UnicodeDecodeError:
            return m
    return None


def check_names(text: str, source: str) -> None:
    """BadInput if a string literal before a ``(`` (a generic op's name) holds bytes
    that are not UTF-8 text."""
    m = non_utf8_literal(text, call=True)
    if m is not None:
        line = text.count("\n", 0, m.start()) + 1
        col = m.start() - (text.rfind("\n", 0, m.start()) + 1) + 1
        raise BadInput(f"{source}:{line}:{col}: a name that is not UTF-8 text ({m.group()[:40]}); legalize"
                       " reads no such name")


def _literal_bytes(body: str) -> bytes:
    """The bytes of a string literal's body, its escapes (``\\XX``, ``\\n``, ...) undone."""
    out = bytearray()
    pos = 0
    for e in _ESCAPE.finditer(body):
        esc = e.group(1)
        out += body[pos:e.start()].encode("utf-8")
        out += bytes.fromhex(esc) if len(esc) == 2 else _ESCAPED.get(esc, esc.encode("utf-8"))
        pos = e.end()
    out += body[pos:].encode("utf-8")
    return bytes(out)


# Explicit locations (``loc(...)`` after an op or an argument) replace the position
# MLIR's parser records; blanked to spaces, the text keeps every offset and its meaning
# (an op's location is all they give). Alias definitions (``#loc1 = loc(...)``) stay:
# unused, they change nothing.
_LOC_TOKEN = re.compile(r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"|//[^\n]*|#[\w$.-]+\s*=\s*loc\(|(?<![\w$.%@#!^-])loc\(')
_PARENS = re.compile(r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"|[()]')


def blank_locations(text: str) -> Tuple[str, bool]:
    """``text`` with each explicit ``loc(...)`` blanked (newlines kept), and whether it had any."""
    parts: List[str] = []
    last = pos = 0
    while True:
        m = _LOC_TOKEN.search(text, pos)
        if m is None:
            break
        pos = m.end()
        tok = m.group()
        if not tok.endswith("loc("):
            continue
        end = _close_paren(text, pos)
        if not tok.startswith("#"):
            parts += [text[last:m.start()], re.sub(r"[^\n]", " ", text[m.start():end])]
            last = end
        pos = end
    if not parts:
        return text, False
    parts.append(text[last:])
    return "".join(parts), True


def _close_paren(text: str, pos: int) -> int:
    depth = 1
    for m in _PARENS.finditer(text, pos):
        tok = m.group()
        depth += 1 if tok == "(" else -1 if tok == ")" else 0
        if depth == 0:
            return m.end()
    return len(text)


# What printing a bytecode module may take beyond the helper's own memory (``bounded_helper``).
PRINT_MEMORY = 2 << 30
PRINT_MEMORY_PER_BYTE = 16
PRINT_TIMEOUT_S = 300.0


def bytecode_to_text(data: bytes, source: str) -> str:
    """MLIR bytecode printed as generic text by iree-base-compiler's MLIR bindings, in
    the bounded helper (``bounded_helper``): its size and nesting checked first
    (``MAX_OPERATIONS``, ``MAX_REGION_DEPTH``), and a printer that crashes or runs out
    of memory on it costs the helper, not the run."""
    bindings(source, "reading MLIR bytecode")  # only to say what is missing, before the helper starts
    from ... import bounded_helper

    try:
        out = bounded_helper.call(_print_bytecode, data, timeout=PRINT_TIMEOUT_S,
                           memory=PRINT_MEMORY + PRINT_MEMORY_PER_BYTE * len(data))
    except bounded_helper.Failed as e:
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
