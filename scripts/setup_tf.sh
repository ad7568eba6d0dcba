#!/usr/bin/env bash
# Install TensorFlow (tensorflow-cpu, for the corpus's Keras applications and their
# TFLite conversion) into its OWN virtual environment: it is large, pins its own numpy
# and protobuf, and must not land in the project's venv.
#
#   bash scripts/setup_tf.sh [VENV_DIR]     # default: <repo>/.venv-tf
#
# Prints the path of that venv's python on its last line. scripts/corpus.py finds
# <repo>/.venv-tf/bin/python by itself; elsewhere, set LEGALIZE_TF_PYTHON.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${1:-$ROOT/.venv-tf}"
VERSION="2.21.0"
source "$ROOT/scripts/own_venv.sh"

own_venv "$VENV" tensorflow-cpu "$VERSION"
"$VENV/bin/python" -c "import tensorflow as tf; assert tf.__version__ == '$VERSION', tf.__version__" 2>/dev/null
echo "$VENV/bin/python"
