# Sourced by scripts/setup_tf.sh and scripts/setup_tosa_tools.sh: a tool that must not
# land in the project's venv gets a venv of its own.
#
# own_venv DIR DIST VERSION: DIR is a venv (made with $PYTHON, else python3, when it is
# missing) with DIST==VERSION installed; pip runs only when another version, or none,
# is there.
own_venv() {
    local venv="$1" dist="$2" version="$3"
    if [ ! -x "$venv/bin/python" ]; then
        "${PYTHON:-python3}" -m venv "$venv"
    fi
    if ! "$venv/bin/python" -m pip show "$dist" 2>/dev/null | grep -qx "Version: $version"; then
        "$venv/bin/python" -m pip install -q "$dist==$version"
    fi
}
