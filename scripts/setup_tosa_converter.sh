#!/usr/bin/env bash
# Install Arm's TFLite-to-TOSA converter (tosa-converter-for-tflite, PyPI) into its OWN
# virtual environment: it installs a generic top-level package name (tests) that must
# not land in the project's venv. scripts/corpus.py converts the corpus's real TFLite
# models with it (the tosa_* models: TOSA bytecode that tests/test_corpus.py compares
# with --against).
#
#   bash scripts/setup_tosa_converter.sh [VENV_DIR]     # default: <repo>/.venv-tosa-converter
#
# Prints the path of the converter on its last line. scripts/corpus.py finds
# <repo>/.venv-tosa-converter/bin/tosa-converter-for-tflite by itself; elsewhere, set
# LEGALIZE_TOSA_CONVERTER.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${1:-$ROOT/.venv-tosa-converter}"
VERSION="2026.2.0"
source "$ROOT/scripts/own_venv.sh"

own_venv "$VENV" tosa-converter-for-tflite "$VERSION"
CONVERTER="$VENV/bin/tosa-converter-for-tflite"
if [ ! -x "$CONVERTER" ]; then
    echo "setup_tosa_converter: tosa-converter-for-tflite $VERSION installed no $CONVERTER" >&2
    exit 1
fi
echo "$CONVERTER"
