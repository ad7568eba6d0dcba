"""The ONNX conformance corpus the round-trip and verifier tests run over: every model
shipped in the onnx wheel's backend test data and every ONNX node test, with their
input data, and a careful onnxruntime runner.

A case onnxruntime cannot run (an op it lacks, an IR version or opset newer than it
supports, a missing locale, ...) is never silently skipped: ``ort_run`` returns the
reason, and the tests count the reasons.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import os
import re
import warnings
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

import numpy as np
import onnx
import onnx.numpy_helper
import onnxruntime as ort
from onnx import helper

WHEEL_DATA = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
WHEEL_FOLDERS = ("light", "pytorch-converted", "pytorch-operator", "simple")
SEED = 0


@dataclass
class Case:
    name: str  # node test name, or "<folder>/<model dir or file stem>" for wheel models
    path: Optional[str] = None  # the .onnx file, for wheel models
    _model: Optional[onnx.ModelProto] = None
    _feeds: Optional[List[Dict[str, Any]]] = None  # None: synthesize from the input types
    refs: Optional[List[list]] = None  # node tests: the reference outputs of each data set
    rtol: float = 1e-3  # the case's tolerances (onnx's TestCase defaults)
    atol: float = 1e-7

    @property
    def model(self) -> onnx.ModelProto:
        if self._model is None:
            self._model = onnx.load_model(self.path)
        return self._model

    def feeds(self) -> List[Dict[str, Any]]:
        if self._feeds is None:
            self._feeds = _wheel_feeds(self) or [synthesize(self.model)]
        return self._feeds


# ---- the corpus -----------------------------------------------------------------------
def wheel_cases() -> List[Case]:
    """Every ``*.onnx`` under the wheel's light, pytorch-converted, pytorch-operator
    and simple folders (the ``real`` folder holds download links only)."""
    out = []
    for folder in WHEEL_FOLDERS:
        for path in sorted(glob.glob(os.path.join(WHEEL_DATA, folder, "**", "*.onnx"), recursive=True)):
            rel = os.path.relpath(path, os.path.join(WHEEL_DATA, folder))
            stem = os.path.dirname(rel) if os.path.basename(rel) == "model.onnx" else rel[: -len(".onnx")]
            out.append(Case(f"{folder}/{stem}", path))
    return out


@functools.lru_cache(maxsize=None)
def node_cases() -> List[Case]:
    """The ONNX node tests (models built in memory, with their data sets)."""
    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the test generators overflow casts on purpose
        tests = load_model_tests(kind="node")
    out = []
    for t in sorted(tests, key=lambda t: t.name):
        names = [vi.name for vi in t.model.graph.input]
        feeds = [dict(zip(names, inputs)) for inputs, _ in t.data_sets]
        refs = [list(outputs) for _, outputs in t.data_sets]
        out.append(Case(t.name, None, t.model, feeds, refs, t.rtol, t.atol))
    return out


def node_groups() -> Dict[str, List[Case]]:
    """Node tests grouped by the first letter of the op they test (``test_add`` -> a)."""
    groups: Dict[str, List[Case]] = {}
    for c in node_cases():
        groups.setdefault(c.name[len("test_"):][:1].lower(), []).append(c)
    return groups


def _wheel_feeds(case: Case) -> List[Dict[str, Any]]:
    """The inputs of a wheel model's ``test_data_set_*`` folders, typed by the model's
    graph inputs (those that are not initializers), in order."""
    if case.path is None:
        return []
    model = case.model
    inits = {t.name for t in model.graph.initializer}
    inputs = [vi for vi in model.graph.input if vi.name not in inits]
    feeds = []
    sets = sorted(glob.glob(os.path.join(os.path.dirname(case.path), "test_data_set_*")))
    for d in sets:
        files = sorted(glob.glob(os.path.join(d, "input_*.pb")),
                       key=lambda p: int(re.search(r"input_(\d+)\.pb$", p).group(1)))
        feed = {}
        for vi, f in zip(inputs, files):
            with open(f, "rb") as fh:
                feed[vi.name] = _read_value(fh.read(), vi.type)
        feeds.append(feed)
    return feeds


def _read_value(data: bytes, tp: onnx.TypeProto) -> Any:
    kind = tp.WhichOneof("value")
    if kind == "sequence_type":
        p = onnx.SequenceProto()
        p.ParseFromString(data)
        return onnx.numpy_helper.to_list(p)
    if kind == "map_type":
        p = onnx.MapProto()
        p.ParseFromString(data)
        return onnx.numpy_helper.to_dict(p)
    if kind == "optional_type":
        p = onnx.OptionalProto()
        p.ParseFromString(data)
        return onnx.numpy_helper.to_optional(p)
    p = onnx.TensorProto()
    p.ParseFromString(data)
    return p  # converted in _ort_value (it may be a type numpy lacks)


def synthesize(model: onnx.ModelProto, seed: int = SEED) -> Dict[str, Any]:
    """Inputs made from the declared input types, with a fixed seed: unknown and
    symbolic dims are 1; floats standard normal, integers in [0, 5), bools random."""
    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    feed = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        feed[vi.name] = _synth(rng, vi.type, vi.name)
    return feed


def _synth(rng, tp: onnx.TypeProto, name: str) -> Any:
    kind = tp.WhichOneof("value")
    if kind == "sequence_type":
        return [_synth(rng, tp.sequence_type.elem_type, name) for _ in range(2)]
    if kind == "optional_type":
        return _synth(rng, tp.optional_type.elem_type, name)
    if kind != "tensor_type":
        raise ValueError(f"cannot synthesize input '{name}' of type {kind}")
    tt = tp.tensor_type
    shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in tt.shape.dim)
    dtype = helper.tensor_dtype_to_np_dtype(tt.elem_type)
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if dtype.kind in "iu":
        return rng.integers(0, 5, shape).astype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind in "OSU":
        return np.array(rng.choice(["a", "bc", "def"], shape), dtype=object)
    raise ValueError(f"cannot synthesize input '{name}' of element type {tt.elem_type}")


# ---- onnxruntime ------------------------------------------------------------------------
def _session_options() -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1  # deterministic reductions, and cheap for tiny models
    so.inter_op_num_threads = 1
    so.log_severity_level = 4
    return so


def _ort_value(x: Any) -> Any:
    """A test-data value as onnxruntime takes it: numpy arrays as they are, arrays of
    types numpy lacks (bfloat16, float8, ...; ml_dtypes) as OrtValues of their bits."""
    if isinstance(x, onnx.TensorProto):
        return _ort_tensor(onnx.numpy_helper.to_array(x), x.data_type)
    if isinstance(x, np.ndarray):
        return _ort_tensor(x, None)
    if isinstance(x, (list, tuple)):
        return [_ort_value(y) for y in x]
    if isinstance(x, dict):
        return {k: _ort_value(v) for k, v in x.items()}
    if x is None:
        return None
    return np.asarray(x)


def _ort_tensor(a: np.ndarray, elem_type: Optional[int]) -> Any:
    if a.dtype.isbuiltin == 1 and a.dtype.kind in "biufcOSU":  # ml_dtypes' are user-defined (2)
        return a
    if elem_type is None:
        elem_type = helper.np_dtype_to_tensor_dtype(a.dtype)
    bits = np.ascontiguousarray(a).view(np.dtype(f"u{a.dtype.itemsize}"))
    width = _SUB_BYTE.get(elem_type)
    if width:
        bits = _packed(bits, width)
    return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, elem_type)


# Element types narrower than a byte, by bit width (INT2/UINT2 from onnx 1.20).
_SUB_BYTE = {getattr(onnx.TensorProto, n): w for n, w in
             (("INT4", 4), ("UINT4", 4), ("FLOAT4E2M1", 4), ("INT2", 2), ("UINT2", 2))
             if hasattr(onnx.TensorProto, n)}


def _packed(bits: np.ndarray, width: int) -> np.ndarray:
    """onnxruntime reads a sub-byte tensor packed (element 0 in the lowest bits of byte 0)
    from the start of the array it is given, whose shape is the logical one: ml_dtypes
    keep one element a byte, so pack them into the front of an array of that shape."""
    per = 8 // width
    flat = (bits.ravel() & ((1 << width) - 1)).astype(np.uint8)
    flat = np.pad(flat, (0, -flat.size % per))
    packed = np.zeros(flat.size // per, np.uint8)
    for k in range(per):
        packed |= flat[k::per] << (k * width)
    out = np.zeros(bits.shape, np.uint8)
    out.reshape(-1)[: packed.size] = packed
    return out


def _from_ort(v: Any) -> Any:
    """An OrtValue output as something comparable: its numpy array, or for types numpy
    lacks (element type, shape, raw bytes)."""
    if isinstance(v, ort.OrtValue):
        try:
            return v.numpy()
        except Exception:  # noqa: BLE001 - e.g. "No corresponding Numpy type ... bfloat16"
            raw = ctypes.string_at(v.data_ptr(), v.tensor_size_in_bytes())
            return ("raw", v.element_type(), tuple(v.shape()), raw)
    return v


@dataclass
class OrtRun:
    """Outputs per feed, or why onnxruntime could not run the model."""

    outputs: Optional[List[list]] = None
    reason: Optional[str] = None
    stage: str = ""  # "session" or "run" where it failed


def ort_run(model_bytes: bytes, feeds: List[Dict[str, Any]]) -> OrtRun:
    """Run ``model_bytes`` on onnxruntime's CPU provider over each feed."""
    try:
        sess = ort.InferenceSession(model_bytes, _session_options(), providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - any failure is a reason, counted by the tests
        return OrtRun(reason=_reason(e), stage="session")
    outputs = []
    try:
        for feed in feeds:
            feed = {k: _ort_value(v) for k, v in feed.items()}
            try:
                outputs.append(sess.run(None, feed))
            except RuntimeError as e:
                if "No corresponding Numpy type" not in str(e):
                    raise
                # An output numpy cannot hold (bfloat16, ...): fetch the raw OrtValues.
                vals = {k: v if isinstance(v, ort.OrtValue) else ort.OrtValue.ortvalue_from_numpy(v)
                        for k, v in feed.items()}
                outputs.append([_from_ort(o) for o in sess.run_with_ort_values(None, vals)])
    except Exception as e:  # noqa: BLE001
        return OrtRun(reason=_reason(e), stage="run")
    return OrtRun(outputs=outputs)


def _reason(e: Exception) -> str:
    """A short, stable reason: the first line of the message, numbers and paths removed."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    text = re.sub(r"/\S+:\d+ ", "", text)
    text = re.sub(r"\[ONNXRuntimeError\] : \d+ : ", "", text)
    m = re.search(r"(Unsupported model IR version|Current official support for domain \S+ is till opset"
                  r"|Could not find an implementation for \w+|is not a registered function/op"
                  r"|Unrecognized attribute: \w+|locale|not supported)", text)
    return m.group(1) if m else text[:160]


@functools.lru_cache(maxsize=None)
def original_run(case_name: str) -> OrtRun:
    """``ort_run`` of a case's original model, once per test session (the round-trip and
    the verifier tests both need it)."""
    case = case_by_name(case_name)
    return ort_run(case.model.SerializeToString(), case.feeds())


@functools.lru_cache(maxsize=None)
def _all_cases() -> Dict[str, Case]:
    return {c.name: c for c in wheel_cases() + node_cases()}


def case_by_name(name: str) -> Case:
    return _all_cases()[name]


def assert_outputs_equal(got: list, want: list, what: str) -> None:
    """Exact equality, NaN-aware, of two output lists (arrays, sequences, maps, raw)."""
    assert len(got) == len(want), f"{what}: {len(got)} outputs vs {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        _assert_equal(g, w, f"{what}, output #{k}")


def _assert_equal(g: Any, w: Any, what: str) -> None:
    if isinstance(w, (list, tuple)) and not (isinstance(w, tuple) and w and w[0] == "raw"):
        assert isinstance(g, (list, tuple)) and len(g) == len(w), f"{what}: {g!r} vs {w!r}"
        for i, (a, b) in enumerate(zip(g, w)):
            _assert_equal(a, b, f"{what}[{i}]")
    elif isinstance(w, dict):
        assert isinstance(g, dict) and g.keys() == w.keys(), f"{what}: keys differ"
        for k in w:
            _assert_equal(g[k], w[k], f"{what}[{k!r}]")
    elif w is None or isinstance(w, tuple):
        assert g == w, f"{what}: {g!r} vs {w!r}"
    else:
        assert isinstance(g, np.ndarray) == isinstance(w, np.ndarray), f"{what}: {type(g)} vs {type(w)}"
        if isinstance(w, np.ndarray):
            assert g.dtype == w.dtype and g.shape == w.shape, \
                f"{what}: {g.dtype}{g.shape} vs {w.dtype}{w.shape}"
        np.testing.assert_array_equal(g, w, err_msg=what)
