"""Generic reading and writing of TFLite flatbuffer tables through the ``tflite``
package's generated code.

The package has readers and builder functions but no object API. Every table of the
schema follows one pattern (a reader class ``X`` with an accessor per field, and
``X.Start``/``X.Add<Field>``/``X.End`` builder functions in module ``tflite.X``), so one
reader turns any table into an ``FbTable`` (its type name and its fields by snake_case
schema name) and one writer turns it back. That keeps every field, present or future,
of every options table without a table per type: nothing of the model is lost on the
way through legalize.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import re
import struct
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

import flatbuffers
import numpy as np

FILE_IDENTIFIER = b"TFL3"
SCHEMA_VERSION = 3

# Union fields whose enum is not named after the field.
_UNION_ENUMS = {"Details": "QuantizationDetails", "ArraySegments": "SparseIndexVector",
                "ArrayIndices": "SparseIndexVector"}
# Vectors whose data must be aligned for the runtime to use it in place.
_ALIGN = {("Buffer", "Data"): 16}
_FLAGS = {"Bool": np.bool_, "Int8": np.int8, "Uint8": np.uint8, "Int16": np.int16, "Uint16": np.uint16,
          "Int32": np.int32, "Uint32": np.uint32, "Int64": np.int64, "Uint64": np.uint64,
          "Float32": np.float32, "Float64": np.float64}


def snake(camel: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", camel).lower()


@dataclass
class FbTable:
    """One table: ``type`` is the schema's table name (``Operator``, ``AddOptions``);
    ``fields`` maps snake_case field names to scalars, strings, numpy arrays (vectors
    of scalars), lists (of tables or strings) or nested ``FbTable``s. A union is two
    fields: ``<name>_type`` (the enum value) and ``<name>`` (the table)."""

    type: str
    fields: Dict[str, Any] = field(default_factory=dict)

    def get(self, key: str, default: Any = None) -> Any:
        return self.fields.get(key, default)


@dataclass(frozen=True)
class _Field:
    camel: str
    kind: str  # scalar | vector | union | other (table, string, vector of tables/strings)
    dtype: Any = None  # element dtype of a scalar vector


@functools.lru_cache(maxsize=None)
def _module(table: str):
    try:
        return importlib.import_module(f"tflite.{table}")
    except ModuleNotFoundError:
        raise KeyError(f"no table '{table}' in the tflite schema") from None


@functools.lru_cache(maxsize=None)
def _fields(table: str) -> Dict[str, _Field]:
    """The fields of ``table`` by snake name, from its builder functions
    (``<Table>Add<Field>``) and reader accessors."""
    mod = _module(table)
    reader = getattr(mod, table)
    prefix = f"{table}Add"
    camels = [n[len(prefix):] for n in dir(mod) if n.startswith(prefix)]
    out: Dict[str, _Field] = {}
    for camel in camels:
        if camel.endswith("Type") and camel[:-4] in camels:
            continue  # the enum half of a union: written with the union
        if f"{camel}Type" in camels:
            kind, dtype = "union", None
        elif hasattr(reader, f"{camel}AsNumpy"):
            src = inspect.getsource(getattr(reader, f"{camel}AsNumpy"))
            kind, dtype = "vector", _FLAGS[re.search(r"GetVectorAsNumpy\(flatbuffers\.number_types\.(\w+)Flags", src).group(1)]
        else:
            kind, dtype = "other", None
        out[snake(camel)] = _Field(camel, kind, dtype)
    return out


def union_class(enum_table: str, code: int) -> Optional[str]:
    """The table name of union member ``code`` of enum ``enum_table``."""
    return _enum_names(enum_table).get(code)


@functools.lru_cache(maxsize=None)
def _enum_names(enum_table: str) -> Dict[int, str]:
    cls = getattr(_module(enum_table), enum_table)
    return {v: k for k, v in vars(cls).items() if not k.startswith("_") and isinstance(v, int)}


@functools.lru_cache(maxsize=None)
def enum_value(enum_table: str, name: str) -> int:
    cls = getattr(_module(enum_table), enum_table)
    return getattr(cls, name)


def enum_name(enum_table: str, code: int) -> Optional[str]:
    return _enum_names(enum_table).get(code)


# ---- reading ------------------------------------------------------------------------
# The generated accessors cost about ten Python calls a field (flatbuffers' Table checks
# each number it is given), which made a 300k-op model a matter of minutes. So each
# field's place is read once from its accessor (the vtable slot, and what lies there),
# and a table is decoded from its vtable directly; a field whose accessor has another
# form is read through the accessor, as before.
_U8, _U16, _U32, _I32 = struct.Struct("<B"), struct.Struct("<H"), struct.Struct("<I"), struct.Struct("<i")


@dataclass(frozen=True)
class _Slot:
    key: str  # snake_case field name
    camel: str
    slot: int  # its offset in the vtable
    kind: str  # scalar | string | table | scalars | tables | strings | union | accessor
    unpack: Any = None  # scalar: struct.Struct
    cast: Any = None  # scalar: the Python type the accessor returns
    default: Any = None  # scalar: the accessor's value when the field is absent
    table: Optional[str] = None  # table, tables: the element's table; union: its enum
    dtype: Any = None  # scalars: numpy dtype
    type_slot: int = 0  # union: the slot of its enum


def _source(reader, name: str) -> str:
    return inspect.getsource(getattr(reader, name))


def _slot_of(table: str, key: str, f: _Field) -> _Slot:
    reader = getattr(_module(table), table)
    src = _source(reader, f.camel)
    slot = int(re.search(r"Offset\((\d+)\)", src).group(1))
    obj = re.search(r"obj = (\w+)\(\)", src)
    if f.kind == "union":
        type_slot = int(re.search(r"Offset\((\d+)\)", _source(reader, f"{f.camel}Type")).group(1))
        return _Slot(key, f.camel, slot, "union", table=_UNION_ENUMS.get(f.camel, f.camel), type_slot=type_slot)
    if f.kind == "vector":
        return _Slot(key, f.camel, slot, "scalars", dtype=np.dtype(f.dtype).newbyteorder("<"))
    if hasattr(reader, f"{f.camel}Length"):
        if obj and "Indirect" in src:
            return _Slot(key, f.camel, slot, "tables", table=obj.group(1))
        if "String(" in src:
            return _Slot(key, f.camel, slot, "strings")
    elif "self._tab.String(o + self._tab.Pos)" in src:
        return _Slot(key, f.camel, slot, "string")
    elif obj and "Indirect(o + self._tab.Pos)" in src:
        return _Slot(key, f.camel, slot, "table", table=obj.group(1))
    else:
        # only the plain template: "return [bool(]self._tab.Get(...)", then "return <literal>"
        scalar = re.search(r"return (?:bool\()?self\._tab\.Get\(flatbuffers\.number_types\.(\w+)Flags,"
                           r" o \+ self\._tab\.Pos\)", src)
        default = re.search(r"\n\s*return (-?[0-9.]+|True|False)\s*$", src)
        if scalar and default:
            flags = getattr(flatbuffers.number_types, f"{scalar.group(1)}Flags")
            return _Slot(key, f.camel, slot, "scalar", unpack=struct.Struct("<" + flags.packer_type.format[-1]),
                         cast=flags.py_type, default=ast.literal_eval(default.group(1)))
    return _Slot(key, f.camel, slot, "accessor")


@functools.lru_cache(maxsize=None)
def _layout(table: str) -> Tuple[_Slot, ...]:
    return tuple(_slot_of(table, key, f) for key, f in _fields(table).items())


def _string(buf, at: int) -> str:
    at += _U32.unpack_from(buf, at)[0]
    n = _U32.unpack_from(buf, at)[0]
    return bytes(buf[at + 4:at + 4 + n]).decode("utf-8", "replace")


def _read_at(buf, pos: int, table: str) -> FbTable:
    """The ``FbTable`` of the ``table`` at ``pos`` of ``buf``, from its vtable."""
    vt = pos - _I32.unpack_from(buf, pos)[0]
    vt_len = _U16.unpack_from(buf, vt)[0]
    out = FbTable(table)
    fields = out.fields
    for s in _layout(table):
        o = _U16.unpack_from(buf, vt + s.slot)[0] if s.slot < vt_len else 0
        kind = s.kind
        if kind == "scalar":
            fields[s.key] = s.cast(s.unpack.unpack_from(buf, pos + o)[0]) if o else s.default
        elif kind == "accessor":
            reader = getattr(_module(table), table)()
            reader.Init(buf, pos)
            _read_field(reader, s.key, _fields(table)[s.key], fields)
        elif kind == "union":
            t = _U16.unpack_from(buf, vt + s.type_slot)[0] if s.type_slot < vt_len else 0
            code = _U8.unpack_from(buf, pos + t)[0] if t else 0
            if code == 0:
                continue
            fields[f"{s.key}_type"] = code
            member = union_class(s.table, code)
            if member is not None and o:
                at = pos + o
                fields[s.key] = _read_at(buf, at + _U32.unpack_from(buf, at)[0], member)
        elif not o:
            continue
        elif kind == "string":
            fields[s.key] = _string(buf, pos + o)
        elif kind == "table":
            at = pos + o
            fields[s.key] = _read_at(buf, at + _U32.unpack_from(buf, at)[0], s.table)
        else:
            at = pos + o
            at += _U32.unpack_from(buf, at)[0]
            n = _U32.unpack_from(buf, at)[0]
            if kind == "scalars":
                fields[s.key] = np.frombuffer(buf, s.dtype, n, at + 4)
            elif kind == "tables":
                items = (at + 4 + 4 * j for j in range(n))
                fields[s.key] = [_read_at(buf, e + _U32.unpack_from(buf, e)[0], s.table) for e in items]
            else:
                fields[s.key] = [_string(buf, at + 4 + 4 * j) for j in range(n)]
    return out


def read(obj: Any, table: Optional[str] = None) -> FbTable:
    """The ``FbTable`` of reader object ``obj``. Vectors of scalars are numpy views of
    the file's bytes, not copies."""
    return _read_at(obj._tab.Bytes, obj._tab.Pos, table or type(obj).__name__)


