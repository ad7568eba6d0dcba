"""Run .tflite models on LiteRT (the ``ai-edge-litert`` package), for the numeric check
of TFLite models: original and legalized run on the same inputs and kernels.

    run_tflite(path_or_bytes, {"x": array}, subgraph=0)      -> {tensor name: array}
    input_specs(path_or_bytes, subgraph=0)                    -> [InputSpec(name, dtype, shape_signature, quantization)]
    LiteRTModel(path_or_bytes)                                 -> loads once; .run(...), .input_specs(...)

``subgraph`` is a subgraph index or a SignatureDef key. Inputs are given, and outputs
come back, keyed by tensor name (a signature's own input names are accepted too).
A dynamic dim (-1 in ``shape_signature``) is resized to the given array's size; a static
dim must match.

Kernels: the interpreter is made with ``BUILTIN_WITHOUT_DEFAULT_DELEGATES`` and one
thread. LiteRT's default (AUTO/BUILTIN) applies the XNNPACK delegate to the graph, which
partitions, fuses and reorders float work differently depending on the graph around
each op, so the original and the legalized graph (which has extra RESHAPEs) could get
slightly different float results for the same computation. Without default delegates
every op runs on TFLite's own builtin kernel, single-threaded and deterministic.
``kernels="reference"`` picks BUILTIN_REF (TFLite's reference kernels: slower, the most
literal reading of each op) instead, ``kernels="default"`` LiteRT's default resolver with
its default delegate (XNNPACK), which also runs some custom ops (MediaPipe's
``Convolution2DTransposeBias``, ``MaxPoolingWithArgmax2D``, ``MaxUnpooling2D``) that no
builtin kernel resolves: the check falls back to it for such a model (``unresolved_custom_op``).

Failures are one line: ``CheckUnavailable`` when ai-edge-litert is not installed,
``LiteRTError`` (``.stage`` is load, resize, allocate, set, invoke or get) when LiteRT
rejects the model or the inputs.
"""

from __future__ import annotations

import os
import re
from typing import Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np

from ..errors import CheckUnavailable
from ..extras import install_hint
from . import inputs
from .runner import Runner

INSTALL_HINT = f"install the litert extra: {install_hint('litert')}"

Source = Union[str, "os.PathLike[str]", bytes, bytearray]


class LiteRTError(RuntimeError):
    """LiteRT rejected the model or the inputs; the message is one line."""

    def __init__(self, stage: str, message: str):
        super().__init__(f"LiteRT {stage} failed: {message}")
        self.stage = stage
        self.reason = message


class InputSpec(NamedTuple):
    name: str
    dtype: np.dtype
    shape_signature: List[int]  # -1 for a dynamic dim
    quantization: Tuple[float, int]  # (scale, zero_point); (0.0, 0) when not quantized


def litert_available() -> bool:
    """Whether ai-edge-litert's interpreter can be imported."""
    try:
        _interpreter_module()
    except CheckUnavailable:
        return False
    return True


def _interpreter_module():
    try:
        from ai_edge_litert import interpreter
    except ImportError as e:  # also a broken install (missing shared library)
        raise CheckUnavailable(f"the TFLite check needs ai-edge-litert ({INSTALL_HINT}): {_joined_lines(e)}") from None
    return interpreter


def _joined_lines(e: BaseException, limit: int = 400) -> str:
    """LiteRT's messages span lines ('...not broadcastable.' / 'Node number 0 (ADD)
    failed to prepare.'): keep each distinct line, joined into one."""
    lines = []
    # LiteRT glues its error reporter's lines together without a newline.
    text = re.sub(r"(?<=\S)(Node number \d+)", r"\n\1", str(e))
    for line in text.splitlines():
        line = line.strip()
        if line and line not in lines:
            lines.append(line)
    text = "; ".join(lines) or type(e).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."


