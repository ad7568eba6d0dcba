"""Reading an untrusted ``.pt2`` without letting it run code.

``torch.export.load`` is pickle and more: torch's own documentation says never to load
a ``.pt2`` from an untrusted source. In torch 2.13 an archive can make the loader run
code of its choosing in these ways, each refused here before torch reads the archive
(or, for pickles, made impossible while it does):

- pickles: the sample inputs (and pre-2.7 weight files) are unpickled with
  ``weights_only=True`` and, when that fails, again with ``weights_only=False``
  (arbitrary code); weights and constants marked ``use_pickle`` go straight to
  ``weights_only=False``; "opaque" constants to ``pickle.loads``, custom-object
  constants to TorchScript's unpickler. torch reads here under
  ``TORCH_FORCE_WEIGHTS_ONLY_LOAD``, so every ``torch.load`` is the safe unpickler;
  a pickle it refuses is "needs unsafe unpickling"; constants that are not tensors
  are refused before;
- native code: an AOTInductor package (``data/aotinductor/``) is a shared library
  that the loader opens;
- Python source: a symbolic shape (``expr_str``) is parsed by ``sympy.sympify``,
  which is ``eval``; the program's input guards (``guards_code``) are compiled and
  run by ``program.module()``. Each must be plain sympy / a plain shape guard;
- imports: a pytree context holding an enum or a ``defaultdict`` names a module
  that the loader imports;
- the graph itself, which the check runs: every call must be a tensor op (aten,
  prims, quantized_decomposed, the structural higher-order ops, Python's arithmetic),
  not e.g. ``torch.export.custom_ops._call_custom_autograd_function_in_pre_dispatch``
  (imports a module by name) or ``aten.from_file`` (maps any file).

What is checked is what torch reads: one open file, read through torch's own
archive reader, then given to torch's loader (``load_pt2``, without
``torch.export.load``'s fallback to the pre-2.7 format through Python's zipfile).
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import json
import math
import os
import pickle
import re
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Tuple

from ...errors import BadInput, first_line

TRUST_HINT = "pass --trust-pt2 only for a file you trust"
UNPICKLING = "needs unsafe unpickling (arbitrary code)"

# Each torch.load reads these (torch.serialization.load), whatever its caller passes.
FORCE_SAFE, FORCE_UNSAFE = "TORCH_FORCE_WEIGHTS_ONLY_LOAD", "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"


def refusal(path: Path, reason: str) -> BadInput:
    return BadInput(f"{path}: its archive {reason}; {TRUST_HINT}")


def invalid(path: Path, e: BaseException) -> BadInput:
    return BadInput(f"{path}: not a valid torch.export archive ({type(e).__name__}: {first_line(e)})")


def load_untrusted(path: Path):
    """The program of the ``.pt2`` at ``path`` (an ``ExportedProgram``), read so that
    nothing in it runs; BadInput naming what it would run otherwise."""
    from torch.export.pt2_archive import PT2ArchiveReader
    from torch.export.pt2_archive._package import load_pt2

    from .torch_logs import quiet_torch

    with open(path, "rb") as f:
        reason = inflation_risk(f)
        if reason is not None:
            raise refusal(path, reason)
        f.seek(0)
        try:
            reader = PT2ArchiveReader(f)
        except Exception as e:  # noqa: BLE001 - torch's reader says what is wrong
            if _is_pre_27_format(path):
                raise refusal(path, "is in the pre-2.7 torch.export format, which torch loads with unsafe"
                                    " unpickling") from None
            raise invalid(path, e) from None
        try:
            reason = archive_risk(reader)
        except (ValueError, TypeError, AttributeError, RuntimeError) as e:
            raise invalid(path, e) from None
        if reason is not None:
            raise refusal(path, reason)
        f.seek(0)
        try:
            with quiet_torch(), safe_unpickling():
                contents = load_pt2(f)
        except pickle.UnpicklingError:
            raise refusal(path, UNPICKLING) from None
        except Exception as e:  # noqa: BLE001
            raise invalid(path, e) from None
    program = contents.exported_programs.get("model")
    if program is None:
        raise BadInput(f"{path}: not a valid torch.export archive (it holds no program named 'model')")
    return program


@contextlib.contextmanager
def safe_unpickling() -> Iterator[None]:
    """Every ``torch.load`` meanwhile uses the safe unpickler, whatever ``weights_only``
    its caller passes: torch.export's loader passes ``False`` for pickled weights and
    retries with it when the safe load fails. The variable is process-wide: a
    ``torch.load`` in another thread meanwhile is safe-only too (it fails safe)."""
    saved = {k: os.environ.get(k) for k in (FORCE_SAFE, FORCE_UNSAFE)}
    os.environ[FORCE_SAFE] = "1"
    os.environ.pop(FORCE_UNSAFE, None)  # both set is an error in torch
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _is_pre_27_format(path: Path) -> bool:
    import zipfile

    try:
        with zipfile.ZipFile(path) as z:
            leaves = {n.rsplit("/", 1)[-1] for n in z.namelist()}
    except (zipfile.BadZipFile, OSError, ValueError):
        return False
    return "serialized_exported_program.json" in leaves and "archive_format" not in leaves


# -- the archive --------------------------------------------------------------------

# torch.export.save stores every member uncompressed; a compressed member that inflates
# past both bounds is a bomb (a few MB of file, GBs once read), refused from the sizes
# the zip directory declares, before any member is read.
MAX_INFLATION = 100  # uncompressed / compressed
INFLATION_FLOOR = 16 << 20  # members smaller than this are never refused for it


def inflation_risk(f) -> Optional[str]:
    """The first member of the zip archive open as ``f`` that would inflate beyond
    the bounds above, as the refusal's reason; None when none does, or when ``f`` is
    no zip archive (torch's reader then says what is wrong)."""
    import zipfile

    try:
        members = zipfile.ZipFile(f).infolist()
    except (zipfile.BadZipFile, OSError, ValueError):
        return None
    for m in members:
        if m.file_size > INFLATION_FLOOR and m.file_size > MAX_INFLATION * max(m.compress_size, 1):
            return (f"member {_show(m.filename)} inflates from {m.compress_size:,} to {m.file_size:,} bytes"
                    f" (more than {MAX_INFLATION}x), which reading it would allocate")
    return None


def archive_risk(reader) -> Optional[str]:
    """What in the archive would make torch's loader (or running its program) run
    code, as the refusal's reason; None when nothing does."""
    from torch.export.pt2_archive import constants as pt2

    names = reader.get_file_names()
    native = sorted(n for n in names if n.startswith(pt2.AOTINDUCTOR_DIR))
    if native:
        return f"holds compiled native code ({native[0]}), which torch's loader opens"
    for name in names:
        if name.startswith(pt2.CONSTANTS_DIR) and name.endswith(".json"):
            config = json.loads(reader.read_string(name)).get("config") or {}
            # tensor constants are read as tensors (or by torch.load, kept safe);
            # custom and opaque objects by unpicklers that run code
            if any(not str(entry.get("path_name", "")).startswith(pt2.TENSOR_CONSTANT_FILENAME_PREFIX)
                   for entry in config.values()):
                return UNPICKLING
    for name in names:
        if name.startswith(pt2.MODELS_DIR):
            reason = program_risk(json.loads(reader.read_string(name)), name)
            if reason is not None:
                return reason
    return None


def program_risk(doc: Any, member: str) -> Optional[str]:
    """The first field of a serialized program (``models/*.json``) that torch would
    run as code. Every field of each name is checked, wherever it is: torch's
    deserializer finds them by name."""
    for key, value in _fields(doc):
        check = _FIELD_CHECKS.get(key)
        if check is None:
            continue
        values = value if key == "guards_code" and isinstance(value, list) else [value]
        for text in values:
            if not isinstance(text, str):
                raise ValueError(f"{member}: {key} is not a string")
            reason = check(text, member)
            if reason is not None:
                return reason
    return None


def _fields(doc: Any) -> Iterator[Tuple[str, Any]]:
    stack = [doc]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, value in item.items():
                yield key, value
                stack.append(value)
        elif isinstance(item, list):
            stack.extend(item)


def _show(text: str, limit: int = 100) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


# -- symbolic shapes (sympy.sympify is eval) ---------------------------------------

_PLAIN_STRING = re.compile(r"[A-Za-z0-9_.+\-]*\Z")  # a symbol's name, a Float's digits
_STRING_FIRST_ARG = {"Symbol", "Dummy", "Float"}
_ARITH = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)
_COMPARE = (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE)
_UNARY = (ast.USub, ast.UAdd, ast.Not)


