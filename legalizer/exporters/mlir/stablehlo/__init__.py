"""StableHLO lowerings of ONNX ops, by family; importing the package registers them all
in ``LOWERINGS``."""

from . import elementwise, nn, shapes  # noqa: F401 - each registers its lowerings
from .emitter import LOWERINGS

__all__ = ["LOWERINGS"]
