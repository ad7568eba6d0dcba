"""onnxruntime sessions as every check opens them: the execution providers a
``--provider`` choice means, and a session with the options the check needs."""

from __future__ import annotations

from typing import Dict, List, Sequence

import numpy as np
import onnx
from onnx import helper

from ..errors import UsageError
from .inputs import InputSpec, static_or_key
from .runner import Runner


# The execution providers each ``--provider`` choice asks for: "auto" is CUDA where
# onnxruntime has it, else the CPU; a choice that names one must get it.
EXECUTION = {"cpu": ["CPUExecutionProvider"], "cuda": ["CUDAExecutionProvider", "CPUExecutionProvider"]}
REQUIRED = {"cuda": "CUDAExecutionProvider", "qnn": "QNNExecutionProvider"}


def providers(choice: str = "auto") -> List[str]:
    """Execution providers for ``cpu``, ``cuda``, ``qnn`` or ``auto`` (CUDA when present)."""
    import onnxruntime as ort

    if choice == "qnn":  # a plugin EP: onnxruntime lists it only once registered (qnn_ep)
        from .qnn_ep import EP_NAME, INSTALL_HINT, available as qnn_available

        if not qnn_available():
            raise UsageError(INSTALL_HINT)
        return [EP_NAME]
    available = ort.get_available_providers()
    want = REQUIRED.get(choice)
    if want is not None and want not in available:
        raise UsageError("--provider cuda: onnxruntime has no CUDAExecutionProvider here (install"
                         " onnxruntime-gpu instead of onnxruntime; see the docs, Getting started:"
                         " Checking on a GPU)")
    if choice in EXECUTION:
        return list(EXECUTION[choice])
    return list(EXECUTION["cuda" if "CUDAExecutionProvider" in available else "cpu"])


def confirm(choice: str, runner) -> None:
    """UsageError when the loaded ``runner`` did not start the provider ``choice`` names."""
    want = REQUIRED.get(choice)
    if want is not None and runner.provider != want:
        raise UsageError("--provider cuda: onnxruntime could not start its CUDA provider (missing CUDA or"
                         " cuDNN libraries?); see the docs, Getting started: Checking on a GPU")


def session(model, provider_list: Sequence[str], basic: bool = False, arena: bool = True):
    """An onnxruntime session for a ModelProto (or its bytes) or a model path (a path
    resolves external data beside the model). ``basic`` keeps to onnxruntime's basic graph
    optimizations (no QDQ fusion into integer kernels). ``arena=False``: memory is
    given back after each run (onnxruntime's CPU arena keeps a run's peak)."""
    import onnxruntime as ort

    # Quiet: a binding the original rejects is an expected outcome, reported by us.
    ort.set_default_logger_severity(4)
    if list(provider_list) == ["QNNExecutionProvider"]:  # HTP alone: a node it refuses fails the session
        from .qnn_ep import session_options

        opts = session_options()
    else:
        opts = ort.SessionOptions()
    opts.log_severity_level = 4
    if basic:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    opts.enable_cpu_mem_arena = arena
    source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else \
        model if isinstance(model, bytes) else str(model)
    # CUDA multiplies in TF32 by default: ~1e-3 relative, beyond the check's tolerance against
    # an fp32 reference (PyTorch on CPU, LiteRT); the check wants the model's fp32 numbers.
    providers = [(p, CUDA_OPTIONS) if p == "CUDAExecutionProvider" else p for p in provider_list]
    if providers == ["QNNExecutionProvider"]:  # (given by the options' device)
        return ort.InferenceSession(source, opts, disabled_optimizers=UNSAFE_OPTIMIZERS)
    # onnxruntime 1.32's WeightBiasQuantization quantizes the float weights of a Conv that
    # sits between QuantizeLinear/DequantizeLinear nodes per tensor, which loses the
    # per-channel precision a TFLite model's weights had (59 int8 steps off on a per-axis
    # conv): the check computes what the graph says.
    return ort.InferenceSession(source, opts, providers=providers, disabled_optimizers=UNSAFE_OPTIMIZERS)


UNSAFE_OPTIMIZERS = ["WeightBiasQuantization"]


CUDA_OPTIONS = {"use_tf32": "0"}


def _ort_dtype(type_str: str) -> str:
    name = type_str[len("tensor("):-1]
    return {"float": "float32", "double": "float64"}.get(name, name)


