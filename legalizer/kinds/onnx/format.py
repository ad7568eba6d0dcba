"""ONNX models: checked and localized on onnxruntime, reduced to ONNX subgraphs."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Dict, Mapping, Optional, Sequence, Tuple

from ...model import Model
from ..behaviour import Format, Sides, Subject


def as_proto(model):
    """A ModelProto with its external data (a path is read after the check of its
    external data locations)."""
    import onnx

    from ...importers.reader import check_external_data

    if isinstance(model, onnx.ModelProto):
        return model
    check_external_data(Path(model))
    return onnx.load(str(model))


def range_hints(source) -> Dict[str, list]:
    """Per dim, the sizes at the bounds of its range (a PyTorch program's range
    constraints; ``source`` a ``TorchSource`` or None), for the check's search."""
    if source is None:
        return {}
    from ...numeric.search import sizes_in_range
    from ..pt2.onnx_export import dim_ranges

    return {key: sizes_in_range(lo, hi) for key, (lo, hi) in dim_ranges(source).items()}


class OnnxFormat(Format):
    name = "onnx"
    title = "ONNX"
    written = "onnx"
    golden = True
    reduces = True
    against = ("onnx",)
    static_for_target = True  # (onnxruntime's constant folding then makes the shape arithmetic constant)

    def proto(self, model: Model):
        """The ModelProto the check runs as the original."""
        return model.proto

    def original(self, path: Path, model: Model):
        """What the check runs as the original: the input file."""
        return path

    def stage(self, model: Model, path: Path, *, force: bool = False):
        from .exporter import export_model, staged_model

        # The initializers and nodes are streamed into the file, not copied into a new ModelProto.
        inits: list = []
        nodes: list = []
        proto = export_model(model.graph, model.proto, detached=inits, detached_nodes=nodes)
        return staged_model(proto, path, model.base_dir, force=force, protect=model.source, initializers=inits,
                            nodes=nodes)

    def specialize(self, model: Model, path: Path, dims: Mapping[str, int]) -> Tuple[Dict[str, int], Optional[str]]:
        """A static-shape target's: the dims bound (``--dim``/``--input-shape``), else 1,
        made static and the shape arithmetic folded (``numeric.static_onnx``); the check
        binds the same sizes."""
        from ...numeric.static_onnx import specialize_onnx

        done = specialize_onnx(model, dict(dims))
        if not done.bound:
            return dict(dims), None
        return {**dims, **done.bound}, ("shapes made static at " + ", ".join(f"{k}={v}" for k, v in done.bound.items())
                                        + f": {done.shapes_set} input dims, {done.folded} shape values folded")

    def declared(self, model: Model):
        from ...numeric.user_inputs import declared_shapes

        return declared_shapes(self.proto(model))

    def input_types(self, model: Model) -> Dict[str, int]:
        return {vi.name: vi.type.tensor_type.elem_type for vi in self.proto(model).graph.input
                if vi.type.HasField("tensor_type")}

    def check(self, subject: Subject, written: Path):
        """The legalized model checked against the original."""
        from ...numeric.ort import check, choices_from_constraints

        golden, original = subject.golden, self.original(subject.path, subject.model)
        if golden is not None and golden.samples is not None:
            from ...numeric.samples import check_samples

            return check_samples(original, written, golden.samples, subject.settings,
                                 expected=golden.expected, reference=golden.reference, dims=subject.dims)
        return check(original, written, subject.settings, dims=subject.dims, inputs=subject.given,
                     choices=choices_from_constraints(subject.constraints),
                     hints=self.hints(subject.model), profile=subject.profile)

    def hints(self, model: Model) -> Dict[str, list]:
        """Sizes worth trying per dim (a PyTorch program's ranges); none for ONNX."""
        return {}

    def sides(self, subject: Subject, written: Path) -> Sides:
        return Sides(self, written, self.original(subject.path, subject.model))

    def compare(self, subject: Subject, reference: Path):
        from ...numeric.ort import check

        settings = replace(subject.settings, record=False)
        # the reference's declarations as read for its output names, if it was (not parsed again)
        declared = subject.reference.proto if subject.reference is not None else None
        return check(reference, subject.path, settings, dims=subject.dims, inputs=subject.given, raise_faults=True,
                     declared=declared)

    def feeds(self, sides: Sides, dims: Mapping[str, int], given, provider: str):
        from ...numeric.ort import synthesize

        return synthesize(sides.reference, dims, given)

    def localize(self, sides: Sides, binding, given, settings, *, budget: int):
        from ...numeric.localize import localize_onnx

        sides.candidate, sides.reference = as_proto(sides.candidate), as_proto(sides.reference)
        feeds = self.feeds(sides, binding.dims, given, settings.provider)
        return localize_onnx(sides.candidate, sides.reference, feeds, settings, binding=binding.dims)

    def reduce(self, sides: Sides, loc, path: Path, given, settings, *, force: bool, protect: Sequence[Path]):
        from ...numeric.reduce import reduce_onnx

        feeds = self.feeds(sides, loc.binding, given, settings.provider)
        return reduce_onnx(sides.candidate, sides.reference, loc, feeds, settings, path, force=force,
                           protect=protect)

    def reduce_violation(self, model: Model, source: Path, code: str, node: str, profile: str, path: Path, *,
                         force: bool, protect: Sequence[Path]):
        from ...numeric.reduce import reduce_onnx_violation

        return reduce_onnx_violation(as_proto(source), model.graph, code, node, profile, path, force=force,
                                     protect=protect)


class Pt2Format(OnnxFormat):
    """A ``torch.export`` program handed to ``load`` (a module, a program): legalized as
    its ONNX export. A run reads no such model (a ``.pt2`` file is ``AtenFormat``'s), so
    it has no check of its own: ``legalizer.check`` compares it with that export on
    onnxruntime and with PyTorch running the program, in one ``plan.Session``."""

    name = "pt2-onnx"
    title = ".pt2"
    against = ()
    runs_as_file = False

    def proto(self, model: Model):
        return model.torch.onnx

    def original(self, path: Path, model: Model):
        return model.torch.onnx

    def default_output(self, path: Path, model: Model) -> Path:
        from ..paths import default_output

        return default_output(path.with_suffix(".onnx"))

    def hints(self, model: Model) -> Dict[str, list]:
        return range_hints(model.torch)

    def reduce_violation(self, model: Model, source: Path, code: str, node: str, profile: str, path: Path, *,
                         force: bool, protect: Sequence[Path]):
        return Format.reduce_violation(self, model, source, code, node, profile, path, force=force, protect=protect)
