"""ONNX ops lowered to MLIR dialects (StableHLO, TOSA).

Shared by both dialects: ``driver`` (the one walk over a graph that lowers each op by
its dialect's rule, ``rule(cx, node)``), ``registry`` (per-op lowering tables; dialect
op names read from ``rules/onnx.toml``), ``printer`` (types, literals, attributes), ``fold``
(compile-time evaluation, with each dialect's named limits), ``onnx_attrs`` (ONNX
attribute defaults and the opsets at which attributes became operands) and
``failures`` (the one-line error naming every op that cannot be emitted).
Each dialect's lowerings live in its subpackage, split by op family;
``legalizer.exporters.stablehlo`` and ``legalizer.exporters.tosa`` are the driver's two
dialects (arguments, constants, results, the module's text).
"""
