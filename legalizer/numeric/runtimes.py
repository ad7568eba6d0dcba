"""The runtimes a model runs on, as one table of records (``Runtime``): which model
format each runs and for which ``--provider`` choices, and how to make its ``Runner``
(``runner.py``). The check, ``--against`` and localization all get their runners here
(``runner_for``), and ``--provider``'s choices are the table's; adding a runtime is its
``Runner`` subclass and one entry (``register``).

Every runner made here runs its model in the child process (``child.py``), but IREE's,
whose compiles and runs each go to the children (``iree_run.run_contained``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, List, Optional, Tuple

from ..errors import CheckUnavailable

if TYPE_CHECKING:  # (the options read the table's providers before any runtime is imported)
    from .runner import Runner

# The --provider choices the built-in runtimes serve (each runs wherever the check runs),
# and those that run on a GPU only (a Ray batch gives each task one).
ANY = ("auto", "cpu", "cuda")
GPU_ONLY = {"cuda"}
# The model formats the checks ask runners for, as the table names them (``Format.name``).
ONNX, TFLITE, MODULE = "onnx", "tflite", "mlir"


@dataclass(frozen=True)
class Runtime:
    """One runtime. ``make(model, provider, *, what, **options)`` makes an unactivated
    ``Runner`` of ``model`` (a path, or what the format's check holds: an ONNX
    ModelProto, a TOSA module's text); ``what`` names the model in a fault when it is
    not a path. ``label(provider)`` names what runs it before it is loaded (a check
    that fails to load says so); ``confirm(provider, runner)`` raises UsageError when
    the loaded runner did not get what ``provider`` asked for."""

    name: str  # as the runner and the report name it
    formats: Tuple[str, ...]  # the model formats it runs (``Format.name``, ``reader.sniff``'s names)
    providers: Tuple[str, ...]  # the --provider choices it serves
    make: Callable[..., Runner]
    label: Optional[Callable[[str], str]] = None
    confirm: Optional[Callable[[str, Runner], None]] = None
    reference: bool = True  # it runs the reference of --against (not the module compared)
    quantized: bool = False  # an integer output of its models is quantized: compared within one step
    # The --provider the original runs on instead, as the reference of the legalized model
    # on this one (None: both run here).
    original: Optional[str] = None
    # (rtol, atol) the check takes unless given: what its arithmetic needs (None: the check's).
    tolerance: Optional[Tuple[float, float]] = None

    def runner(self, model, provider: str, **options) -> Runner:
        return self.make(model, provider, **options)

    def names(self, provider: str) -> str:
        """What runs a model on ``provider``, as a check that could not load it says."""
        return self.label(provider) if self.label is not None else self.name

    def started(self, provider: str, runner: Runner) -> None:
        if self.confirm is not None:
            self.confirm(provider, runner)


# -- the built-in runtimes' runners --------------------------------------------------------

def _ort(model, provider: str, *, what: str = "the model", basic: bool = False) -> Runner:
    """An ONNX model (a ModelProto or a path) on onnxruntime, in the child."""
    from .child import ChildRunner, label
    from .ort_session import OrtRunner, providers

    return ChildRunner(OrtRunner, model, providers(provider), basic, model=label(model) or what,
                       fetch=("provider", "outputs"))


def _ort_label(provider: str) -> str:
    from .ort_session import providers

    return providers(provider)[0]


def _ort_confirm(provider: str, runner: Runner) -> None:
    from .ort_session import confirm

    confirm(provider, runner)


# HTP runs a float32 model at fp16 (11 significant bits: each op rounds to 2^-11 = 4.9e-4
# relative, and what the probe measured on single ops, rules/qnn_htp.toml, is within 2e-3
# absolute on values of size 1-4). A model's outputs gather the roundings of every op on their
# path: 1e-2 relative, and 1e-3 absolute for outputs near 0 (softmax probabilities, ...).
QNN_TOLERANCE = (1e-2, 1e-3)


def _litert(model, provider: str, *, what: str = "the model", subgraph=0, kernels: Optional[str] = None) -> Runner:
    """A ``.tflite`` (a path) on LiteRT, in the child; ``kernels`` None: its builtin
    kernels, or LiteRT's default resolver for a custom op only that runs (as the check
    finds them; the runner comes loaded, having been asked)."""
    from .child import ChildRunner
    from .litert import LiteRTRunner

    if kernels is not None:
        return ChildRunner(LiteRTRunner, str(model), subgraph, kernels=kernels, model=str(model))
    runner = ChildRunner(LiteRTRunner, str(model), subgraph, model=str(model)).activate()
    if runner.call("unresolved_custom_op"):
        runner.deactivate()
        runner = ChildRunner(LiteRTRunner, str(model), subgraph, kernels="default", model=str(model)).activate()
    return runner


def _iree(model, provider: str, *, what: str = "the module") -> Runner:
    """A TOSA module (its text) on IREE llvm-cpu, compiled and run in the children."""
    from .iree_run import IreeRunner

    return IreeRunner(model, contained=True, model=what)


RUNTIMES: List[Runtime] = [
    # --provider qnn: the legalized model on Qualcomm's HTP, against the original on the CPU
    # (the `qnn` extra: onnxruntime-qnn)
    Runtime("onnxruntime QNN HTP", (ONNX,), ("qnn",), _ort, label=lambda p: "QNNExecutionProvider", reference=False,
            original="cpu", tolerance=QNN_TOLERANCE),
    Runtime("LiteRT", (TFLITE,), ANY, _litert, quantized=True),
    Runtime("onnxruntime", (ONNX,), ANY, _ort, label=_ort_label, confirm=_ort_confirm),
    Runtime("IREE llvm-cpu", (MODULE,), ANY, _iree, reference=False),
]


def register(runtime: Runtime) -> None:
    """Add ``runtime``: ahead of those that run the same formats on the same providers."""
    RUNTIMES.insert(0, runtime)


def provider_choices() -> Tuple[str, ...]:
    """Every --provider choice some runtime serves, in the table's order."""
    return tuple(dict.fromkeys(p for rt in reversed(RUNTIMES) for p in rt.providers))


def runner_for(fmt: str, provider: str = "auto") -> Runtime:
    """The runtime that runs models of format ``fmt`` on ``provider`` (CheckUnavailable
    when none does)."""
    for rt in RUNTIMES:
        if fmt in rt.formats and provider in rt.providers:
            return rt
    raise CheckUnavailable(f"no runtime runs a {fmt} model on --provider {provider}")


def needs_gpu(provider: str) -> bool:
    """Whether the ``--provider`` choice runs models on a GPU only."""
    return provider in GPU_ONLY


def reference_for(fmt: str, provider: str = "auto") -> Optional[Runtime]:
    """The runtime that runs a ``fmt`` model as ``--against``'s reference, or None."""
    return next((rt for rt in RUNTIMES if rt.reference and fmt in rt.formats and provider in rt.providers), None)


def reference_formats() -> List[str]:
    """The formats some runtime runs as ``--against``'s reference, in the table's order."""
    return list(dict.fromkeys(f for rt in RUNTIMES if rt.reference for f in rt.formats))
