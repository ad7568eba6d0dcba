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
import dataclasses
import functools
import importlib
import linecache
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
# Vectors of scalars that rarely repeat (an op's own tensors): not looked up to be shared.
_UNSHARED = {("Operator", "Inputs"), ("Operator", "Outputs"), ("Operator", "Intermediates")}
# Vectors whose data must be aligned for the runtime to use it in place.
_ALIGN = {("Buffer", "Data"): 16}
_FLAGS = {"Bool": np.bool_, "Int8": np.int8, "Uint8": np.uint8, "Int16": np.int16, "Uint16": np.uint16,
          "Int32": np.int32, "Uint32": np.uint32, "Int64": np.int64, "Uint64": np.uint64,
          "Float32": np.float32, "Float64": np.float64}


def source_of(fn) -> str:
    """The source of a generated function (the ``tflite`` package's): its ``def`` line
    and the lines indented under it, as ``inspect.getsource`` gives them but from the
    module's lines read once (getsource tokenizes the file anew each time: 30 ms of
    every run for the tables a model has)."""
    code = fn.__code__
    lines = linecache.getlines(code.co_filename)
    start = code.co_firstlineno - 1
    indent = len(lines[start]) - len(lines[start].lstrip())
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or len(lines[end]) - len(lines[end].lstrip()) > indent):
        end += 1
    while end > start + 1 and not lines[end - 1].strip():
        end -= 1
    return "".join(lines[start:end])

