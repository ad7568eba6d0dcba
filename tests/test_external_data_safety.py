"""External data from an untrusted model never makes legalize read or copy another file.

A secret file lies beside the model's folder. Models whose external-data ``location``
leads to it (``../secret``, an absolute path, a symlink in the folder, a symlinked
subfolder), on an initializer, a subgraph's initializer, a Constant node's ``value`` or
a sparse initializer, are bad input: exit 2, one line naming the tensor and the location,
nothing written, and the secret never opened (an audit hook sees every ``open``), so its
bytes are in no file. Offsets and lengths that are not byte counts inside the data file,
or a length that is not what the dims need, are bad input too, and so are TFLite
buffers stored by offset outside the file. A model whose data lies in a subfolder of its
own folder still works, from any working directory.
"""

from __future__ import annotations

import contextlib
import os
import re
import struct
import sys
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import legalizer
from legalizer.errors import BadInput
from helpers import make_model

F = TensorProto.FLOAT
W = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5
# The secret: 24 bytes that are also a valid [2, 3] float tensor, so that a leak would
# not fail on its size; no other file of a test holds them.
SECRET = np.frombuffer(b"SECRET-KEY-" + bytes(range(200, 213)), np.float32).reshape(2, 3)

# -- every file the process opens, while recording (audit events are never removed, so
#    one hook for the module, switched on and off) --------------------------------------
_OPENED: Optional[List[str]] = None


def _audit(event: str, args) -> None:
    if _OPENED is not None and event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        _OPENED.append(os.path.realpath(os.fsdecode(args[0])))


sys.addaudithook(_audit)


@contextlib.contextmanager
def _recording_opens():
    global _OPENED
    _OPENED = []
    try:
        yield _OPENED
    finally:
        _OPENED = None




# -- models ---------------------------------------------------------------------------

def _external(t: TensorProto, location: str, offset: Optional[str] = None,
              length: Optional[str] = None) -> TensorProto:
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        if value is not None:
            t.external_data.add(key=key, value=value)
    return t


# Every model here: x [2, 3] in, y [2, 3] out.
X = helper.make_tensor_value_info("x", F, [2, 3])
Y = helper.make_tensor_value_info("y", F, [2, 3])


def initializer_model(location: str, offset=None, length=None) -> onnx.ModelProto:
    w = _external(numpy_helper.from_array(W, "w"), location, offset, length)
    return make_model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], [X], [Y], [w])


def subgraph_model(location: str) -> onnx.ModelProto:
    w = _external(numpy_helper.from_array(W, "tw"), location)
    then_g = helper.make_graph([helper.make_node("Add", ["x", "tw"], ["t"], name="then_add")], "then", [],
                               [helper.make_tensor_value_info("t", F, [2, 3])], [w])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"], name="else_neg")], "else", [],
                               [helper.make_tensor_value_info("e", F, [2, 3])])
    return make_model([helper.make_node("If", ["cond"], ["y"], name="if", then_branch=then_g, else_branch=else_g)],
                      [X, helper.make_tensor_value_info("cond", TensorProto.BOOL, [])], [Y])


def constant_model(location: str) -> onnx.ModelProto:
    """y = x + c, c a Constant node whose value [3] is external: legalizing for tosa
    folds its rank expansion, which reads it."""
    c = _external(numpy_helper.from_array(W[0], "cv"), location)
    return make_model([helper.make_node("Constant", [], ["c"], name="const", value=c),
                       helper.make_node("Add", ["x", "c"], ["y"], name="add")], [X], [Y])


def sparse_model(location: str) -> onnx.ModelProto:
    values = _external(numpy_helper.from_array(W.reshape(-1), "sw"), location)
    indices = numpy_helper.from_array(np.arange(6, dtype=np.int64), "sw_idx")
    st = helper.make_sparse_tensor(values, indices, [2, 3])
    return make_model([helper.make_node("Add", ["x", "sw"], ["y"], name="add")], [X], [Y], sparse=[st])