class OrtRunner(Runner):
    """An ONNX model (a ModelProto or its bytes, or a path: external data resolves beside it) on
    onnxruntime; ``basic``: see ``session``. Its intermediate values (``values``) are
    added to the graph's outputs, as Polygraphy's ``--onnx-outputs mark all`` does
    (top-level values; a subgraph's stay inside it)."""

    name = "onnxruntime"

    def __init__(self, model, provider_list: Sequence[str], basic: bool = False):
        super().__init__()
        self.model, self.provider_list, self.basic = model, list(provider_list), basic
        self.session = None
        self.outputs: List[str] = []
        self._sessions: Dict[tuple, object] = {}  # the session that gives out some values (one at a time)

    def activate_impl(self) -> None:
        self.session = session(self.model, self.provider_list, self.basic)
        self.outputs = [o.name for o in self.session.get_outputs()]

    def deactivate_impl(self) -> None:
        self.session = None

    @property
    def provider(self) -> str:
        """The execution provider onnxruntime put first."""
        return self.session.get_providers()[0]

    def input_specs(self) -> List[InputSpec]:
        """The session's inputs; each dynamic dim keyed ``input[axis]``."""
        return [InputSpec(i.name, helper.np_dtype_to_tensor_dtype(np.dtype(_ort_dtype(i.type))),
                          static_or_key(i.name, i.shape)) for i in self.session.get_inputs()]

    def infer_impl(self, feed):
        return dict(zip(self.outputs, self.session.run(None, dict(feed))))

    # -- intermediate values ---------------------------------------------------------
    def _proto(self) -> onnx.ModelProto:
        if isinstance(self.model, bytes):  # serialized (sent so to the child: parsed only if asked)
            self.model = onnx.load_from_string(self.model)
        if not isinstance(self.model, onnx.ModelProto):  # a path: read once, external data checked
            from ..importers.reader import check_external_data
            from pathlib import Path

            check_external_data(Path(self.model))
            self.model = onnx.load(str(self.model))
        return self.model

    def input_names(self) -> List[str]:
        """The graph inputs that are fed (initializers left out), in order."""
        graph = self._proto().graph
        inits = {t.name for t in graph.initializer}
        return [i.name for i in graph.input if i.name not in inits]

    def output_names(self) -> List[str]:
        return [o.name for o in self._proto().graph.output]

    def producers(self) -> Dict[str, str]:
        """The op type that computes each value, by value name."""
        return {o: n.op_type for n in self._proto().graph.node for o in n.output}

    def all_names(self) -> List[str]:
        """The top-level values in graph order (each node's outputs), then the outputs."""
        graph = self._proto().graph
        names = [o for n in graph.node for o in n.output if o]
        return list(dict.fromkeys(names + [o.name for o in graph.output]))

    def _values_session(self, names: Sequence[str]):
        key = tuple(names)
        if key not in self._sessions:
            m = onnx.ModelProto()
            m.CopyFrom(self._proto())
            declared = {o.name for o in m.graph.output}
            for name in names:
                if name not in declared:  # untyped: onnxruntime infers it
                    m.graph.output.append(onnx.ValueInfoProto(name=name))
            self._sessions = {}  # one at a time, without an arena: each holds a chunk's values after its run
            self._sessions = {key: session(m, self.provider_list, arena=False)}
        return self._sessions[key]

    def sizes(self, feed, names: Sequence[str]) -> Dict[str, int]:
        """The bytes each value of ``names`` takes at most (its element count times 8),
        from one run that gives out the value's ``Shape`` only: onnxruntime frees the
        values themselves as it goes, so this run takes what a plain run takes."""
        m = onnx.ModelProto()
        m.CopyFrom(self._proto())
        del m.graph.output[:]
        outs = []
        for k, name in enumerate(names):
            out = f"{name}@size{k}"
            m.graph.node.append(onnx.helper.make_node("Shape", [name], [out]))
            m.graph.output.append(onnx.ValueInfoProto(name=out))
            outs.append(out)
        self._sessions = {}
        self.runs += 1
        got = session(m, self.provider_list, arena=False).run(outs, dict(feed))
        return {n: 8 * int(np.prod(s)) for n, s in zip(names, got)}

    def values(self, feed, names=None):
        names = self.all_names() if names is None else list(names)
        sess = self._values_session(names)
        want = [o.name for o in sess.get_outputs()]
        self.runs += 1
        got = sess.run(want, dict(feed))
        asked = set(names)
        return {n: v for n, v in zip(want, got) if n in asked and isinstance(v, np.ndarray)}
