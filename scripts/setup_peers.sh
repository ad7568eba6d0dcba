#!/usr/bin/env bash
# Install the graph rewriters `python scripts/bench.py --peers` runs beside legalize
# (onnxsim, onnxslim, onnxscript's optimizer, onnxoptimizer) into their OWN virtual
# environment: they pin onnx, onnxruntime and protobuf versions of their own, which must
# not land in the project's venv.
#
#   bash scripts/setup_peers.sh [VENV_DIR]     # default: <repo>/.venv-peers
#
# Prints the venv's python on its last line; scripts/bench.py --peers finds
# <repo>/.venv-peers/bin/python by itself (elsewhere: --peers-python PY).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${1:-$ROOT/.venv-peers}"
PY="${PYTHON:-python3}"
PEERS=("onnxsim==0.8.1" "onnxslim==0.1.98" "onnxscript==0.7.2" "onnxoptimizer==0.4.2")

if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q "${PEERS[@]}" onnxruntime
# Each peer imports (its version is what the bench reports).
"$VENV/bin/python" - <<'EOF'
import importlib.metadata as md
for dist, module in (("onnxsim", "onnxsim"), ("onnxslim", "onnxslim"), ("onnxscript", "onnxscript.optimizer"),
                     ("onnxoptimizer", "onnxoptimizer"), ("onnx", "onnx")):
    __import__(module)
    print(f"setup_peers: {dist} {md.version(dist)}")
EOF
echo "$VENV/bin/python"
