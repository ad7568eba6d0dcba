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

import functools
import importlib
import inspect
import re
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
def read(obj: Any, table: Optional[str] = None) -> FbTable:
    """The ``FbTable`` of reader object ``obj``. Vectors of scalars are numpy views of
    the file's bytes, not copies."""
    table = table or type(obj).__name__
    out = FbTable(table)
    for key, f in _fields(table).items():
        if f.kind == "vector":
            if getattr(obj, f"{f.camel}IsNone")():
                continue
            out.fields[key] = getattr(obj, f"{f.camel}AsNumpy")()
        elif f.kind == "union":
            code = getattr(obj, f"{f.camel}Type")()
            if code == 0:
                continue
            member = union_class(_UNION_ENUMS.get(f.camel, f.camel), code)
            tab = getattr(obj, f.camel)()
            out.fields[f"{key}_type"] = code
            if member is not None and tab is not None:
                inner = getattr(_module(member), member)()
                inner.Init(tab.Bytes, tab.Pos)
                out.fields[key] = read(inner, member)
        elif hasattr(obj, f"{f.camel}Length"):
            if getattr(obj, f"{f.camel}IsNone")():
                continue
            items = [getattr(obj, f.camel)(j) for j in range(getattr(obj, f"{f.camel}Length")())]
            out.fields[key] = [x.decode("utf-8", "replace") if isinstance(x, bytes) else read(x) for x in items]
        else:
            value = getattr(obj, f.camel)()
            if value is None:
                continue
            if isinstance(value, bytes):
                value = value.decode("utf-8", "replace")
            elif hasattr(value, "_tab"):
                value = read(value)
            out.fields[key] = value
    return out


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
