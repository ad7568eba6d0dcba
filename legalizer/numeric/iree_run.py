"""Parse, verify, compile (llvm-cpu) and run TOSA MLIR on IREE (the optional ``iree``
extra: iree-base-compiler and iree-base-runtime)."""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Sequence

import numpy as np

from ..errors import BadInput, CheckUnavailable
from ..extras import install_hint
from ..kinds.mlir.bounds import non_utf8_literal
from .inputs import InputSpec, graph_input_specs
from .runner import Runner, positional

INSTALL_HINT = f"install the iree extra: {install_hint('iree')}"


class TosaError(RuntimeError):
    """IREE rejected the module (parse, verify or compile) or failed to run it."""


class Refused(BadInput):
    """A module ``compilable`` does not let IREE compile (bad input: exit 2); the
    message names what is refused, not the file."""


def _compiler():
    try:
        import iree.compiler as compiler
        import iree.runtime as runtime
    except ImportError:
        raise CheckUnavailable(f"IREE is not installed: {INSTALL_HINT}") from None
    return compiler, runtime


# A line of MLIR's diagnostic may print a whole op, its dense data with it: each line is
# kept up to this many characters.
MAX_DIAGNOSTIC_LINE = 2000


def diagnostic(e: BaseException) -> str:
    """MLIR's diagnostic in ``e``, every line of it (``\\n`` between them; the command line
    prints each on a line of its own, escaped), each line cut at ``MAX_DIAGNOSTIC_LINE``."""
    lines = [ln.rstrip() for ln in str(e).strip().splitlines() if ln.strip()]
    return "\n".join(ln if len(ln) <= MAX_DIAGNOSTIC_LINE else
                     f"{ln[:MAX_DIAGNOSTIC_LINE]}... ({len(ln) - MAX_DIAGNOSTIC_LINE:,} more characters)"
                     for ln in lines)


def parse(text: str):
    """The parsed and verified module; TosaError with MLIR's words if it is not."""
    compiler, _ = _compiler()
    from iree.compiler import ir

    try:
        module = ir.Module.parse(text, ir.Context())
    except Exception as e:  # noqa: BLE001 - MLIR's diagnostics are the message
        raise TosaError(f"TOSA text does not parse: {diagnostic(e)}") from None
    if not module.operation.verify():
        raise TosaError("TOSA module does not verify")
    return module


def bind_dims(text: str, shapes: Sequence[Sequence[int]]) -> str:
    """``text`` with the dynamic dims of ``@main``'s arguments bound to ``shapes`` (the
    arrays it will run on, in argument order). IREE compiles a ``?`` as an unbounded
    size, and some dynamic modules then do not compile ("stack allocation ...
    576460752303423424 bytes") or do not run; with static arguments, its shape
    inference makes the whole body static. The body's own types are left as they are
    (a ``?`` there is compatible with any size). Unchanged if no argument is dynamic."""
    if "?" not in text:
        return text
    _compiler()
    from iree.compiler import ir

    module = parse(text)
    with module.context, ir.Location.unknown():
        main = next((op for op in module.body.operations if op.operation.name == "func.func"
                     and ir.StringAttr(op.attributes["sym_name"]).value == "main"), None)
        if main is None:
            return text  # run() names what is missing
        ftype = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
        args = main.regions[0].blocks[0].arguments
        bound = []
        for k, (arg, declared) in enumerate(zip(args, ftype.inputs)):
            try:
                t = ir.RankedTensorType(declared)
            except ValueError:  # not a ranked tensor: left as it is
                t = None
            if t is not None and k < len(shapes):
                shape = list(shapes[k])
                if t.rank == len(shape) and all(t.is_dynamic_dim(i) or t.get_dim_size(i) == shape[i]
                                                for i in range(t.rank)):
                    declared = ir.RankedTensorType.get(shape, t.element_type, t.encoding)
                    arg.set_type(declared)
            bound.append(declared)
        main.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(bound, ftype.results))
        if not module.operation.verify():
            raise TosaError("TOSA module does not verify with its dynamic dims bound")
        return str(module)


