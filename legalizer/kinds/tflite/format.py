"""TFLite models: checked on LiteRT (and as their ONNX form on onnxruntime), localized
on LiteRT, their shapes made static for a static-shape target."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Tuple

from ...model import Model
from ..behaviour import Format, Sides, Subject


class TfliteFormat(Format):
    name = "tflite"
    title = "TFLite"
    written = "tflite"
    runtime = "litert"
    golden = True
    static_shapes = True
    against = ("tflite",)

    def stage(self, model: Model, path: Path, *, force: bool = False):
        from .exporter import staged_tflite

        return staged_tflite(model, path, force=force, protect=model.source)

    def declared(self, model: Model):
        from ...numeric.inputs import graph_declared

        return graph_declared(model.graph)

    def input_types(self, model: Model) -> Dict[str, int]:
        from ...ir.dtypes import elem_type

        return {n.output.name: elem_type(n.output.type.dtype) for n in model.graph.inputs}

    def dim_keys(self, model: Model) -> Optional[List[str]]:
        """Of every subgraph: a --dim binds a dynamic dim of any of them."""
        from ...numeric.user_inputs import dynamic_keys
        from ...numeric.inputs import graph_declared

        return dynamic_keys([d for g in model.graphs for d in graph_declared(g)])

    def check(self, subject: Subject, written: Path):
        from ...numeric.tflite import check_tflite

        golden, model = subject.golden, subject.model
        # the ONNX form --emit writes (legalized), where one is written: what is run is that
        form = subject.onnx_form
        result = check_tflite(subject.path, written, model, subject.settings, dims=subject.dims,
                              inputs=subject.given, samples=golden.samples, expected=golden.expected,
                              reference=golden.reference, form=(form.proto, form.results) if form is not None else None)
        if len(model.graphs) == 1:  # its bindings are named as the user names them
            for b in result.bindings:
                b.source = "user" if b.dims and set(b.dims) <= set(subject.dims) else b.source
        return result

    def sides(self, subject: Subject, written: Path) -> Sides:
        return Sides(self, written, subject.path, subject.model.graph)

    def compare(self, subject: Subject, reference: Path):
        from ...numeric.tflite import check_tflite

        settings = replace(subject.settings, record=False)
        return check_tflite(reference, subject.path, subject.model, settings, dims=subject.dims,
                            inputs=subject.given, litert_only=True)

    def feeds(self, sides: Sides, dims: Mapping[str, int], given, provider: str):
        from ...numeric.inputs import graph_input_specs, make_feeds

        prefix = f"{sides.graph.name}/"
        return make_feeds(graph_input_specs(sides.graph),
                          {k[len(prefix):] if k.startswith(prefix) else k: v for k, v in dims.items()}, given, 0)

    def localize(self, sides: Sides, binding, given, settings, *, budget: int):
        from ...numeric.localize import localize_tflite

        feeds = self.feeds(sides, binding.dims, given, settings.provider)
        loc = localize_tflite(sides.candidate, sides.reference, sides.graph, feeds, settings, binding=binding.dims)
        if not any(not o.ok for o in binding.outputs if o.name.endswith("(LiteRT)")):
            loc.note = "compared on LiteRT, where the outputs match: those that differ are the ONNX form's"
        return loc

    def specialize(self, model: Model, path: Path, dims: Mapping[str, int]) -> Tuple[Dict[str, int], Optional[str]]:
        """``--static``, or dims bound for a static-shape target: the shapes made static
        and the shape arithmetic that became constant folded (``numeric.static_shapes``);
        the check binds the dims as the user bound them."""
        from ...numeric.static_shapes import specialize_tflite

        done = specialize_tflite(model, path, dict(dims))
        if not done.bound:
            return dict(dims), None
        return dict(dims), ("shapes made static at " + ", ".join(f"{k}={v}" for k, v in done.bound.items())
                            + f": {done.shapes_set} tensor shapes, {done.folded} shape values folded")
