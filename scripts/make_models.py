#!/usr/bin/env python3
"""Make the small sample models committed in models/.

Run from the repository root: ``python scripts/make_models.py``. Deterministic: the
same files come out each time (fixed seeds, no timestamps).

Two kinds of model:

- hand-made with ``onnx.helper`` (``mlp_bias``, ``dynamic_broadcast``,
  ``incompatible_add``): always made;
- the same PyTorch modules as ``torch.export`` programs (``*.pt2``, saved with
  ``torch.export.save``: the input of ``legalize model.pt2``), with the same extra;
- TFLite models in ``tflite/`` (``tests/tflite_models.py``), built without
  TensorFlow by legalize's own flatbuffer writer: always made;
- small PyTorch modules exported with ``torch.onnx.export``, each twice: with the
  dynamo exporter (``*.dynamo.onnx``: symbolic dims such as ``batch`` and ``seq`` on
  the inputs) and with the TorchScript exporter (``*.torchscript.onnx``: static
  shapes). These need the ``torch`` extra (``pip install -e '.[torch]'``: the pinned
  torch and onnxscript; another version exports other bytes); without it they are
  skipped, with one line saying so. The exported files are committed, so nothing else
  needs torch.

The exported models keep their weights inside the ``.onnx`` file. The dynamo exporter
annotates every node with its FX node, name scopes and Python stack trace (file paths
of the machine that ran it); those annotations and all doc strings are stripped so
that a rerun anywhere gives the same bytes.

The models are defined in tests/sample_models.py and tests/tflite_models.py (the
tests build them too); this script writes them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable, Dict

import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT / "tests"))
import sample_models as samples  # noqa: E402 - tests/ is on the path now


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "models")
    ap.add_argument("--only", choices=["all", "helper", "torch", "pt2", "tflite"], default="all",
                    help="make only the onnx.helper models, the torch-exported ones, the torch.export"
                         " programs (.pt2) or the TFLite ones")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    makers: Dict[str, Callable[[], onnx.ModelProto]] = {}
    if args.only in ("all", "helper"):
        makers.update(samples.MODELS)
    if args.only in ("all", "torch"):
        made, why = samples.torch_models()
        skipped = [f for f in samples.TORCH_MODELS if f not in made]
        if skipped:
            print(f"skipped {', '.join(skipped)}: {why}")
        if made and samples.version_mismatch():
            print(f"note: {samples.version_mismatch()}: the exported files may differ from the committed ones")
        makers.update(made)
    for name, make in makers.items():
        onnx.save(make(), str(args.out / name))
        print(f"wrote {args.out / name}")
    if args.only in ("all", "pt2"):
        try:
            import torch  # noqa: F401
        except ImportError:
            print(f"skipped {', '.join(samples.PT2_MODELS)}: torch is not installed (pip install -e '.[torch]')")
        else:
            for fname in samples.PT2_MODELS:
                samples.save_pt2(fname[:-len(".pt2")], args.out / fname)
                print(f"wrote {args.out / fname}")
    if args.only in ("all", "tflite"):
        from legalizer.kinds.tflite.exporter import to_tflite
        from tflite_models import tflite_models  # tests/tflite_models.py

        (args.out / "tflite").mkdir(exist_ok=True)
        for name, make in tflite_models().items():
            (args.out / "tflite" / name).write_bytes(to_tflite(make()))
            print(f"wrote {args.out / 'tflite' / name}")


if __name__ == "__main__":
    main()
