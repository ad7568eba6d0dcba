"""IR -> ONNX ModelProto.

Everything the IR does not model is carried over from the protos the importer kept:
the model header (IR version, opsets, metadata, functions, training info), each graph's
header (name, doc string, quantization annotations), node fields other than inputs,
outputs and subgraphs, declared value_info, and initializers (external ones stay
external: their proto, not their data, is copied). ``save_model`` writes a model file,
moving external data beside it when it goes to another folder.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, List, Optional, Tuple

import onnx.numpy_helper
from onnx import AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto, ValueInfoProto, helper

from ...errors import BadInput, UsageError
from ...atomic_files import Staged, check_output_path, commit, remove_temps, temp_beside
from ...ir.constdata import external_data
from ...ir.gc import paused_gc
from ...ir.graph import CONST, INPUT, OP, Graph, Node, Value
from ...ir.dtypes import elem_type
from ...ir.types import TensorType
from .protoutil import copy_field, copy_fields as _copy_fields, model_tensors

_NODE_REBUILT = {"input", "output", "attribute"}
_GRAPH_REBUILT = {"node", "input", "output", "initializer", "sparse_initializer", "value_info"}


def value_info(name: str, t: TensorType) -> ValueInfoProto:
    vi = ValueInfoProto(name=name)
    tt = vi.type.tensor_type
    tt.elem_type = elem_type(t.dtype)
    if t.shape is not None:
        shape = tt.shape
        shape.SetInParent()
        for d in t.shape:
            dim = shape.dim.add()
            if isinstance(d, int):
                dim.dim_value = d
            elif isinstance(d, str):
                dim.dim_param = d
    return vi


def _info_for(v: Value, name: str, declared) -> ValueInfoProto:
    if declared is not None and declared.name == name:
        return declared
    return value_info(name, v.type)


def _initializer(n: Node) -> TensorProto:
    d = n.data
    if d.proto is not None and not d.sparse:
        if d.proto.name == n.output.name:
            return d.proto
        t = TensorProto()
        t.CopyFrom(d.proto)
        t.name = n.output.name
        return t
    return onnx.numpy_helper.from_array(d.array, n.output.name)


def _export_node(n: Node, out: NodeProto) -> NodeProto:
    if n.proto is not None:
        _copy_fields(out, n.proto, _NODE_REBUILT)
    # The IR's identity fields win over the proto's (a pass may have changed them);
    # set only where they differ, so an unchanged node keeps its exact bytes.
    for field, value in (("op_type", n.op_type), ("domain", n.domain), ("name", n.name)):
        if getattr(out, field) != value:
            setattr(out, field, value)
    out.input.extend(v.name if v is not None else "" for v in n.inputs)
    # Trailing unused optional outputs may be dropped, inner ones stay as "".
    out.output.extend(v.name for v in n.outputs)
    for name, a in n.attrs.items():
        if isinstance(a, Graph):
            attr = out.attribute.add(name=name, type=AttributeProto.GRAPH)
            export_graph(a, attr.g)
        elif isinstance(a, list):
            attr = out.attribute.add(name=name, type=AttributeProto.GRAPHS)
            for g in a:
                export_graph(g, attr.graphs.add())
        elif isinstance(a, AttributeProto):
            out.attribute.append(a)
        else:
            out.attribute.append(helper.make_attribute(name, a))
    return out


def _node_proto(n: Node, p: Optional[NodeProto], new: Callable[[], NodeProto] = NodeProto) -> NodeProto:
    """The NodeProto of ``n``: its imported proto ``p`` itself while ``n`` still is that
    node (same identity fields, operand and result names, and the very attribute protos,
    in order; no subgraph); a copy with new operand names where only those changed (what
    a rewrite of its operands does), both copied in C; else built field by field.
    ``new`` makes the NodeProto a copy or a rebuilt node goes into."""
    if p is None or p.op_type != n.op_type or p.domain != n.domain or p.name != n.name:
        return _export_node(n, new())
    outputs = n.outputs
    if p.output[:] != ([outputs[0].name] if len(outputs) == 1 else [v.name for v in outputs]):
        return _export_node(n, new())
    attrs = n.attrs
    if attrs or p.attribute:
        protos = p.attribute
        if len(protos) != len(attrs) or not all(a is b for a, b in zip(attrs.values(), protos)):
            return _export_node(n, new())
    inputs = [v.name if v is not None else "" for v in n.inputs]
    if p.input[:] == inputs:
        return p
    out = new()
    out.CopyFrom(p)
    del out.input[:]
    out.input.extend(inputs)
    return out


def export_graph(graph: Graph, gp: Optional[GraphProto] = None,
                 detached: Optional[List[TensorProto]] = None,
                 detached_nodes: Optional[List[NodeProto]] = None) -> GraphProto:
    """Write ``graph`` into ``gp`` (a new GraphProto if not given). With ``detached``
    (a list), the initializers go there, in order, instead of into ``gp``: the proto
    they came from is not copied (``save_model`` streams them into the file); with
    ``detached_nodes``, so do the nodes (each the imported NodeProto itself where the
    node is unchanged)."""
    with paused_gc():
        return _export_graph(graph, GraphProto() if gp is None else gp, detached, detached_nodes)


def _export_graph(graph: Graph, gp: GraphProto, detached: Optional[List[TensorProto]],
                  detached_nodes: Optional[List[NodeProto]]) -> GraphProto:
    if graph.proto is not None:
        _copy_fields(gp, graph.proto, _GRAPH_REBUILT)
    else:
        gp.name = graph.name
    inits: List[tuple] = []
    sparse: List[tuple] = []
    infos: List[tuple] = []
    new_infos: List[ValueInfoProto] = []
    node_protos: List[NodeProto] = [] if detached_nodes is None else detached_nodes
    # The nodes made anew (copies of changed nodes, new ones) share one arena: that of
    # a GraphProto holding them until they are written (else each has its own).
    made = GraphProto().node.add
    for n in graph.nodes():
        kind = n.kind
        if kind == OP:
            node_protos.append(_node_proto(n, n.proto, made))
            for v in n.outputs:
                if v.info is not None:
                    if v.info.name == v.name:
                        infos.append((v.info_index, v.info))
                elif n.proto is None and v.name and v.type.shape is not None:
                    new_infos.append(value_info(v.name, v.type))
            continue
        if kind == INPUT:
            gp.input.append(_info_for(n.output, n.output.name, n.proto))
            if n.data is not None:
                inits.append((n.data.index, _initializer(n)))
        elif kind == CONST:
            if n.data.sparse:
                sparse.append((n.data.index, n.data.proto))
            else:
                inits.append((n.data.index if n.data.proto is not None else 1 << 60, _initializer(n)))
        for v in n.outputs:
            if v.info is not None and v.info.name == v.name:
                infos.append((v.info_index, v.info))
    if detached_nodes is None:
        gp.node.extend(node_protos)
    for n in graph.outputs:
        v = n.inputs[0]
        gp.output.append(_info_for(v, v.name, n.proto))
    infos.extend(graph.foreign_value_info)
    inits.sort(key=lambda t: t[0])
    if detached is not None:
        detached.extend(t for _, t in inits)
    else:
        gp.initializer.extend(t for _, t in inits)
    sparse.sort(key=lambda t: t[0])
    gp.sparse_initializer.extend(t for _, t in sparse)
    infos.sort(key=lambda t: t[0])
    gp.value_info.extend(vi for _, vi in infos)
    gp.value_info.extend(new_infos)
    return gp


def export_model(graph: Graph, header: Optional[ModelProto] = None,
                 detached: Optional[List[TensorProto]] = None,
                 detached_nodes: Optional[List[NodeProto]] = None) -> ModelProto:
    """The model of ``graph``, with every header field of ``header`` (the imported
    model) carried over. ``detached``, ``detached_nodes``: as for ``export_graph``,
    for the main graph."""
    m = ModelProto()
    if header is not None:
        _copy_fields(m, header, {"graph"})
    else:
        m.ir_version = onnx.IR_VERSION
        for domain, version in graph.opsets.items():
            m.opset_import.append(helper.make_opsetid(domain, version))
    export_graph(graph, m.graph, detached, detached_nodes)
    return m


def save_model(proto: ModelProto, path, base_dir: Optional[Path] = None, *, force: bool = False,
               protect: Optional[Path] = None, inspect: Optional[Callable[[Path], None]] = None,
               initializers: Optional[List[TensorProto]] = None,
               nodes: Optional[List[NodeProto]] = None) -> Path:
    """Write ``proto`` to ``path`` atomically (``staged_model``); ``inspect`` gets the
    written file (a temporary name beside ``path``, with its external data beside it)
    before anything takes its final name; if it raises, nothing is left behind."""
    with staged_model(proto, path, base_dir, force=force, protect=protect, initializers=initializers, nodes=nodes,
                      inspected=inspect is not None) as staged:
        if inspect is not None:
            inspect(staged.path)
        staged.accept()
    return Path(path)


@contextmanager
def staged_model(proto: ModelProto, path, base_dir: Optional[Path] = None, *, force: bool = False,
                 protect: Optional[Path] = None, initializers: Optional[List[TensorProto]] = None,
                 nodes: Optional[List[NodeProto]] = None, inspected: bool = True) -> Iterator[Staged]:
    """Write ``proto`` under a temporary name beside ``path`` and yield it (a
    ``Staged``); when the block ends it takes the name ``path`` if it was accepted, and
    nothing is left behind if it was not (``atomic_files``' rules).

    ``initializers``: the main graph's initializers, when ``proto`` was exported
    without them (``export_model(..., detached=[])``); they are serialized one at a
    time straight into the file, after the graph's nodes, so that the weights are never
    held twice (the file has the bytes ``onnx.save`` would write for the whole model).
    ``nodes``: likewise the main graph's nodes (``detached_nodes``), each serialized on
    its own, so that they are not copied into a new GraphProto first.

    External tensors stay external. Their locations are relative to ``base_dir`` (the
    input model's folder): written into that same folder, the model references the
    input's data files as they are; written elsewhere, the data is copied, streamed
    from the input's files, into ``<output name>.<16 random hex digits>.data`` beside
    the output (a new name for each write), and the tensors point there. ``proto``
    itself is left as it is. The staged model reads its data under the data's
    temporary name (``inspected``: something runs it before the commit; without, it
    names the data's final name at once, and is written once).

    The model's rename is the one commit: its data takes its name just before, so a
    reader never sees a model with another run's data, and a run stopped before it
    leaves the previous output (model and data) as it was. The data file the replaced
    model referenced beside it is then removed.
    """
    path = Path(path)
    base = Path(base_dir) if base_dir is not None else Path(".")
    inits = list(initializers) if initializers is not None else None
    relocate = (path.parent.resolve() != base.resolve()
                and any(t.data_location == TensorProto.EXTERNAL for _, t in model_tensors(proto, inits, nodes)))
    check_output_path(path, force=force, protect=protect)
    if relocate:
        copy = ModelProto()
        copy.CopyFrom(proto)  # usually small: its big tensors are the external ones
        if inits is not None:  # copies of the external ones only: those are small
            inits = [_copied(t) if t.data_location == TensorProto.EXTERNAL else t for t in inits]
        if nodes is not None:  # copies too, whose external tensors can be pointed elsewhere
            copy.graph.node.extend(nodes)
            nodes = None
        proto = copy
    previous = None
    temps: List[Path] = []
    try:
        data = None
        if relocate:
            external = [(what, t) for what, t in model_tensors(proto, inits) if t.data_location == TensorProto.EXTERNAL]
            data = path.with_name(f"{path.name}.{secrets.token_hex(8)}.data")
            data_tmp = temp_beside(data, temps)
            _copy_external(external, base, data_tmp, data_tmp.name)
            if not inspected:  # the model names the data's final name at once
                _point_at([t for _, t in external], data.name)
        staged = Staged(temp_beside(path, temps))
        _write(proto, inits, staged.path, nodes)
        yield staged
        if not staged.accepted:
            return
        tmp = staged.path
        if data is not None and inspected:  # the model that is kept names the data's final name
            _point_at([t for _, t in external], data.name)
            tmp = temp_beside(path, temps)
            _write(proto, inits, tmp, nodes)
        if data is not None:
            commit(data_tmp, data, force=False)  # a new name: no model references it yet
        previous = _open_previous(path) if force else None
        try:
            commit(tmp, path, force=force)
        except BaseException:
            if data is not None:
                data.unlink()
            raise
        if previous is not None:
            keep = {e.value for _, t in model_tensors(proto, inits, nodes) for e in t.external_data if e.key == "location"}
            _remove_stale_data(previous, path, keep)
    except OSError as e:
        raise UsageError(f"{path}: cannot write: {e.strerror}") from None
    finally:
        remove_temps(temps)
        if previous is not None:
            previous.close()


def _copy_span(src: int, offset: int, dst: int, at: int, length: int) -> None:
    """``length`` bytes of ``src`` from ``offset`` into ``dst`` at ``at``: only the
    source's data extents (``SEEK_DATA``/``SEEK_HOLE``; its holes stay holes, as
    nothing is written there), each with ``copy_file_range`` (in the kernel: a reflink
    on a file system that shares extents, no bytes through this process), or read and
    written where the kernel cannot (another file system on an old kernel)."""
    end, pos = offset + length, offset
    while pos < end:
        try:
            data = os.lseek(src, pos, os.SEEK_DATA)
        except OSError as e:
            if e.errno == errno.ENXIO:  # no data after pos: the rest is a hole
                return
            data = pos  # no SEEK_DATA here: all of it is data
        if data >= end:
            return
        try:
            hole = min(os.lseek(src, data, os.SEEK_HOLE), end)
        except OSError:
            hole = end
        _copy_data(src, data, dst, at + (data - offset), hole - data)
        pos = hole


def _copy_data(src: int, offset: int, dst: int, at: int, length: int) -> None:
    while length > 0:
        try:
            n = os.copy_file_range(src, dst, min(length, 1 << 30), offset, at)
        except (OSError, AttributeError):  # EXDEV, EINVAL, ENOSYS: byte by byte, in chunks
            n = _copy_bytes(src, offset, dst, at, min(length, _CHUNK))
        if n <= 0:
            raise OSError(errno.EIO, "the file ended early")
        offset, at, length = offset + n, at + n, length - n


def _copy_bytes(src: int, offset: int, dst: int, at: int, length: int) -> int:
    chunk = os.pread(src, length, offset)
    view = memoryview(chunk)
    while view:
        at += (n := os.pwrite(dst, view, at))
        view = view[n:]
    return len(chunk)


def _point_at(tensors: List[TensorProto], location: str) -> None:
    for t in tensors:
        for e in t.external_data:
            if e.key == "location":
                e.value = location


def _open_previous(path: Path):
    """The output about to be replaced, opened (the data files it names are looked up
    after the rename), or None; never anything but a regular file (opening a FIFO
    would block)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return os.fdopen(fd, "rb")


# A data file legalize writes beside an output: <output name>.<16 hex digits>.data, or
# <output name>.data as legalize 0.1.0 named it.
def _is_own_data(name: str, output: str) -> bool:
    return name == f"{output}.data" or re.fullmatch(re.escape(output) + r"\.[0-9a-f]{16}\.data", name) is not None


_LOCATION_ENTRY = re.compile(rb"\n\x08location\x12")  # StringStringEntryProto{key: "location", value: ...}


def _locations(f) -> set:
    """The external-data locations a serialized model names, read from its bytes with
    no parse (the file may hold gigabytes of weights)."""
    import mmap

    try:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return set()
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            found = set()
            for m in _LOCATION_ENTRY.finditer(mm):
                n, shift, i = 0, 0, m.end()
                while i < size and shift < 35:  # the value's length: a varint
                    b = mm[i]
                    n |= (b & 0x7F) << shift
                    shift += 7
                    i += 1
                    if not b & 0x80:
                        break
                found.add(bytes(mm[i:i + n]).decode("utf-8", "replace"))
            return found
    except (OSError, ValueError):
        return set()


def _remove_stale_data(previous, path: Path, keep: set) -> None:
    """Remove the data files the replaced output referenced beside it, named as
    legalize names them, that the new output does not reference."""
    for name in _locations(previous) - keep:
        if "/" not in name and "\\" not in name and _is_own_data(name, path.name):
            try:
                os.unlink(path.parent / name)
            except OSError:
                pass


def _copied(t: TensorProto) -> TensorProto:
    c = TensorProto()
    c.CopyFrom(t)
    return c


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _split(msg, number: int, cls, low: bool = True):
    """Two messages of ``msg``'s fields numbered below and above ``number`` (copies;
    the first left empty unless ``low``)."""
    lo, hi = cls(), cls()
    for fd, val in msg.ListFields():
        if fd.number == number or (fd.number < number and not low):
            continue
        copy_field(lo if fd.number < number else hi, fd, val)
    return lo, hi


_GRAPH_FIELD = ModelProto.DESCRIPTOR.fields_by_name["graph"].number  # 7
_INITIALIZER_FIELD = GraphProto.DESCRIPTOR.fields_by_name["initializer"].number  # 5
_NODE_FIELD = GraphProto.DESCRIPTOR.fields_by_name["node"].number  # 1: before every other field of a graph


def _write(proto: ModelProto, inits: Optional[List[TensorProto]], path: Path,
           nodes: Optional[List[NodeProto]] = None) -> None:
    """Write ``proto`` with ``inits`` as its main graph's initializers and ``nodes`` as
    its nodes. Protobuf writes a message's fields in field-number order, so the file is
    the model's fields before ``graph``, the graph (its nodes, field 1, each serialized
    on its own; its other fields before ``initializer``, each initializer, its fields
    after), then the model's fields after ``graph``: each piece serialized on its own,
    one tensor at a time."""
    if not inits and not nodes:
        onnx.save_model(proto, str(path))
        return
    inits = inits or []
    g = proto.graph
    head, tail = _split(proto, _GRAPH_FIELD, ModelProto)
    _, g_tail = _split(g, _INITIALIZER_FIELD, GraphProto, low=False)
    g_bytes = g.SerializeToString()
    cut = len(g_bytes) - g_tail.ByteSize()
    node_bytes = _repeated(_NODE_FIELD, nodes or ())
    tag = _varint(_INITIALIZER_FIELD << 3 | 2)
    sizes = [t.ByteSize() for t in inits]
    total = len(node_bytes) + len(g_bytes) + sum(len(tag) + len(_varint(n)) + n for n in sizes)
    with open(path, "wb") as f:
        f.write(head.SerializeToString())
        f.write(_varint(_GRAPH_FIELD << 3 | 2) + _varint(total))
        f.write(node_bytes)
        del node_bytes
        f.write(g_bytes[:cut])
        for t, n in zip(inits, sizes):
            f.write(tag + _varint(n))
            f.write(t.SerializeToString())
        f.write(g_bytes[cut:])
        f.write(tail.SerializeToString())


# A length below 128 is a one-byte varint: most nodes' serialized lengths.
_SHORT_VARINTS = [bytes([n]) for n in range(128)]


def _repeated(number: int, messages) -> bytearray:
    """The bytes of ``messages`` as the entries of repeated message field ``number``
    (what their container would serialize to), each serialized on its own and added to
    one buffer at once (a list of the pieces, joined at the end, held three objects a
    node: a large graph's save peaked on it)."""
    tag, short = _varint(number << 3 | 2), _SHORT_VARINTS
    out = bytearray()
    for m in messages:
        data = m.SerializeToString()
        n = len(data)
        out += tag
        out += short[n] if n < 128 else _varint(n)
        out += data
    return out


_CHUNK = 1 << 24
_BLOCK = 4096  # each tensor's bytes start at the offset modulo this that they had: holes and extents line up


def _copy_external(tensors: List[Tuple[str, TensorProto]], base: Path, dst: Path, location: str) -> None:
    """Copy each tensor's external bytes from its file under ``base`` into ``dst``, once
    for tensors that share them, and point the tensor at ``location`` (``dst``'s name).
    Every tensor's data is checked (``external_data``: inside ``base``, within its file)
    before a byte is copied. The bytes go as the file system allows (``_copy_span``):
    in the kernel, a reflink where it has them, and holes kept: a sparse 8 GiB weight
    stays 0 bytes on disk, and is copied in a moment."""
    sources = [(what, t, external_data(t, base, what)) for what, t in tensors]
    copied = {}
    with open(dst, "wb") as out:
        end = 0
        for what, t, ext in sources:
            key = (ext.path, ext.offset, ext.length)
            if key not in copied:
                start = -(-end // _BLOCK) * _BLOCK + ext.offset % _BLOCK
                try:
                    with open(ext.path, "rb") as f:
                        if os.fstat(f.fileno()).st_size < ext.offset + ext.length:  # it shrank since it was checked
                            raise BadInput(f"{what}: external data '{ext.location}' is shorter than"
                                           f" its length ({ext.offset + ext.length} bytes)")
                        _copy_span(f.fileno(), ext.offset, out.fileno(), start, ext.length)
                except OSError as e:
                    raise BadInput(f"{what}: cannot read external data '{ext.location}':"
                                   f" {e.strerror}") from None
                copied[key] = (start, ext.length)
                end = max(end, start + ext.length)
            start, size = copied[key]
            rest = [(e.key, e.value) for e in t.external_data if e.key not in ("location", "offset", "length")]
            del t.external_data[:]
            for k, v in [("location", location), ("offset", str(start)), ("length", str(size))] + rest:
                t.external_data.add(key=k, value=v)
        os.ftruncate(out.fileno(), end)  # its size: a hole at the end stays one
