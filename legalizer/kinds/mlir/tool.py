"""MLIR's own parser, run on untrusted text out of our process, in a subprocess under a
memory and a time limit: ``iree-opt`` (iree-base-compiler's), and ``tosa-opt`` (PyPI's
``tosa-tools``) for the TOSA op syntax that IREE's build does not take (the one
``tosa-converter-for-tflite``, tf-opt and LLVM's tests write). The ``mlir`` extra
installs both; ``tosa-opt`` is found in the environment legalize runs in. Each reads
without verifying (legalize reads invalid TOSA to report it), ops of any dialect.
iree-opt writes bytecode of version 4, which stores properties as attributes (the
bindings list them for an op of a dialect they have not loaded) and the quant dialect's
types as text; tosa-opt's bytecode encodes those types with its quant dialect, which the
bindings cannot read without it, so tosa-opt writes the generic form, every op's
location kept, and iree-opt reads that (no custom syntax in it) to bytecode."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Optional, Sequence, Tuple, Union

from ...errors import BadInput
from ...extras import install_hint

# Where tosa-opt is looked for: the tosa-tools distribution installed beside legalize
# (the ``mlir`` extra; its wheel keeps the binary in its own ``bin/`` under
# site-packages), then a checkout's ``.venv-tosa-tools``, which
# ``scripts/setup_tosa_tools.sh`` makes for developers (tosa-tools installs generic
# top-level package names, kept out of the development venv).
ENV_VAR = "LEGALIZE_TOSA_OPT"
DISTRIBUTION = "tosa-tools"
REPO_ROOT = Path(__file__).resolve().parents[3]
VENV_TOOL = REPO_ROOT / ".venv-tosa-tools" / "bin" / "tosa-opt"
MLIR_EXTRA = "mlir"
SETUP_HINT = (f"install the {MLIR_EXTRA} extra: {install_hint(MLIR_EXTRA)} (in a checkout: bash"
              f" scripts/setup_tosa_tools.sh), or set {ENV_VAR} to a tosa-opt")

# What MLIR's parser may take, beyond the tool's own footprint, per byte of input.
OPT_MEMORY = 4 << 30
OPT_MEMORY_PER_BYTE = 32
OPT_TIMEOUT_S = 300.0
READ = ("--mlir-very-unsafe-disable-verifier-on-parsing", "--allow-unregistered-dialect",
        "--mlir-disable-threading")
BYTECODE = ("--emit-bytecode", "--emit-bytecode-version=4")
GENERIC = ("--mlir-print-op-generic", "--mlir-print-debuginfo")
_DIAGNOSTIC = re.compile(r"^<stdin>:(\d+):(\d+): error: (.*)$", re.M)
# IREE's TOSA dialect spells some attributes of the custom syntax its own way
# (``axis(1)`` for the producers' ``{axis = 1 : i32}``): its error on one of them
# starts so, and tosa-opt, when there is one, reads the text instead.
_TOSA_SYNTAX = "custom op 'tosa."


def _executable(path) -> bool:
    return bool(path) and os.path.isfile(path) and os.access(path, os.X_OK)


def find_tosa_opt() -> Optional[str]:
    """``$LEGALIZE_TOSA_OPT``, then the tosa-opt of the tosa-tools installed in this
    environment, then ``<repo>/.venv-tosa-tools/bin/tosa-opt``, then PATH."""
    env = os.environ.get(ENV_VAR)
    if env and _executable(env):
        return env
    for tool in (_installed_tool(), str(VENV_TOOL)):
        if tool and _executable(tool):
            return tool
    return shutil.which("tosa-opt")


def _installed_tool() -> Optional[str]:
    """The tosa-opt binary of the tosa-tools distribution beside legalize, else its
    console script beside this interpreter; found from the distribution's record, its
    Python packages never imported."""
    try:
        dist = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None
    binary = Path(dist.locate_file(Path("bin") / "tosa-opt"))
    if _executable(str(binary)):
        return str(binary)
    script = Path(sys.executable).parent / "tosa-opt"
    return str(script) if _executable(str(script)) else None


def parser_missing(source: str, what: str = "reading MLIR") -> BadInput:
    """The one line for MLIR input without MLIR's parser and bindings (iree-base-compiler)."""
    return BadInput(f"{source}: {what} needs MLIR's parser (the {MLIR_EXTRA} extra: {install_hint(MLIR_EXTRA)})")


def bindings(source: str, what: str = "reading MLIR"):
    """iree-base-compiler's MLIR Python bindings (``iree.compiler.ir``), else BadInput
    naming the extra."""
    try:
        from iree.compiler import ir
    except ImportError:
        raise parser_missing(source, what) from None
    return ir


