#!/usr/bin/env bash
# Install the TOSA validator (tosa-opt from PyPI's tosa-tools) into its OWN virtual
# environment: tosa-tools installs generic top-level packages (checker, conformance,
# frameworks, ...) that must not land in the project's venv.
#
#   bash scripts/setup_tosa_tools.sh [VENV_DIR]     # default: <repo>/.venv-tosa-tools
#
# Prints the path of tosa-opt on its last line. legalizer/numeric/tosa_validate.py finds
# <repo>/.venv-tosa-tools/bin/tosa-opt by itself; elsewhere, set LEGALIZE_TOSA_OPT.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${1:-$ROOT/.venv-tosa-tools}"
VERSION="2026.8.0"
source "$ROOT/scripts/own_venv.sh"

own_venv "$VENV" tosa-tools "$VERSION"
TOSA_OPT="$VENV/bin/tosa-opt"
if [ ! -x "$TOSA_OPT" ]; then
    echo "setup_tosa_tools: tosa-tools $VERSION installed no $TOSA_OPT" >&2
    exit 1
fi
"$TOSA_OPT" --version >/dev/null
echo "$TOSA_OPT"