class LiteRTModel:
    """One loaded .tflite model (path or bytes) on a LiteRT interpreter."""

    def __init__(self, source: Source, *, kernels: str = "builtin", num_threads: int = 1,
                 keep_tensors: bool = False):
        """``keep_tensors``: LiteRT keeps every intermediate tensor of a run (more
        memory), for ``tensors()``."""
        mod = _interpreter_module()
        resolver = {
            "builtin": mod.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
            "reference": mod.OpResolverType.BUILTIN_REF,
            "default": mod.OpResolverType.AUTO,
        }.get(kernels)
        if resolver is None:
            raise ValueError(f"kernels must be 'builtin', 'reference' or 'default', not {kernels!r}")
        self.kernels = kernels
        self._content: Optional[bytes] = None
        if isinstance(source, (bytes, bytearray)):
            self._content = bytes(source)
            kwargs = {"model_content": self._content}
            self.label = "<bytes>"
        else:
            path = os.fspath(source)
            if not os.path.isfile(path):
                raise LiteRTError("load", f"no such file: {path}")
            kwargs = {"model_path": path}
            self.label = path
        try:
            self.interpreter = mod.Interpreter(experimental_op_resolver_type=resolver, num_threads=num_threads,
                                               experimental_preserve_all_tensors=keep_tensors, **kwargs)
        except Exception as e:  # noqa: BLE001 - LiteRT's words are the reason
            raise LiteRTError("load", _joined_lines(e)) from None
        try:
            self._signatures = self.interpreter.get_signature_list() or {}
        except Exception:  # noqa: BLE001
            self._signatures = {}
        self._subgraph_of_sig: Dict[str, int] = {}
        for key in self._signatures:
            try:
                self._subgraph_of_sig[key] = int(
                    self.interpreter._interpreter.GetSubgraphIndexFromSignature(key))  # noqa: SLF001
            except Exception:  # noqa: BLE001
                pass

    def unresolved_custom_op(self) -> str:
        """LiteRT's words if a custom op of the model has no kernel here (found when the
        primary subgraph's tensors are allocated), else ""."""
        try:
            self.interpreter.allocate_tensors()
        except Exception as e:  # noqa: BLE001
            text = _joined_lines(e)
            return text if "unresolved custom op" in text else ""
        return ""

    # -- choosing what to run ------------------------------------------------------

    @property
    def signatures(self) -> List[str]:
        return list(self._signatures)

    def _target(self, subgraph: Union[int, str]) -> "_Target":
        if isinstance(subgraph, str):
            if subgraph not in self._signatures:
                have = ", ".join(self._signatures) or "none"
                raise LiteRTError("load", f"no signature '{subgraph}' in {self.label} (signatures: {have})")
            return _SignatureTarget(self, subgraph)
        if subgraph == 0:
            return _PrimaryTarget(self)
        for key, index in self._subgraph_of_sig.items():
            if index == subgraph:
                return _SignatureTarget(self, key)
        return _SubgraphTarget(self, subgraph)

    # -- public API ----------------------------------------------------------------

    def input_specs(self, subgraph: Union[int, str] = 0) -> List[InputSpec]:
        return [_spec(d) for _, d in self._target(subgraph).inputs()]

    def output_names(self, subgraph: Union[int, str] = 0) -> List[str]:
        return [d["name"] for _, d in self._target(subgraph).outputs()]

    def run(self, inputs: Mapping[str, np.ndarray], subgraph: Union[int, str] = 0) -> Dict[str, np.ndarray]:
        target = self._target(subgraph)
        declared = target.inputs()  # [(key, details)]: key is what the runner is fed by
        feeds = _match_inputs(declared, inputs)
        for (key, d), value in zip(declared, feeds):
            _check_fits(d, value)
        try:
            return target.run(list(zip(declared, feeds)))
        except LiteRTError:
            raise
        except Exception as e:  # noqa: BLE001
            raise LiteRTError(getattr(e, "_stage", "invoke"), _joined_lines(e)) from None


    def tensors(self) -> Dict[str, np.ndarray]:
        """Every tensor of subgraph 0 after the last ``run`` of it, by name (with
        ``keep_tensors``; else LiteRT may have reused intermediate buffers). A name two
        tensors share, and a tensor LiteRT cannot give, is left out."""
        details = self.interpreter.get_tensor_details()
        counts: Dict[str, int] = {}
        for d in details:
            counts[d["name"]] = counts.get(d["name"], 0) + 1
        out = {}
        for d in details:
            if counts[d["name"]] == 1:
                try:
                    out[d["name"]] = np.asarray(self.interpreter.get_tensor(d["index"]))
                except Exception:  # noqa: BLE001 - a tensor without data (unused, freed)
                    pass
        return out


def _spec(d) -> InputSpec:
    sig = d.get("shape_signature")
    sig = list(d["shape"]) if sig is None or len(sig) != len(d["shape"]) else list(sig)
    scale, zp = d.get("quantization", (0.0, 0))
    return InputSpec(d["name"], np.dtype(d["dtype"]), [int(v) for v in sig], (float(scale), int(zp)))