def read_by_accessors(obj: Any, table: Optional[str] = None) -> FbTable:
    """``read`` through the generated accessors alone (the reference the fast path is
    tested against)."""
    table = table or type(obj).__name__
    out = FbTable(table)
    for key, f in _fields(table).items():
        _read_field(obj, key, f, out.fields)
    return out


def _read_field(obj: Any, key: str, f: _Field, fields: Dict[str, Any]) -> None:
    """Field ``key`` of reader object ``obj``, through its accessor, into ``fields``
    (nothing when absent)."""
    if f.kind == "vector":
        if not getattr(obj, f"{f.camel}IsNone")():
            fields[key] = getattr(obj, f"{f.camel}AsNumpy")()
    elif f.kind == "union":
        code = getattr(obj, f"{f.camel}Type")()
        if code == 0:
            return
        member = union_class(_UNION_ENUMS.get(f.camel, f.camel), code)
        tab = getattr(obj, f.camel)()
        fields[f"{key}_type"] = code
        if member is not None and tab is not None:
            inner = getattr(_module(member), member)()
            inner.Init(tab.Bytes, tab.Pos)
            fields[key] = read_by_accessors(inner, member)
    elif hasattr(obj, f"{f.camel}Length"):
        if not getattr(obj, f"{f.camel}IsNone")():
            items = [getattr(obj, f.camel)(j) for j in range(getattr(obj, f"{f.camel}Length")())]
            fields[key] = [x.decode("utf-8", "replace") if isinstance(x, bytes) else read_by_accessors(x) for x in items]
    else:
        value = getattr(obj, f.camel)()
        if value is None:
            return
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        elif hasattr(value, "_tab"):
            value = read_by_accessors(value)
        fields[key] = value


