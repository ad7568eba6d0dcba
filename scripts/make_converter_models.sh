#!/usr/bin/env bash
# TOSA modules made by tosa-converter-for-tflite (PyPI, kept in its own environment: it
# installs generic top-level package names) from the TFLite sample models, committed in
# models/tosa_converter/ as third-party input for `legalize --verify-only [--against]`.
#
#   python3 -m venv /tmp/venv-tosa && /tmp/venv-tosa/bin/pip install tosa-converter-for-tflite==2026.2.0
#   scripts/make_converter_models.sh /tmp/venv-tosa/bin/tosa-converter-for-tflite
set -euo pipefail
converter=${1:-tosa-converter-for-tflite}
root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/models/tosa_converter"
mkdir -p "$out"
for f in "$root"/models/tflite/*.tflite; do
  name=$(basename "$f" .tflite)
  if "$converter" "$f" --bytecode -o "$out/$name.mlirbc" >/dev/null 2>"$out/.err"; then
    echo "wrote $out/$name.mlirbc"
  else
    echo "$name: rejected: $(grep -m1 -i error "$out/.err" || true)"
    rm -f "$out/$name.mlirbc"
  fi
done
"$converter" "$root/models/tflite/mobilenet_like.tflite" --text -o "$out/mobilenet_like.mlir" >/dev/null
echo "wrote $out/mobilenet_like.mlir"
rm -f "$out/.err"
