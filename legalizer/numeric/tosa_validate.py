"""Validate TOSA MLIR text against the TOSA specification with ``tosa-opt --tosa-validate``.

The tool comes from PyPI's ``tosa-tools`` (2026.8.0): the ``mlir`` extra installs it
beside legalize; a checkout keeps it in a virtual environment of its own (it installs
generic top-level package names): ``bash scripts/setup_tosa_tools.sh`` creates
``<repo>/.venv-tosa-tools``. ``find_tosa_opt`` looks in both.

The module is checked as one target environment: ``--tosa-attach-target`` (specification
1.0, level 8k, profiles ``pro_int,pro_fp`` - float models need PRO-FP, int8 ones PRO-INT -,
no extensions) then ``--tosa-validate``. Spec 1.0's level check rejects dynamic dims,
so only static modules (symbolic dims bound with ``dims=``) can pass.
"""

from __future__ import annotations

import os
import subprocess
from typing import Optional, Sequence, Tuple

from ..kinds.mlir.tool import SETUP_HINT, find_tosa_opt  # the one lookup: MLIR's parser uses it too

PROFILES = ("pro_int", "pro_fp")
EXTENSIONS: Tuple[str, ...] = ()
TIMEOUT_S = 60.0


def command(tool: str, *, profiles: Sequence[str] = PROFILES, extensions: Sequence[str] = EXTENSIONS,
            strict: bool = False) -> list:
    """The argument list that validates MLIR read from stdin."""
    target = f"profiles={','.join(profiles)}"
    if extensions:
        target += f" extensions={','.join(extensions)}"
    validate = "--tosa-validate=strict-op-spec-alignment" if strict else "--tosa-validate"
    return [tool, "-", f"--tosa-attach-target={target}", validate, "-o", os.devnull]


def validate(text: str, *, tool: Optional[str] = None, timeout: float = TIMEOUT_S,
             profiles: Sequence[str] = PROFILES, extensions: Sequence[str] = EXTENSIONS,
             strict: bool = False) -> Tuple[bool, str]:
    """``(ok, first_error_line)``: whether tosa-opt parses, verifies and validates ``text``;
    when not, the first ``error:`` line of its diagnostics (``<stdin>:LINE:COL: error: ...``),
    or why it could not run. ``first_error_line`` is ``""`` when ok."""
    tool = tool or find_tosa_opt()
    if tool is None:
        return False, f"tosa-opt not found: {SETUP_HINT}"
    try:
        proc = subprocess.run(command(tool, profiles=profiles, extensions=extensions, strict=strict),
                              input=text, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, f"tosa-opt timed out after {timeout:g} s"
    except OSError as e:
        return False, f"tosa-opt cannot run: {e}"
    if proc.returncode == 0:
        return True, ""
    lines = [ln.strip() for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error:" in ln]
    first = (errors or lines or [f"tosa-opt exited with status {proc.returncode}"])[0]
    return False, first
