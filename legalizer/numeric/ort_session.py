"""onnxruntime sessions as every check opens them: the execution providers a
``--provider`` choice means, and a session with the options the check needs."""

from __future__ import annotations

from typing import List, Sequence

import numpy as np
import onnx
from onnx import helper

from ..errors import UsageError
from .inputs import InputSpec, static_or_key
from .runner import Runner


def providers(choice: str = "auto") -> List[str]:
    """Execution providers for ``cpu``, ``cuda`` or ``auto`` (CUDA when present)."""
    import onnxruntime as ort

    available = ort.get_available_providers()
    if choice == "cpu":
        return ["CPUExecutionProvider"]
    if choice == "cuda":
        if "CUDAExecutionProvider" not in available:
            raise UsageError("--provider cuda: onnxruntime has no CUDAExecutionProvider here (install"
                             " onnxruntime-gpu instead of onnxruntime; see the docs, Getting started:"
                             " Checking on a GPU)")
        return ["CUDAExecutionProvider", "CPUExecutionProvider"]
    if "CUDAExecutionProvider" in available:
        return ["CUDAExecutionProvider", "CPUExecutionProvider"]
    return ["CPUExecutionProvider"]


def session(model, provider_list: Sequence[str], basic: bool = False, arena: bool = True):
    """An onnxruntime session for a ModelProto or a model path (a path resolves
    external data beside the model). ``basic`` keeps to onnxruntime's basic graph
    optimizations (no QDQ fusion into integer kernels). ``arena=False``: memory is
    given back after each run (onnxruntime's CPU arena keeps a run's peak)."""
    import onnxruntime as ort

    # Quiet: a binding the original rejects is an expected outcome, reported by us.
    ort.set_default_logger_severity(4)
    opts = ort.SessionOptions()
    opts.log_severity_level = 4
    if basic:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    opts.enable_cpu_mem_arena = arena
    source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    # CUDA multiplies in TF32 by default: ~1e-3 relative, beyond the check's tolerance against
    # an fp32 reference (PyTorch on CPU, LiteRT); the check wants the model's fp32 numbers.
    providers = [(p, CUDA_OPTIONS) if p == "CUDAExecutionProvider" else p for p in provider_list]
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
    """An ONNX model (a ModelProto, or a path: external data resolves beside it) on
    onnxruntime; ``basic``: see ``session``."""

    name = "onnxruntime"

    def __init__(self, model, provider_list: Sequence[str], basic: bool = False):
        super().__init__()
        self.model, self.provider_list, self.basic = model, list(provider_list), basic
        self.session = None
        self.outputs: List[str] = []

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
