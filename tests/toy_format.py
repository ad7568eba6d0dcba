"""A toy model kind, as a new format is added (tests/test_add_format.py): its record
(``KIND``: suffix ``.toy``, the signature ``TOY1``), its reader and its behaviour, all in
this one file. A ``.toy`` file is ``TOY1`` and then an ONNX model's bytes; its legal
form is written the same way."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Dict

from legalizer.kinds.base import Kind
from legalizer.kinds.behaviour import Format
from legalizer.model import Model

MAGIC = b"TOY1"


def read(path: Path, infer: bool, trust_pt2: bool) -> Model:
    import onnx

    from legalizer.kinds.onnx.importer import import_model

    model = import_model(onnx.load_model_from_string(path.read_bytes()[len(MAGIC):]), path.resolve().parent,
                         infer=infer)
    model.format, model.source = KIND.name, path
    return model


class ToyFormat(Format):
    name = "toy"
    title = "toy"
    written = "toy"

    def declared(self, model: Model):
        from legalizer.numeric.ort import declared_shapes

        return declared_shapes(model.proto)

    def input_types(self, model: Model) -> Dict[str, int]:
        return {vi.name: vi.type.tensor_type.elem_type for vi in model.proto.graph.input}

    @contextmanager
    def stage(self, model: Model, path: Path, *, force: bool = False):
        from legalizer.atomic_files import staged_output
        from legalizer.kinds.onnx.exporter import export_model

        data = MAGIC + export_model(model.graph, model.proto).SerializeToString()
        with staged_output(path, force=force, protect=model.source) as staged:
            staged.path.write_bytes(data)
            yield staged


KIND = Kind(name="toy", title="a toy model", suffixes=(".toy",), magic=lambda path, head: head.startswith(MAGIC),
            read="toy_format:read", formats=(("toy", "toy_format:ToyFormat"),), written=".toy")
