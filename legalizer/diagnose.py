"""After a check that failed (or with ``--localize``): where the candidate starts to
differ from its reference (``check.localize``), and with ``--reduce PATH`` the smallest
subgraph that still differs, or still violates the trait (``check.reduce``). The job
(``pipeline.py``) calls these; they turn the check's result into the runs to make.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Sequence

import numpy as np

from .check.localize import Localization
from .check.ort_session import providers
from .check.results import BindingResult, CheckResult
from .check.reduce import Reduced
from .errors import first_line


@dataclass
class Sides:
    """What was compared: the candidate and its reference, as the check ran them.
    ``kind``: the candidate's format (onnx, tflite, mlir). ONNX sides are ModelProtos
    or paths, TFLite sides paths (``graph`` the candidate's IR), an MLIR candidate a
    path and its reference a ``.tflite`` or ``.onnx`` path."""

    kind: str
    candidate: Any
    reference: Any
    graph: Any = None


def failing_binding(chk: CheckResult, forced: bool) -> Optional[BindingResult]:
    """The first binding whose outputs differ in value (not a failed run); with
    ``forced``, else the first compared one."""
    compared = [b for b in chk.bindings if not b.skipped]
    for b in compared:
        if any(not o.ok and o.stats is not None for o in b.outputs):
            return b
    return compared[0] if forced and compared else None


def _onnx(model):
    """A ModelProto with its external data (a path is read after the check of its
    external data locations)."""
    import onnx

    from .importers.reader import check_external_data

    if isinstance(model, onnx.ModelProto):
        return model
    check_external_data(Path(model))
    return onnx.load(str(model))


def _feeds(sides: Sides, dims: Mapping[str, int], given, provider: str) -> Dict[str, np.ndarray]:
    """The inputs the check fed at ``dims`` (the same synthesis, the same seed)."""
    if sides.kind == "onnx":
        from .check.ort import synthesize

        return synthesize(sides.reference, dims, given)
    if sides.kind == "tflite":
        from .check.inputs import graph_input_specs, make_feeds

        prefix = f"{sides.graph.name}/"
        return make_feeds(graph_input_specs(sides.graph),
                          {k[len(prefix):] if k.startswith(prefix) else k: v for k, v in dims.items()}, given, 0)
    from .check.against import feeds_for

    return feeds_for(Path(sides.reference), dims, given, provider)


def localize(sides: Sides, chk: CheckResult, *, given, rtol, atol, provider: str = "auto", budget: int = 8,
             forced: bool = False) -> Optional[Localization]:
    """Localize the first binding that differs (with ``forced``, else the first
    compared): None when no binding was compared. A runtime that refuses the probes
    gives a Localization whose ``note`` says why."""
    from .check import localize as lz

    binding = failing_binding(chk, forced)
    if binding is None:
        return None
    try:
        if sides.kind == "onnx":
            sides.candidate, sides.reference = _onnx(sides.candidate), _onnx(sides.reference)
        feeds = _feeds(sides, binding.dims, given or {}, provider)
        if sides.kind == "onnx":
            return lz.localize_onnx(sides.candidate, sides.reference, feeds, providers(provider), rtol=rtol,
                                    atol=atol, binding=binding.dims)
        if sides.kind == "tflite":
            loc = lz.localize_tflite(sides.candidate, sides.reference, sides.graph, feeds, rtol=rtol, atol=atol,
                                     binding=binding.dims)
            if not any(not o.ok for o in binding.outputs if o.name.endswith("(LiteRT)")):
                loc.note = "compared on LiteRT, where the outputs match: those that differ are the ONNX form's"
            return loc
        from .check.against import module_text

        differing = [i for i, o in enumerate(binding.outputs) if not o.ok]
        return lz.localize_mlir(module_text(Path(sides.candidate)), sides.reference, feeds, providers(provider),
                                rtol=rtol, atol=atol, binding=binding.dims, differing=differing, budget=budget)
    except Exception as e:  # noqa: BLE001 - a runtime refusing a probe: the check's result stands
        return Localization("", dict(binding.dims), note=f"could not localize: {first_line(e)}")


def reduce_divergence(sides: Sides, loc: Localization, path: Path, *, given, rtol, atol, provider: str = "auto",
                      force: bool = False, protect: Sequence[Path] = ()) -> Reduced:
    """``--reduce`` after a localization with a culprit (ONNX or TOSA MLIR candidates)."""
    from .check import reduce as rd
    from .errors import UsageError

    if sides.kind == "tflite":
        raise UsageError("--reduce writes ONNX or TOSA MLIR subgraphs: a TFLite model is localized, not reduced")
    feeds = _feeds(sides, loc.binding, given or {}, provider)
    if sides.kind == "onnx":
        return rd.reduce_onnx(sides.candidate, sides.reference, loc, feeds, providers(provider), path, rtol=rtol,
                              atol=atol, force=force, protect=protect)
    from .check.against import module_text
    from .check.iree_run import bind_dims
    from .check.probes import printed

    text = printed(bind_dims(module_text(Path(sides.candidate)), [np.shape(a) for a in feeds.values()]))
    return rd.reduce_mlir(text, loc, feeds, path, rtol=rtol, atol=atol, force=force, protect=protect)


def reduce_violation(model, path_in: Path, violation: dict, profile: str, path: Path, *, force: bool = False,
                     protect: Sequence[Path] = ()) -> Reduced:
    """``--reduce`` of a model whose input violates the trait: its first violation."""
    from .check import reduce as rd
    from .errors import UsageError

    code, node = violation["code"], violation["node"]
    if violation.get("graph"):
        raise UsageError("--reduce reduces the main graph: the first violation is in subgraph"
                         f" '{violation['graph']}'")
    if model.format == "onnx" and model.torch is None:
        return rd.reduce_onnx_violation(_onnx(path_in), model.graph, code, node, profile, path, force=force,
                                        protect=protect)
    if model.format == "mlir":
        from .check.against import module_text
        from .check.probes import printed

        text = printed(module_text(Path(path_in)))
        return rd.reduce_mlir_violation(text, code, _printed_label(model, text, node), profile, path, force=force,
                                        protect=protect)
    raise UsageError(f"--reduce writes ONNX or TOSA MLIR subgraphs: a {model.format} model is not reduced")


def _printed_label(model, text: str, node: str) -> str:
    """The label of op ``node`` (of the module as read) in ``text``, the module as MLIR
    prints it: the printer renumbers SSA names, the ops keep their order."""
    from .importers.mlir import parse_mlir
    from .ir.graph import CONST, OP

    mine = [n.label for n in model.graph.nodes() if n.kind in (OP, CONST)]
    theirs = [n.label for n in parse_mlir(text).graph.nodes() if n.kind in (OP, CONST)]
    return theirs[mine.index(node)] if node in mine and len(mine) == len(theirs) else node
