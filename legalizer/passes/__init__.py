"""Passes over the IR. Each takes (graph, ctx) and returns whether it changed the graph."""

from .aten_ranks import aten_explicit_broadcast, aten_ranks
from .base import (PASSES, Contract, ContractError, Pass, PassContext, PassManager, PassResult, pass_record,
                   register_pass)
from .dce import dead_code_elimination
from .deploy_forms import (broadcast_to_as_concat, broadcast_to_as_tile, broadcast_to_into_consumers,
                           broadcast_to_through_reshape, densify_constants, elementwise_at_rank4, fold_for_npu,
                           gather_bool_as_int32, square_as_mul,
                           one_sided_broadcast, reshape_constants_before_dequantize, reshape_forms)
from .equalize_ranks import equalize_ranks
from .fold_ranks import (fold_axis_ops, fold_gather_indices, fold_matmuls, fold_ranks, fold_ranks_for_rank4_ops,
                         fold_transposes)
from .explicit_broadcast import explicit_broadcast, lower_broadcast_in_dim, needs_explicit_broadcast
from .legacy_broadcast import legacy_broadcast
from .rank_agnostic import MIN_OPSET as RANK_AGNOSTIC_OPSET, needs_rank_agnostic, rank_agnostic, rank_agnostic_expand
from .split_variadic import split_variadic

# The targets name the registered passes in their pipelines (``targets.Target.passes``;
# ``PASSES``); importing the modules above registers them.
__all__ = ["PASSES", "Contract", "ContractError", "Pass", "pass_record", "register_pass", "PassContext", "aten_explicit_broadcast", "aten_ranks", "PassManager", "PassResult", "broadcast_to_as_concat",
           "broadcast_to_as_tile",
           "broadcast_to_into_consumers", "broadcast_to_through_reshape", "densify_constants", "elementwise_at_rank4", "fold_for_npu",
           "gather_bool_as_int32", "square_as_mul",
           "one_sided_broadcast", "reshape_constants_before_dequantize", "reshape_forms",
           "explicit_broadcast", "lower_broadcast_in_dim", "needs_explicit_broadcast", "dead_code_elimination",
           "equalize_ranks", "fold_axis_ops", "fold_gather_indices", "fold_matmuls", "fold_ranks", "fold_ranks_for_rank4_ops", "fold_transposes", "legacy_broadcast", "rank_agnostic", "rank_agnostic_expand", "split_variadic",
           "needs_rank_agnostic", "RANK_AGNOSTIC_OPSET"]
