"""Small protobuf helpers shared by the ONNX reader and writer."""

from __future__ import annotations

from functools import lru_cache
from typing import Optional

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError


def is_repeated(f: FieldDescriptor) -> bool:
    rep = getattr(f, "is_repeated", None)  # protobuf >= 5.29; ``label`` is gone in 6.x
    return rep if rep is not None else f.label == FieldDescriptor.LABEL_REPEATED


def copy_fields(dst, src, skip=()) -> None:
    """Copy every set field of ``src`` but those named in ``skip`` into ``dst``."""
    for fd, val in src.ListFields():
        if fd.name in skip:
            continue
        if is_repeated(fd):
            getattr(dst, fd.name).extend(val)
        elif fd.type == fd.TYPE_MESSAGE:
            getattr(dst, fd.name).CopyFrom(val)
        else:
            setattr(dst, fd.name, val)


@lru_cache(maxsize=None)
def _utf8_checking_model_class():
    """ModelProto of a proto3 copy of onnx's schema (package ``legalize_utf8``): proto3
    string fields are UTF-8 checked by the parser itself, in C, where onnx's proto2
    schema takes any bytes."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    from onnx import onnx_ml_pb2

    fdp = descriptor_pb2.FileDescriptorProto()
    onnx_ml_pb2.DESCRIPTOR.CopyToProto(fdp)
    package = fdp.package
    fdp.name, fdp.package, fdp.syntax = "legalize_utf8_check.proto", "legalize_utf8", "proto3"

    def fix(messages) -> None:
        for m in messages:
            for f in m.field:
                f.ClearField("default_value")  # proto3 has none
                if f.label == f.LABEL_REQUIRED:
                    f.label = f.LABEL_OPTIONAL
                if f.type_name.startswith(f".{package}."):
                    f.type_name = ".legalize_utf8." + f.type_name[len(package) + 2:]
            fix(m.nested_type)

    fix(fdp.message_type)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("legalize_utf8.ModelProto"))


def strings_are_utf8(serialized: bytes) -> Optional[bool]:
    """Whether every string field of a serialized ModelProto is valid UTF-8, decided by
    one C-level parse against the proto3 copy of the schema (bytes fields, tensor
    payloads among them, are not looked at). None if that schema cannot be built."""
    try:
        cls = _utf8_checking_model_class()
    except Exception:  # noqa: BLE001 - an unforeseen protobuf or onnx release: the caller checks in Python
        return None
    try:
        cls.FromString(serialized)
    except DecodeError:
        return False
    return True
