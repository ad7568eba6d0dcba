"""Polygraphy's JSON, read and written without Polygraphy: the input data that
``polygraphy run --save-inputs`` writes (a list of feed dicts, one per iteration) and
the ``RunResults`` that ``--save-outputs`` writes (per runner, per iteration, the
outputs by name), so that golden data moves between the two tools both ways.

An array is the bytes of a ``.npy`` file, base64-encoded, in an object marked
``"polygraphy_class": "ndarray"``; an output of a run is such an array wrapped in a
``LazyArray`` (``{"values": ...}``). Older files mark objects with the legacy key
``"__polygraphy_encoded_<type>"``; both are read.

Every file read here is untrusted: its arrays are checked from their ``.npy`` header
(dtype, shape, the byte count that must follow) before any is made, and no pickled
object is ever loaded.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
from typing import Dict, List, Mapping, Sequence, Tuple

import numpy as np

MARKER = "polygraphy_class"
_LEGACY_VALUE = "polygraphy_serialized_json_type"
_LEGACY_PREFIX = "__polygraphy_encoded_"

Feed = Dict[str, np.ndarray]
Runs = List[Tuple[str, List[Feed]]]  # (runner name, per iteration its outputs by name)


class FormatError(ValueError):
    """The JSON is not Polygraphy's input data or run results (the message says where)."""


# -- arrays -------------------------------------------------------------------------

def encode_array(array: np.ndarray) -> dict:
    buf = io.BytesIO()
    np.save(buf, np.asarray(array), allow_pickle=False)
    return {"array": base64.b64encode(buf.getvalue()).decode("ascii"), MARKER: "ndarray"}


def _kind(obj) -> str:
    """The Polygraphy type an object was encoded from, or ""."""
    if not isinstance(obj, dict):
        return ""
    kind = obj.get(MARKER)
    if isinstance(kind, str):
        return kind
    for key, value in obj.items():
        if key.startswith(_LEGACY_PREFIX) and value == _LEGACY_VALUE:
            return key[len(_LEGACY_PREFIX):]
    return ""


def npy_header(data: bytes, where: str, max_bytes: int) -> Tuple[np.dtype, Tuple[int, ...]]:
    """The dtype and shape a ``.npy`` payload declares, checked against its length and
    ``max_bytes`` before anything is made from it."""
    f = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        else:
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
    except (ValueError, SyntaxError, TypeError) as e:
        raise FormatError(f"{where}: not a .npy array: {e}") from None
    if dtype.hasobject:
        raise FormatError(f"{where}: holds Python objects (dtype {dtype}), which are never unpickled")
    # Each dim on its own (a zero elsewhere makes the product 0, and numpy still
    # refuses a dim past its index type), then the product, in Python's integers.
    limit = max_bytes // max(dtype.itemsize, 1)
    for d in shape:
        if d < 0:
            raise FormatError(f"{where}: declares shape {list(shape)}: dim {d} is negative")
        if d > limit:
            raise FormatError(f"{where}: declares shape {list(shape)}: dim {d} is more elements of {dtype} than the"
                              f" check takes ({max_bytes / 2**30:.3g} GiB)")
    count = 1
    for d in shape:
        count *= int(d)
    size = count * dtype.itemsize
    if size > max_bytes:
        raise FormatError(f"{where}: an array of shape {list(shape)} and dtype {dtype} would take"
                          f" {size / 2**30:.3g} GiB, more than the check takes ({max_bytes / 2**30:.3g} GiB)")
    if len(data) - f.tell() != size:
        raise FormatError(f"{where}: declares shape {list(shape)} and dtype {dtype} ({size} bytes) but holds"
                          f" {len(data) - f.tell()} bytes")
    return dtype, tuple(shape)