def snake(camel: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", camel).lower()


@dataclass(slots=True)
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
            src = source_of(getattr(reader, f"{camel}AsNumpy"))
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
    return source_of(getattr(reader, name))


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


_SCALAR, _DEFAULT, _STRING, _TABLE, _SCALARS, _TABLES, _STRINGS, _UNION, _ACCESSOR, _SCALAR_AT = range(10)


def _plan_at(table: str, buf, vt: int) -> Tuple:
    """How to read a ``table`` whose vtable is at ``vt``: every table that shares a
    vtable has its fields at the same places, so the vtable is read once for them all.
    Returns the struct of its scalars, each from the table's start (one unpack for all),
    and the steps, in the layout's order (the dict's order, as the accessors give it):
    (key, what, its place in the table or the scalar's index, what else it needs)."""
    vt_len = _U16.unpack_from(buf, vt)[0]
    scalars, steps = [], []
    for s in _layout(table):
        o = _U16.unpack_from(buf, vt + s.slot)[0] if s.slot < vt_len else 0
        kind = s.kind
        if kind == "scalar":
            if o:
                steps.append([s.key, _SCALAR, len(scalars), None])
                scalars.append((o, s.unpack.format[-1], len(steps) - 1))
            else:
                steps.append((s.key, _DEFAULT, 0, s.default))
        elif kind == "accessor":
            steps.append((s.key, _ACCESSOR, 0, None))
        elif kind == "union":
            t = _U16.unpack_from(buf, vt + s.type_slot)[0] if s.type_slot < vt_len else 0
            if t:  # (no type: nothing, whatever the member's slot holds)
                steps.append((s.key, _UNION, (t, o), s.table))
        elif o:
            what = {"string": _STRING, "table": _TABLE, "scalars": _SCALARS, "tables": _TABLES}.get(kind, _STRINGS)
            steps.append((s.key, what, o, s.dtype if kind == "scalars" else s.table))
    fmt, at, k = "<", 0, 0
    for o, code, step in sorted(scalars):
        if o < at:  # (a corrupt vtable: fields that overlap are read one by one)
            steps[step][1:] = _SCALAR_AT, o, struct.Struct("<" + code)
            continue
        fmt += "x" * (o - at) + code
        at = o + struct.calcsize("<" + code)
        steps[step][2] = k  # its index among the unpacked values, in offset order
        k += 1
    steps = tuple(tuple(x) for x in steps)
    return (struct.Struct(fmt) if k else None), steps


def _reader_of(table: str, st, steps) -> Any:
    """A function that reads a ``table`` of one vtable (``_plan_at``'s ``st`` and
    ``steps``): the steps as straight-line code, compiled once per vtable (a loop over
    them, asking each step's kind, was most of a large model's read)."""
    env = {"FbTable": FbTable, "ST": st, "U8": _U8, "U32": _U32, "string": _string, "read_at": _read_at,
           "frombuffer": np.frombuffer, "union_class": union_class, "by_accessor": _by_accessor}
    lines = ["def read(buf, pos, plans):", "    f = {}"]
    if st is not None:
        lines.append("    v = ST.unpack_from(buf, pos)")
    for i, (key, what, o, arg) in enumerate(steps):
        k = repr(key)
        if isinstance(arg, str):
            a = repr(arg)
        else:  # (a default, a dtype, a struct: by name)
            env[f"a{i}"] = arg
            a = f"a{i}"
        if what == _SCALAR:
            lines.append(f"    f[{k}] = v[{o}]")
        elif what == _DEFAULT:
            lines.append(f"    f[{k}] = {a}")
        elif what == _SCALAR_AT:
            lines.append(f"    f[{k}] = {a}.unpack_from(buf, pos + {o})[0]")
        elif what == _STRING:
            lines.append(f"    f[{k}] = string(buf, pos + {o})")
        elif what == _TABLE:
            lines.append(f"    at = pos + {o}")
            lines.append(f"    f[{k}] = read_at(buf, at + U32.unpack_from(buf, at)[0], {a}, plans)")
        elif what == _UNION:
            t, o = o
            lines += [f"    code = U8.unpack_from(buf, pos + {t})[0]",
                      "    if code:",
                      f"        f[{repr(key + '_type')}] = code"]
            if o:
                lines += [f"        member = union_class({a}, code)",
                          "        if member is not None:",
                          f"            at = pos + {o}",
                          f"            f[{k}] = read_at(buf, at + U32.unpack_from(buf, at)[0], member, plans)"]
        elif what == _ACCESSOR:
            lines.append(f"    by_accessor(buf, pos, {repr(table)}, {k}, f)")
        else:
            lines += [f"    at = pos + {o}", "    at += U32.unpack_from(buf, at)[0]", "    n = U32.unpack_from(buf, at)[0]"]
            if what == _SCALARS:
                lines.append(f"    f[{k}] = frombuffer(buf, {a}, n, at + 4)")
            elif what == _TABLES:
                lines.append(f"    f[{k}] = [read_at(buf, e + U32.unpack_from(buf, e)[0], {a}, plans)"
                             " for e in range(at + 4, at + 4 + 4 * n, 4)]")
            else:
                lines.append(f"    f[{k}] = [string(buf, e) for e in range(at + 4, at + 4 + 4 * n, 4)]")
    lines.append(f"    return FbTable({repr(table)}, f)")
    exec(compile("\n".join(lines), f"<tflite_schema reader of {table}>", "exec"), env)
    return env["read"]


def _by_accessor(buf, pos: int, table: str, key: str, fields: Dict[str, Any]) -> None:
    reader = getattr(_module(table), table)()
    reader.Init(buf, pos)
    _read_field(reader, key, _fields(table)[key], fields)


def _read_at(buf, pos: int, table: str, plans: Dict) -> FbTable:
    """The ``FbTable`` of the ``table`` at ``pos`` of ``buf``, from its vtable
    (``plans``: the reader ``_reader_of`` made for each (table, vtable) of this buffer)."""
    vt = pos - _I32.unpack_from(buf, pos)[0]
    reader = plans.get((table, vt))
    if reader is None:
        st, steps = _plan_at(table, buf, vt)
        # equal layouts (in this file or another) share one compiled reader
        key = (table, st.format if st is not None else None,
               *[(k, w, o, a.format if isinstance(a, struct.Struct) else a) for k, w, o, a in steps])
        layouts = plans.setdefault(None, set())  # (this file's distinct layouts)
        layouts.add(key)
        if len(layouts) > MAX_LAYOUTS:  # a writer shares its vtables: a file of thousands is crafted
            raise ValueError(f"more than {MAX_LAYOUTS} distinct table layouts")
        reader = _READERS.get(key)
        if reader is None:
            if len(_READERS) >= _MAX_READERS:  # (a long-lived process fed crafted files: bounded)
                _READERS.clear()
            reader = _READERS[key] = _reader_of(table, st, steps)
        plans[table, vt] = reader
    return reader(buf, pos, plans)


# A table's layout -> its compiled reader. The code compiled holds only the schema's
# names and the vtable's integer offsets: nothing a file says becomes code.
_READERS: Dict[Tuple, Any] = {}
_MAX_READERS = 4096
# The distinct layouts one file may have: each costs a compile (~0.15 ms, ~2 KB), and a
# crafted file can make one every ~16 bytes; the samples and the corpus have under 100.
MAX_LAYOUTS = 2048


def read(obj: Any, table: Optional[str] = None) -> FbTable:
    """The ``FbTable`` of reader object ``obj``. Vectors of scalars are numpy views of
    the file's bytes, not copies."""
    return _read_at(obj._tab.Bytes, obj._tab.Pos, table or type(obj).__name__, {})


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
# The generated ``<Table>Add<Field>`` functions each call one builder method with the
# field's vtable slot and default; a 300k-op model made millions of those calls through
# two layers of functions. So each field's slot, flags and default are read once from
# its function, and the builder's own methods are called with them. A table's vector of
# tables (or strings) is written at once, and what repeats (small vectors of scalars,
# tables of scalars alone: a shape [1], an empty AddOptions) is written once and shared.
@dataclass(frozen=True)
class _Put:
    key: str
    slot: int  # the field's index among the table's (StartObject's count)
    kind: str  # scalar | vector | ref (table, union, string, vector of tables/strings) | call
    flags: Any = None  # scalar: flatbuffers.number_types flags
    default: Any = None  # scalar: the schema's default (the builder leaves it out)
    dtype: Any = None  # vector: the element dtype
    align: Optional[int] = None  # vector: the data's alignment, where it needs more
    add: Any = None  # call: the generated function, for a field of another form
    width: int = 0  # scalar: its bytes
    code: str = ""  # scalar, vector: the struct code of one
    shared: bool = False  # vector: a short one is written once
    order: int = 0  # its place in the schema's order of the table's fields


@dataclass(frozen=True)
class _Plan:
    count: int
    puts: Dict[str, _Put]  # by key
    shareable: bool  # scalars alone: equal tables may be one


_STRUCT = {("b", 1): "?", ("i", 1): "b", ("u", 1): "B", ("i", 2): "h", ("u", 2): "H", ("i", 4): "i", ("u", 4): "I",
           ("i", 8): "q", ("u", 8): "Q", ("f", 4): "f", ("f", 8): "d"}  # numpy kind and size -> struct code
_SLOT_CALL = re.compile(r"builder\.Prepend(\w+?)Slot\((\d+), .*, ([^,()]+)\)\s*$")


def _put(table: str, key: str, camel: str, f_kind: str, dtype=None) -> _Put:
    add = getattr(_module(table), f"{table}Add{camel}")
    m = _SLOT_CALL.search(source_of(add))
    if m is not None and m.group(1) == "UOffsetTRelative":
        if f_kind == "vector":
            dt = np.dtype(dtype)
            return _Put(key, int(m.group(2)), "vector", dtype=dt, align=_ALIGN.get((table, camel)),
                        width=dt.itemsize, code=_STRUCT[dt.kind, dt.itemsize], shared=(table, camel) not in _UNSHARED)
        return _Put(key, int(m.group(2)), "ref")
    flags = getattr(flatbuffers.number_types, f"{m.group(1)}Flags", None) if m is not None else None
    if flags is not None and f_kind not in ("vector", "union"):
        try:
            default = ast.literal_eval(m.group(3))
        except (ValueError, SyntaxError):
            default = None
        if isinstance(default, (int, float, bool)):
            return _Put(key, int(m.group(2)), "scalar", flags=flags, default=default, width=flags.bytewidth,
                        code=flags.packer_type.format[-1])
    return _Put(key, -1, "call", add=add)


@functools.lru_cache(maxsize=None)
def _plan(table: str) -> _Plan:
    mod = _module(table)
    count = int(re.search(r"StartObject\((\d+)\)", source_of(getattr(mod, f"{table}Start"))).group(1))
    puts = {}
    for key, f in _fields(table).items():
        if f.kind == "union":
            puts[f"{key}_type"] = _put(table, f"{key}_type", f"{f.camel}Type", "scalar")
        puts[key] = _put(table, key, f.camel, f.kind, f.dtype)
    puts = {k: dataclasses.replace(p, order=i) for i, (k, p) in enumerate(puts.items())}
    return _Plan(count, puts, all(p.kind == "scalar" for p in puts.values()))


class _Writer:
    """One flatbuffer's writing: the builder and what it already holds."""

    def __init__(self, builder: flatbuffers.Builder, by_builder: bool = False):
        self.b = builder
        self.vectors: Dict[Tuple, int] = {}  # a small vector of scalars -> its offset
        self.tables: Dict[Tuple, int] = {}  # a table of scalars alone -> its offset
        self.plans: Dict[str, _Plan] = {}
        self.orders: Dict[Tuple, list] = {}  # (type, its field names) -> their puts in schema order
        self.by_builder = by_builder

    def table(self, t: FbTable) -> int:
        fields = t.fields
        if not self.by_builder:
            names = (t.type, *fields)
            write = _WRITERS.get(names)
            if write is None:
                write = _writer_of(names)
            if write is not None:
                return write(self, fields)
        return self.generic(t)

    def generic(self, t: FbTable) -> int:
        """``table``'s work field by field, each table through the builder's
        ``StartObject``/``EndObject``: the reference the compiled writers (``_writer_of``)
        are tested against, and the way for a table with a field of another form (a
        call; none in today's schema)."""
        plan = self.plans.get(t.type)
        if plan is None:
            plan = self.plans[t.type] = _plan(t.type)
        fields = t.fields
        names = (t.type, *fields)
        ordered = self.orders.get(names)
        if ordered is None:
            ordered = self.orders[names] = _ordered(names)
        # (the builder leaves a scalar at its default out)
        present = [(p, fields[p.key]) for p in ordered
                   if fields[p.key] is not None and (p.kind != "scalar" or fields[p.key] != p.default)]
        key = None
        if plan.shareable:
            key = (t.type, *[(p.order, float(v).hex() if isinstance(v, (float, np.floating)) else v)
                             for p, v in present])
            hit = self.tables.get(key)
            if hit is not None:
                return hit
        b = self.b
        # each present field's value: a scalar's own, or its target's offset
        offs, calls = [], []
        for p, value in present:
            kind = p.kind
            if kind == "scalar":
                offs.append(value)
                continue
            if kind == "vector":
                off = self.scalars(p, value)
            elif kind == "call" and not isinstance(value, (FbTable, str, list)):
                calls.append((p.add, value))
                off = None
            else:
                off = self.ref(t.type, p, value)
            offs.append(off)
        b.StartObject(plan.count)
        placed = _placed(present, offs)
        if placed:
            self.place(placed)
        for add, value in calls:
            add(b, value)
        off = b.EndObject()
        if key is not None:
            self.tables[key] = off
        return off

    def ref(self, t: str, p: _Put, value) -> int:
        """The offset of a field's target: a table, a string, or a vector of either."""
        if isinstance(value, FbTable):
            return self.table(value)
        if isinstance(value, str):
            return self.string(value)
        if isinstance(value, list):
            return self.offsets([self.string(x) if isinstance(x, str) else self.table(x) for x in value])
        raise TypeError(f"table {t}: field {p.key} holds a {type(value).__name__}")

    def object(self, layout: Tuple, offs: list, start: int) -> int:
        """The table whose fields' values (or targets' offsets) are ``offs``, laid out as
        ``layout`` says (``_object_layout``), in one write: byte for byte what
        ``StartObject``, ``place`` and ``EndObject`` make of it (its vtable shared with an
        equal one already written, as ``WriteVtable`` does). ``start``: the offset from
        the buffer's end it starts at."""
        b = self.b
        fmt, packing, size, vt_key, vt_bytes, align = layout
        room = size + len(vt_bytes)
        if b.head <= room:
            b.Prep(1, room)  # grow only (alignment 1 pads nothing)
        if align > b.minalign:
            b.minalign = align
        head = b.head - size
        obj = start + size  # the object's offset from the buffer's end
        values = [start + rel - offs[j] if ref else offs[j] for j, ref, rel in packing]
        vt = b.vtables.get(vt_key)
        if vt is None:
            b.Bytes[head - len(vt_bytes):head] = vt_bytes
            b.vtables[vt_key] = obj + len(vt_bytes)
            fmt.pack_into(b.Bytes, head, len(vt_bytes), *values)
            b.head = head - len(vt_bytes)
        else:
            fmt.pack_into(b.Bytes, head, vt - obj, *values)
            b.head = head
        return obj

    def place(self, placed) -> None:
        """The fields of the table being built, in one write: widest first from its end
        (so that each lies on its width with no padding between), each slot noted in the
        builder's vtable, as ``Prepend<Type>Slot`` would. ``placed`` as ``table`` sorts it
        (widths negated)."""
        b = self.b
        b.Prep(-placed[0][0], 0)
        size = -sum([x[0] for x in placed])
        b.Prep(1, size)  # room only: aligned already
        end = b.Offset()  # the first field ends here, counted from the buffer's end
        codes, values, vtable = [], [], b.current_vtable
        for width, _, code, value, slot, target, _ in placed:
            end -= width
            vtable[slot] = end
            codes.append(code)
            values.append(value if target is None else end - target)  # an offset: from the field
        b.head -= size
        codes.reverse()
        values.reverse()
        struct.pack_into("<" + "".join(codes), b.Bytes, b.head, *values)

    def scalars(self, p: _Put, value) -> int:
        """A vector of scalars (a numpy array or a list); a small one written once."""
        b = self.b
        if p.align is not None or (isinstance(value, np.ndarray) and value.nbytes > 64):
            arr = np.ascontiguousarray(value, p.dtype).reshape(-1)
            data = arr.view(np.uint8)
            b.StartVector(arr.itemsize, arr.size, max(p.align or 1, arr.itemsize))
            b.head = b.head - data.size
            b.Bytes[b.head:b.head + data.size] = data.tobytes()
            return b.EndVector()
        if isinstance(value, np.ndarray):
            value = value.astype(p.dtype, copy=False).reshape(-1).tolist()
        n = len(value)
        key = (p.code, *value) if p.shared and n * p.width <= 64 else None
        if key is not None:
            off = self.vectors.get(key)
            if off is not None:
                return off
        off = self.packed(p, value, n) if p.width <= 4 else None
        if off is None:
            try:
                data = struct.pack(f"<{n}{p.code}", *value)
            except struct.error:  # a list of another type than the field's: numpy casts it
                data = np.asarray(value, p.dtype).tobytes()
            off = self.vector(data, n, p.width)
        if key is not None:
            self.vectors[key] = off
        return off

    def packed(self, p: _Put, value, n: int) -> Optional[int]:
        """``vector``'s work for a list of ``n`` scalars of at most 4 bytes where the
        buffer has room: its length and its elements packed in place at once. None
        where it has no room, or where the list is not of the field's type (the caller
        writes it then)."""
        b = self.b
        size = n * p.width
        pad = (b.head - len(b.Bytes) - size) & 3
        if b.head < pad + size + 8:
            return None
        head = b.head - pad - size - 4
        fmt = _PACKED.get((p.code, n))
        if fmt is None:
            fmt = struct.Struct(f"<I{n}{p.code}")
            if n <= 64:  # (the lengths an op's operands come in: the cache stays small)
                _PACKED[p.code, n] = fmt
        try:
            fmt.pack_into(b.Bytes, head, n, *value)
        except struct.error:
            return None
        if pad:
            b.Bytes[b.head - pad:b.head] = bytes(pad)  # Pad's zeros
        if b.minalign < 4:
            b.minalign = 4
        b.head = head
        return len(b.Bytes) - head

    def vector(self, data: bytes, n: int, align: int) -> int:
        """A vector of ``n`` elements whose bytes are ``data``: its length and its bytes
        in one write, where ``StartVector`` and ``EndVector`` would put them."""
        b = self.b
        size = len(data)
        pad = (b.head - len(b.Bytes) - size) & 3  # Prep(4, size): the length aligned right before the data
        if align > 4 or b.head < pad + size + 8:
            b.Prep(4, size)  # (and room for both)
            if align > 4:
                b.Prep(align, size)
        else:
            if pad:
                b.Bytes[b.head - pad:b.head] = bytes(pad)  # Pad's zeros
                b.head -= pad
            if b.minalign < 4:
                b.minalign = 4
        head = b.head - size - 4
        _U32.pack_into(b.Bytes, head, n)
        b.Bytes[head + 4:head + 4 + size] = data
        b.head = head
        return b.Offset()

    def string(self, text: str) -> int:
        """``CreateString``'s layout (length, UTF-8 bytes, a zero) in one write."""
        data = text.encode("utf-8")
        return self.vector(data + b"\0", len(data), 4)

    def offsets(self, offs) -> int:
        """A vector of the tables (or strings) at ``offs``, in one write: each element
        is its target's offset from the element itself, as PrependUOffsetTRelative
        writes it."""
        b = self.b
        n = len(offs)
        b.StartVector(4, n, 4)
        head = b.head - 4 * n
        b.head = head
        here = len(b.Bytes) - head - 4 * np.arange(n, dtype=np.int64)  # each element's offset from the end
        b.Bytes[head:head + 4 * n] = (here - np.asarray(offs, np.int64)).astype("<u4").tobytes()
        b.vectorNumElems = n
        return b.EndVector()


def _placed(present, offs) -> list:
    """The fields as ``place`` takes them: (-width, schema order, struct code, value,
    slot, target offset or None, index in ``present``), the widest first, in schema order
    within a width; a field of another form (a call) left out."""
    placed = [(-p.width, p.order, p.code, v, p.slot, None, j) if p.kind == "scalar" else
              (-4, p.order, "I", 0, p.slot, off, j)
              for j, ((p, v), off) in enumerate(zip(present, offs)) if p.kind != "call"]
    placed.sort()  # (by width and order alone: no two fields share an order)
    return placed


def _object_layout(count: int, placed, start: int) -> Tuple:
    """Where ``Writer.object`` puts a table of ``placed`` fields (``_placed``'s; of
    ``count`` slots) that starts ``start`` (mod 8) bytes from the buffer's end, as the
    builder does it: the fields aligned to the widest (``place``), the offset to the
    vtable aligned to 4 (``PrependSOffsetTRelative``), the vtable of the slots' offsets
    from the object with trailing absent ones left out (``WriteVtable``). Returns the
    struct of the object (offset to the vtable, padding, fields from the lowest address,
    padding); per field from the lowest address, (its index among the table's present
    fields, whether it is an offset, its offset from the buffer's end less the object's
    start); the object's size; the builder's vtable key; the vtable's bytes; the
    alignment."""
    widest = -placed[0][0] if placed else 1
    lead = -start & (widest - 1)  # Prep(widest, 0)
    packing, end, slots = [], lead, [0] * count
    for width, _, _, _, slot, target, j in placed:
        end -= width  # (widths negated)
        packing.append((j, target is not None, end))
        slots[slot] = end
    pad = -(start + end) & 3  # Prep(4, 0) before the offset to the vtable
    size = end + pad + 4
    offsets = [size - s if s else 0 for s in slots]
    while offsets and not offsets[-1]:
        offsets.pop()
    vt_key = (*reversed(offsets), size)
    vt_bytes = struct.pack(f"<{len(offsets) + 2}H", 2 * (len(offsets) + 2), size, *offsets)
    fmt = "<i" + "x" * pad + "".join(x[2] for x in reversed(placed)) + "x" * lead
    packing.reverse()
    return struct.Struct(fmt), packing, size, vt_key, vt_bytes, max(widest, 4)


_PACKED: Dict[Tuple[str, int], struct.Struct] = {}  # (element's code, count) -> the vector's struct

# (type, its field names in the table's order) -> the function that writes such a table
# (``_writer_of``); None where one field is of another form (the generic way writes it).
_WRITERS: Dict[Tuple, Any] = {}
_MAX_WRITERS = 4096


def _writer_of(names: Tuple) -> Any:
    """The writer of tables of type ``names[0]`` whose fields are ``names[1:]``: what
    ``_Writer.generic`` does for one, as straight-line code made once (a 300k-op model
    is a million tables, and the generic walk over each one's fields was the most of
    its writing). The code holds the schema's names and numbers alone: the field names
    are checked against the schema before they are put in it."""
    table = names[0]
    plan = _plan(table)
    ordered = _ordered(names)
    if any(p.kind == "call" for p in ordered):
        write = None
    else:
        env = {"P": ordered, "layouts": {}, "layout_of": _layout_of, "np": np, "float": float}
        lines = ["def write(w, f):", "    mask = 0"]
        for i, p in enumerate(ordered):
            lines.append(f"    v{i} = f[{p.key!r}]")
            test = f"v{i} is not None" + (f" and v{i} != P[{i}].default" if p.kind == "scalar" else "")
            lines.append(f"    if {test}: mask |= {1 << i}")
        if plan.shareable:  # equal tables of scalars alone are one
            lines.append(f"    key = [{table!r}]")
            for i, p in enumerate(ordered):
                lines.append(f"    if mask & {1 << i}: key.append(({p.order}, float(v{i}).hex()"
                             f" if isinstance(v{i}, (float, np.floating)) else v{i}))")
            lines += ["    key = tuple(key)", "    hit = w.tables.get(key)", "    if hit is not None:",
                      "        return hit"]
        lines.append("    offs = []")
        for i, p in enumerate(ordered):  # the targets first, in schema order, as the generic way writes them
            value = {"scalar": f"v{i}", "vector": f"w.scalars(P[{i}], v{i})"}.get(p.kind, f"w.ref({table!r}, P[{i}], v{i})")
            lines.append(f"    if mask & {1 << i}: offs.append({value})")
        lines += ["    b = w.b", "    start = len(b.Bytes) - b.head", "    layout = layouts.get((mask, start & 7))",
                  "    if layout is None:",
                  f"        layout = layouts[mask, start & 7] = layout_of({plan.count}, P, mask, start & 7)",
                  "    off = w.object(layout, offs, start)"]
        if plan.shareable:
            lines.append("    w.tables[key] = off")
        lines.append("    return off")
        exec(compile("\n".join(lines), f"<tflite_schema writer of {table}>", "exec"), env)
        write = env["write"]
    if len(_WRITERS) >= _MAX_WRITERS:  # (a long-lived process fed crafted files: bounded)
        _WRITERS.clear()
    _WRITERS[names] = write
    return write


def _ordered(names: Tuple) -> list:
    """The puts of fields ``names[1:]`` of a table of type ``names[0]`` in schema order
    (the bytes depend on the table alone, not its dict's order); KeyError naming a field
    the schema lacks."""
    puts = _plan(names[0]).puts
    unknown = set(names[1:]) - set(puts)
    if unknown:
        raise KeyError(f"table {names[0]} has no field {', '.join(sorted(unknown))}")
    return sorted((puts[k] for k in names[1:]), key=lambda p: p.order)


def _layout_of(count: int, ordered: list, mask: int, start: int) -> Tuple:
    """``_object_layout`` of the fields of ``ordered`` (schema order) that ``mask`` says
    are present (what is placed where depends on which are, not on their values)."""
    present = [(p, 0) for i, p in enumerate(ordered) if mask >> i & 1]
    return _object_layout(count, _placed(present, [None if p.kind == "scalar" else 0 for p, _ in present]), start)


def write(builder: flatbuffers.Builder, t: FbTable, by_builder: bool = False) -> int:
    """Build ``t`` (children first, as flatbuffers requires); return its offset.
    ``by_builder``: each table through the builder's StartObject/EndObject (the
    reference the one-write tables are tested against)."""
    return _Writer(builder, by_builder).table(t)


def serialize(model: FbTable, initial_size: int = 1024, by_builder: bool = False) -> bytes:
    """The bytes of a ``Model`` table, with the TFLite file identifier."""
    builder = flatbuffers.Builder(initial_size)
    builder.Finish(write(builder, model, by_builder), file_identifier=FILE_IDENTIFIER)
    return bytes(builder.Output())


@functools.lru_cache(maxsize=None)
def _defaults(table: str) -> Dict[str, Any]:
    """The scalar fields of ``table`` by key, with the default the writer leaves out."""
    return {k: p.default for k, p in _plan(table).puts.items() if p.kind == "scalar"}


def without_defaults(table: str, fields: Dict[str, Any], leave=frozenset()) -> Dict[str, Any]:
    """``fields`` of a ``table`` less those in ``leave`` and the scalars at their schema
    default: what the writer writes of them is the same (it leaves a default out), and
    a table kept for writing back holds only what it needs."""
    defaults = _defaults(table)
    return {k: v for k, v in fields.items() if k not in leave and (k not in defaults or v != defaults[k])}


def builtin_code(name: str) -> int:
    return enum_value("BuiltinOperator", name)


def builtin_name(code: int) -> Optional[str]:
    return enum_name("BuiltinOperator", code)


@functools.lru_cache(maxsize=None)
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
