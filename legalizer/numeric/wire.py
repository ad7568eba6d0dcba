"""The messages between ``legalize`` and the child that runs its models (``child.py``,
``serve.py``): a length, then the bytes.

Both ways a message is JSON plus raw array bytes, read back into plain values (None,
bool, int, float, str, bytes, lists, tuples, dicts, numpy arrays of plain dtypes,
``InputSpec``) and nothing else: never a pickle, so that nothing crossing a process
boundary runs code. A request may also carry an ONNX ``ModelProto`` (its serialized
bytes, parsed by the child); a reply may not: the child runs untrusted models, and code
that a runtime's memory bug lets a model run could answer anything."""

from __future__ import annotations

import json
import os
import select
import struct
import time
from typing import List, Optional

import numpy as np

HEADER = struct.Struct("<Q")
# A reply bigger than this is refused before it is read (the check caps each input at
# 1 GiB; outputs and localization's values are of that order).
MAX_REPLY = 64 << 30


class Timeout(Exception):
    pass


class BadReply(Exception):
    """A reply that is not what the protocol allows."""


# -- framing ------------------------------------------------------------------------------

def send(fd: int, data) -> None:
    _write_all(fd, memoryview(HEADER.pack(len(data))))
    _write_all(fd, memoryview(data).cast("B"))


def _write_all(fd: int, view: memoryview) -> None:
    while view:
        view = view[os.write(fd, view):]


def receive(fd: int, deadline: Optional[float], limit: int = MAX_REPLY) -> bytearray:
    """A message of at most ``limit`` bytes (for a reply, the memory the child was
    allowed: it cannot have made more), its claimed size checked before any of it is
    read, and the buffer grown as the bytes arrive: a header that claims 60 GiB costs
    nothing."""
    head = _read(fd, HEADER.size, deadline)
    (n,) = HEADER.unpack(bytes(head))
    if n > limit:
        raise BadReply(f"a reply of {n} bytes, more than the {limit} bytes its memory allows")
    return _read(fd, n, deadline)


_STEP = 1 << 24


def _read(fd: int, n: int, deadline: Optional[float]) -> bytearray:
    buf = bytearray(min(n, _STEP))
    got = 0
    while got < n:
        if deadline is not None:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                raise Timeout
        if got == len(buf):  # grown as bytes come (a large one in place: realloc moves pages, not bytes)
            buf.extend(bytes(min(n - got, len(buf), 1 << 30)))
        k = os.readv(fd, [memoryview(buf)[got:got + _STEP]])
        if not k:
            raise EOFError
        got += k
    return buf


# -- replies: JSON and array bytes ------------------------------------------------------

def encode(value, request: bool = False) -> bytes:
    """``value`` as a message (a reply; ``request``: a request, which may hold a
    ModelProto): its JSON, then the bytes of its arrays."""
    blobs: List[np.ndarray] = []
    doc = json.dumps(_plain(value, blobs, request)).encode()
    # each array's bytes, flat (an empty array's view cannot be cast: it has no bytes)
    parts = [HEADER.pack(len(doc)), doc] + [memoryview(np.ascontiguousarray(a).reshape(-1)).cast("B")
                                            if a.size else b"" for a in blobs]
    return b"".join(parts)


