#!/usr/bin/env python3
"""Make the small sample models committed in models/.

Run from the repository root: ``python scripts/make_models.py``. Deterministic: the
same files come out each time (fixed seeds, no timestamps).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def _model(graph: onnx.GraphProto, opset: int = OPSET) -> onnx.ModelProto:
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                          producer_name="legalize/scripts/make_models.py")
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


def mlp_bias() -> onnx.ModelProto:
    """Two dense layers with rank-1 biases: [N,16]x[16,32] + [32] - legal under the
    mlir profile, but the bias operands' ranks differ from the result's (tosa)."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((16, 32)).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(rng.standard_normal((32,)).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((32, 8)).astype(np.float32), "w2")
    b2 = numpy_helper.from_array(rng.standard_normal((8,)).astype(np.float32), "b2")
    scale = numpy_helper.from_array(np.array(0.5, np.float32), "scale")
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h0"], name="fc1"),
        helper.make_node("Add", ["h0", "b1"], ["h1"], name="fc1_bias"),
        helper.make_node("Relu", ["h1"], ["h2"], name="act"),
        helper.make_node("MatMul", ["h2", "w2"], ["h3"], name="fc2"),
        helper.make_node("Add", ["h3", "b2"], ["h4"], name="fc2_bias"),
        helper.make_node("Mul", ["h4", "scale"], ["y"], name="out_scale"),
    ]
    g = helper.make_graph(nodes, "mlp_bias",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])],
                          [w1, b1, w2, b2, scale])
    return _model(g)


def dynamic_broadcast() -> onnx.ModelProto:
    """The RFC's hard cases: <2x?> + <?x?>, <?x2> + <2x?>, symbols N and M. Legal, with
    runtime constraints the report lists."""
    nodes = [
        helper.make_node("Add", ["a", "b"], ["ab"], name="add_2xq_qxq"),
        helper.make_node("Mul", ["c", "d"], ["cd"], name="mul_qx2_2xq"),
        helper.make_node("Sub", ["e", "f"], ["y"], name="sub_N_M"),
    ]
    g = helper.make_graph(nodes, "dynamic_broadcast", [
        helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, None]),
        helper.make_tensor_value_info("b", TensorProto.FLOAT, [None, None]),
        helper.make_tensor_value_info("c", TensorProto.FLOAT, [None, 2]),
        helper.make_tensor_value_info("d", TensorProto.FLOAT, [2, None]),
        helper.make_tensor_value_info("e", TensorProto.FLOAT, ["N", 3]),
        helper.make_tensor_value_info("f", TensorProto.FLOAT, ["M", 1]),
    ], [
        helper.make_tensor_value_info("ab", TensorProto.FLOAT, [2, None]),
        helper.make_tensor_value_info("cd", TensorProto.FLOAT, [2, 2]),
        helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 3]),
    ])
    return _model(g)


def incompatible_add() -> onnx.ModelProto:
    """An Add whose operands cannot broadcast ([3,4] + [2]): a violation, exit 1."""
    nodes = [helper.make_node("Add", ["x", "b"], ["y"], name="bad_add")]
    g = helper.make_graph(nodes, "incompatible_add",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4]),
                           helper.make_tensor_value_info("b", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)],
                          producer_name="legalize/scripts/make_models.py")
    m.ir_version = 8
    return m  # onnx.checker's strict shape inference rejects it, as it should


MODELS = {
    "mlp_bias.onnx": mlp_bias,
    "dynamic_broadcast.onnx": dynamic_broadcast,
    "incompatible_add.onnx": incompatible_add,
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent.parent / "models")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name, make in MODELS.items():
        onnx.save(make(), str(args.out / name))
        print(f"wrote {args.out / name}")


if __name__ == "__main__":
    main()
