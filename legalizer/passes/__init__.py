"""Passes over the IR. Each takes (graph, ctx) and returns whether it changed the graph."""

from .base import PassContext, PassManager, PassResult
from .dce import dead_code_elimination
from .equalize_ranks import equalize_ranks
from .fold_ranks import fold_ranks
from .explicit_broadcast import explicit_broadcast, lower_broadcast_in_dim, needs_explicit_broadcast
from .legacy_broadcast import legacy_broadcast
from .split_variadic import split_variadic

# legacy_broadcast runs before these, in legalizer.transform (it may raise the opset).
TOSA_PIPELINE = (split_variadic, fold_ranks, equalize_ranks, dead_code_elimination)
XLA_PIPELINE = (split_variadic, fold_ranks, explicit_broadcast, lower_broadcast_in_dim, dead_code_elimination)

__all__ = ["PassContext", "PassManager", "PassResult", "TOSA_PIPELINE", "XLA_PIPELINE",
           "explicit_broadcast", "lower_broadcast_in_dim", "needs_explicit_broadcast", "dead_code_elimination",
           "equalize_ranks", "fold_ranks", "legacy_broadcast", "split_variadic"]
