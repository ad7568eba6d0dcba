"""Passes over the IR. Each takes (graph, ctx) and returns whether it changed the graph."""

from .base import PassContext, PassManager, PassResult
from .dce import dead_code_elimination
from .deploy_forms import (broadcast_to_as_concat, broadcast_to_as_tile, broadcast_to_into_consumers,
                           broadcast_to_through_reshape, densify_constants, elementwise_at_rank4, fold_for_npu,
                           one_sided_broadcast, reshape_constants_before_dequantize, reshape_forms)
from .equalize_ranks import equalize_ranks
from .fold_ranks import fold_ranks
from .explicit_broadcast import explicit_broadcast, lower_broadcast_in_dim, needs_explicit_broadcast
from .legacy_broadcast import legacy_broadcast
from .rank_agnostic import rank_agnostic, rank_agnostic_expand
from .split_variadic import split_variadic

# legacy_broadcast runs before these, in legalizer.transform (it may raise the opset).
TOSA_PIPELINE = (split_variadic, fold_ranks, equalize_ranks, rank_agnostic, dead_code_elimination)
XLA_PIPELINE = (split_variadic, fold_ranks, rank_agnostic_expand, explicit_broadcast, lower_broadcast_in_dim, dead_code_elimination)
# Deployment targets (TFLite): BROADCAST_TO folded into its consumers before the ranks fold
# (the consumer's region then folds with it), the rest copied at the folded rank after.
# Vela: regions that broadcast or batch fold to their lowest rank too (fold_for_npu).
_DEPLOY_HEAD = (split_variadic, densify_constants, reshape_forms, broadcast_to_into_consumers, broadcast_to_through_reshape, fold_ranks,
                broadcast_to_as_tile)
LITERT_GPU_PIPELINE = _DEPLOY_HEAD + (equalize_ranks, elementwise_at_rank4, reshape_forms,
                                     reshape_constants_before_dequantize, dead_code_elimination)
ETHOS_U_PIPELINE = _DEPLOY_HEAD + (fold_for_npu, equalize_ranks, reshape_forms, dead_code_elimination)
# Vela's deprecated core (U55/U65) also wants one operand of a binary op at the result's
# shape; the default core broadcasts both at fewer cycles than any copy costs.
ETHOS_U55_PIPELINE = (split_variadic, densify_constants, reshape_forms, broadcast_to_into_consumers, broadcast_to_through_reshape,
                      fold_ranks, broadcast_to_as_concat, fold_for_npu, one_sided_broadcast, equalize_ranks,
                      reshape_forms, dead_code_elimination)

__all__ = ["PassContext", "PassManager", "PassResult", "TOSA_PIPELINE", "XLA_PIPELINE",
           "LITERT_GPU_PIPELINE", "ETHOS_U_PIPELINE", "ETHOS_U55_PIPELINE", "broadcast_to_as_concat",
           "broadcast_to_as_tile",
           "broadcast_to_into_consumers", "broadcast_to_through_reshape", "densify_constants", "elementwise_at_rank4", "fold_for_npu",
           "one_sided_broadcast", "reshape_constants_before_dequantize", "reshape_forms",
           "explicit_broadcast", "lower_broadcast_in_dim", "needs_explicit_broadcast", "dead_code_elimination",
           "equalize_ranks", "fold_ranks", "legacy_broadcast", "rank_agnostic", "split_variadic"]