def decode_array(obj, where: str, max_bytes: int) -> np.ndarray:
    """An ``ndarray`` object (or a ``LazyArray`` around one) as an array."""
    kind = _kind(obj)
    if kind in ("LazyArray", "LazyNumpyArray"):
        return decode_array(obj.get("values"), where, max_bytes)
    if kind != "ndarray" or not isinstance(obj.get("array"), str):
        found = f"a {kind}" if kind else type(obj).__name__
        raise FormatError(f"{where}: expected an encoded numpy array, found {found}")
    try:
        data = base64.b64decode(obj["array"].encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise FormatError(f"{where}: the array is not base64 (Polygraphy's older latin-1 form is not read)") from None
    if data.startswith(b"PK\x03\x04"):
        raise FormatError(f"{where}: an .npz archive inside the JSON (Polygraphy's oldest form) is not read")
    npy_header(data, where, max_bytes)
    return np.load(io.BytesIO(data), allow_pickle=False)


# Golden data is a few objects per array (an array's text is its base64 bytes): more
# objects than this is a file made to fill memory (60 MB of ``{}`` took 3 GB), refused
# while it is parsed.
MAX_OBJECTS = 1_000_000


class _TooMany(Exception):
    pass


def _decoder(max_objects: int) -> json.JSONDecoder:
    made = 0

    def counted(pairs):
        nonlocal made
        made += 1
        if made > max_objects:
            raise _TooMany
        return dict(pairs)

    return json.JSONDecoder(object_pairs_hook=counted)


def _parse(text: str, what: str, max_items: int = 0, max_objects: int = MAX_OBJECTS):
    """The JSON ``text``; where it is a list, one element at a time, refused past
    ``max_items`` elements (0: no limit) before the rest is parsed; and refused past
    ``max_objects`` objects in all."""
    decoder = _decoder(max_objects)
    try:
        start = _skip(text, 0)
        if not max_items or not text.startswith("[", start):
            return decoder.decode(text)
        items, i = [], _skip(text, start + 1)
        if text.startswith("]", i):
            return _end(text, i + 1, items)
        while True:
            item, i = decoder.raw_decode(text, i)
            items.append(item)
            if len(items) > max_items:
                raise FormatError(f"more than {max_items} iterations, more than a check runs ({max_items}"
                                  " samples)")
            i = _skip(text, i)
            if text.startswith("]", i):
                return _end(text, i + 1, items)
            if not text.startswith(",", i):
                raise json.JSONDecodeError("Expecting ',' delimiter", text, i)
            i = _skip(text, i + 1)
    except _TooMany:
        raise FormatError(f"not {what}: more than {max_objects:,} JSON objects") from None
    except RecursionError:
        raise FormatError(f"not {what}: nested too deeply") from None
    except FormatError:
        raise
    except ValueError as e:
        raise FormatError(f"not JSON: {e}") from None


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\n\r":
        i += 1
    return i


def _end(text: str, i: int, items: list) -> list:
    if _skip(text, i) != len(text):
        raise json.JSONDecodeError("Extra data", text, _skip(text, i))
    return items


# -- input data ---------------------------------------------------------------------

def dump_inputs(samples: Sequence[Mapping[str, np.ndarray]]) -> str:
    """Input data as ``polygraphy run --save-inputs`` writes it: a list of feed dicts."""
    return json.dumps([{name: encode_array(a) for name, a in feed.items()} for feed in samples], indent=4)


def load_inputs(text: str, max_bytes: int, max_samples: int = 0) -> List[Feed]:
    """The feed dicts of ``--save-inputs`` data: a list of them, or one alone; more than
    ``max_samples`` (0: any number) is refused before the rest is parsed."""
    data = _parse(text, "input data", max_samples)
    items = data if isinstance(data, list) else [data]
    samples = []
    for k, feed in enumerate(items):
        if not isinstance(feed, dict) or _kind(feed):
            raise FormatError(f"iteration {k}: expected a dict of input names to arrays"
                              + (" (is this --save-outputs data?)" if _kind(feed) == "RunResults" else ""))
        samples.append({name: decode_array(v, f"iteration {k}, input '{name}'", max_bytes)
                        for name, v in feed.items()})
    if not samples:
        raise FormatError("the input data holds no iteration")
    return samples


# -- run results --------------------------------------------------------------------

def dump_runs(runs: Runs) -> str:
    """Run results as ``polygraphy run --save-outputs`` writes them (a ``RunResults``:
    per runner, each iteration's outputs as ``LazyArray`` s, in order)."""
    lst = [[name, [{"outputs": {out: {"values": encode_array(a), MARKER: "LazyArray"} for out, a in it.items()},
                    "runtime": 0.0, "runner_name": name, MARKER: "IterationResult"} for it in iterations]]
           for name, iterations in runs]
    return json.dumps({"lst": lst, MARKER: "RunResults"}, indent=4)


def load_runs(text: str, max_bytes: int) -> Runs:
    """The runners' outputs of ``--save-outputs`` data, per iteration, by name."""
    data = _parse(text, "run results")
    if _kind(data) != "RunResults" or not isinstance(data.get("lst"), list):
        hint = " (is this --save-inputs data?)" if isinstance(data, list) else ""
        raise FormatError(f"not Polygraphy run results (a RunResults object){hint}")
    runs: Runs = []
    for entry in data["lst"]:
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)
                and isinstance(entry[1], list)):
            raise FormatError("a RunResults entry is not [runner name, [iteration results]]")
        name, iterations = entry
        outs = []
        for k, it in enumerate(iterations):
            where = f"runner '{name}', iteration {k}"
            if _kind(it) != "IterationResult" or not isinstance(it.get("outputs"), dict):
                raise FormatError(f"{where}: not an IterationResult")
            outs.append({out: decode_array(v, f"{where}, output '{out}'", max_bytes)
                         for out, v in it["outputs"].items()})
        runs.append((name, outs))
    if not runs:
        raise FormatError("the run results hold no runner")
    return runs
