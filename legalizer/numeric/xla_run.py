"""Parse, verify, compile and run StableHLO text on XLA's CPU backend, through the
MLIR bindings and the XLA client that ship in jaxlib (an optional dependency: importing
this module needs ``jax``).

A module with dynamic dims (``?``) cannot be compiled as it is: XLA compiles static
shapes. As JAX does when it calls an exported polymorphic function, ``run`` wraps the
module's ``@main`` in a new ``@main`` with the concrete argument types that
``stablehlo.convert``s each argument to the polymorphic type and calls the original,
then runs StableHLO's shape refinement (jaxlib's ``refine_polymorphic_shapes``). The
refinement also evaluates the ``@shape_assertion`` custom calls; they are checked first,
on the module cut down to them (``assertions_only``), so a binding that breaks one fails
with the assertion's own message, before anything is computed.
"""

from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np

import jax
import jax.extend.backend as jax_backend
from jax._src.interpreters import mlir as jax_mlir
from jax._src.lib import xla_client
from jax._src.lib.mlir import ir
from jax._src.lib.mlir.dialects import func as func_dialect
from jax._src import compiler

from ..ir.dtypes import MLIR_ELEMENT, dtype_of_array
from .inputs import InputSpec, graph_input_specs
from .runner import Runner, positional

_INNER = "_legalized_main"

# XLA:CPU's YNNPACK fusions are off: in jaxlib 0.10.2 a fusion of convolution + bias add +
# max + reduce (a Conv-Relu-GlobalAveragePool tail) computes zeros or garbage (seen on
# light_squeezenet; tests/test_stablehlo.py keeps a small reproduction). The empty list
# means "no YNN fusion types" (the flag's overwrite mode).
_XLA_OPTIONS = {"xla_cpu_experimental_ynn_fusion_type": ""}
# Not worked around (no option for it): XLA:CPU duplicates an elementwise op into two fusions
# and LLVM contracts one copy into an FMA, so x - max(x) in a softmax need not be 0 at the max;
# with |x| ~ 3e9 (the shipped-weights light_squeezenet) exp overflows (or underflows) and the softmax
# is NaN. tests/test_stablehlo.py keeps the reproduction, marked xfail.


class StableHLOError(RuntimeError):
    """The text does not parse or verify, shape refinement fails (a shape assertion
    included), or XLA rejects the module."""


def context() -> ir.Context:
    """An MLIR context with the func, stablehlo and chlo dialects loaded."""
    return jax_mlir.make_ir_context()


def parse(text: str, ctx: ir.Context = None) -> ir.Module:
    """Parse and verify ``text``; ``StableHLOError`` with MLIR's diagnostics if it fails."""
    ctx = ctx or context()
    with ctx, ir.Location.unknown():
        try:
            module = ir.Module.parse(text)
        except ir.MLIRError as e:
            raise StableHLOError(f"StableHLO text does not parse: {e}") from None
        if not module.operation.verify():
            raise StableHLOError("StableHLO module does not verify")
    return module


def _mlir_type(array: np.ndarray) -> str:
    dims = "x".join(str(d) for d in array.shape)
    elem = MLIR_ELEMENT[dtype_of_array(array)]
    return f"tensor<{dims + 'x' if dims else ''}{elem}>"


def _main(module: ir.Module):
    for op in module.body.operations:
        if "sym_name" in op.attributes and ir.StringAttr(op.attributes["sym_name"]).value == "main":
            return op
    raise StableHLOError("module has no @main function")


def _is_assertion(op) -> bool:
    return (op.operation.name == "stablehlo.custom_call"
            and ir.StringAttr(op.attributes["call_target_name"]).value == "shape_assertion")


def assertions_only(text: str, ctx: ir.Context) -> Optional[str]:
    """``text`` cut down to its shape assertions and the shape computations they read,
    returning nothing; None if it has no assertions.

    Why: jaxlib refines shapes before it checks assertions, so with a binding that breaks
    a runtime broadcast, the broadcast itself fails refinement first (with its own
    verifier's words). JAX avoids that by construction; here the assertions are checked
    on their own first, on a module in which nothing else can fail."""
    module = parse(text, ctx)
    with ctx, ir.Location.unknown():
        main = _main(module)
        block = main.regions[0].blocks[0]
        ops = list(block.operations)
        # (operations hash and compare by the op they wrap, not by Python identity)
        keep = {op.operation for op in ops if _is_assertion(op)}
        if not keep:
            return None
        # Backward slice: the producers of every kept op's operands (block order means
        # one reverse sweep finds them all).
        for op in reversed(ops):
            if op.operation not in keep:
                continue
            for v in op.operands:
                if isinstance(v, ir.OpResult):
                    keep.add(v.owner.operation)
        # Users go before what they use: the return first (the cut-down function returns
        # nothing), then the rest in reverse order.
        ops[-1].operation.erase()
        for op in reversed(ops[:-1]):
            if op.operation not in keep:
                op.operation.erase()
        with ir.InsertionPoint(block):
            func_dialect.ReturnOp([])
        ftype = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
        main.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(list(ftype.inputs), []))
        return str(module)


