"""What a test needs beyond ``.[test]``, in one table: each extra of pyproject.toml by
the modules that tell it is installed, and each tool a script sets up. A test says what
it needs once, ``@pytest.mark.needs("iree")`` (a module: ``pytestmark``), or
``require("iree")`` inside a test whose need depends on its parameters; where it is
missing, the test skips with a reason that names the extra and how to install it
(``needs the iree extra: pip install 'legalizer[iree]'``). tests/conftest.py reads the
marker."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import shutil
import sys
from pathlib import Path
from typing import Callable, Dict, Optional, Tuple

import pytest

from legalizer.extras import install_hint

# extra -> the modules it installs that the tests use (onnx_ir comes with onnxscript).
EXTRAS: Dict[str, Tuple[str, ...]] = {
    "torch": ("torch", "onnxscript", "onnx_ir"),
    "litert": ("ai_edge_litert.interpreter",),
    "coreml": ("coremltools",),
    "corpus": ("transformers",),
    "executorch": ("executorch.exir", "executorch.runtime"),
    "jax": ("jax", "jaxlib"),
    "iree": ("iree.compiler", "iree.runtime"),
    "mlir": ("iree.compiler",),  # MLIR's parser (tosa-opt for the older TOSA syntax: the tool below)
    "ray": ("ray",),
    "vela": ("ethosu.vela",),
    "qnn": ("onnxruntime_qnn",),
    "sandbox": ("pyseccomp",),
    "docs": ("mkdocs", "mkdocstrings", "mkdocstrings_handlers.python"),
    "viewer": ("model_explorer", "model_explorer_onnx", "ai_edge_model_explorer_adapter"),
}
# The corpus's models are read from .cache/corpus, built or not; a test that exports a
# transformers architecture itself needs the corpus extra (transformers).


def _tosa_opt() -> Optional[str]:
    from legalizer.kinds.mlir.tool import SETUP_HINT, find_tosa_opt

    return None if find_tosa_opt() else SETUP_HINT


def _polygraphy() -> Optional[str]:
    # Not an extra: the round-trip tests check our Polygraphy JSON against Polygraphy itself.
    hint = "pip install polygraphy, or the test extra: pip install -e '.[test]' (the golden round-trip tests use its module and command)"
    try:
        importlib.import_module("polygraphy")
    except ImportError:
        return hint
    return None if polygraphy_command() else hint


def polygraphy_command() -> Optional[str]:
    """The polygraphy command (on PATH, or beside this Python), or None."""
    here = Path(sys.executable).parent / "polygraphy"
    return shutil.which("polygraphy") or (str(here) if here.exists() else None)


def _litert_gpu() -> Optional[str]:
    # LiteRT's WebGPU accelerator: the litert extra and a Vulkan driver (Mesa's lavapipe).
    if missing("litert") is not None:
        return f"it comes with the litert extra: {install_hint('litert')}"
    from legalizer.numeric import litert_gpu

    ok, why = litert_gpu.gpu_available()
    if ok:
        return None
    return why if litert_gpu.MESA_HINT in why else f"{why} ({litert_gpu.MESA_HINT})"


def _chromium() -> Optional[str]:
    return None if browser() else "no chromium on PATH: apt-get install chromium"


def _sympy() -> Optional[str]:
    # onnxruntime's symbolic shape inference (contrib ops' ranks) imports it; onnxruntime's
    # wheel does not bring it, torch's does
    return None if importlib.util.find_spec("sympy") else "no sympy, which onnxruntime's symbolic shape inference" \
        " needs: pip install sympy"


def _ps() -> Optional[str]:
    # the containment tests list a run's children with it
    return None if shutil.which("ps") else "no ps on PATH: apt-get install procps"


def browser() -> Optional[str]:
    """The headless browser the HTML tests drive, or None."""
    return next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome", "chrome")
                 if shutil.which(b)), None)


# tool -> why it is not usable here (how to set it up), or None
TOOLS: Dict[str, Callable[[], Optional[str]]] = {
    "tosa-opt": _tosa_opt,
    "polygraphy": _polygraphy,
    "litert-gpu": _litert_gpu,
    "chromium": _chromium,
    "ps": _ps,
    "sympy": _sympy,
}


@functools.lru_cache(maxsize=None)
def missing(need: str) -> Optional[str]:
    """Why the extra or tool ``need`` is not usable here (a skip's reason), or None."""
    if need in TOOLS:
        setup = TOOLS[need]()
        return None if setup is None else f"needs {need}: {setup}"
    if need not in EXTRAS:
        raise KeyError(f"unknown need {need!r}: one of {', '.join([*EXTRAS, *TOOLS])}")
    for module in EXTRAS[need]:
        try:
            importlib.import_module(module)
        except ImportError as e:  # also a broken install (a missing shared library)
            return f"needs the {need} extra: {install_hint(need)} ({module}: {e})"
    return None


def require(*needs: str, module: bool = False) -> None:
    """Skip the running test (``module``: the whole module, called at its top) unless
    every one of ``needs`` is usable."""
    for need in needs:
        reason = missing(need)
        if reason is not None:
            pytest.skip(reason, allow_module_level=module)


def has(need: str) -> bool:
    return missing(need) is None