def _match_inputs(declared, inputs: Mapping[str, np.ndarray]) -> List[np.ndarray]:
    """The given arrays in declared order, by tensor name (or signature input name)."""
    out = []
    used = set()
    for key, d in declared:
        for name in (d["name"], key):
            if name in inputs:
                out.append(np.asarray(inputs[name]))
                used.add(name)
                break
        else:
            raise LiteRTError("set", f"no value given for input '{d['name']}'")
    extra = sorted(set(inputs) - used)
    if extra:
        raise LiteRTError("set", f"unknown input(s): {', '.join(extra)} (inputs: "
                          f"{', '.join(d['name'] for _, d in declared)})")
    return out


def _check_fits(d, value: np.ndarray) -> None:
    spec = _spec(d)
    if value.dtype != spec.dtype:
        raise LiteRTError("set", f"input '{spec.name}' is {spec.dtype}, got {value.dtype}")
    if value.ndim != len(spec.shape_signature) or any(
            s != -1 and s != v for s, v in zip(spec.shape_signature, value.shape)):
        raise LiteRTError("resize", f"input '{spec.name}' has shape signature {spec.shape_signature},"
                          f" got shape {list(value.shape)}")


def _staged(stage: str, fn, *args):
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001
        raise LiteRTError(stage, _joined_lines(e)) from None


class _Target:
    def __init__(self, model: LiteRTModel):
        self.model = model
        self.it = model.interpreter


class _PrimaryTarget(_Target):
    """Subgraph 0 through the interpreter's public API."""

    def inputs(self):
        return [(d["name"], d) for d in self.it.get_input_details()]

    def outputs(self):
        return [(d["name"], d) for d in self.it.get_output_details()]

    def run(self, feeds):
        it = self.it
        for (_, d), value in feeds:
            if list(d["shape"]) != list(value.shape):
                # strict=True: LiteRT itself refuses to change a static dim.
                _staged("resize", it.resize_tensor_input, d["index"], list(value.shape), True)
        _staged("allocate", it.allocate_tensors)
        for (_, d), value in feeds:
            _staged("set", it.set_tensor, d["index"], value)
        _staged("invoke", it.invoke)
        return {d["name"]: _staged("get", it.get_tensor, d["index"]) for d in it.get_output_details()}


class _SignatureTarget(_Target):
    """A SignatureDef, through get_signature_runner (its own subgraph and names)."""

    def __init__(self, model: LiteRTModel, key: str):
        super().__init__(model)
        self.key = key
        self.runner = _staged("load", model.interpreter.get_signature_runner, key)

    def inputs(self):
        return list(self.runner.get_input_details().items())

    def outputs(self):
        return list(self.runner.get_output_details().items())

    def run(self, feeds):
        # The runner resizes every input to the array's shape (strict=False), allocates
        # and invokes; _check_fits has already kept static dims as they are.
        result = _staged("invoke", lambda: self.runner(**{key: value for (key, _), value in feeds}))
        names = dict((key, d["name"]) for key, d in self.outputs())
        return {names.get(k, k): v for k, v in result.items()}


class _SubgraphTarget(_Target):
    """A subgraph with no SignatureDef (k > 0): LiteRT's Python API has no public entry
    for it, so this drives the interpreter wrapper with the subgraph index, as the
    signature runner does, and reads the subgraph's inputs/outputs from the flatbuffer."""

    def __init__(self, model: LiteRTModel, index: int):
        super().__init__(model)
        self.index = index
        self.wrapper = getattr(model.interpreter, "_interpreter", None)
        count = _staged("load", self.wrapper.NumSubgraphs) if self.wrapper is not None else 0
        if self.wrapper is None or not 0 <= index < count:
            raise LiteRTError("load", f"no subgraph {index} in {model.label} ({count} subgraphs)")
        self._ins, self._outs = _io_indices(model, index)

    def _details(self, idx):
        return _staged("load", self.it._get_tensor_details, idx, self.index)  # noqa: SLF001

    def inputs(self):
        return [(d["name"], d) for d in (self._details(i) for i in self._ins)]

    def outputs(self):
        return [(d["name"], d) for d in (self._details(i) for i in self._outs)]

    def run(self, feeds):
        w, k = self.wrapper, self.index
        for (_, d), value in feeds:
            _staged("resize", w.ResizeInputTensor, d["index"], np.array(value.shape, np.int32), False, k)
        _staged("allocate", w.AllocateTensors, k)
        for (_, d), value in feeds:
            try:
                w.SetTensor(d["index"], value, k)
            except Exception as e:  # noqa: BLE001
                # LiteRT allocates no memory for an input that no op of the subgraph
                # reads (a WHILE condition that looks at some loop variables only)
                if "unallocated" not in str(e):
                    raise LiteRTError("set", _joined_lines(e)) from None
        _staged("invoke", w.Invoke, k)
        return {d["name"]: _staged("get", w.GetTensor, d["index"], k) for _, d in self.outputs()}


