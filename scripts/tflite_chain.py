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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.append(str(ROOT / "tests"))  # the chain is the tests' (as scripts/corpus.py's models are)

from tflite_build import add_chain  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("output", type=Path)
    ap.add_argument("--ops", type=int, default=300_000)
    ap.add_argument("--elements", type=int, default=1, help="elements of each value (float32)")
    ap.add_argument("--wrong-at", type=int, default=-1, help="the ADD (from 0) that adds 2")
    args = ap.parse_args()
    args.output.write_bytes(add_chain(args.ops, args.elements, args.wrong_at))


if __name__ == "__main__":
    main()