# What IREE is given to compile and run in this process: functions of these dialects
# and nothing else. A module is untrusted input, and IREE compiles whatever it holds: a
# stream.executable whose dispatch holds llvm.inline_asm "syscall", or an object file
# linked in by #hal.executable.object<{path = ...}>, runs native code of its choosing.
ALLOWED_DIALECTS = ("tosa", "func", "arith", "tensor", "quant", "ml_program")
_ALLOWED = frozenset(ALLOWED_DIALECTS)
_ALLOWED_REFERENCES = _ALLOWED | {"builtin"}
# A dialect's attribute or type in printed MLIR: #hal.executable.object<...>, !llvm.ptr,
# #hal<...> (the verbose form); builtin ones print with no prefix (dense<...>, tensor<...>).
_DIALECT_REFERENCE = re.compile(r"[#!]([A-Za-z_][\w$]*)(?:\.[\w$.]*|(?=<))")


def compilable(text: str) -> str:
    """The module IREE may compile: ``text`` parsed by MLIR, refused (``Refused``)
    unless every op in it is of ``ALLOWED_DIALECTS``, its top level holds only
    ``func.func`` with bodies (and ``ml_program`` globals), and no type or attribute
    refers to another dialect; then printed again from what was checked, without
    locations and without discardable attributes of other dialects (``tf.*``,
    ``hal.*``, ``iree.*``: nothing IREE should act on). TosaError if MLIR cannot parse it."""
    from ..kinds.mlir.importer import check_text

    check_text(text, "the module")  # MLIR's parser recurses as deep as the text nests, and expands aliases
    _compiler()
    from iree.compiler import ir

    ctx = ir.Context()
    ctx.allow_unregistered_dialects = True  # so that an op of another dialect is named, not a parse error
    try:
        module = ir.Module.parse(text, ctx)
    except Exception as e:  # noqa: BLE001 - MLIR's diagnostics are the message
        raise TosaError(f"TOSA text does not parse: {diagnostic(e)}") from None
    with ctx:
        for op in module.body.operations:
            _check_top_level(op.operation)
        _strip_attributes(module.operation)
        calls: Dict[str, List[str]] = {}
        stack = [(op.operation, _symbol(op.operation)) for op in module.body.operations]
        while stack:  # its own stack: the text's nesting is bounded, the walk need not recurse
            op, function = stack.pop()
            _check_op(op)
            if op.name in _CALLS and function is not None:
                calls.setdefault(function, []).append(_callee(op))
            for region in op.regions:
                for block in region.blocks:
                    for arg in block.arguments:
                        _check_reference(str(arg.type), f"a block argument of '{op.name}'")
                    stack.extend((inner.operation, function) for inner in block.operations)
        _check_acyclic(calls)
        return module.operation.get_asm(enable_debug_info=False)


# The ops that name a function to call (func.constant makes one func.call_indirect calls).
_CALLS = {"func.call": "callee", "func.constant": "value"}


def _symbol(op) -> Optional[str]:
    try:
        return _ir_symbol(op.attributes["sym_name"])
    except KeyError:
        return None


def _ir_symbol(attr) -> str:
    """``@name`` of a symbol name or reference attribute (printed ``"name"`` / ``@name``)."""
    text = str(attr)
    return text if text.startswith("@") else "@" + text.strip('"')


def _callee(op) -> str:
    return _ir_symbol(op.attributes[_CALLS[op.name]])


