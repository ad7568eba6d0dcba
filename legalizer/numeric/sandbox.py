"""The syscall filter of the child that runs models (``serve.py``): seccomp, through
libseccomp (PyPI ``pyseccomp``, the optional ``sandbox`` extra, over the system's
libseccomp2), installed before the child reads its first request, so that code a
runtime's memory bug lets a model run can do no more than compute and return results.

Allowed (``ALLOWED``): memory (mmap, mprotect, ...), threads (clone with CLONE_THREAD
only, futex, ...), reading files (open/openat without any flag that writes, creates or
truncates; stat, read, getdents64, ...), reading and writing descriptors it already
holds (its pipes, /dev/null), clocks, signals to itself, reading its resource limits
(``prlimit64`` without a new limit; no ``setrlimit``: the parent sets its address-space
limit from outside, and nothing inside can raise it). Everything else fails with EPERM
(``clone3`` with ENOSYS, so that threads are made with ``clone``): no execve, fork or
vfork, no socket, no file created, written, renamed, removed or re-permissioned, no
ptrace or process_vm_*, no io_uring, no signal to another process, no new limit.

Found by running the real runtimes under ``strace -f`` on the sample models
(models/*.onnx, models/tflite, models/mlp.pt2: onnxruntime, LiteRT, PyTorch, IREE's
runtime, localization included) and then under the filter itself (tests/test_contained.py).
IREE's compiler runs its own tools (iree-compile, its linker) and writes temporary
files: it runs in a second child without this filter (``child.COMPILE``), and only the
compiled module's run happens here.
"""

from __future__ import annotations

import errno
import os
from typing import Tuple

ALLOWED = (
    # memory
    "brk", "mmap", "munmap", "mprotect", "mremap", "madvise", "mbind", "get_mempolicy", "set_mempolicy",
    "membarrier", "mincore",
    # threads and their synchronization
    "futex", "futex_waitv", "set_robust_list", "get_robust_list", "rseq", "set_tid_address", "gettid", "getpid",
    "getppid", "sched_yield", "sched_getaffinity", "sched_setaffinity", "sched_getparam", "sched_getscheduler",
    "sched_get_priority_max", "sched_get_priority_min", "getcpu", "prctl", "arch_prctl", "exit", "exit_group",
    # time
    "nanosleep", "clock_nanosleep", "clock_gettime", "clock_getres", "gettimeofday", "getrusage", "times",
    # signals (to itself: tgkill below)
    "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "sigaltstack", "restart_syscall",
    # descriptors it holds, and reading files
    "read", "readv", "pread64", "preadv", "preadv2", "write", "writev", "pwrite64", "pwritev", "close",
    "close_range", "fstat", "newfstatat", "stat", "lstat", "statx", "lseek", "access", "faccessat", "faccessat2",
    "readlink", "readlinkat", "getdents64", "getcwd", "fcntl", "dup", "dup2", "dup3", "ioctl", "eventfd2",
    "epoll_create1", "epoll_ctl", "epoll_wait", "epoll_pwait", "poll", "ppoll", "select", "pselect6", "pipe2",
    "fadvise64", "flock",
    # the process itself
    "getrandom", "uname", "sysinfo", "getrlimit", "geteuid", "getuid", "getegid",
    "getgid", "getresuid", "getresgid", "getpgrp", "getpgid", "getsid", "umask",
)

# open/openat flags that write, create or truncate: refused
_WRITING = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND  # (O_TMPFILE needs one of the first two)
_CLONE_THREAD = 0x00010000


def install() -> Tuple[bool, str]:
    """Load the filter into this process (and the threads it makes from now on):
    (True, "seccomp") or (False, why not)."""
    try:
        import pyseccomp as sc
    except ImportError:
        return False, "no syscall filter: pyseccomp is not installed (the sandbox extra)"
    except OSError as e:  # pyseccomp without the system's libseccomp
        return False, f"no syscall filter: libseccomp cannot be loaded ({e})"
    try:
        f = sc.SyscallFilter(defaction=sc.ERRNO(errno.EPERM))
        for name in ALLOWED:
            _allow(f, sc, name)
        for name, arg in (("open", 1), ("openat", 2)):
            _allow(f, sc, name, sc.Arg(arg, sc.MASKED_EQ, _WRITING, 0))
        _allow(f, sc, "clone", sc.Arg(0, sc.MASKED_EQ, _CLONE_THREAD, _CLONE_THREAD))
        # limits read, never set (the parent sets its address-space limit from outside)
        _allow(f, sc, "prlimit64", sc.Arg(2, sc.EQ, 0))
        _allow(f, sc, "tgkill", sc.Arg(0, sc.EQ, os.getpid()))
        try:
            f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
        except (ValueError, OSError, RuntimeError):
            pass
        f.load()
    except (OSError, ValueError, RuntimeError, AttributeError) as e:
        return False, f"no syscall filter: seccomp refused it ({e})"
    return True, "seccomp"


def _allow(f, sc, name: str, *args) -> None:
    try:
        f.add_rule(sc.ALLOW, name, *args)
    except (ValueError, OSError, RuntimeError):  # a call this architecture does not have
        pass
