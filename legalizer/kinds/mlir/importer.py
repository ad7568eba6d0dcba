"""TOSA MLIR -> IR: ``load_mlir(path)`` and ``parse_mlir(text)``. Translates; never rewrites.

MLIR's own parser reads the text: ``iree-opt`` (iree-base-compiler's), or ``tosa-opt``
for the TOSA syntax IREE's build does not take, in a bounded subprocess (``tool``),
without verifying (legalize reads invalid TOSA, operands of mismatched ranks, to report
it), writes it as bytecode; the Python bindings load that in a context with no dialects,
so nothing is verified here either, and this module walks the ops. Bytecode input is
printed as text first, under the bounds of ``bounds``.

What MLIR does not keep is read from the text at the positions MLIR records: SSA names
(which carry the ONNX value names through the TOSA legalize emits) and each op's line.
An explicit ``loc(...)`` replaces the position MLIR records, so the text is read twice
when it has any: with them blanked (positions), and as written (locations).

Conventions of the MLIR IR:

- An op is a node of its dialect as domain and the rest as op type: ``tosa.add`` is
  domain ``tosa``, op type ``add`` (``node.op == "tosa.add"``). Ops of unknown dialects
  are kept opaque.
- Values are named by their SSA names without ``%`` (``0``, ``arg0``; the results of
  ``%0:2`` are ``0#0`` and ``0#1``); a node is named by its first result (``%0``), and
  ``node.proto`` is an ``OpSource`` with its line, column and explicit location.
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
from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np

from ...errors import BadInput
from ...ir.constdata import ConstData
from ...ir.graph import CONST, INPUT, OP, OUTPUT, Graph, Node, Value
from ...ir.types import TensorType
from .kind import KIND as MLIR
from ...model import Model
from .bounds import blank_locations, bytecode_to_text, check_names, check_nesting, check_text
from .tool import bindings, to_bytecode
from .types import MlirAttr, MType, attr_value, attributes, mtype, opaque_quant, text_of

__all__ = ["BYTECODE_MAGIC", "MlirAttr", "MlirSource", "OpSource", "bytecode_to_text", "check_nesting", "check_text",
           "load_mlir", "parse_mlir"]

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


@dataclass(frozen=True)
class OpSource:
    """``Node.proto`` of an imported op: where it is in the text, and its location."""

    line: int
    column: int
    loc: Optional[str] = None


@dataclass
class MlirSource:
    """``Model.proto`` of an MLIR model: the form it was read from, the module's
    attributes and its functions with a body. (MLIR resolves aliases: ``OpSource.loc``
    is the location itself.)"""

    form: str  # "text" | "bytecode"
    module_attrs: Dict[str, Any] = field(default_factory=dict)
    functions: List[str] = field(default_factory=list)


# ---- reading: MLIR's parser, then the text at the positions it records --------------------

def _read(text: str, source: str):
    """An ``ir.Module`` of ``text``, in a context with no dialects."""
    ir = bindings(source)
    from iree.compiler._mlir_libs._mlir import ir as bare  # the Context without IREE's dialects

    try:
        written = to_bytecode(opaque_quant(text).encode("utf-8"), source)
    except BadInput as e:
        raise BadInput(text_of(e)) from None
    ctx = bare._Context()
    ctx.allow_unregistered_dialects = True
    try:
        return ir.Module.parse(written, ctx)
    except ir.MLIRError as e:  # the bindings verify the module op itself (its attributes' names)
        first = e.error_diagnostics[0] if e.error_diagnostics else None
        if first is None:
            raise BadInput(f"{source}: {text_of(e).strip().splitlines()[0]}") from None
        line, col = _position(first.location)
        where = f"{source}:{line}:{col}" if line else source
        raise BadInput(f"{where}: {text_of(first.message)}") from None


def _preorder(top) -> Iterator[Any]:
    stack = [top]
    while stack:
        op = stack.pop()
        yield op
        stack.extend(reversed([inner.operation for region in op.regions for block in region.blocks
                               for inner in block.operations]))


_FILE_LOC = re.compile(r'^loc\("(?:[^"\\]|\\.)*":(\d+):(\d+)\)$')
_RESULTS = re.compile(r"((?:%[\w$.-]+(?::\d+)?\s*,\s*)*%[\w$.-]+(?::\d+)?)\s*=\s*$")
_SSA_NAME = re.compile(r"%([\w$.-]+)")


class _Text:
    """The text MLIR read: what it does not keep (SSA names), read at the positions it records."""

    def __init__(self, text: str, source: str):
        self.text, self.source = text, source
        self.starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def error(self, message: str, pos: Tuple[int, int]) -> BadInput:
        return BadInput(f"{self.source}:{pos[0]}:{pos[1]}: {message}")

    def offset(self, pos: Tuple[int, int]) -> int:
        line = min(max(pos[0], 1), len(self.starts))
        return self.starts[line - 1] + max(pos[1], 1) - 1

    def results(self, pos: Tuple[int, int], count: int, what: str) -> List[str]:
        """The names of an op's ``count`` results, written before its name at ``pos``:
        ``%a, %b:2 =`` -> a, b#0, b#1."""
        if count == 0:
            return []
        end = self.offset(pos)
        for back in (1, 3):  # its line, else the lines before (results split over lines)
            m = _RESULTS.search(self.text, self.starts[max(pos[0] - back, 0)], end)
            if m is not None:
                break
        names: List[str] = []
        for part in (m.group(1).split(",") if m else []):
            name, _, n = part.strip()[1:].partition(":")
            k = int(n) if n else 1
            names += [name] if k == 1 else [f"{name}#{i}" for i in range(k)]
        if len(names) != count:
            raise self.error(f"cannot read the names of the {count} result(s) of '{what}'", pos)
        return names

    def name_at(self, pos: Tuple[int, int]) -> Optional[str]:
        m = _SSA_NAME.match(self.text, self.offset(pos))
        return m.group(1) if m else None

    def use(self, name: str, after: Tuple[int, int]) -> Tuple[int, int]:
        """Where ``%name`` is first used after ``after`` (for an error), else ``after``."""
        m = re.compile(re.escape(f"%{name.split('#')[0]}") + r"(?![\w$.-])").search(self.text, self.offset(after))
        if m is None:
            return after
        line = bisect.bisect_right(self.starts, m.start())
        return line, m.start() - self.starts[line - 1] + 1


