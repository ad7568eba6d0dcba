"""One interface over the runtimes a check runs a model on (the shape of Polygraphy's
runners): onnxruntime (``ort.OrtRunner``), LiteRT (``litert.LiteRTRunner``), IREE
(``iree_run.IreeRunner``), XLA (``xla_run.XlaRunner``) and PyTorch
(``torch_ref.TorchRunner``).

    runner.activate()         load the model (a session, an interpreter): what fails here
                              is a model the runtime does not take; or ``with runner:``
    runner.input_specs()      the inputs it declares (``inputs.InputSpec``), to make feeds
    runner.infer(feed)        {output name: array} for {input name: array}
    runner.deactivate()       let the loaded model go

Localization asks a runner for the model's intermediate values, as an option of the run
(no activation needed: each such run makes what it needs, a chunk of values at a time):

    runner.all_names()                 every value it can give, in the model's order
    runner.values(feed, names)         {value name: array} of those (None: all of them)
    runner.sizes(feed, names)          the bytes each value takes, from one run
    runner.sketches(feed, names, ...)  a bounded summary of each (``probes.sketch``)
    runner.runs                        how many times values were run (the report's ``runs``)

``name`` names the runtime in reports. Outputs come in the model's order; a runtime
whose outputs have no names (IREE, XLA, PyTorch) names them ``result #i``.
"""

from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Sequence

import numpy as np

from ..errors import CheckUnavailable
from .inputs import InputSpec
from .probes import CHUNK_BYTES, chunks, sketch


def positional(values) -> Dict[str, np.ndarray]:
    """Outputs that have no names, as ``{"result #i": array}`` in order."""
    return {f"result #{i}": np.asarray(v) for i, v in enumerate(values)}


class Runner:
    """A model on one runtime. Subclasses implement ``activate_impl`` (load),
    ``input_specs`` and ``infer_impl``; ``deactivate_impl`` when unloading takes more
    than dropping references."""

    name = ""
    runs = 0

    def __init__(self) -> None:
        self.is_active = False
        self.runs = 0

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

    def begin(self) -> "Runner":
        """Start loading the model without waiting, where the runtime can (in another
        process); ``activate`` then waits for it. Here: nothing (``activate`` loads)."""
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

    def infer_held(self, feed: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """``infer``, for a comparison: an output larger than a chunk may stay where the
        model ran (``child.Held``), valid until the runner runs again."""
        return self.infer(feed)

    @property
    def provider(self) -> str:
        """What ran the model, as the check's summary names it (onnxruntime: its
        execution provider)."""
        return self.name

    # -- intermediate values (localization) ----------------------------------------------
    def all_names(self) -> List[str]:
        """Every value ``values`` can give, in the model's order."""
        raise CheckUnavailable(f"{self.name} does not give a model's intermediate values")

    def values(self, feed: Mapping[str, np.ndarray], names: Optional[Sequence[str]] = None) -> Dict[str, np.ndarray]:
        """The intermediate values ``names`` (None: every one) of a run on ``feed``."""
        raise CheckUnavailable(f"{self.name} does not give a model's intermediate values")

    def sizes(self, feed: Mapping[str, np.ndarray], names: Sequence[str]) -> Dict[str, int]:
        """The bytes each value of ``names`` takes (at most), from one run on ``feed``."""
        raise CheckUnavailable(f"{self.name} does not give a model's intermediate values")

    def sketches(self, feed: Mapping[str, np.ndarray], names: Sequence[str], sizes: Mapping[str, int],
                 budget: int = CHUNK_BYTES) -> Dict[str, list]:
        """For content matching: each float value of ``names`` as [its element count,
        its ``sketch``], from runs that give out a chunk of them at a time."""
        out: Dict[str, list] = {}
        for chunk in chunks(names, sizes, budget):
            for n, a in self.values(feed, chunk).items():
                a = np.asarray(a)
                if a.dtype.kind == "f":
                    out[n] = [int(a.size), sketch(a)]
        return out

    def activate_impl(self) -> None:
        pass

    def deactivate_impl(self) -> None:
        pass

    def input_specs(self) -> List[InputSpec]:
        raise NotImplementedError

    def infer_impl(self, feed: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
        raise NotImplementedError
