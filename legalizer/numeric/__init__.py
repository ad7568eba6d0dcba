"""Numeric checks: original against legalized, on onnxruntime."""

# The check's tolerances, for the command line and the library alike: float kernels of
# other providers (CUDA) and of PyTorch differ by ~1e-6 from the CPU's. Here rather than
# in .ort, so that the command line's option defaults import neither numpy nor onnx.
RTOL, ATOL = 1e-4, 1e-5
BUDGET = 8  # IREE runs (each a compile) one localization may take