def _iree_opt(source: str) -> str:
    try:
        from iree.compiler.tools.binaries import find_tool
    except ImportError:
        raise parser_missing(source) from None
    return find_tool("iree-opt")


def to_bytecode(text: bytes, source: str) -> bytes:
    """MLIR text as bytecode (version 4) by MLIR's parser: iree-opt's, else, where it
    refuses a TOSA op's syntax, tosa-opt's; else BadInput with iree-opt's first error
    (``source:line:col: message``), which names the extra when the syntax is TOSA's
    and no tosa-opt is there."""
    iree_opt = _iree_opt(source)
    out, message = _run(iree_opt, text, source, BYTECODE)
    if not isinstance(out, bytes):
        generic = _tosa_generic(text, source, message, out)
        second = _run(iree_opt, generic, source, BYTECODE)[0] if generic is not None else None
        out = second if isinstance(second, bytes) else out  # else iree-opt's word on the text
    if isinstance(out, BadInput):
        raise out
    return out


def iree_text(text: bytes, source: str) -> str:
    """``text`` as IREE's own parser reads it: the text itself if iree-opt reads it, else
    (a TOSA syntax IREE's build does not take) tosa-opt's generic form of it; else
    BadInput with iree-opt's first error, as ``to_bytecode``."""
    out, message = _run(_iree_opt(source), text, source, ("-o", os.devnull))
    if isinstance(out, bytes):
        return text.decode("utf-8")
    generic = _tosa_generic(text, source, message, out)
    if generic is None:
        raise out
    return generic.decode("utf-8")


def _tosa_generic(text: bytes, source: str, message: str, error: BadInput) -> Optional[bytes]:
    """tosa-opt's generic form of ``text``, where iree-opt refused it (``message``) for a
    TOSA op's syntax; None where iree-opt's ``error`` is the word (another error, or
    tosa-opt cannot read it either); BadInput naming the extra where no tosa-opt is there."""
    if not message.startswith(_TOSA_SYNTAX):
        return None
    tosa_opt = find_tosa_opt()
    if tosa_opt is None:
        raise BadInput(f"{error} (a TOSA syntax IREE's parser does not take; tosa-opt reads it: install the"
                       f" {MLIR_EXTRA} extra: {install_hint(MLIR_EXTRA)})")
    generic = _run(tosa_opt, text, source, GENERIC)[0]
    return generic if isinstance(generic, bytes) else None


def _capped(command: Sequence[str], memory: int) -> list:
    """``command`` under an address-space limit of ``memory`` bytes (soft, under any hard
    limit of ours), set by a shell that then becomes the tool: not by a ``preexec_fn``,
    which would run Python in a fork of this process, whose runtimes may hold threads."""
    import resource

    hard = resource.getrlimit(resource.RLIMIT_AS)[1]
    cap = memory if hard == resource.RLIM_INFINITY else min(memory, hard)
    return ["/bin/sh", "-c", 'ulimit -S -v "$1" && shift && exec "$@"', "sh", str(cap // 1024), *command]


def _run(tool: str, data: bytes, source: str, write: Sequence[str]) -> Tuple[Union[bytes, BadInput], str]:
    """``tool`` reading ``data``, writing as ``write`` says: its output, or BadInput with MLIR's first error; and that
    error's message as MLIR wrote it (``""`` when none)."""
    memory = OPT_MEMORY + OPT_MEMORY_PER_BYTE * len(data)
    try:
        done = subprocess.run(_capped([tool, *READ, *write, "-"], memory), input=data, capture_output=True,
                              timeout=OPT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return BadInput(f"{source}: MLIR's parser did not finish in {OPT_TIMEOUT_S:.0f} s"), ""
    except OSError as e:
        return BadInput(f"{source}: MLIR's parser ({tool}) cannot run: {e.strerror}"), ""
    if done.returncode == 0:
        return done.stdout, ""
    err = done.stderr.decode("utf-8", "replace")
    m = _DIAGNOSTIC.search(err)
    if m and m.group(1) != "0":
        message = m.group(3).strip()
        return BadInput(f"{source}:{m.group(1)}:{m.group(2)}: {message}"), message
    if done.returncode < 0:
        return BadInput(f"{source}: MLIR that MLIR's parser cannot read (it died of signal {-done.returncode})"), ""
    first = next((ln for ln in err.splitlines() if "error" in ln), err.strip().splitlines()[0] if err.strip() else "")
    message = first.split("error: ", 1)[-1].strip() or "no message"
    return BadInput(f"{source}: not readable MLIR ({message})"), message
