"""Dim algebra: InferDim / InferShape / InferResultShape, symbols, constraints."""

from .broadcast import (Constraint, IncompatibleDims, Inference, alternatives, broadcast_constraint,
                        broadcast_label, broadcast_label_operands, dim_labels, equality_constraint,
                        expand_rank, infer_dim, infer_result_shape, same_shape)

__all__ = ["Constraint", "IncompatibleDims", "Inference", "alternatives", "broadcast_constraint",
           "broadcast_label", "broadcast_label_operands", "dim_labels", "equality_constraint",
           "expand_rank", "infer_dim", "infer_result_shape", "same_shape"]