def _identifier(name: str) -> bool:
    return name.isidentifier() and not name.startswith("_")


def _sympy_class(name: str) -> bool:
    """A sympy expression class (sympy's, or torch's own functions of shapes), by name;
    never one of the builtins that sympify's eval namespace also holds."""
    import sympy
    from torch.utils._sympy import functions

    if not _identifier(name) or hasattr(builtins, name):
        return False
    cls = getattr(sympy, name, None) or getattr(functions, name, None)
    return isinstance(cls, type) and issubclass(cls, sympy.Basic)


def _operators_ok(node: ast.AST, ok: Callable[[ast.AST], bool]) -> Optional[bool]:
    """What both grammars (shape expressions, guards) allow alike: number and bool
    literals, arithmetic, comparisons and boolean operators over what ``ok`` allows;
    None for any other node, which the grammar judges itself."""
    if isinstance(node, ast.Expression):
        return ok(node.body)
    if isinstance(node, ast.Constant):
        return type(node.value) in (int, float, bool)
    if isinstance(node, ast.BinOp):
        return isinstance(node.op, _ARITH) and ok(node.left) and ok(node.right)
    if isinstance(node, ast.UnaryOp):
        return isinstance(node.op, _UNARY) and ok(node.operand)
    if isinstance(node, ast.Compare):
        return all(isinstance(op, _COMPARE) for op in node.ops) and all(map(ok, [node.left, *node.comparators]))
    if isinstance(node, ast.BoolOp):
        return all(map(ok, node.values))
    return None