# ---- writing ------------------------------------------------------------------------
def write(builder: flatbuffers.Builder, t: FbTable) -> int:
    """Build ``t`` (children first, as flatbuffers requires); return its offset."""
    mod = _module(t.type)
    fields = _fields(t.type)
    unknown = set(t.fields) - set(fields) - {f"{k}_type" for k, f in fields.items() if f.kind == "union"}
    if unknown:
        raise KeyError(f"table {t.type} has no field {', '.join(sorted(unknown))}")
    offsets: Dict[str, int] = {}
    for key, f in fields.items():
        value = t.fields.get(key)
        if value is None:
            continue
        if f.kind == "vector":
            offsets[key] = _scalar_vector(builder, mod, t.type, f, value)
        elif f.kind == "union" or isinstance(value, FbTable):
            offsets[key] = write(builder, value)
        elif isinstance(value, str):
            offsets[key] = builder.CreateString(value)
        elif isinstance(value, list):
            items = [builder.CreateString(x) if isinstance(x, str) else write(builder, x) for x in value]
            getattr(mod, f"{t.type}Start{f.camel}Vector")(builder, len(items))
            for off in reversed(items):
                builder.PrependUOffsetTRelative(off)
            offsets[key] = builder.EndVector()
    getattr(mod, f"{t.type}Start")(builder)
    for key, f in fields.items():
        if f.kind == "union":
            code = t.fields.get(f"{key}_type")
            if code:
                getattr(mod, f"{t.type}Add{f.camel}Type")(builder, code)
        value = t.fields.get(key)
        if value is None:
            continue
        add = getattr(mod, f"{t.type}Add{f.camel}")
        add(builder, offsets[key] if key in offsets else value)
    return getattr(mod, f"{t.type}End")(builder)


def _scalar_vector(builder: flatbuffers.Builder, mod, table: str, f: _Field, value) -> int:
    arr = np.ascontiguousarray(np.asarray(value, dtype=f.dtype)).reshape(-1)
    align = _ALIGN.get((table, f.camel))
    if align is None:
        return builder.CreateNumpyVector(arr)
    data = arr.view(np.uint8)
    builder.StartVector(1, data.size, align)
    builder.head = builder.head - data.size
    builder.Bytes[builder.head:builder.head + data.size] = data.tobytes()
    return builder.EndVector()


def serialize(model: FbTable, initial_size: int = 1024) -> bytes:
    """The bytes of a ``Model`` table, with the TFLite file identifier."""
    builder = flatbuffers.Builder(initial_size)
    builder.Finish(write(builder, model), file_identifier=FILE_IDENTIFIER)
    return bytes(builder.Output())


def builtin_code(name: str) -> int:
    return enum_value("BuiltinOperator", name)


def builtin_name(code: int) -> Optional[str]:
    return enum_name("BuiltinOperator", code)


def options_type(options_table: Optional[str]) -> Tuple[str, int]:
    """Which union (``builtin_options`` or ``builtin_options_2``) holds options table
    ``options_table``, and its code there."""
    if options_table is None:
        return "builtin_options", 0
    for union in ("BuiltinOptions", "BuiltinOptions2"):
        try:
            return snake(union), enum_value(union, options_table)
        except (AttributeError, KeyError):
            continue
    raise KeyError(f"no options table '{options_table}' in the tflite schema")
