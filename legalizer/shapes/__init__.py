"""Dim algebra: InferDim / InferShape / InferResultShape, symbols, constraints."""

from .broadcast import (Constraint, IncompatibleDims, Inference, broadcast_constraint,
                        dim_labels, equality_constraint, expand_rank, infer_dim,
                        infer_result_shape, same_shape)

__all__ = ["Constraint", "IncompatibleDims", "Inference", "broadcast_constraint", "dim_labels",
           "equality_constraint", "expand_rank", "infer_dim", "infer_result_shape", "same_shape"]