def _sympy_ok(node: ast.AST) -> bool:
    shared = _operators_ok(node, _sympy_ok)
    if shared is not None:
        return shared
    if isinstance(node, ast.Name):  # a symbol, a constant (oo, true), a class; not open, exec, ...
        return _identifier(node.id) and not hasattr(builtins, node.id)
    if isinstance(node, ast.Tuple):
        return all(map(_sympy_ok, node.elts))
    if isinstance(node, ast.Call):
        if not (isinstance(node.func, ast.Name) and _sympy_class(node.func.id)):
            return False
        args = list(node.args)
        if node.func.id in _STRING_FIRST_ARG and args and isinstance(args[0], ast.Constant) \
                and isinstance(args[0].value, str):
            if not _PLAIN_STRING.match(args.pop(0).value):
                return False
        return all(map(_sympy_ok, args)) and all(
            _identifier(k.arg or "") and isinstance(k.value, ast.Constant)
            and type(k.value.value) in (int, bool) for k in node.keywords)
    return False


def sympy_risk(text: str, member: str) -> Optional[str]:
    """Why ``text`` is not a plain sympy expression (``srepr`` or ``str`` form): torch
    gives it to ``sympy.sympify``, which evaluates it as Python."""
    try:
        tree = ast.parse(text, mode="eval")
        ok = _sympy_ok(tree)
    except (SyntaxError, ValueError, RecursionError):
        ok = False
    if not ok:
        return f"has Python code where torch expects a shape expression ({member}: {_show(text)}), which loading runs"
    return arithmetic_risk(tree, f"a shape expression ({member}: {_show(text)})", "loading evaluates")


# -- literal arithmetic (sympify and the guards evaluate it: 9**9**9**9 never ends) --

MAX_LITERAL = 1 << 64  # sizes, strides and bounds are 64-bit numbers
MAX_EXPONENT = 64
# Powers of powers: each exponent small, the tower's value is not ((2**64)**64)**64... has
# 64**k bits. A literal power of more bits than this is refused.
MAX_POWER_BITS = 1 << 16
_POWERS = {"Pow", "PowByNatural", "FloatPow", "pow"}  # sympy's, torch's and math's
# Families whose value at a literal grows beyond any shape (factorial(10**9) never
# ends); no shape expression or guard that torch writes calls them.
_EXPLOSIVE_MODULES = ("sympy.functions.combinatorial", "sympy.functions.special", "sympy.ntheory")
_EXPLOSIVE_MATH = {"factorial", "comb", "perm", "prod", "lgamma", "gamma"}


def _called(node: ast.Call) -> str:
    f = node.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def _has_variable(node: ast.AST) -> bool:
    """Whether ``node`` depends on a symbol or an input (so loading does not fold it
    to a number): a name that is no called function, a ``Symbol(...)``, ``L[...]``."""
    funcs = {id(n.func) for n in ast.walk(node) if isinstance(n, ast.Call)}
    return any((isinstance(n, ast.Name) and id(n) not in funcs and n.id not in ("math", "torch"))
               or isinstance(n, ast.Subscript)
               or (isinstance(n, ast.Call) and _called(n) in _STRING_FIRST_ARG - {"Float"})
               for n in ast.walk(node))


def _small_exponent(node: ast.AST) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        return _small_exponent(node.operand)
    if isinstance(node, ast.Call) and _called(node) in ("Integer", "Float", "Rational") and node.args:
        return all(map(_small_exponent, node.args))
    return isinstance(node, ast.Constant) and type(node.value) in (int, float, bool) \
        and abs(node.value) <= MAX_EXPONENT


