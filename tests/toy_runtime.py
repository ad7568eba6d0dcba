"""A toy runtime for tests/test_add_runtime.py: onnxruntime under another name and a
--provider choice of its own ("toy"). All it takes to add a runtime: its ``Runner``
subclass and one entry in the runtimes' table. (A module of its own, light to import:
the child process imports it to build the runner.)"""

from legalizer.numeric.child import ChildRunner, label
from legalizer.numeric.ort_session import OrtRunner
from legalizer.numeric.runtimes import Runtime

PROVIDER = "toy"


class ToyRunner(OrtRunner):
    """An ONNX model on onnxruntime's CPU provider, named as the toy runtime."""

    name = "toy-ort"

    def __init__(self, model, basic: bool = False):
        super().__init__(model, ["CPUExecutionProvider"], basic)

    @property
    def provider(self) -> str:
        return "ToyExecutionProvider"


def toy(model, provider: str, *, what: str = "the model", basic: bool = False):
    """The toy runner of ``model``, in the child process."""
    return ChildRunner(ToyRunner, model, basic, model=label(model) or what, fetch=("provider", "outputs"))


TOY = Runtime("toy-ort", ("onnx",), (PROVIDER,), toy, label=lambda provider: "ToyExecutionProvider")