def _check_acyclic(calls: Dict[str, List[str]]) -> None:
    """Refused if a function reaches itself through calls: IREE's compiler inlines and
    does not end on a recursive call graph (it ran until --run-timeout)."""
    state: Dict[str, int] = {}  # 1: on the path, 2: done
    for root in sorted(calls):
        if state.get(root):
            continue
        path, todo = [root], [iter(calls.get(root, ()))]
        state[root] = 1
        while todo:
            nxt = next(todo[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                todo.pop()
            elif state.get(nxt) == 1:
                cycle = path[path.index(nxt):] + [nxt]
                raise Refused(f"--against compiles no recursive call graph: {' -> '.join(cycle)}; IREE's compiler"
                              " does not end on one")
            elif not state.get(nxt):
                state[nxt] = 1
                path.append(nxt)
                todo.append(iter(calls.get(nxt, ())))


def _refuse(what: str) -> Refused:
    return Refused(f"--against compiles and runs only functions of the {', '.join(ALLOWED_DIALECTS[:-1])} and"
                    f" {ALLOWED_DIALECTS[-1]} dialects; the module has {what}")


def _check_top_level(op) -> None:
    if op.name == "func.func":
        if not len(op.regions) or not len(op.regions[0].blocks):
            raise _refuse(f"a function declaration without a body ({op.attributes['sym_name']}), which IREE"
                          " would import from elsewhere")
    elif not op.name.startswith("ml_program.global"):
        raise _refuse(f"'{op.name}' at its top level")


# Ops of the allowed dialects that address a tensor at positions given as values, and IREE
# checks none of them: tensor.extract at 1e8 (a constant, or computed) reads outside
# the buffer (SIGSEGV), tensor.insert_slice at 64 writes outside it. Refused where a
# position is an SSA value (an ``index`` operand) or, for tensor.gather and tensor.scatter,
# always (their positions are a tensor); static slice offsets are MLIR's to check.
UNCHECKED_INDEXING = ("tensor.extract", "tensor.insert", "tensor.extract_slice", "tensor.insert_slice",
                      "tensor.parallel_insert_slice", "tensor.gather", "tensor.scatter")
_INDEXED_BY_TENSOR = frozenset({"tensor.gather", "tensor.scatter"})


def _check_op(op) -> None:
    dialect = op.name.split(".", 1)[0]
    if dialect not in _ALLOWED or "." not in op.name:
        raise _refuse(f"op '{op.name}'")
    if op.name in UNCHECKED_INDEXING and (op.name in _INDEXED_BY_TENSOR
                                          or any(str(v.type) == "index" for v in op.operands)):
        raise Refused(f"--against runs no '{op.name}' whose position is a value: IREE checks no such position"
                      " against the tensor's bounds")
    _strip_attributes(op)
    for result in op.results:
        _check_reference(str(result.type), f"a result of '{op.name}'")


def _check_reference(printed: str, where: str) -> None:
    for m in _DIALECT_REFERENCE.finditer(printed):
        if m.group(1) not in _ALLOWED_REFERENCES:
            raise _refuse(f"'{m.group()}' in {where}")


def _strip_attributes(op) -> None:
    """Refuse an attribute of ``op`` whose value refers to another dialect; drop its
    discardable attributes of other dialects (named ``dialect.name``: ``tf.*`` and the
    like, which IREE ignores, and ``hal.*``, ``iree.*``, which it would act on), also
    in a function's argument and result attributes."""
    from iree.compiler import ir

    attrs = op.attributes
    try:
        names = list(attrs)
    except RuntimeError:  # the bindings' word for a name that is not UTF-8 text
        raise _refuse(f"an attribute name of '{op.name}' that is not UTF-8 text") from None
    for name in names:
        value = attrs[name]
        where = f"attribute '{name}' of '{op.name}'"
        if name in ("arg_attrs", "res_attrs") and isinstance(value, ir.ArrayAttr):
            attrs[name] = ir.ArrayAttr.get([_stripped_dict(d, f"{name} of '{op.name}'") for d in value])
            continue
        # dense data is builtin: only its type can refer to a dialect (and printing it costs)
        _check_reference(str(value.type) if isinstance(value, ir.DenseElementsAttr) else str(value), where)
        if _foreign_name(name):
            del attrs[name]


def _foreign_name(name: str) -> bool:
    """A discardable attribute's name of a dialect not allowed (``tf.entry_function``)."""
    return "." in name and name.split(".", 1)[0] not in _ALLOWED


def _stripped_dict(attr, where: str):
    from iree.compiler import ir

    d = ir.DictAttr(attr)
    if non_utf8_literal(str(d)) is not None:  # the bindings abort on a key that is not UTF-8: none is asked for
        raise _refuse(f"a string that is not UTF-8 text in the {where}")
    kept = {}
    for i in range(len(d)):
        entry = d[i]
        _check_reference(str(entry.attr), f"'{entry.name}' in the {where}")
        if not _foreign_name(entry.name):
            kept[entry.name] = entry.attr
    return ir.DictAttr.get(kept)


# IREE does not check the index of a tosa.gather or tosa.scatter: one outside [0, K) of its
# values' dim 1 reads or writes outside the buffer (TOSA makes it an error that a runtime
# need not catch). Each op's indices operand goes through maximum then minimum to
# [0, K-1] (IREE's TOSA validation refuses tosa.clamp of i32: "did not align with any
# profile"): an index in range is unchanged, one out of range stays inside the buffer.
# By op: its values and indices operands, and what it does outside the buffer.
INDEXED_OPS = {"tosa.gather": (0, 1, "read"), "tosa.scatter": (0, 1, "write")}


def memory_safe(text: str) -> str:
    """``text`` (what ``compilable`` printed, its dims bound) with the indices of every
    ``INDEXED_OPS`` op clamped to [0, K-1] of its values' dim K
    (a dim K known only at run time is read there, ``tensor.dim``), ``Refused`` for an op
    whose operands are not [N,K,C] and [N,W] or whose K is 0, ``TosaError`` naming a
    constant index out of range (TOSA leaves the result undefined: nothing to compare).
    Unchanged if it has none."""
    if not any(name in text for name in INDEXED_OPS):
        return text
    _compiler()
    from iree.compiler import ir

    module = parse(text)
    with module.context, ir.Location.unknown():
        stack = [op.operation for op in module.body.operations]
        while stack:  # its own stack, as ``compilable``'s walk
            op = stack.pop()
            if op.name in INDEXED_OPS:
                _clamp_indices(op, *INDEXED_OPS[op.name])
            stack.extend(inner.operation for region in op.regions for block in region.blocks
                         for inner in block.operations)
        if not module.operation.verify():
            raise TosaError("TOSA module does not verify with its gather and scatter indices clamped")
        return module.operation.get_asm(enable_debug_info=False)


def _clamp_indices(op, values_at: int, indices_at: int, does: str) -> None:
    from iree.compiler import ir

    values, indices = op.operands[values_at], op.operands[indices_at]
    try:
        vtype, itype = ir.RankedTensorType(values.type), ir.RankedTensorType(indices.type)
    except ValueError:
        vtype = itype = None
    if vtype is None or vtype.rank != 3 or itype.rank != 2:
        raise Refused(f"--against runs '{op.name}' only on values [N,K,C] and indices [N,W]: the module has one"
                      f" of {values.type} and {indices.type}")
    k = None if vtype.is_dynamic_dim(1) else vtype.get_dim_size(1)
    if k == 0:
        raise Refused(f"--against runs no '{op.name}' of values {vtype}: with K = 0, every index is outside them")
    if k is not None:
        _check_constant_indices(op, indices, k, does)
    element = itype.element_type
    bound = ir.RankedTensorType.get([1, 1], element)
    at, loc = ir.InsertionPoint(op), op.location

    def create(name, result, *operands, **attributes):
        return ir.Operation.create(name, results=[result], operands=list(operands), attributes=attributes,
                                   loc=loc, ip=at).result

    def const(v: int):
        splat = ir.DenseElementsAttr.get_splat(bound, ir.IntegerAttr.get(element, v))
        return create("tosa.const", bound, values=splat)

    if k is not None:
        last = const(k - 1)
    else:  # K known only at run time (a body type IREE infers once the arguments are bound): its dim, less one
        index = ir.IndexType.get()
        dim = create("tensor.dim", index, values, create("arith.constant", index, value=ir.IntegerAttr.get(index, 1)))
        k_1 = create("arith.subi", element, create("arith.index_cast", element, dim),
                     create("arith.constant", element, value=ir.IntegerAttr.get(element, 1)))
        last = create("tensor.splat", bound, k_1)
    op.operands[indices_at] = create("tosa.maximum", itype, create("tosa.minimum", itype, indices, last), const(0))


def _check_constant_indices(op, indices, k: int, does: str) -> None:
    """``TosaError`` if ``indices`` is a ``tosa.const`` with a value outside [0, k)."""
    from iree.compiler import ir

    owner = indices.owner
    if not isinstance(owner, ir.Operation) and hasattr(owner, "operation"):
        owner = owner.operation
    if not isinstance(owner, ir.Operation) or owner.name != "tosa.const":
        return
    data = owner.attributes["values"]
    if not isinstance(data, ir.DenseIntElementsAttr):
        return
    at = np.asarray(data) if not data.is_splat else np.asarray([int(data.get_splat_value())])
    bad = at[(at < 0) | (at >= k)]
    if bad.size:
        more = f" (and {bad.size - 1:,} more)" if bad.size > 1 else ""
        raise TosaError(f"a '{op.name}' of the module has constant index {int(bad.flat[0])}{more} out of range"
                        f" [0, {k - 1}] of its values' dim K: TOSA leaves its result undefined, and IREE"
                        f" would {does} outside the buffer")


def run(text: str, inputs: Sequence[np.ndarray]) -> List[np.ndarray]:
    """Compile ``text`` for the CPU and run its ``@main`` on ``inputs`` (in argument
    order): only what ``compilable`` lets through, printed again from what it checked."""
    return run_vmfb(compile_vmfb(text), inputs)


def compile_vmfb(text: str) -> bytes:
    """``text`` compiled for the CPU (what ``compilable`` lets through): IREE's module."""
    compiler, _ = _compiler()
    text = memory_safe(compilable(text))
    try:
        return bytes(compiler.compile_str(text, input_type="tosa", target_backends=["llvm-cpu"],
                                          extra_args=["--iree-llvmcpu-target-cpu=host"]))
    except Exception as e:  # noqa: BLE001
        raise TosaError(f"IREE cannot compile the module: {diagnostic(e) or 'compile failed'}") from None


def run_vmfb(vmfb: bytes, inputs: Sequence[np.ndarray]) -> List[np.ndarray]:
    """IREE's compiled module's ``@main`` on ``inputs``, on the CPU."""
    _, runtime = _compiler()
    try:
        module = runtime.load_vm_flatbuffer(vmfb, driver="local-task")
    except Exception as e:  # noqa: BLE001
        raise TosaError(f"IREE failed to load the module: {diagnostic(e)}") from None
    main = getattr(module, "main", None)
    if main is None:
        raise TosaError("the module has no function @main, which the comparison runs")
    try:
        out = main(*inputs)
    except Exception as e:  # noqa: BLE001
        raise TosaError(f"IREE failed to run the module: {diagnostic(e)}") from None
    outs = out if isinstance(out, (list, tuple)) else [out]
    return [np.asarray(o.to_host() if hasattr(o, "to_host") else o) for o in outs]


class Compiler:
    """``compile_vmfb`` as the compile child serves it (``child.COMPILE``)."""

    runtime = "IREE llvm-cpu (compile)"

    def compile(self, text: str) -> bytes:
        return compile_vmfb(text)


class Vmfb:
    """A compiled module, run in the run child (``run_vmfb``)."""

    runtime = "IREE llvm-cpu"

    def __init__(self, vmfb: bytes):
        self.vmfb = vmfb

    def main(self, inputs: Sequence[np.ndarray]) -> List[np.ndarray]:
        return run_vmfb(self.vmfb, inputs)


def run_contained(text: str, inputs: Sequence[np.ndarray], model: str = "the module") -> List[np.ndarray]:
    """``run``, in the children (``child.py``): compiled in the compile child, run in the
    run child, each under its limits; a fault there is ``child.RunFault``."""
    from .child import COMPILE, Remote

    compiler = Remote(Compiler, model=model, runtime="IREE's compiler", pool=COMPILE)
    try:
        vmfb = compiler.call("compile", text)
    finally:
        compiler.close()
    module = Remote(Vmfb, vmfb, model=model, runtime="IREE llvm-cpu")
    try:
        return list(module.call("main", list(inputs)))
    finally:
        module.close()


def printed(text: str) -> str:
    """``text`` as MLIR prints it, locations kept: the SSA names localization and the IR share."""
    return parse(text).operation.get_asm(enable_debug_info=True)


def main_func(module):
    """The ``@main`` function of a module IREE's MLIR bindings parsed (TosaError if none)."""
    from iree.compiler import ir

    for op in module.body.operations:
        if op.operation.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value == "main":
            return op
    raise TosaError("the module has no @main")


def cut(text: str, names: Sequence[str]) -> str:
    """``text`` with ``@main`` returning the values ``names`` (SSA names without ``%``,
    as MLIR prints ``text``) instead of its results."""
    from iree.compiler import ir

    module = parse(text)
    with module.context, ir.Location.unknown():
        main = main_func(module)
        block = main.regions[0].blocks[0]
        by_name = {a.get_name()[1:]: a for a in block.arguments}
        ops = list(block.operations)
        for op in ops:
            by_name.update((v.get_name()[1:], v) for v in op.results)
        missing = [n for n in names if n not in by_name]
        if missing:
            raise TosaError(f"no value %{missing[0]} in @main")
        values = [by_name[n] for n in names]
        ret = ops[-1]
        ir.Operation.create(ret.operation.name, operands=values, loc=ret.location, ip=ir.InsertionPoint(ret))
        ret.operation.erase()
        ftype = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
        main.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(list(ftype.inputs),
                                                                               [v.type for v in values]))
        if not module.operation.verify():
            raise TosaError("the module cut at the probed values does not verify")
        return str(module)


class IreeRunner(Runner):
    """A TOSA module's ``@main`` on IREE (llvm-cpu), its arguments fed in order. Each
    ``infer`` compiles the module with its dynamic arguments bound to the feed's shapes
    (``bind_dims``): there is nothing to load ahead. Its intermediate values
    (``values``) come from ``@main`` cut at them (``cut``), compiled and run:
    names are the SSA names of the module as MLIR prints it, without ``%``."""

    name = "IREE llvm-cpu"

    def __init__(self, text: str, contained: bool = False, model: str = "the module"):
        super().__init__()
        self.text, self.contained, self.model = text, contained, model
        self._checked: Optional[str] = None  # ``compilable(text)``, once

    def input_specs(self) -> List[InputSpec]:
        """``@main``'s arguments as the MLIR importer reads them."""
        from ..kinds.mlir.importer import parse_mlir

        return graph_input_specs(parse_mlir(self.text).graph)

    def infer_impl(self, feed):
        """``contained``: compiled and run in the children (``run_contained``)."""
        args = list(feed.values())
        if self._checked is None:  # refused before anything parses it with IREE's dialects
            self._checked = compilable(self.text)
        text = bind_dims(self._checked, [a.shape for a in args])
        return positional(run_contained(text, args, self.model) if self.contained else run(text, args))

    def all_names(self) -> List[str]:
        """Every op result of ``@main`` that is a tensor, constants left out (the same in
        any run), in the module's order."""
        module = parse(self.text)
        with module.context:
            return [v.get_name()[1:] for op in main_func(module).regions[0].blocks[0].operations
                    if op.operation.name not in ("tosa.const", "tosa.const_shape", "arith.constant")
                    for v in op.results if str(v.type).startswith("tensor<")]

    def values(self, feed, names=None):
        names = self.all_names() if names is None else list(names)
        if not names:
            return {}
        self.runs += 1
        text = cut(self.text, names)
        got = run_contained(text, list(feed.values())) if self.contained else run(text, list(feed.values()))
        return dict(zip(names, got))