def _io_indices(model: LiteRTModel, index: int) -> Tuple[List[int], List[int]]:
    import tflite

    data = model._content  # noqa: SLF001
    if data is None:
        with open(model.label, "rb") as f:
            data = f.read()
    sg = tflite.Model.GetRootAs(data, 0).Subgraphs(index)
    ins = [int(v) for v in sg.InputsAsNumpy()] if sg.InputsLength() else []
    outs = [int(v) for v in sg.OutputsAsNumpy()] if sg.OutputsLength() else []
    return ins, outs


class LiteRTRunner(Runner):
    """One subgraph (an index or a signature key) of a .tflite model on LiteRT; the
    source is a path, bytes, or a loaded ``LiteRTModel`` (the runners of several
    subgraphs share it).

    Its intermediate values (``values``, of the primary subgraph of a model given as a
    path) are asked of a copy of the model whose subgraph 0 gives them out (its other
    tensors' buffers reused as LiteRT plans them), so that a run holds those values, not
    every one; a model whose weights lie outside its flatbuffer (buffer offsets) keeps
    every tensor instead."""

    name = "LiteRT"

    def __init__(self, source: Union[Source, LiteRTModel], subgraph: Union[int, str] = 0, *,
                 kernels: str = "builtin", keep_tensors: bool = False):
        super().__init__()
        self.source, self.subgraph = source, subgraph
        self.kernels, self.keep_tensors = kernels, keep_tensors
        self.model: Optional[LiteRTModel] = source if isinstance(source, LiteRTModel) else None
        self._table = None  # the model's tables, read when values are first asked for
        self._index: Dict[str, int] = {}  # tensor name -> index (names two tensors share left out)
        self._ops: List[str] = []

    def activate_impl(self) -> None:
        if self.model is None:
            self.model = LiteRTModel(self.source, kernels=self.kernels, keep_tensors=self.keep_tensors)

    def input_specs(self) -> List["inputs.InputSpec"]:
        """The interpreter's inputs: a dynamic dim keyed ``input[axis]``, an integer input
        with a scale quantized."""
        from onnx import helper

        out = []
        for s in self.model.input_specs(self.subgraph):
            try:
                code = helper.np_dtype_to_tensor_dtype(s.dtype)
            except (KeyError, ValueError, TypeError):
                out.append(inputs.InputSpec(s.name, 0, (), unavailable=f"input '{s.name}' is of type {s.dtype},"
                                                                        " which the check does not make"))
                continue
            out.append(inputs.InputSpec(s.name, code, inputs.static_or_key(s.name, s.shape_signature),
                                        s.quantization[0] != 0.0 and s.dtype.kind in "iu"))
        return out

    def output_names(self) -> List[str]:
        return self.model.output_names(self.subgraph)

    def select(self, subgraph: Union[int, str]) -> None:
        """Run ``subgraph`` from now on: one loaded interpreter serves every subgraph of
        its model (the check compares each without loading the model again)."""
        self.subgraph = subgraph

    def infer_impl(self, feed):
        return self.model.run(feed, self.subgraph)

    # -- intermediate values (subgraph 0) ------------------------------------------------
    def loaded(self) -> LiteRTModel:
        return self.activate().model

    def unresolved_custom_op(self) -> str:
        return self.loaded().unresolved_custom_op()

    def input_names(self) -> List[str]:
        return [s.name for s in self.loaded().input_specs()]

    def producers(self) -> Dict[str, str]:
        """The op that computes each tensor, by tensor name."""
        it = self.loaded().interpreter
        names = {d["index"]: d["name"] for d in it.get_tensor_details()}
        return {names[int(t)]: op["op_name"] for op in it._get_ops_details() for t in op["outputs"]  # noqa: SLF001
                if int(t) in names}

    def _read(self):
        import tflite

        from ..kinds.tflite.schema import read

        if self._table is None:
            with open(os.fspath(self.source), "rb") as f:
                buf = f.read()
            self._table = read(tflite.Model.GetRootAs(buf, 0))
            sg = self._table.fields["subgraphs"][0]
            names = [t.fields.get("name", "") for t in sg.fields["tensors"]]
            counts: Dict[str, int] = {}
            for n in names:
                counts[n] = counts.get(n, 0) + 1
            self._index = {n: i for i, n in enumerate(names) if counts[n] == 1}
            by_index = dict(enumerate(names))
            outs = [by_index.get(int(t)) for op in sg.fields.get("operators", []) for t in op.fields.get("outputs", [])
                    if int(t) >= 0]
            outs += [by_index.get(int(t)) for t in sg.fields.get("outputs", [])]
            self._ops = [n for n in dict.fromkeys(outs) if n in self._index]
        return self._table

    def all_names(self) -> List[str]:
        """The op results of subgraph 0 in op order, then its outputs (unique names)."""
        self._read()
        return list(self._ops)

    def sizes(self, feed, names: Sequence[str]) -> Dict[str, int]:
        """The bytes of each value of ``names``, from the tensors' shapes after one plain
        run (LiteRT reuses the buffers, so this run takes what the check's does)."""
        model = self.loaded()
        model.run(feed, 0)
        self.runs += 1
        want = set(names)
        return {d["name"]: int(np.prod(d["shape"])) * np.dtype(d["dtype"]).itemsize
                for d in model.interpreter.get_tensor_details() if d["name"] in want}

    def _cut(self, names: Sequence[str]) -> Optional[bytes]:
        """The model with ``names`` as subgraph 0's outputs, or None where its weights lie
        outside the flatbuffer (a copy would lose them)."""
        from ..kinds.tflite.schema import FbTable, serialize

        table = self._read()
        if any(int(b.fields.get("offset", 0) or 0) > 1 for b in table.fields.get("buffers", [])):
            return None
        sg = table.fields["subgraphs"][0]
        outputs = [self._index[n] for n in names]
        # LiteRT runs every op of the plan, needed or not: the ops after the last one
        # that computes an asked-for value are left out (a chunk early in the model no
        # longer costs a whole run; those before stay, whatever they do)
        ops = sg.fields.get("operators", [])
        wanted, last = set(outputs), -1
        for k, op in enumerate(ops):
            if not wanted.isdisjoint(int(t) for t in op.fields.get("outputs", [])):
                last = k
        cut_sg = FbTable(sg.type, dict(sg.fields, outputs=np.array(outputs, np.int32), operators=ops[:last + 1]))
        fields = dict(table.fields, subgraphs=[cut_sg] + list(table.fields["subgraphs"][1:]))
        fields.pop("signature_defs", None)  # subgraph 0 run as itself, not through a signature's names
        return serialize(FbTable(table.type, fields), initial_size=1 << 20)

    def values(self, feed, names=None):
        import warnings

        self._read()
        names = [n for n in (self.all_names() if names is None else names) if n in self._index]
        if not names:
            return {}
        self.runs += 1
        content = self._cut(names)
        with warnings.catch_warnings():  # "intended for debugging purposes only": that is what it is for
            warnings.simplefilter("ignore", UserWarning)
            if content is None:
                model = LiteRTModel(self.source, kernels=self.kernels, keep_tensors=True)
                model.run(feed, 0)
                got = model.tensors()
            else:
                got = LiteRTModel(content, kernels=self.kernels).run(feed, 0)
        return {n: np.asarray(got[n]) for n in names if n in got}  # (LiteRT gave copies)


# -- functions -------------------------------------------------------------------------

def run_tflite(source: Source, inputs: Mapping[str, np.ndarray], *, subgraph: Union[int, str] = 0,
               kernels: str = "builtin") -> Dict[str, np.ndarray]:
    """Run a .tflite model (path or bytes) once on ``inputs`` (tensor name -> array);
    ``subgraph`` is an index or a signature key. Returns tensor name -> array."""
    return LiteRTModel(source, kernels=kernels).run(inputs, subgraph)


def input_specs(source: Source, *, subgraph: Union[int, str] = 0) -> List[InputSpec]:
    """(name, numpy dtype, shape_signature with -1, (scale, zero_point)) of each input,
    in the interpreter's order, for input synthesis."""
    return LiteRTModel(source).input_specs(subgraph)
