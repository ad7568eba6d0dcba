"""Exporters: write the IR back out as any kind's ONNX form (``as_onnx``) and the MLIR
dialects (``tosa``, ``stablehlo``, ``mlir``); each kind's own writer is in its package
(``kinds/<kind>/exporter.py``)."""