def _explosive(node: ast.Call) -> bool:
    f = node.func
    if isinstance(f, ast.Attribute):
        return isinstance(f.value, ast.Name) and f.value.id == "math" and f.attr in _EXPLOSIVE_MATH
    if isinstance(f, ast.Name) and _sympy_class(f.id):
        import sympy
        from torch.utils._sympy import functions

        cls = getattr(sympy, f.id, None) or getattr(functions, f.id)
        return cls.__module__.startswith(_EXPLOSIVE_MODULES)
    return False


def _exponent(node: ast.AST) -> int:
    """A constant exponent's value (``_small_exponent``), else ``MAX_EXPONENT``."""
    if isinstance(node, ast.UnaryOp):
        return _exponent(node.operand)
    if isinstance(node, ast.Call) and node.args:
        return _exponent(node.args[0])
    return abs(int(node.value)) if isinstance(node, ast.Constant) and _small_exponent(node) else MAX_EXPONENT


def _bits(node: ast.AST) -> int:
    """A bound on the bits of ``node``'s value, where it is literal arithmetic (a
    symbol or a size: 64)."""
    if isinstance(node, ast.Constant):
        return max(1, abs(int(node.value)).bit_length()) if type(node.value) in (int, bool) else 64
    if isinstance(node, ast.UnaryOp):
        return _bits(node.operand)
    if isinstance(node, ast.BinOp):
        left, right = _bits(node.left), _bits(node.right)
        if isinstance(node.op, ast.Pow):
            return left * _exponent(node.right)
        return left + right if isinstance(node.op, ast.Mult) else max(left, right) + 1
    if isinstance(node, ast.Call) and node.args:
        if _called(node) in _POWERS and len(node.args) == 2:
            return _bits(node.args[0]) * _exponent(node.args[1])
        each = [_bits(a) for a in node.args]
        return sum(each) if _called(node) == "Mul" else max(each) + len(each)
    return 64


def arithmetic_risk(tree: ast.AST, what: str, when: str) -> Optional[str]:
    """Why evaluating the literal arithmetic of ``tree`` (already within its grammar)
    could take without end: a literal beyond 64 bits, a constant exponent beyond
    ``MAX_EXPONENT``, a factorial-like function; None when it cannot."""
    for node in ast.walk(tree):
        reason = None
        if isinstance(node, ast.Constant) and type(node.value) is int and abs(node.value) > MAX_LITERAL:
            reason = "a literal beyond 64 bits"
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow) or \
                isinstance(node, ast.Call) and _called(node) in _POWERS and len(node.args) == 2:
            exponent = node.right if isinstance(node, ast.BinOp) else node.args[1]
            if not _has_variable(exponent) and not _small_exponent(exponent):
                reason = f"a constant exponent that is no literal of at most {MAX_EXPONENT}"
            elif _bits(node) > MAX_POWER_BITS:
                reason = f"a power of powers of more than {MAX_POWER_BITS:,} bits"
        elif isinstance(node, ast.Call) and _explosive(node):
            reason = f"{_called(node)}(), whose value grows beyond any shape"
        if reason is not None:
            return f"has arithmetic in {what} that may not end ({reason}), which {when}"
    return None


# -- input guards (compiled and run by program.module()) ---------------------------

_TENSOR_METHODS = {"size", "stride", "storage_offset", "dim", "numel"}
_GUARD_CALLS = {"abs", "max", "min", "round", "IsNonOverlappingAndDenseIndicator", "cast_symbool_to_symint_guardless"}
_TORCH_SYM = {"sym_float", "sym_int", "sym_max", "sym_min", "sym_not", "sym_ite", "sym_sqrt", "sym_sum", "_sym_sqrt"}


def _input_ref(node: ast.AST) -> bool:
    """``L['x']``, ``L['x'].size()[0]``, ``L['xs'][1]``: an input, its sizes and strides."""
    if isinstance(node, ast.Name):
        return node.id == "L"
    if isinstance(node, ast.Subscript):
        key = node.slice
        plain = isinstance(key, ast.Constant) and (type(key.value) is int or (
            isinstance(key.value, str) and _PLAIN_STRING.match(key.value) is not None))
        return plain and _input_ref(node.value)
    if isinstance(node, ast.Call):
        f = node.func
        return (isinstance(f, ast.Attribute) and f.attr in _TENSOR_METHODS and _input_ref(f.value)
                and not node.keywords and all(map(_guard_ok, node.args)))
    return False


