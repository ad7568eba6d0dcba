"""The syscall filter of the children that work on untrusted input (the one that runs
models, ``numeric/serve.py``, and the bounded helper, ``bounded_helper.py``): seccomp, through
libseccomp (PyPI ``pyseccomp``, the optional ``sandbox`` extra, over the system's
libseccomp2), installed before the child reads its first request, so that code a
runtime's memory bug lets a model run can do no more than compute and return results.

Allowed (``ALLOWED``): memory (mmap, mprotect, ...), threads (clone with CLONE_THREAD
only, futex, ...), reading files (open/openat without any flag that writes, creates or
truncates; stat, read, getdents64, ...; which files, Landlock decides: ``landlock.py``),
reading and writing descriptors it already holds (its pipes, /dev/null; ``ioctl`` with
the requests in ``IOCTLS`` only, ``fcntl`` with the commands in ``FCNTLS``: no lock, no
lease), clocks, signals to itself, reading its resource limits
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
from typing import List, Sequence, Tuple

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
    "readlink", "readlinkat", "getdents64", "getcwd", "dup", "dup2", "dup3", "eventfd2",
    "epoll_create1", "epoll_ctl", "epoll_wait", "epoll_pwait", "poll", "ppoll", "select", "pselect6", "pipe2",
    "fadvise64",
    # the process itself
    "getrandom", "uname", "sysinfo", "getrlimit", "geteuid", "getuid", "getegid",
    "getgid", "getresuid", "getresgid", "getpgrp", "getpgid", "getsid", "umask",
)

# open/openat flags that write, create or truncate: refused
_WRITING = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND  # (O_TMPFILE needs one of the first two)
_CLONE_THREAD = 0x00010000

# ``ioctl`` requests the runtimes issue (strace -f of onnxruntime, LiteRT, IREE's runtime
# and PyTorch on the samples): TCGETS alone (isatty, by Python and the C libraries). No
# TIOCSTI (typing into a terminal), no TIOCLINUX, nothing else.
IOCTLS = {"TCGETS": 0x5401}
# ``fcntl`` commands: descriptor flags and duplicates only; no lock (F_SETLK, F_OFD_*),
# no lease (F_SETLEASE), no F_SETOWN/F_SETSIG (a signal to another process), no F_NOTIFY.
FCNTLS = {"F_DUPFD": 0, "F_GETFD": 1, "F_SETFD": 2, "F_GETFL": 3, "F_SETFL": 4, "F_DUPFD_CLOEXEC": 1030,
          "F_GETPIPE_SZ": 1032}


def install(readable: Sequence[str] = ()) -> Tuple[bool, str]:
    """Limit reading to ``readable`` (and the Python install: ``landlock.py``) where the
    kernel has Landlock, then load the filter into this process (and the threads it
    makes from now on): (True, "seccomp" or "seccomp, landlock") or (False, why not)."""
    from .landlock import restrict_reading

    try:  # (before Landlock: finding libseccomp reads the loader's cache and runs ldconfig)
        import pyseccomp as sc
    except ImportError:
        sc = None
        missing = "no syscall filter: pyseccomp is not installed (the sandbox extra)"
    except OSError as e:  # pyseccomp without the system's libseccomp
        sc = None
        missing = f"no syscall filter: libseccomp cannot be loaded ({e})"
    landlocked, why = restrict_reading(readable)
    if sc is None:
        return False, missing + ("; reading limited by Landlock" if landlocked else "")
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
        _allow(f, sc, "kill", sc.Arg(0, sc.EQ, os.getpid()))
        for request in IOCTLS.values():
            _allow(f, sc, "ioctl", sc.Arg(1, sc.EQ, request))
        for fd in _gpu_descriptors():  # CUDA's, opened before the filter: the driver's own requests
            _allow(f, sc, "ioctl", sc.Arg(0, sc.EQ, fd))
        for command in FCNTLS.values():
            _allow(f, sc, "fcntl", sc.Arg(1, sc.EQ, command))
        try:
            f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
        except (ValueError, OSError, RuntimeError):
            pass
        f.load()
    except (OSError, ValueError, RuntimeError, AttributeError) as e:
        return False, f"no syscall filter: seccomp refused it ({e})"
    return True, "seccomp, landlock" if landlocked else f"seccomp; {why}"


def _gpu_descriptors() -> List[int]:
    """The descriptors this process holds on NVIDIA's device files (``/dev/nvidia*``,
    opened by ``serve._start_cuda`` before the filter; none can be opened after it)."""
    fds = []
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return fds
    for name in names:
        try:
            if os.readlink(f"/proc/self/fd/{name}").startswith("/dev/nvidia"):
                fds.append(int(name))
        except (OSError, ValueError):
            pass
    return fds


def _allow(f, sc, name: str, *args) -> None:
    try:
        f.add_rule(sc.ALLOW, name, *args)
    except (ValueError, OSError, RuntimeError):  # a call this architecture does not have
        pass