def specialize(text: str, args: Sequence[np.ndarray], ctx: ir.Context) -> ir.Module:
    """The module of ``text`` made static for arguments like ``args``: the wrapper
    described above, then shape refinement. The shape assertions are checked first, on
    their own (see ``assertions_only``)."""
    checks = assertions_only(text, ctx)
    if checks is not None:
        _refine(_wrap(checks, args, ctx))
    return _refine(_wrap(text, args, ctx))


def _refine(module: ir.Module) -> ir.Module:
    try:
        return jax_mlir.refine_polymorphic_shapes(module)
    except ValueError as e:  # its cause carries the refinement's own message
        cause = e.__cause__ if e.__cause__ is not None else e
        raise StableHLOError(f"shape refinement failed: {cause}") from None


def _wrap(text: str, args: Sequence[np.ndarray], ctx: ir.Context) -> ir.Module:
    """``text`` with a static ``@main`` around its own (renamed) for these ``args``."""
    module = parse(text, ctx)
    with ctx, ir.Location.unknown():
        main = _main(module)
        ftype = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
        poly_in = [str(t) for t in ftype.inputs]
        results = [str(t) for t in ftype.results]
        if len(poly_in) != len(args):
            raise StableHLOError(f"@main takes {len(poly_in)} arguments, {len(args)} given")
        static_in = [_mlir_type(np.asarray(a)) for a in args]
        if static_in == poly_in:
            return module  # already static: nothing to refine
        main.attributes["sym_name"] = ir.StringAttr.get(_INNER)
        main.attributes["sym_visibility"] = ir.StringAttr.get("private")
        params = ", ".join(f"%a{i}: {t}" for i, t in enumerate(static_in))
        body = [f"%c{i} = stablehlo.convert %a{i} : ({s}) -> {p}"
                for i, (s, p) in enumerate(zip(static_in, poly_in))]
        call_args = ", ".join(f"%c{i}" for i in range(len(poly_in)))
        body.append(f"%r:{len(results)} = func.call @{_INNER}({call_args}) : ({', '.join(poly_in)})"
                    f" -> ({', '.join(results)})" if results else
                    f"func.call @{_INNER}({call_args}) : ({', '.join(poly_in)}) -> ()")
        rets = ", ".join(f"%r#{i}" for i in range(len(results)))
        body.append(f"return {rets} : {', '.join(results)}" if results else "return")
        wrapper = (f"func.func public @main({params}) -> ({', '.join(results)}) {{\n  "
                   + "\n  ".join(body) + "\n}")
        text2 = "module {\n" + wrapper + "\n" + "\n".join(str(op) for op in module.body.operations) + "\n}"
    return parse(text2, ctx)


def _compile(backend, bytecode: bytes, devices):
    def attempt(overrides):
        options = compiler.get_compile_options(num_replicas=1, num_partitions=1, env_options_overrides=overrides)
        return backend.compile_and_load(bytecode, executable_devices=xla_client.DeviceList(tuple(devices)),
                                        compile_options=options)

    try:
        try:
            return attempt(_XLA_OPTIONS)
        except Exception as e:  # noqa: BLE001 - a jaxlib without the flag: compile as it is
            if "ynn" not in str(e).lower():
                raise
            return attempt(None)
    except Exception as e:  # noqa: BLE001 - XLA's own words are the reason
        raise StableHLOError(f"XLA cannot compile the module: {e}") from None


def run(text: str, args: Sequence[np.ndarray]) -> List[np.ndarray]:
    """Compile ``text`` for arguments like ``args`` on XLA's CPU backend and run it."""
    ctx = context()
    args = [np.asarray(a) for a in args]
    module = specialize(text, args, ctx)
    backend = jax_backend.get_backend("cpu")
    devices = backend.local_devices()[:1]
    exe = _compile(backend, jax_mlir.module_to_bytecode(module), devices)
    # 64-bit arrays stay 64-bit only with x64 enabled (jax's default narrows them).
    with jax.enable_x64(True):
        buffers = [jax.device_put(a, devices[0]) for a in args]
        outs = exe.execute(buffers)
        return [np.asarray(o) for o in outs]


class XlaRunner(Runner):
    """A StableHLO module's ``@main`` on XLA's CPU backend, its arguments fed in order;
    each ``infer`` compiles it for the feed's shapes (``run``)."""

    name = "XLA cpu"

    def __init__(self, text: str):
        super().__init__()
        self.text = text

    def activate_impl(self) -> None:
        parse(self.text)  # StableHLOError: the text does not parse or verify

    def input_specs(self) -> List[InputSpec]:
        """``@main``'s arguments as the MLIR importer reads them."""
        from ..kinds.mlir.importer import parse_mlir

        return graph_input_specs(parse_mlir(self.text).graph)

    def infer_impl(self, feed):
        return positional(run(self.text, list(feed.values())))
