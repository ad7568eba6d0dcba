"""Small protobuf helpers shared by the ONNX reader and writer."""

from __future__ import annotations

from google.protobuf.descriptor import FieldDescriptor


def is_repeated(f: FieldDescriptor) -> bool:
    rep = getattr(f, "is_repeated", None)  # protobuf >= 5.29; ``label`` is gone in 6.x
    return rep if rep is not None else f.label == FieldDescriptor.LABEL_REPEATED
