#!/usr/bin/env python3
"""Write a TFLite chain of ADDs, the scale cases of issue 24 (item 6 and --localize):

    python scripts/tflite_chain.py chain300k.tflite --ops 300000          # 300k ops, ~30 MB
    python scripts/tflite_chain.py big.tflite --ops 10 --elements 33554432  # 10 values of 128 MiB
    python scripts/tflite_chain.py bad.tflite --ops 10 --elements 33554432 --wrong-at 3

x[elements] (float32), then ``ops`` ADDs of the constant 1 (the one at --wrong-at adds
2 instead: a candidate that differs from the plain chain from that value on).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from legalizer.tflite_schema import FbTable, builtin_code, options_type, serialize  # noqa: E402


def chain(ops: int, elements: int = 1, wrong_at: int = -1) -> bytes:
    """The chain's .tflite bytes (tensors x, one, two, v1..v<ops>; v<ops> the output)."""
    def i32(*v):
        return np.array(v, np.int32)

    def const(v: float):
        return FbTable("Buffer", {"data": np.frombuffer(np.float32([v]).tobytes(), np.uint8)})

    tensors = [FbTable("Tensor", {"shape": i32(elements), "type": 0, "buffer": 1, "name": "x"}),
               FbTable("Tensor", {"shape": i32(1), "type": 0, "buffer": 2, "name": "one"}),
               FbTable("Tensor", {"shape": i32(1), "type": 0, "buffer": 3, "name": "two"})]
    union, code = options_type("AddOptions")
    opts = []
    for i in range(ops):
        tensors.append(FbTable("Tensor", {"shape": i32(elements), "type": 0, "buffer": 0, "name": f"v{i + 1}"}))
        src = len(tensors) - 2 if i else 0
        opts.append(FbTable("Operator", {"opcode_index": 0, "inputs": i32(src, 2 if i == wrong_at else 1),
                                         "outputs": i32(len(tensors) - 1), f"{union}_type": code,
                                         union: FbTable("AddOptions", {})}))
    add = builtin_code("ADD")
    return serialize(FbTable("Model", {
        "version": 3, "description": "chain",
        "buffers": [FbTable("Buffer", {}), FbTable("Buffer", {}), const(1.0), const(2.0)],
        "operator_codes": [FbTable("OperatorCode", {"builtin_code": add, "deprecated_builtin_code": add,
                                                    "version": 1})],
        "subgraphs": [FbTable("SubGraph", {"tensors": tensors, "inputs": i32(0), "outputs": i32(len(tensors) - 1),
                                           "operators": opts, "name": "main"})]}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("output", type=Path)
    ap.add_argument("--ops", type=int, default=300_000)
    ap.add_argument("--elements", type=int, default=1, help="elements of each value (float32)")
    ap.add_argument("--wrong-at", type=int, default=-1, help="the ADD (from 0) that adds 2")
    args = ap.parse_args()
    args.output.write_bytes(chain(args.ops, args.elements, args.wrong_at))


if __name__ == "__main__":
    main()
