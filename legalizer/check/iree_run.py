"""Parse, verify, compile (llvm-cpu) and run TOSA MLIR on IREE (the optional ``iree``
extra: iree-base-compiler and iree-base-runtime)."""

from __future__ import annotations

from typing import List, Sequence

import numpy as np

from .ort import CheckUnavailable

INSTALL_HINT = "install the iree extra: pip install 'legalize[iree]'"


class TosaError(RuntimeError):
    """IREE rejected the module (parse, verify or compile) or failed to run it."""


def _compiler():
    try:
        import iree.compiler as compiler
        import iree.runtime as runtime
    except ImportError:
        raise CheckUnavailable(f"IREE is not installed: {INSTALL_HINT}") from None
    return compiler, runtime


def parse(text: str):
    """The parsed and verified module; TosaError with MLIR's words if it is not."""
    compiler, _ = _compiler()
    from iree.compiler import ir

    try:
        module = ir.Module.parse(text, ir.Context())
    except Exception as e:  # noqa: BLE001 - MLIR's diagnostics are the message
        raise TosaError(f"TOSA text does not parse: {str(e).strip().splitlines()[0]}") from None
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


def run(text: str, inputs: Sequence[np.ndarray]) -> List[np.ndarray]:
    """Compile ``text`` for the CPU and run its ``@main`` on ``inputs`` (in argument order)."""
    compiler, runtime = _compiler()
    try:
        vmfb = compiler.compile_str(text, input_type="tosa", target_backends=["llvm-cpu"],
                                    extra_args=["--iree-llvmcpu-target-cpu=host"])
    except Exception as e:  # noqa: BLE001
        lines = [ln for ln in str(e).splitlines() if "error:" in ln] or str(e).splitlines() or ["compile failed"]
        raise TosaError(f"IREE cannot compile the module: {lines[0].strip()}") from None
    try:
        module = runtime.load_vm_flatbuffer(vmfb, driver="local-task")
        out = module.main(*inputs)
    except Exception as e:  # noqa: BLE001
        raise TosaError(f"IREE failed to run the module: {str(e).strip().splitlines()[0]}") from None
    outs = out if isinstance(out, (list, tuple)) else [out]
    return [np.asarray(o.to_host() if hasattr(o, "to_host") else o) for o in outs]
