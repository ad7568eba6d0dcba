"""The MLIR text importer's recursive-descent parser (one method per construct):
MLIR text -> a small syntax tree of operations, regions and blocks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from ..ir.dtypes import MLIR_FLOATS, numpy_dtype
from .mlir_lexer import Lexer, _unquote, describe
from .mlir_types import DenseParser, MlirAttr, MType, _float_from_bits, parse_shaped


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
