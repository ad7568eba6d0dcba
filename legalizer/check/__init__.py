"""Numeric checks: original against legalized, on onnxruntime."""
