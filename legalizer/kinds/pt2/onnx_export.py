"""PyTorch input: a ``torch.export`` program (a ``.pt2`` archive written by
``torch.export.save``, an ``ExportedProgram``, or an ``nn.Module`` with example inputs)
exported to ONNX with ``torch.onnx.export(..., dynamo=True)`` and imported.

The program's symbolic input dims stay symbolic: the exporter reads them from the
program (its placeholders' ``SymInt`` sizes, bounded by its range constraints), so
the ONNX inputs carry the program's symbols (``s77``, ...). The program itself is
kept on the model (``Model.torch``) so that the check can run PyTorch as a reference.

torch and onnxscript are the optional ``torch`` extra: everything here imports them
lazily, and without them a PyTorch input is one clear error naming the extra.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from ...errors import BadInput, first_line
from ...extras import install_hint
from ...model import Model
from .torch_logs import quiet_torch

if TYPE_CHECKING:
    import onnx

EXTRA = install_hint("torch")

# The opset the dynamo exporter of the pinned torch emits natively (no version conversion).
OPSET = 18


@dataclass
class TorchSource:
    """Where a model exported from PyTorch came from: the program (run as the check's
    reference), the ONNX the exporter made of it (the model before legalization) and
    the ONNX names of the program's user inputs, in the program's flat input order."""

    program: Any  # torch.export.ExportedProgram
    onnx: onnx.ModelProto
    input_names: List[str] = field(default_factory=list)
    _module: Any = field(default=None, repr=False)  # program.module(), made once


def require_torch(what: str) -> None:
    """BadInput unless torch and onnxscript (the dynamo exporter) can be imported."""
    missing = []
    for pkg in ("torch", "onnxscript"):
        try:
            __import__(pkg)
        except ImportError:
            missing.append(pkg)
    if missing:
        raise BadInput(f"{what} needs {' and '.join(missing)}, which {'is' if len(missing) == 1 else 'are'}"
                       f" not installed: {EXTRA}")


def load_pt2(path: Path, infer: bool = True, trust: bool = False) -> Model:
    """A ``.pt2`` archive (``torch.export.save``) as a Model of its ONNX export.

    An archive is pickle and more (``safety``): unless ``trust``, it is read so that
    nothing in it runs, and one that would run code is refused (BadInput). ``trust``
    is ``torch.export.load`` as it is, unsafe fallbacks included, for a file the user
    vouches for."""
    require_torch(f"{path}: is a torch.export archive (.pt2); reading it")
    if trust:
        program = _load_trusted(path)
    else:
        from .safety import load_untrusted

        program = load_untrusted(path)
    model = from_program(program, what=str(path), infer=infer)
    model.source = path
    return model


def _load_trusted(path: Path):
    import torch

    from .safety import invalid

    try:
        with quiet_torch():
            return torch.export.load(str(path))
    except Exception as e:  # noqa: BLE001 - torch's own words are the reason
        raise invalid(path, e) from None


def load_module(module, example_inputs, dynamic_shapes=None, infer: bool = True) -> Model:
    """An ``nn.Module`` (or an ``ExportedProgram``) as a Model of its ONNX export:
    ``torch.export.export(module, example_inputs, dynamic_shapes=dynamic_shapes)``
    first, so that the symbolic dims of ``dynamic_shapes`` become ONNX dim params."""
    require_torch("a PyTorch module")
    import torch

    if isinstance(module, torch.export.ExportedProgram):
        return from_program(module, what="the ExportedProgram", infer=infer)
    if example_inputs is None:
        raise BadInput("a PyTorch module needs example_inputs (a tuple of tensors) to be exported")
    if not isinstance(example_inputs, tuple):
        example_inputs = tuple(example_inputs) if isinstance(example_inputs, list) else (example_inputs,)
    try:
        with quiet_torch():
            program = torch.export.export(module, example_inputs, dynamic_shapes=dynamic_shapes)
    except Exception as e:  # noqa: BLE001
        raise BadInput(f"torch.export.export cannot export the module ({type(e).__name__}: {first_line(e)})") from None
    return from_program(program, what=type(module).__name__, infer=infer)


def from_program(program, what: str = "the program", infer: bool = True) -> Model:
    """Export ``program`` with the dynamo exporter and import the ONNX it makes."""
    import torch

    from ..onnx.importer import import_model

    try:
        with quiet_torch(), torch.no_grad():
            onnx_program = torch.onnx.export(program, dynamo=True, opset_version=OPSET, external_data=False,
                                             optimize=True, verbose=False)
        proto = onnx_program.model_proto
    except Exception as e:  # noqa: BLE001
        raise BadInput(f"{what}: torch.onnx.export cannot export it to ONNX"
                       f" ({type(e).__name__}: {first_line(e)})") from None
    inits = {t.name for t in proto.graph.initializer}
    names = [vi.name for vi in proto.graph.input if vi.name not in inits]
    try:
        model = import_model(proto, None, infer=infer)
    except BadInput as e:
        raise BadInput(f"{what}: its ONNX export: {e}") from None
    model.torch = TorchSource(program, proto, names)
    return model


def run_program(source: TorchSource, feeds) -> list:
    """Run the program on ``feeds`` (ONNX input name -> array), as PyTorch runs it:
    ``program.module()(*args, **kwargs)``; its outputs flattened, as numpy arrays."""
    import numpy as np
    import torch
    from torch.utils import _pytree

    flat = [torch.from_numpy(np.ascontiguousarray(feeds[n])) for n in source.input_names]
    args, kwargs = _pytree.tree_unflatten(flat, source.program.call_spec.in_spec)
    with torch.no_grad():
        out = _module(source)(*args, **kwargs)
    leaves, _ = _pytree.tree_flatten(out)
    return [x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x) for x in leaves]


def _module(source: TorchSource):
    mod = source._module
    if mod is None:
        with quiet_torch():
            mod = source.program.module()
        source._module = mod
    return mod


def dim_ranges(source: TorchSource) -> Dict[str, Tuple[int, Optional[int]]]:
    """The program's range constraints, keyed by the name its ONNX export gives each dim
    (``s77``, ``4*s94``): (lower, upper) bounds, upper None when unbounded. The check's
    search for bindings tries them."""
    out: Dict[str, Tuple[int, Optional[int]]] = {}
    for symbol, bounds in getattr(source.program, "range_constraints", {}).items():
        try:
            lower = int(bounds.lower)
        except (TypeError, ValueError, AttributeError, OverflowError):
            continue
        try:
            upper: Optional[int] = int(bounds.upper)
        except (TypeError, ValueError, AttributeError, OverflowError):  # int_oo: no upper bound
            upper = None
        out[str(symbol)] = (lower, upper)
    return out
