#!/usr/bin/env python3
"""The Keras part of the corpus (scripts/corpus.py): Keras applications, random weights
(``weights=None``), converted by TensorFlow's ``tf.lite.TFLiteConverter``, in float and
in full int8 (a representative dataset of seeded random images; int8 input and output).

Runs in TensorFlow's own venv (scripts/setup_tf.sh), not the project's:

    .venv-tf/bin/python scripts/corpus_keras.py OUT_DIR NAME...

NAME is ``keras_<application>`` or ``keras_<application>_int8`` (see APPLICATIONS).
Writes OUT_DIR/NAME.tflite for each, then prints one JSON line per model:
{"name", "file", "versions", "dims", "seconds"} or {"name", "error"}.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT / "tests"))
# application -> the input side: tests/corpus_models.py (standard library only, so this
# venv reads it too), which also names the models.
from corpus_models import KERAS_APPLICATIONS as APPLICATIONS, keras_name  # noqa: E402

CLASSES = 10  # a small head: the 1000-class one only adds weights
CALIBRATION = 8  # representative images for full-int8 quantization


def _application(name: str):
    return {keras_name(app, int8): (app, int8) for app in APPLICATIONS for int8 in (False, True)}.get(name)


def convert(name: str, out_dir: Path) -> dict:
    import keras
    import numpy as np
    import tensorflow as tf

    app, int8 = _application(name)
    side = APPLICATIONS[app]
    keras.utils.set_random_seed(0)
    model = getattr(keras.applications, app)(input_shape=(side, side, 3), weights=None, classes=CLASSES)
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    if int8:
        rng = np.random.default_rng(0)
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = lambda: (
            [rng.uniform(0, 255, (1, side, side, 3)).astype(np.float32)] for _ in range(CALIBRATION))
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        converter.inference_input_type = tf.int8
        converter.inference_output_type = tf.int8
    data = converter.convert()
    path = out_dir / f"{name}.tflite"
    tmp = path.with_suffix(".tflite.part")
    tmp.write_bytes(data)
    tmp.replace(path)
    return {"file": path.name, "versions": {"tensorflow-cpu": tf.__version__, "keras": keras.__version__},
            "dims": {"input": [None, side, side, 3], "int8": int8, "application": f"keras.applications.{app}"}}


def main(argv) -> int:
    out_dir, names = Path(argv[0]), argv[1:]
    unknown = [n for n in names if _application(n) is None]
    if unknown:
        print(f"corpus_keras: unknown models: {', '.join(unknown)}", file=sys.stderr)
        return 2
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in names:
        t0 = time.perf_counter()
        try:
            row = convert(name, out_dir)
        except Exception as e:  # noqa: BLE001 - reported per model; the others go on
            row = {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
        row.update(name=name, seconds=round(time.perf_counter() - t0, 2))
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
