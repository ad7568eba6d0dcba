"""Landlock (Linux 5.13 and later): what the run child may read, limited to the folders
it needs, so that code a runtime's memory bug lets a model run cannot read the
machine's other files (``/etc/shadow`` as root, another user's terminal, the run's own
inputs of other models). Called by ``sandbox.install`` before the syscall filter,
through the kernel's three calls directly (ctypes): no package needed.

Only reading is handled here (``READ_FILE``, ``READ_DIR``): writing, creating and
removing are refused by the syscall filter for every path. The folders: the Python
install (the interpreter's prefixes and the module search path), the system's shared
libraries, the folders of the run's models, outputs and temporaries (named by the
parent), ``/proc/self`` (the process's own maps and limits) and the CPU topology in
``/sys/devices/system/cpu`` (the runtimes size their thread pools from it)."""

from __future__ import annotations

import ctypes
import os
import sys
import sysconfig
from typing import Iterable, List, Tuple

_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446  # x86_64 and the generic table (arm64) alike
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_READ_FILE, _READ_DIR = 1 << 2, 1 << 3
_PR_SET_NO_NEW_PRIVS = 38

# Read by every interpreter and runtime: the dynamic loader's cache and the system's
# shared libraries (libstdc++, libgomp, libm), the CPU's topology and features, and
# /dev/urandom (PyTorch does not start without it).
SYSTEM = ("/etc/ld.so.cache", "/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib",
          "/sys/devices/system/cpu", "/proc/cpuinfo", "/proc/self", "/dev/urandom")


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def python_install() -> List[str]:
    """The interpreter's own folders: its prefixes' libraries, its executable, and every
    folder on its module search path (the working folder is not one: the child starts
    with ``-P``)."""
    paths = [os.path.dirname(os.path.realpath(sys.executable)), sys.executable]
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        try:
            paths.append(sysconfig.get_path(key))
        except KeyError:
            pass
    paths += [p for p in sys.path if p and os.path.isabs(p)]
    # this package itself, and a clone's op tables beside it: an editable install imports
    # it through a finder, from a folder that is not on the search path
    here = os.path.dirname(os.path.realpath(__file__))
    paths += [p for p in (here, os.path.join(os.path.dirname(here), "rules")) if os.path.isdir(p)]
    return paths


def abi() -> int:
    """The kernel's Landlock ABI version; 0 where it has none (older than 5.13, or
    Landlock not enabled at boot)."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        version = libc.syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    except (OSError, AttributeError):
        return 0
    return max(int(version), 0)


def restrict_reading(roots: Iterable[str]) -> Tuple[bool, str]:
    """Let this process (and the threads it makes from now on) read only beneath
    ``roots`` (and ``SYSTEM``, ``python_install()``): (True, "landlock") or (False, why
    not)."""
    if abi() < 1:
        return False, "no Landlock (the kernel has none: reading is not limited)"
    libc = ctypes.CDLL(None, use_errno=True)
    handled = ctypes.c_uint64(_READ_FILE | _READ_DIR)
    ruleset = libc.syscall(_CREATE_RULESET, ctypes.byref(handled), ctypes.c_size_t(8), ctypes.c_uint32(0))
    if ruleset < 0:
        return False, f"no Landlock ({os.strerror(ctypes.get_errno())})"
    try:
        for path in dict.fromkeys(os.path.realpath(p) for p in (*SYSTEM, *python_install(), *roots)):
            _allow(libc, ruleset, path)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or libc.syscall(_RESTRICT_SELF, ruleset, 0) != 0:
            return False, f"no Landlock ({os.strerror(ctypes.get_errno())})"
    finally:
        os.close(ruleset)
    return True, "landlock"


def _allow(libc, ruleset: int, path: str) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:  # not on this machine: nothing to allow
        return
    try:
        rule = _PathBeneath(_READ_FILE | (_READ_DIR if os.path.isdir(path) else 0), fd)
        libc.syscall(_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0)
    finally:
        os.close(fd)