def _layout(tmp_path: Path) -> Dict[str, Path]:
    """tmp/secret, tmp/elsewhere/w.bin (the secret too), tmp/model/ with a symlink to
    each (link.bin, and sub -> elsewhere), tmp/out/ for the output."""
    d = {k: tmp_path / k for k in ("model", "out", "elsewhere")}
    for p in d.values():
        p.mkdir()
    d["secret"] = tmp_path / "secret"
    d["secret"].write_bytes(SECRET.tobytes())
    (d["elsewhere"] / "w.bin").write_bytes(SECRET.tobytes())
    (d["model"] / "link.bin").symlink_to(d["secret"])
    (d["model"] / "sub").symlink_to(d["elsewhere"], target_is_directory=True)
    (d["model"] / "w.bin").write_bytes(W.tobytes())  # the model's own data, for the offset cases
    return d


OUTSIDE = "it must name a file inside the model's folder"

# name -> (model builder, location ("{secret}": the secret's absolute path), what the
# error line names, why)
ESCAPES = {
    "dotdot": (initializer_model, "../secret", "initializer 'w'", f"contains '..'; {OUTSIDE}"),
    "dotdot inside a path": (initializer_model, "sub2/../../secret", "initializer 'w'", f"contains '..'; {OUTSIDE}"),
    "absolute": (initializer_model, "{secret}", "initializer 'w'", f"is an absolute path; {OUTSIDE}"),
    "symlink to a file": (initializer_model, "link.bin", "initializer 'w'",
                          f"resolves outside the model's folder (through a symlink); {OUTSIDE}"),
    "symlinked subfolder": (initializer_model, "sub/w.bin", "initializer 'w'",
                            f"resolves outside the model's folder (through a symlink); {OUTSIDE}"),
    "subgraph initializer": (subgraph_model, "../secret", "initializer 'tw'", f"contains '..'; {OUTSIDE}"),
    "constant node value": (constant_model, "link.bin", "node 'const' attribute 'value'",
                            f"resolves outside the model's folder (through a symlink); {OUTSIDE}"),
    "sparse initializer values": (sparse_model, "{secret}", "sparse initializer 'sw'",
                                  f"is an absolute path; {OUTSIDE}"),
}


def _files_holding(root: Path, data: bytes, skip: Tuple[Path, ...]) -> List[Path]:
    return [p for p in root.rglob("*") if p.is_file() and not p.is_symlink() and p not in skip
            and data in p.read_bytes()]


@pytest.mark.parametrize("case", ESCAPES)
def test_a_location_outside_the_model_folder_is_refused_before_anything_is_read(case, tmp_path, legalize_in_process):
    build, location, what, why = ESCAPES[case]
    d = _layout(tmp_path)
    location = location.format(secret=d["secret"])
    src = d["model"] / "m.onnx"
    onnx.save_model(build(location), str(src))
    out = d["out"] / "m.onnx"
    with _recording_opens() as opened:
        code, stdout, stderr = legalize_in_process(src, "-o", out, "--target", "tosa")
    assert code == 2, (stdout, stderr)
    assert stderr.splitlines() == [f"legalize: error: {src}: {what}: external data location '{location}' {why}"]
    assert stdout == ""
    assert os.listdir(d["out"]) == []  # neither the model nor '<output>.data'
    assert sorted(os.listdir(d["model"])) == ["link.bin", "m.onnx", "sub", "w.bin"]
    secret_files = {str(d["secret"]), str(d["elsewhere"] / "w.bin")}
    assert not secret_files & set(opened), "the secret was opened"
    assert _files_holding(tmp_path, SECRET.tobytes(), (d["secret"], d["elsewhere"] / "w.bin")) == []

    # The library refuses it the same way: load, and check (which hands paths to onnxruntime).
    with pytest.raises(BadInput) as e:
        legalizer.load(src)
    assert str(e.value) == f"{src}: {what}: external data location '{location}' {why}"
    with pytest.raises(BadInput) as e:
        legalizer.check(src, src)
    assert str(e.value) == f"{src}: {what}: external data location '{location}' {why}"


