"""TOSA MLIR -> IR: ``load_mlir(path)`` and ``parse_mlir(text)``. Translates; never rewrites.

Text is read in two steps: a hand-written lexer (``mlir_lexer``) and recursive-descent
parser (``mlir_parser``, with types and ``dense`` literals in ``mlir_types``) build a small
syntax tree of operations, regions and blocks; then each function becomes a ``Graph``
(here). Bytecode (``.mlirbc``) is printed as generic text first by iree-base-compiler's
MLIR bindings, when they are installed, under the bounds of ``mlir_bounds``.

Text is not read by MLIR's own parser: it verifies what it parses, with no way to turn
that off in the Python bindings, so it refuses the invalid TOSA (operands of mismatched
ranks) that legalize reads in order to report it; and it keeps no SSA names, which carry
the ONNX value names through TOSA that legalize emits (``%conv1_b_0`` would read as ``%109``).

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

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ..errors import BadInput
from ..ir.constdata import ConstData
from ..ir.graph import CONST, INPUT, OP, OUTPUT, Graph, Node, Value
from ..ir.types import UNKNOWN, TensorType
from ..model import Model
from .mlir_bounds import bytecode_to_text, check_nesting
from .mlir_lexer import Lexer
from .mlir_parser import Block, Op, Parser
from .mlir_types import MlirAttr, MType

__all__ = ["BYTECODE_MAGIC", "MlirAttr", "MlirSource", "OpSource", "bytecode_to_text", "check_nesting",
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
    attributes and the aliases the text defined."""

    form: str  # "text" | "bytecode"
    module_attrs: Dict[str, Any] = field(default_factory=dict)
    aliases: Dict[str, str] = field(default_factory=dict)
    functions: List[str] = field(default_factory=list)


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