def _plain(v, blobs, request: bool = False):
    from .inputs import InputSpec

    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (bytes, bytearray)):
        blobs.append(np.frombuffer(bytes(v), dtype=np.uint8))
        return {"b": len(v)}
    if isinstance(v, os.PathLike):
        return os.fspath(v)
    if request and type(v).__name__ == "ModelProto" and hasattr(v, "SerializeToString"):
        data = v.SerializeToString()
        blobs.append(np.frombuffer(data, dtype=np.uint8))
        return {"p": len(data)}
    if isinstance(v, np.generic):
        v = np.asarray(v)
    if isinstance(v, np.ndarray):
        if v.dtype.kind in "OV" or v.dtype.hasobject:
            raise TypeError(f"an array of dtype {v.dtype}, which the reply does not carry")
        blobs.append(v)
        return {"a": [v.dtype.str, list(v.shape), v.nbytes]}
    if isinstance(v, InputSpec):
        return {"s": [v.name, int(v.elem_type), [d if isinstance(d, (int, str)) else str(d) for d in v.shape],
                      bool(v.quantized), v.unavailable]}
    if isinstance(v, dict):
        return {"d": [[_plain(k, blobs, request), _plain(x, blobs, request)] for k, x in v.items()]}
    if isinstance(v, tuple):
        return {"t": [_plain(x, blobs, request) for x in v]}
    if isinstance(v, list):
        return {"l": [_plain(x, blobs, request) for x in v]}
    raise TypeError(f"a {type(v).__name__}, which the reply does not carry")


def decode(data: bytearray, request: bool = False):
    """The value of a reply (``request``: of a request); ``BadReply`` if it is not one
    the protocol allows."""
    try:
        (n,) = HEADER.unpack_from(data, 0)
        doc = json.loads(bytes(data[HEADER.size:HEADER.size + n]))
    except (struct.error, ValueError, UnicodeDecodeError) as e:
        raise BadReply(str(e)) from None
    cursor = [HEADER.size + n]
    value = _value(doc, memoryview(data), cursor, 0, request)
    if cursor[0] != len(data):
        raise BadReply("trailing bytes")
    return value


def _value(doc, data: memoryview, cursor: List[int], depth: int, request: bool = False):
    from .inputs import InputSpec

    if depth > 64:
        raise BadReply("nested too deep")
    if doc is None or isinstance(doc, (bool, int, float, str)):
        return doc
    if not isinstance(doc, dict) or len(doc) != 1:
        raise BadReply("not a value")
    (tag, body), = doc.items()
    try:
        if tag == "a":
            dtype_text, shape, nbytes = body
            dtype = np.dtype(str(dtype_text))
            if dtype.kind in "OV" or dtype.hasobject:
                raise BadReply(f"dtype {dtype}")
            shape = tuple(int(d) for d in shape)
            count = 1
            for d in shape:
                if d < 0:
                    raise BadReply("a negative dim")
                count *= d
            if count * dtype.itemsize != nbytes or cursor[0] + nbytes > len(data):
                raise BadReply("array bytes do not match its shape")
            start = cursor[0]
            cursor[0] += nbytes
            return np.frombuffer(data[start:start + nbytes], dtype=dtype).reshape(shape)
        if tag == "b":
            nbytes = int(body)
            if nbytes < 0 or cursor[0] + nbytes > len(data):
                raise BadReply("bytes past the reply's end")
            start = cursor[0]
            cursor[0] += nbytes
            return bytes(data[start:start + nbytes])
        if tag == "s":
            name, elem_type, shape, quantized, unavailable = body
            return InputSpec(str(name), int(elem_type), tuple(d if isinstance(d, (int, str)) else str(d)
                                                              for d in shape), bool(quantized), str(unavailable))
        if tag == "p" and request:
            import onnx

            nbytes = int(body)
            if nbytes < 0 or cursor[0] + nbytes > len(data):
                raise BadReply("bytes past the message's end")
            start = cursor[0]
            cursor[0] += nbytes
            return onnx.ModelProto.FromString(bytes(data[start:start + nbytes]))
        if tag == "d":
            return {_key(_value(k, data, cursor, depth + 1, request)): _value(x, data, cursor, depth + 1, request)
                    for k, x in body}
        if tag in ("l", "t"):
            items = [_value(x, data, cursor, depth + 1, request) for x in body]
            return items if tag == "l" else tuple(items)
    except (TypeError, ValueError) as e:
        raise BadReply(str(e)) from None
    raise BadReply(f"tag {tag!r}")


def _key(k):
    if isinstance(k, (str, int, float, bool)) or k is None:
        return k
    raise BadReply("a dict key that is not a scalar")