def _guard_ok(node: ast.AST) -> bool:
    shared = _operators_ok(node, _guard_ok)
    if shared is not None:
        return shared
    if isinstance(node, ast.Name):
        return node.id == "inf"
    if isinstance(node, (ast.Subscript,)) or (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                                              and node.func.attr in _TENSOR_METHODS):
        return _input_ref(node)
    if isinstance(node, ast.Attribute):  # math.inf, math.pi
        return isinstance(node.value, ast.Name) and node.value.id == "math" and _identifier(node.attr) \
            and isinstance(getattr(math, node.attr, None), float)
    if isinstance(node, ast.Call) and not node.keywords and all(map(_guard_ok, node.args)):
        f = node.func
        if isinstance(f, ast.Name):
            return f.id in _GUARD_CALLS
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
            if f.value.id == "math":
                return _identifier(f.attr) and callable(getattr(math, f.attr, None))
            return f.value.id == "torch" and f.attr in _TORCH_SYM
    return False


def guard_risk(text: str, member: str) -> Optional[str]:
    """Why ``text`` is not a plain guard on input shapes: ``program.module()`` compiles
    each into the module's input check and runs it on every call."""
    try:
        tree = ast.parse(text, mode="eval")
        ok = "\n" not in text and "\r" not in text and _guard_ok(tree)
    except (SyntaxError, ValueError, RecursionError):
        ok = False
    if not ok:
        return f"has Python code where torch expects an input guard ({member}: {_show(text)})," \
               f" which torch compiles and runs"
    return arithmetic_risk(tree, f"an input guard ({member}: {_show(text)})", "torch runs")


# -- the graph's calls -------------------------------------------------------------

_TENSOR_OP_NAMESPACES = {"aten", "prims", "quantized_decomposed"}
_FILE_OPS = {"from_file"}  # aten.from_file maps any file into a tensor (shared: writes it)
_STRUCTURAL_HOPS = {"cond", "while_loop", "while_loop_stack_output", "map_impl", "scan", "associative_scan",
                    "wrap_with_set_grad_enabled", "wrap_with_autocast", "invoke_subgraph", "auto_functionalized",
                    "auto_functionalized_v2", "out_dtype", "hints_wrapper", "with_effects", "flex_attention",
                    "_export_tracepoint"}
# What torch's verifier lets a graph call besides op overloads, less what imports
# a module by name (_call_custom_autograd_function_in_pre_dispatch) or vmap/jvp internals.
_OPERATOR = {"getitem", "add", "mul", "sub", "truediv", "ge", "le", "gt", "lt", "eq", "ne", "floordiv", "mod",
             "and_", "or_", "not_", "pow", "neg", "abs", "lshift", "rshift"}
_PLAIN_CALLS = ({f"_operator.{n}" for n in _OPERATOR} | {"math.ceil", "math.floor", "math.trunc"}
                | {f"torch.{n}" for n in _TORCH_SYM}
                | {"torch.autograd.grad_mode.set_grad_enabled", "torch._C._set_grad_enabled",
                   "torch.amp.autocast_mode._enter_autocast", "torch.amp.autocast_mode._exit_autocast"})


def _tensor_op(target: str) -> bool:
    parts = target.split(".")
    if not all(p and not p.startswith("__") for p in parts) or parts[:2] != ["torch", "ops"]:
        return False
    if len(parts) == 5 and parts[2] in _TENSOR_OP_NAMESPACES:  # torch.ops.aten.add.Tensor
        return not (parts[2] == "aten" and parts[3] in _FILE_OPS)
    return len(parts) == 4 and parts[2] == "higher_order" and parts[3] in _STRUCTURAL_HOPS


def target_risk(text: str, member: str) -> Optional[str]:
    """Why a node's target (or an operator argument) is not a tensor op that running
    the program (the check does) may call."""
    if text in _PLAIN_CALLS or _tensor_op(text):
        return None
    return f"calls {_show(text)} ({member}), which is not a tensor op"


# -- pytree specs (their contexts can name modules to import) ----------------------

def spec_risk(text: str, member: str) -> Optional[str]:
    """Why a serialized pytree spec would make the loader import a module: an enum in a
    context (``{"__enum__": ..., "fqn": "module:Class"}``) or a ``defaultdict`` (its
    factory's module)."""
    for key, value in _fields(json.loads(text)):
        if key == "type" and value == "collections.defaultdict":
            return f"names a module to import ({member}: a defaultdict's factory), which loading does"
        if key == "context" and isinstance(value, str):
            for k, v in _fields(json.loads(value)):
                if k == "__enum__":
                    return f"names a module to import ({member}: an enum in a pytree context), which loading does"
    return None


_FIELD_CHECKS = {"expr_str": sympy_risk, "guards_code": guard_risk, "target": target_risk,
                 "as_operator": target_risk, "in_spec": spec_risk, "out_spec": spec_risk}
