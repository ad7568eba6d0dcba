"""One interface over the runtimes a check runs a model on (the shape of Polygraphy's
runners): onnxruntime (``ort.OrtRunner``), LiteRT (``litert.LiteRTRunner``), IREE
(``iree_run.IreeRunner``), XLA (``xla_run.XlaRunner``) and PyTorch
(``torch_ref.TorchRunner``).

    runner.activate()         load the model (a session, an interpreter): what fails here
                              is a model the runtime does not take; or ``with runner:``
    runner.input_specs()      the inputs it declares (``inputs.InputSpec``), to make feeds
    runner.infer(feed)        {output name: array} for {input name: array}
    runner.deactivate()       let the loaded model go

``name`` names the runtime in reports. Outputs come in the model's order; a runtime
whose outputs have no names (IREE, XLA, PyTorch) names them ``result #i``.
"""

from __future__ import annotations

from typing import Dict, List, Mapping

import numpy as np

from .inputs import InputSpec


def positional(values) -> Dict[str, np.ndarray]:
    """Outputs that have no names, as ``{"result #i": array}`` in order."""
    return {f"result #{i}": np.asarray(v) for i, v in enumerate(values)}


class Runner:
    """A model on one runtime. Subclasses implement ``activate_impl`` (load),
    ``input_specs`` and ``infer_impl``; ``deactivate_impl`` when unloading takes more
    than dropping references."""

    name = ""

    def __init__(self) -> None:
        self.is_active = False

    def __enter__(self) -> "Runner":
        return self.activate()

    def __exit__(self, *exc) -> None:
        self.deactivate()

    def activate(self) -> "Runner":
        """Load the model (once); the runtime's own exception when it does not take it."""
        if not self.is_active:
            self.activate_impl()
            self.is_active = True
        return self

    def deactivate(self) -> None:
        if self.is_active:
            self.deactivate_impl()
            self.is_active = False

    def infer(self, feed: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """The outputs for ``feed``; the runtime's own exception when it fails."""
        if not self.is_active:
            raise RuntimeError(f"{self.name} runner: activate it before infer")
        return self.infer_impl(feed)

    def activate_impl(self) -> None:
        pass

    def deactivate_impl(self) -> None:
        pass

    def input_specs(self) -> List[InputSpec]:
        raise NotImplementedError

    def infer_impl(self, feed: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
        raise NotImplementedError
