"""The targets: for each, the verifier profile its legal form satisfies, the passes that
make it, the ONNX opset those passes' explicit forms need, and the MLIR dialect written
in that form. Every other module asks this table; none spells a target's parts itself."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from .errors import UsageError
from .passes import ETHOS_U55_PIPELINE, ETHOS_U_PIPELINE, LITERT_GPU_PIPELINE, TOSA_PIPELINE, XLA_PIPELINE
from .passes.base import PassFn

# ONNX opset 7 brought numpy-style broadcasting; before it, broadcasting was the
# ``broadcast``/``axis`` attributes (the legacy forms ``passes.legacy_broadcast`` rewrites).
NUMPY_OPSET = 7


@dataclass(frozen=True)
class Target:
    name: str
    profile: str  # the verifier profile (``verify.PROFILES``) the legal form satisfies
    passes: Tuple[PassFn, ...]
    min_opset: int  # what the explicit forms need: xla's Expand (8) and Where (9)
    dialects: Tuple[str, ...]  # the ``--emit`` MLIR formats written in this form
    max_rank: Optional[int] = None  # the rank ``fold_ranks`` folds elementwise regions down to
    # The backend whose rules the legal form is checked against (``verify.deploy``), if any.
    backend: Optional[str] = None


TARGETS: Dict[str, Target] = {
    "tosa": Target("tosa", "tosa", TOSA_PIPELINE, NUMPY_OPSET, ("tosa",)),
    "xla": Target("xla", "xla", XLA_PIPELINE, 9, ("stablehlo", "stablehlo-bytecode")),
    # Backends that take TFLite: operands of equal rank (the GPU delegate aligns a
    # lower-rank operand from the left, LiteRT #8980), every tensor at rank <= 4.
    "litert-gpu": Target("litert-gpu", "tosa", LITERT_GPU_PIPELINE, NUMPY_OPSET, (), 4, "litert-gpu"),
    "ethos-u": Target("ethos-u", "tosa", ETHOS_U_PIPELINE, NUMPY_OPSET, (), 4, "ethos-u"),
    "ethos-u55": Target("ethos-u55", "tosa", ETHOS_U55_PIPELINE, NUMPY_OPSET, (), 4, "ethos-u55"),
}
# ``--emit`` format -> the target whose legal form it is written in.
TARGET_OF_DIALECT = {d: t.name for t in TARGETS.values() for d in t.dialects}


def target(name: str) -> Target:
    """The target called ``name``, or UsageError naming the ones there are."""
    try:
        return TARGETS[name]
    except KeyError:
        raise UsageError(f"unknown target '{name}'; expected one of {', '.join(TARGETS)}") from None