def test_a_model_held_in_memory_is_not_written_with_data_from_outside_the_working_folder(tmp_path, monkeypatch):
    """``legalizer.save`` of a ModelProto (its locations relative to the working
    folder) into another folder streams the data into ``<output>.data``: refused for a
    location outside, nothing written; and ``legalizer.legalize`` of it refuses too."""
    d = _layout(tmp_path)
    monkeypatch.chdir(d["model"])
    for location, why in (("../secret", "contains '..'"),
                          ("link.bin", "resolves outside the model's folder (through a symlink)")):
        proto = initializer_model(location)
        with pytest.raises(BadInput) as e:
            legalizer.save(proto, d["out"] / "m.onnx")
        assert str(e.value) == f"initializer 'w': external data location '{location}' {why}; {OUTSIDE}"
        assert os.listdir(d["out"]) == []
        with pytest.raises(BadInput) as e:
            legalizer.legalize(proto, "tosa")
        assert str(e.value) == f"initializer 'w': external data location '{location}' {why}; {OUTSIDE}"


# -- offsets and lengths -----------------------------------------------------------------

SPANS = {  # (offset, length) of initializer w [2, 3] float in w.bin (24 bytes) -> why
    "negative offset": (("-4", None), "external data offset '-4' is not a number of bytes (a non-negative integer)"),
    "non-numeric offset": (("abc", None),
                           "external data offset 'abc' is not a number of bytes (a non-negative integer)"),
    "negative length": ((None, "-24"),
                        "external data length '-24' is not a number of bytes (a non-negative integer)"),
    "length past the end": (("8", "24"),
                            "external data 'w.bin' is 24 bytes, but the tensor's offset 8 and length 24 reach byte 32"),
    "offset past the end": (("4096", None), "external data 'w.bin' is shorter than the tensor (4120 > 24 bytes)"),
    "no length, data short": (("4", None), "external data 'w.bin' is shorter than the tensor (28 > 24 bytes)"),
    "length not the dims'": ((None, "20"),
                             "external data length 20 does not match its dims [2, 3] of float (24 bytes)"),
    "missing file": (("0", "24"), "external data file 'nowhere.bin' is missing"),
}


@pytest.mark.parametrize("case", SPANS)
def test_an_offset_or_length_that_is_not_a_span_of_the_file_is_bad_input(case, tmp_path, legalize_in_process):
    (offset, length), why = SPANS[case]
    d = _layout(tmp_path)
    src = d["model"] / "m.onnx"
    onnx.save_model(initializer_model("nowhere.bin" if case == "missing file" else "w.bin", offset, length), str(src))
    code, stdout, stderr = legalize_in_process(src, "-o", d["out"] / "m.onnx", "--target", "xla")
    assert (code, stdout) == (2, ""), stderr
    assert stderr.splitlines() == [f"legalize: error: {src}: initializer 'w': {why}"]
    assert os.listdir(d["out"]) == []


# -- what still works -------------------------------------------------------------------------

def _run_ort(path: Path, feeds) -> List[np.ndarray]:
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("build", [initializer_model, constant_model, subgraph_model],
                         ids=["initializer", "constant node", "subgraph"])