def _position(loc) -> Tuple[int, int]:
    m = _FILE_LOC.match(str(loc))
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


# ---- MLIR's module -> IR ------------------------------------------------------------------

class _Builder:
    """Functions of the module -> graphs; each op's operands are the values it uses."""

    def __init__(self, text: _Text, explicit: Dict[Tuple[int, int], str]):
        self.src = text
        self.explicit = explicit  # op position -> its explicit location
        self.values: Dict[Any, Value] = {}  # MLIR's values -> the IR's
        self.opsets = {TOSA_DOMAIN: 1}
        self.warnings: List[str] = []
        self._warned: set = set()

    def function_graph(self, fn) -> Graph:
        name = sym_name(fn)
        blocks = list(fn.regions[0].blocks)
        if len(blocks) != 1:
            raise self.src.error(f"function @{name} has {len(blocks)} blocks; only single-block"
                                 " functions (as TOSA producers write) are supported", _position(fn.location))
        return self.graph(str(name), blocks[0], None)

    def graph(self, name: str, block, owner: Optional[Node]) -> Graph:
        g = Graph(name, self.opsets, owner)
        g.frontend = TOSA_DOMAIN
        nodes: List[Node] = []
        pending: List[Tuple[Node, Any]] = []
        for k, arg in enumerate(block.arguments):
            pos = _position(arg.location)
            v = self.define(arg, self.src.name_at(pos) or f"arg{k}", pos)
            nodes.append(Node(INPUT, "$input", name=v.name, outputs=[v]))
        for op in block.operations:
            op = op.operation
            pos = _position(op.location)
            inputs = [self.use(x, op, pos) for x in op.operands]
            if op.name in TERMINATORS:
                nodes.extend(Node(OUTPUT, "$output", name=v.name, inputs=[v]) for v in inputs)
                continue
            names = self.src.results(pos, len(op.results), op.name)
            outputs = [self.define(r, n, pos) for r, n in zip(op.results, names)]
            source = OpSource(pos[0], pos[1], self.explicit.get(pos))
            label = f"%{names[0].split('#')[0]}" if names else f"{op.name}@{pos[0]}:{pos[1]}"
            try:
                attrs = attributes(op.attributes)
            except ValueError as e:  # a name or a constant legalize cannot hold
                raise self.src.error(str(e), pos) from None
            const = self.constant(attrs, outputs, label, source) if op.name in CONSTANT_OPS else None
            if const is not None:
                nodes.append(const)
                continue
            self.check_op(op.name)
            domain, _, op_type = op.name.partition(".")
            node = Node(OP, op_type, domain, label, inputs, outputs, attrs, proto=source)
            nodes.append(node)
            if len(op.regions):
                pending.append((node, op))
        g.add_nodes(nodes)
        for node, op in pending:  # subgraphs link to outer values: outer nodes first
            for k, region in enumerate(op.regions):
                blocks = list(region.blocks)
                if len(blocks) != 1:
                    raise self.src.error(f"'{op.name}' has a region of {len(blocks)} blocks; only"
                                         " single-block regions are supported", _position(op.location))
                node.attrs[f"region{k}"] = self.graph(f"{node.label}.region{k}", blocks[0], node)
        return g

    def define(self, value, name: str, pos: Tuple[int, int]) -> Value:
        try:
            ty: MType = mtype(value.type)
        except ValueError as e:
            raise self.src.error(str(e), pos) from None
        v = Value(name, ty.tensor, info=None if ty.is_tensor else ty.text, quant=ty.quant)
        self.values[value] = v
        return v

    def use(self, value, op, pos: Tuple[int, int]) -> Value:
        v = self.values.get(value)
        if v is not None:
            return v
        # MLIR resolves a use before its definition (dominance is the verifier's): say so
        owner = value.owner
        name = self.src.results(_position(owner.location), len(owner.results), owner.name)[value.result_number] \
            if hasattr(value, "result_number") else "?"
        raise self.src.error(f"use of undefined value '%{name}'", self.src.use(name, pos))

    def constant(self, attrs: Dict[str, Any], outputs: List[Value], label: str, source: OpSource) -> Optional[Node]:
        """A constant op whose ``dense`` literal is read: a constant node holding it."""
        value = attrs.get("values", attrs.get("value"))
        if not isinstance(value, np.ndarray) or len(outputs) != 1:
            return None
        v = outputs[0]
        if v.type.shape is None and v.info is None:  # a tensor of unranked type: the data's shape
            v.type = TensorType(v.type.dtype, tuple(value.shape))
        return Node(CONST, "$const", name=label, outputs=[v], proto=source,
                    data=ConstData.from_array(value), attrs={k: a for k, a in attrs.items()
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


def sym_name(op) -> str:
    """An op's ``sym_name``; one that is not UTF-8 text as MLIR writes it, escaped."""
    return str(attr_value(op.attributes["sym_name"]))


def _functions(op, module_attrs: Dict[str, Any], src: _Text) -> List[Any]:
    """The func.func ops in the module ``op`` and the modules in it; their attributes
    gathered in ``module_attrs``."""
    try:
        attrs = attributes(op.attributes)
    except ValueError as e:  # a name or a constant legalize cannot hold
        raise src.error(str(e), _position(op.location)) from None
    module_attrs.update({k: v for k, v in attrs.items() if k != "sym_name"})
    funcs: List[Any] = []
    for block in op.regions[0].blocks:
        for inner in block.operations:
            inner = inner.operation
            if inner.name == "func.func":
                funcs.append(inner)
            elif inner.name == "builtin.module":
                funcs.extend(_functions(inner, module_attrs, src))
    return funcs


def parse_mlir(text: str, source: str = "<string>", form: str = "text") -> Model:
    """MLIR text -> Model (format ``mlir``)."""
    check_text(text, source)
    check_names(text, source)
    blanked, has_locations = blank_locations(text)
    module = _read(blanked, source)
    explicit: Dict[Tuple[int, int], str] = {}
    if has_locations:  # the same ops, in the same order, with the locations written
        written = _read(text, source)
        for a, b in zip(_preorder(module.operation), _preorder(written.operation)):
            if str(a.location) != str(b.location):
                explicit[_position(a.location)] = str(b.location)
    module_attrs: Dict[str, Any] = {}
    src = _Text(text, source)
    funcs = _functions(module.operation, module_attrs, src)
    bodies = [f for f in funcs if len(f.regions[0].blocks)]
    if not bodies:
        raise BadInput(f"{source}: no function with a body (expected func.func @main(...) {{ ... }})")
    bodies.sort(key=lambda f: sym_name(f) != "main")  # @main first, then file order
    builder = _Builder(src, explicit)
    graphs = [builder.function_graph(f) for f in bodies]
    proto = MlirSource(form, module_attrs, [sym_name(f) for f in bodies])
    return Model(graphs[0], MLIR.name, proto=proto, warnings=builder.warnings,
                 subgraphs=graphs if len(graphs) > 1 else [])


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
