"""TOSA MLIR modules: verified, not legalized; compared (``--against``) on IREE with the
model they came from, localized and reduced as TOSA modules."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Dict, Mapping, Optional, Sequence

import numpy as np

from ...errors import BadInput, UsageError
from ...model import Model
from ..behaviour import Format, Sides, Subject


class MlirFormat(Format):
    name = "mlir"
    title = "TOSA MLIR"
    input_profile = "tosa"
    reduces = True
    against = ("tflite", "onnx")

    def dim_keys(self, model: Model) -> Optional[list]:
        return None  # its dims are its reference's (--against), checked where that is read

    def declared(self, model: Model):
        return []

    def user_dims(self, model: Model, dims: Mapping[str, int], input_shapes: Mapping[str, tuple],
                  given) -> Dict[str, int]:
        if input_shapes:
            raise UsageError("--input-shape binds the inputs of an ONNX, TFLite or .pt2 model; a TOSA MLIR"
                             " module's comparison (--against) takes arrays with --input")
        return dict(dims)

    def compare(self, subject: Subject, reference: Path):
        from ...numeric.against import check_against
        from ...numeric.iree_run import Refused

        try:
            return check_against(subject.path, reference, replace(subject.settings, record=False),
                                 given=subject.given, dims=subject.dims)
        except Refused as e:  # nothing was compiled: an op, a top-level op or an attribute IREE must not see
            raise BadInput(f"{subject.path}: {e}") from None

    def feeds(self, sides: Sides, dims: Mapping[str, int], given, provider: str):
        from ...numeric.against import feeds_for

        return feeds_for(Path(sides.reference), dims, given, provider)

    def localize(self, sides: Sides, binding, given, settings, *, budget: int):
        from ...numeric.against import module_text
        from ...numeric.localize import localize_mlir

        feeds = self.feeds(sides, binding.dims, given, settings.provider)
        differing = [i for i, o in enumerate(binding.outputs) if not o.ok]
        return localize_mlir(module_text(Path(sides.candidate)), sides.reference, feeds, settings,
                             binding=binding.dims, differing=differing, budget=budget)

    def reduce(self, sides: Sides, loc, path: Path, given, settings, *, force: bool, protect: Sequence[Path]):
        from ...numeric.against import module_text
        from ...numeric.iree_run import bind_dims
        from ...numeric.iree_run import printed
        from ...numeric.reduce import reduce_mlir

        feeds = self.feeds(sides, loc.binding, given, settings.provider)
        text = printed(bind_dims(module_text(Path(sides.candidate)), [np.shape(a) for a in feeds.values()]))
        return reduce_mlir(text, loc, feeds, path, settings, force=force, protect=protect)

    def reduce_violation(self, model: Model, source: Path, code: str, node: str, profile: str, path: Path, *,
                         force: bool, protect: Sequence[Path]):
        from ...numeric.against import module_text
        from ...numeric.iree_run import printed
        from ...numeric.reduce import reduce_mlir_violation

        text = printed(module_text(Path(source)))
        return reduce_mlir_violation(text, code, _printed_label(model, text, node), profile, path, force=force,
                                     protect=protect)


def _printed_label(model: Model, text: str, node: str) -> str:
    """The label of op ``node`` (of the module as read) in ``text``, the module as MLIR
    prints it: the printer renumbers SSA names, the ops keep their order."""
    from .importer import parse_mlir
    from ...ir.graph import CONST, OP

    mine = [n.label for n in model.graph.nodes() if n.kind in (OP, CONST)]
    theirs = [n.label for n in parse_mlir(text).graph.nodes() if n.kind in (OP, CONST)]
    return theirs[mine.index(node)] if node in mine and len(mine) == len(theirs) else node