def test_data_in_a_subfolder_of_the_model_folder_still_works_from_any_working_folder(build, tmp_path,
                                                                                     monkeypatch, legalize_in_process):
    """With a decoy at the same relative path under the working folder: the data is read
    from the model's folder (a Constant's value was read from the working folder)."""
    src_dir, out_dir, cwd = tmp_path / "model", tmp_path / "out", tmp_path / "cwd"
    for p in (src_dir / "weights", out_dir, cwd / "weights"):
        p.mkdir(parents=True)
    m = build("weights/w.bin")
    data = W[0] if build is constant_model else W
    (src_dir / "weights" / "w.bin").write_bytes(data.tobytes())
    (cwd / "weights" / "w.bin").write_bytes((data * 100).tobytes())  # the decoy
    src = src_dir / "m.onnx"
    onnx.save_model(m, str(src))
    monkeypatch.chdir(cwd)
    out = out_dir / "m.onnx"
    code, stdout, stderr = legalize_in_process(src, "-o", out, "--target", "tosa")
    assert code == 0, (stdout, stderr)
    assert stdout.splitlines()[-1].endswith("outputs match on CPUExecutionProvider"), stdout
    # A Constant's value is folded (read) into an inline constant of the new rank.
    # The data goes to a file of its own name (m.onnx.<16 hex>.data), named by the model.
    written = sorted(os.listdir(out_dir))
    assert written[0] == "m.onnx" and len(written) == (1 if build is constant_model else 2), written
    if build is not constant_model:
        assert re.fullmatch(r"m\.onnx\.[0-9a-f]{16}\.data", written[1]), written
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    feeds = {"x": x, "cond": np.array(True)} if build is subgraph_model else {"x": x}
    (got,) = _run_ort(out, feeds)
    np.testing.assert_array_equal(got, x + W if build is not constant_model else x + W[0])
    decoy = (cwd / "weights" / "w.bin").read_bytes()
    assert all(decoy not in p.read_bytes() for p in out_dir.iterdir())


def test_a_symlink_that_stays_inside_the_model_folder_is_followed(tmp_path):
    src_dir = tmp_path / "model"
    (src_dir / "weights").mkdir(parents=True)
    (src_dir / "weights" / "real.bin").write_bytes(W.tobytes())
    (src_dir / "w.bin").symlink_to(src_dir / "weights" / "real.bin")
    src = src_dir / "m.onnx"
    onnx.save_model(initializer_model("w.bin"), str(src))
    model = legalizer.load(src)
    np.testing.assert_array_equal(model.graph.value("w").producer.data.array, W)


# -- TFLite: buffers stored by offset ---------------------------------------------------------

def _patched(data: bytes, buffer: int, field: str, old: int, new: int) -> bytes:
    """``data`` with buffer ``buffer``'s uint64 ``field`` (offset or size), now ``old``,
    set to ``new``, where the flatbuffer holds it (the same 8 bytes may stand elsewhere
    too)."""
    import tflite

    b = tflite.Model.GetRootAs(data, 0).Buffers(buffer)
    at = b._tab.Pos + b._tab.Offset({"offset": 6, "size": 8}[field])  # noqa: SLF001 - the schema's vtable slots
    assert struct.unpack_from("<Q", data, at)[0] == old
    return data[:at] + struct.pack("<Q", new) + data[at + 8:]


@pytest.mark.parametrize("field, value", [("offset", 2**40), ("size", 2**62), ("offset", 2**64 - 1)],
                         ids=["offset past the end", "size past the end", "largest offset"])
def test_a_tflite_buffer_outside_the_file_is_bad_input(field, value, tmp_path, legalize_in_process):
    from test_tflite import _buffer_layout, _offset_model

    data, _, _ = _offset_model()
    offset, size, _ = _buffer_layout(data)[2]
    bad = _patched(data, 2, field, offset if field == "offset" else size, value)
    offset, size = (value, size) if field == "offset" else (offset, value)
    src = tmp_path / "m.tflite"
    src.write_bytes(bad)
    code, stdout, stderr = legalize_in_process(src, "-o", tmp_path / "out.tflite")
    assert (code, stdout) == (2, ""), stderr
    assert stderr.splitlines() == [f"legalize: error: {src}: tensor 'd': buffer 2 lies past the end of the file"
                                   f" (bytes {offset}..{offset + size}, the file has {len(bad)})"]
    assert sorted(os.listdir(tmp_path)) == ["m.tflite"]
