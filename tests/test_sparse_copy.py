"""External data is copied as the file system allows (issue 30, item 8): in the kernel
(``copy_file_range``), holes kept (``SEEK_DATA``/``SEEK_HOLE``), so that a sparse
weight file gives a sparse output in a moment and a dense one never passes through
``legalize``'s memory."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto as T, helper, numpy_helper

from legalizer.kinds.onnx import exporter as exporter

from helpers import lines


def _external(name: str, dims, location: str, offset: int) -> T:
    t = T()
    t.name, t.data_type, t.data_location = name, T.FLOAT, T.EXTERNAL
    t.dims.extend(dims)
    n = int(np.prod(dims)) * 4
    for k, v in (("location", location), ("offset", str(offset)), ("length", str(n))):
        t.external_data.add(key=k, value=v)
    return t


def _model(path: Path, weights) -> Path:
    """``x + w0 + w1 ...``: each weight an external tensor."""
    nodes, prev = [], "x"
    for i, w in enumerate(weights):
        nodes.append(helper.make_node("Add", [prev, w.name], [f"v{i}"]))
        prev = f"v{i}"
    n = weights[0].dims[0]
    g = helper.make_graph(nodes, "ext", [helper.make_tensor_value_info("x", T.FLOAT, [n])],
                          [helper.make_tensor_value_info(prev, T.FLOAT, [n])], list(weights))
    path.write_bytes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
                     .SerializeToString())
    return path


def _data_file(folder: Path) -> Path:
    [data] = [p for p in folder.iterdir() if p.name.endswith(".data")]
    return data


def test_a_sparse_8_gib_weight_gives_a_sparse_output_in_seconds(tmp_path, legalize):
    """A 142-byte model whose weights are an 8 GiB file of 0 bytes on disk: the run wrote
    a dense 8 GiB .data (101 s); now the output's data is as sparse as its input."""
    n = 1 << 31
    model = _model(tmp_path / "sparse.onnx", [_external("w", [n], "w.bin", 0)])
    with open(tmp_path / "w.bin", "wb") as f:
        f.truncate(4 * n)
    out = tmp_path / "out"
    out.mkdir()
    t0 = time.monotonic()
    p = legalize(model, out / "o.onnx", "--no-check", "-q", timeout=300)
    took = time.monotonic() - t0
    assert p.returncode == 0, p.stderr
    assert lines(p.stderr) == []
    data = _data_file(out)
    assert data.stat().st_size == 4 * n
    assert data.stat().st_blocks * 512 < 1 << 20  # allocated: none of the 8 GiB
    assert took < 60, took


def test_holes_and_data_are_copied_where_they_were(tmp_path):
    """Weights at odd offsets of two files, one with a 64 MiB hole inside it, one shared
    by two tensors: each tensor reads back the same, keeps its offset within a block, and
    the hole stays one."""
    n = 1 << 20  # 4 MiB a tensor (b: 68 MiB, its middle 64 MiB a hole)
    hole = 64 << 20
    rng = np.random.default_rng(3)
    a, c = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    b = np.concatenate([rng.standard_normal(n // 2), np.zeros(hole // 4), rng.standard_normal(n // 2)]) \
        .astype(np.float32)
    b_at = 12 + 4 * n + 4096 * 3 + 100
    with open(tmp_path / "one.bin", "wb") as f:
        f.write(b"\1" * 12 + a.tobytes())
        f.seek(b_at)
        f.write(b[:n // 2].tobytes())
        f.seek(b_at + 2 * n + hole)
        f.write(b[n // 2 + hole // 4:].tobytes())
    (tmp_path / "two.bin").write_bytes(b"\2" * 5 + c.tobytes())
    weights = [_external("a", [n], "one.bin", 12), _external("b", [b.size], "one.bin", b_at),
               _external("c", [n], "two.bin", 5), _external("a2", [n], "one.bin", 12)]
    model = onnx.load(str(_model(tmp_path / "m.onnx", weights[:1])), load_external_data=False)
    del model.graph.initializer[:]
    model.graph.initializer.extend(weights)
    out = tmp_path / "out"
    out.mkdir()
    data = out / "o.data"
    inits = [(t.name, t) for t in model.graph.initializer]
    exporter._copy_external(inits, tmp_path, data, data.name)  # noqa: SLF001
    offsets = [int(dict((e.key, e.value) for e in t.external_data)["offset"]) for t in model.graph.initializer]
    for t, want in zip(model.graph.initializer, (a, b, c, a)):
        onnx.external_data_helper.load_external_data_for_tensor(t, str(out))
        np.testing.assert_array_equal(numpy_helper.to_array(t), want)
    assert offsets[0] == offsets[3]  # shared bytes, copied once
    assert [o % 4096 for o in offsets[:3]] == [12, b_at % 4096, 5]
    assert data.stat().st_size == offsets[2] + 4 * n
    assert data.stat().st_blocks * 512 < data.stat().st_size - hole + (1 << 20)  # the hole is not written


def test_a_file_that_shrank_since_it_was_checked_is_one_line(tmp_path, monkeypatch):
    n = 1024
    (tmp_path / "w.bin").write_bytes(np.zeros(n, np.float32).tobytes())
    model = onnx.load(str(_model(tmp_path / "m.onnx", [_external("w", [n], "w.bin", 0)])), load_external_data=False)
    checked = exporter.external_data

    def shrink_after_check(t, base, what):
        ext = checked(t, base, what)
        os.truncate(tmp_path / "w.bin", 100)
        return ext

    monkeypatch.setattr(exporter, "external_data", shrink_after_check)
    import pytest

    from legalizer.errors import BadInput

    with pytest.raises(BadInput, match=r"^initializer 'w': external data 'w.bin' is shorter than its length"
                                       r" \(4096 bytes\)$"):
        exporter._copy_external([("initializer 'w'", model.graph.initializer[0])], tmp_path,  # noqa: SLF001
                                tmp_path / "o.data", "o.data")
