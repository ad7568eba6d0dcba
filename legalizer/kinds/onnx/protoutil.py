"""Small protobuf helpers shared by the ONNX reader and writer."""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Iterator, Optional, Tuple

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message


def is_repeated(f: FieldDescriptor) -> bool:
    rep = getattr(f, "is_repeated", None)  # protobuf >= 5.29; ``label`` is gone in 6.x
    return rep if rep is not None else f.label == FieldDescriptor.LABEL_REPEATED


def copy_fields(dst, src, skip=()) -> None:
    """Copy every set field of ``src`` but those named in ``skip`` into ``dst``."""
    for fd, val in src.ListFields():
        if fd.name not in skip:
            copy_field(dst, fd, val)


def copy_field(dst, fd, val) -> None:
    """Set field ``fd`` of ``dst`` to ``val`` (a value ``ListFields`` gave)."""
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


@lru_cache(maxsize=None)
def _types_model_class():
    """ModelProto of a schema that reads of a model only what shape inference adds:
    each graph's ``value_info`` and ``output`` entries, with their TypeProto left as
    the bytes it was serialized to (``type`` a bytes field: same wire format), and the
    nodes' subgraph attributes (``g``, ``graphs``), which hold more of the same. The
    other fields are not built into objects (upb keeps their bytes as they are)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    from onnx import AttributeProto, GraphProto, ModelProto, NodeProto, ValueInfoProto

    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="legalize_types.proto", package="legalize_types")
    one, many = F.LABEL_OPTIONAL, F.LABEL_REPEATED

    def message(cls, fields) -> None:
        """``cls``'s message with only ``fields``: (name, label, type: a message of
        this schema by name, or a scalar field type), numbered as onnx numbers them."""
        m = fdp.message_type.add(name=cls.DESCRIPTOR.name)
        for name, label, of in fields:
            f = m.field.add(name=name, number=cls.DESCRIPTOR.fields_by_name[name].number, label=label)
            if isinstance(of, str):
                f.type, f.type_name = F.TYPE_MESSAGE, f".legalize_types.{of}"
            else:
                f.type = of

    message(ModelProto, [("graph", one, "GraphProto")])
    message(GraphProto, [("node", many, "NodeProto"), ("output", many, "ValueInfoProto"),
                         ("value_info", many, "ValueInfoProto")])
    message(NodeProto, [("attribute", many, "AttributeProto")])
    message(AttributeProto, [("g", one, "GraphProto"), ("graphs", many, "GraphProto")])
    message(ValueInfoProto, [("name", one, F.TYPE_STRING), ("type", one, F.TYPE_BYTES)])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("legalize_types.ModelProto"))


def parse_types(serialized: bytes):
    """The types of a serialized ModelProto, as ``_types_model_class`` reads them (a
    fraction of the objects and memory of a whole ModelProto: a large model's inferred
    copy holds every node again, and a value_info entry for every value)."""
    return _types_model_class().FromString(serialized)


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


def _attribute(n, a) -> str:
    """How diagnostics name attribute ``a`` of NodeProto ``n`` (the node as
    ``Node.label`` does: its name, or its first output's)."""
    return f"node '{n.name or next((o for o in n.output if o), n.op_type)}' attribute '{a.name}'"


def model_tensors(proto, inits=None, nodes=None) -> Iterator[Tuple[str, Any]]:
    """(how to name it, TensorProto) for every tensor of a ModelProto that can hold
    data: initializers (sparse ones' values and indices too; ``inits``, the main graph's
    when they are held apart from ``proto``) and tensor attributes (``nodes``, the main
    graph's nodes held apart), in every graph, subgraph, function and training graph."""
    def of_nodes(nodes):
        for n in nodes:
            if not n.attribute:
                continue
            for a in n.attribute:
                if a.HasField("t"):
                    yield _attribute(n, a), a.t
                for t in a.tensors:
                    yield _attribute(n, a), t
                for st in ([a.sparse_tensor] if a.HasField("sparse_tensor") else []) + list(a.sparse_tensors):
                    yield _attribute(n, a), st.values
                    yield _attribute(n, a), st.indices
                if a.HasField("g"):
                    yield from of_graph(a.g)
                for g in a.graphs:
                    yield from of_graph(g)

    def of_graph(g):
        for t in g.initializer:
            yield f"initializer '{t.name}'", t
        for st in g.sparse_initializer:
            yield f"sparse initializer '{st.values.name}'", st.values
            yield f"sparse initializer '{st.values.name}'", st.indices
        yield from of_nodes(g.node)

    for t in inits or ():
        yield f"initializer '{t.name}'", t
    yield from of_nodes(nodes or ())
    yield from of_graph(proto.graph)
    for f in proto.functions:
        yield from of_nodes(f.node)
    for ti in proto.training_info:
        yield from of_graph(ti.initialization)
        yield from of_graph(ti.algorithm)


def invalid_string_field(msg: Message, where: str = "") -> Optional[str]:
    """The path of the first string field that is not valid UTF-8, else None.

    ONNX is proto2, so the parser accepts any bytes in a string field and the Python
    API then hands back ``bytes`` instead of ``str`` (names, op types, domains), which
    would break everything downstream. This walk is slow (a third of the import of a
    100,000-node model): the importer runs it only once a C-level check
    (``protoutil.strings_are_utf8``) has found a bad string, to name its field;
    tensor payloads are bytes fields and are not looked at."""
    for f, v in msg.ListFields():
        if f.type == FieldDescriptor.TYPE_STRING:
            if any(type(s) is bytes for s in (v if is_repeated(f) else (v,))):
                return where + f.name
        elif f.type == FieldDescriptor.TYPE_MESSAGE:
            for i, sub in enumerate(v if is_repeated(f) else (v,)):
                bad = invalid_string_field(sub, f"{where}{f.name}[{i}]." if is_repeated(f) else f"{where}{f.name}.")
                if bad is not None:
                    return bad
    return None
