"""A ``torch.export`` program, legalized as its Core ATen graph (``kinds.pt2.importer``) and
written back as a ``torch.export`` program (``.pt2``). Its check is PyTorch: the
original program and the legal one as written, read back by the safe loader, run at the
same bindings (``--dim``, ``--input``) and compared output by output; where the
``executorch`` extra is installed, the legal program lowered to ExecuTorch (XNNPACK)
is run too, against the original (``numeric.executorch_run``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Dict

from ...model import Model
from ..behaviour import Format, Sides, Subject


class AtenFormat(Format):
    name = "pt2"
    title = ".pt2"
    written = "pt2"
    runtime = "torch"
    unpickled = True
    runs_as_file = False

    def declared(self, model: Model):
        from .importer import declaration
        from ...numeric.user_inputs import declared_shapes

        return declared_shapes(declaration(model))

    def input_types(self, model: Model) -> Dict[str, int]:
        from .importer import declaration

        return {vi.name: vi.type.tensor_type.elem_type for vi in declaration(model).graph.input}

    def hints(self, model: Model) -> Dict[str, list]:
        """Per symbol, the sizes at the bounds of its range (the range constraints)."""
        from .onnx_export import TorchSource, dim_ranges
        from ...numeric.search import sizes_in_range

        ranges = dim_ranges(TorchSource(model.aten.program, None))
        return {key: sizes_in_range(lo, hi) for key, (lo, hi) in ranges.items()}

    def stage(self, model: Model, path: Path, *, force: bool = False):
        from ...atomic_files import staged_output
        from .exporter import legal_program, save_program

        program = legal_program(model)
        return _written(staged_output(path, force=force, protect=model.source), program, save_program)

    def check(self, subject: Subject, written: Path):
        from .importer import declaration, user_inputs
        from ...numeric.torch_ref import check_programs

        from ...numeric.executorch_run import check_executorch, installed

        src = subject.model.aten
        settings = replace(subject.settings, record=False)
        choices = self.choices(subject.model, settings.not_one)
        args = (src.original, declaration(subject.model), user_inputs(src.program), written, settings)
        result = check_programs(*args, dims=subject.dims, inputs=subject.given, choices=choices)
        if result.ok:  # and as ExecuTorch deploys it, where installed
            et = result.executorch = check_executorch(*args, dims=subject.dims, inputs=subject.given,
                                                      choices=choices)
            if not et.ran and installed():  # (without the extra, the report alone says so)
                result.notes.append(f"the check on ExecuTorch did not run: {et.error}")
        return result

    def choices(self, model: Model, not_one: bool) -> Dict[str, list]:
        """Per symbol, the sizes the check binds it to: the usual ones (a small size and
        1) that its range takes, else the bounds of its range (``Dim('time', min=37)``:
        37), so that every binding is one the program accepts."""
        from .onnx_export import TorchSource, dim_ranges
        from ...numeric.inputs import SMALL
        from ...numeric.search import sizes_in_range

        usual = [SMALL] if not_one else [SMALL, 1]
        out = {}
        for key, (lo, hi) in dim_ranges(TorchSource(model.aten.program, None)).items():
            inside = [n for n in usual if n >= lo and (hi is None or n <= hi)]
            out[key] = inside or sizes_in_range(lo, hi) or [lo]
        return out

    def sides(self, subject: Subject, written: Path) -> Sides:
        return Sides(self, written, subject.path, subject.model.graph)


class _written:
    """``staged_output``'s context with the program saved into its temporary path."""

    def __init__(self, staged, program, save):
        self.staged, self.program, self.save = staged, program, save

    def __enter__(self):
        s = self.staged.__enter__()
        try:
            self.save(self.program, s.path)
        except BaseException:
            self.staged.__exit__(None, None, None)
            raise
        return s

    def __exit__(self, *exc):
        return self.staged.__exit__(*exc)


def check_pair(original: Path, legalized: Path, settings, *, dims=None, inputs=None, trust: bool = False):
    """The library's check of two torch.export programs (a ``.pt2`` and ``legalize``'s
    legal form of it): both run in PyTorch at the same bindings, the original read by the
    safe loader unless ``trust``."""
    from .importer import declaration, load_pt2, user_inputs
    from ...numeric.torch_ref import check_programs

    model = load_pt2(original, trust=trust)
    return check_programs(model.aten.original, declaration(model), user_inputs(model.aten.program), legalized,
                          settings, dims=dims, inputs=inputs)
