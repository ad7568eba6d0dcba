"""How the house reads to a maintainer (issue 23's measures), from the source alone:

- the length of ``pipeline.run`` and the longest functions (body lines, docstring left out);
- comparisons of a format, target or profile name with a string literal outside the tables
  (``x == "onnx"``, ``fmt in ("tflite", "onnx")``): each is behaviour chosen by name, which
  a new format or target would have to find and extend.

    python scripts/house_metrics.py [--top 10] [--list]
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "legalizer"

# The names a comparison would choose behaviour by: the input formats, the --emit formats,
# the targets and the profiles, and TOSA's levels.
NAMES = {"onnx", "tflite", "mlir", "mlirbc", "pt2", "stablehlo", "stablehlo-bytecode", "tosa", "xla", "strict",
         "litert-gpu", "ethos-u", "ethos-u55", "8k"}


def functions(root: Path):
    """(body lines, "path:line name") of every function under ``root``."""
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                body = node.body
                first = body[1] if len(body) > 1 and isinstance(body[0], ast.Expr) and \
                    isinstance(body[0].value, ast.Constant) else body[0]
                yield node.end_lineno - first.lineno + 1, f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"


def name_comparisons(root: Path):
    """"path:line" of every comparison whose literal operand is one of ``NAMES``."""
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Compare):
                continue
            literals = []
            for operand in (node.left, *node.comparators):
                if isinstance(operand, ast.Constant) and isinstance(operand.value, str):
                    literals.append(operand.value)
                elif isinstance(operand, (ast.Tuple, ast.List, ast.Set)):
                    literals += [e.value for e in operand.elts if isinstance(e, ast.Constant)]
            if NAMES.intersection(v for v in literals if isinstance(v, str)):
                yield f"{path.relative_to(ROOT)}:{node.lineno}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--top", type=int, default=10, help="how many of the longest functions to list")
    ap.add_argument("--list", action="store_true", help="list each name comparison")
    args = ap.parse_args(argv)
    found = sorted(functions(PACKAGE), reverse=True)
    run = next(n for n, where in found if where.startswith("legalizer/pipeline.py") and where.endswith(" run"))
    print(f"pipeline.run: {run} lines")
    print(f"the {args.top} longest functions:")
    for n, where in found[:args.top]:
        print(f"  {n:4d}  {where}")
    hits = list(name_comparisons(PACKAGE))
    print(f"name comparisons outside the tables: {len(hits)}")
    for where in hits if args.list else ():
        print(f"  {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
