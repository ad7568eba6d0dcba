"""Writing outputs as transactions: each file is written under a temporary name beside
its final one and given that name by one rename (``commit``), so a reader never sees a
half-written file and a failed or interrupted run leaves the previous output as it was;
and the checks that outputs are distinct from inputs and each other and may be written."""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import re
import secrets
import socket
import stat
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from .errors import UsageError


@dataclass
class Staged:
    """A file written under its temporary name (``path``), which takes its final name
    when the writer's block ends only if it was ``accept``ed: a check between writing
    and committing decides."""

    path: Path
    accepted: bool = False

    def accept(self) -> None:
        self.accepted = True


@contextmanager
def staged_output(path: Path, *, force: bool = False, protect: Optional[Path] = None) -> Iterator[Staged]:
    """Yield a ``Staged`` temporary path beside ``path``; when the block ends, give it
    the name ``path`` (``commit``) if it was accepted, else remove it.

    Nothing is left behind by a write that fails, is interrupted or is not accepted.
    ``protect`` (the input) is never overwritten; an existing ``path`` needs ``force``,
    and is then replaced only if it is a regular file.
    """
    path = Path(path)
    check_output_path(path, force=force, protect=protect)
    temps: List[Path] = []
    try:
        staged = Staged(temp_beside(path, temps))
        yield staged
        if staged.accepted:
            commit(staged.path, path, force=force)
    except OSError as e:
        raise UsageError(f"{path}: cannot write: {e.strerror}") from None
    finally:
        remove_temps(temps)


@contextmanager
def atomic_output(path: Path, *, force: bool = False, protect: Optional[Path] = None) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success give it the name ``path``
    (``staged_output``, accepted once the block ran)."""
    with staged_output(path, force=force, protect=protect) as staged:
        yield staged.path
        staged.accept()


def temp_name(name: str) -> str:
    """A hidden temporary name for ``name``: ``.<name>.legalize-<host>-<pid>-<random>.tmp``.
    The host (a hash of its name) and the process make a file that a SIGKILL left
    behind known as such to the next run into its folder (``sweep_stale``)."""
    return f".{name}.{TEMP_TAG}-{_HOST}-{os.getpid()}-{secrets.token_hex(4)}.tmp"


TEMP_TAG = "legalize"
_HOST = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:6]
_STALE = re.compile(rf"^\..+\.{TEMP_TAG}-([0-9a-f]{{6}})-(\d+)-[0-9a-f]+\.tmp$")
_swept: set = set()


def sweep_stale(folder: Path) -> List[Path]:
    """Remove the temporary files of runs that were killed (SIGKILL: nothing of them
    ran to remove their own) from ``folder``, once per process and folder: a file named
    by ``temp_name`` on this host whose process is gone, a regular file of this user
    that carries the marker ``temp_beside`` gave it (``MARKER``), never a name alone.
    A process of this host that is alive (another run, or one that took a killed run's
    number) keeps its files. What was removed."""
    try:
        key = os.path.realpath(folder)
    except OSError:
        return []
    if key in _swept:
        return []
    _swept.add(key)
    removed = []
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    for name in names:
        m = _STALE.match(name)
        if m is None or m.group(1) != _HOST or _alive(int(m.group(2))):
            continue
        p = Path(folder) / name
        try:
            st = os.lstat(p)
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and _marked(p):
                os.unlink(p)
                removed.append(p)
        except OSError:
            continue
    return removed


# The extended attribute that marks a file as a temporary of this tool: its value is the
# file's own name. The sweep removes only files that carry it; a name alone is never
# enough (a user's ``.notes.txt.legalize-<host>-<pid>-<hex>.tmp`` stays).
MARKER = "user.legalize.temporary"


def _mark(fd: int, name: str) -> None:
    try:
        os.setxattr(fd, MARKER, name.encode())
    except OSError as e:
        # A file system without user attributes (some FUSE and network mounts, tmpfs
        # before Linux 6.6): the temporary is unmarked, so a SIGKILL's leftover stays.
        if e.errno not in (errno.ENOTSUP, errno.EOPNOTSUPP, errno.EPERM, errno.ENOSYS, errno.E2BIG, errno.ENOSPC):
            raise


def _marked(path: Path) -> bool:
    try:
        return os.getxattr(path, MARKER, follow_symlinks=False) == path.name.encode()
    except OSError:
        return False


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's: alive
        return True
    return True


def temp_beside(path: Path, temps: List[Path]) -> Path:
    """A new, empty, hidden temporary file beside ``path`` (``temp_name``), with the
    permissions ``path`` has or would get. Its name is added to ``temps`` before the
    file is made, so that a run interrupted at any point (SIGTERM, ^C) finds it there
    to remove (``remove_temps``); those a SIGKILL left there before are removed first
    (``sweep_stale``)."""
    path = Path(path)
    mode = _file_mode(path)
    # a descriptor's temporary is not made in /dev or /proc: in the temporary folder
    folder = Path(tempfile.gettempdir()) if descriptor(path) is not None else path.parent
    sweep_stale(folder)
    for _ in range(100):
        tmp = folder / temp_name(path.name)
        temps.append(tmp)
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another's: not ours to remove
            temps.pop()
            continue
        except OSError as e:
            temps.pop()
            raise UsageError(f"{path}: cannot write: {e.strerror}") from None
        try:
            _mark(fd, tmp.name)
            os.fchmod(fd, mode)  # made private, then given the usual permissions
        finally:
            os.close(fd)
        return tmp
    raise UsageError(f"{path}: cannot write: no free temporary name beside it")


def remove_temps(temps: List[Path]) -> None:
    """Remove each temporary file; a ^C or SIGTERM that lands meanwhile (the run is
    unwinding from one already, or it comes now) does not stop the removal: it is
    raised once every file is gone."""
    stopped: Optional[BaseException] = None
    for tmp in temps:
        for _ in range(3):
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            except KeyboardInterrupt as e:
                stopped = e
                continue
            break
    if stopped is not None:
        raise stopped


# os.link fails with these where the file system has no hard links (FAT, some FUSE
# and network mounts): the name is then claimed with O_EXCL instead.
_NO_HARD_LINKS = {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS}


# Set when the command line is told to stop (^C, SIGTERM). Python cannot raise the
# KeyboardInterrupt inside a destructor or a garbage-collector callback (it reports it
# as ignored and goes on), so a signal that lands there would be lost: ``commit``
# checks this too, so that nothing takes its final name once the user stopped the run.
stop_requested = False


def commit(tmp: Path, path: Path, *, force: bool) -> None:
    """Give the finished file ``tmp`` the name ``path``: the one step that makes an
    output visible, whole. Without ``force`` it never replaces anything: a hard link,
    which fails if the name is taken, so that of two runs writing one output the second
    fails (exit 2) instead of silently replacing the first one's result. With ``force``
    only a regular file is replaced (never a device, a FIFO or a socket)."""
    if stop_requested:
        raise KeyboardInterrupt
    fd = descriptor(path)
    if fd is not None:
        _write_through(tmp, fd)
        return
    if not force:
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise UsageError(f"{path}: already exists (use --force to replace it)") from None
        except OSError as e:
            if e.errno not in _NO_HARD_LINKS:
                raise
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            except FileExistsError:
                raise UsageError(f"{path}: already exists (use --force to replace it)") from None
            os.replace(tmp, path)
        else:
            os.unlink(tmp)
        return
    _refuse_special(path)
    os.replace(tmp, path)


# A link into a process's descriptors: /proc/self/fd/1 (what /dev/stdout and /dev/fd/1
# lead to), /proc/<pid>/fd/N, /proc/<pid>/task/<tid>/fd/N.
_PROC_FD = re.compile(r"^/proc/(self|thread-self|\d+)(?:/task/\d+)?/fd/(\d+)$")


def descriptor(path: Path) -> Optional[int]:
    """The descriptor of this process that ``path`` names through its links
    (``/dev/stdout``, ``/dev/fd/2``, ``/proc/self/fd/N``, a link to one of them), else
    None. Such a path is written through, as ``tee`` writes it: renaming a file over it
    would replace the link (``/dev/stdout`` itself) instead. UsageError if it is another
    process's descriptor or one not open for writing."""
    p = os.path.abspath(path)
    for _ in range(40):  # the kernel's own limit on links followed
        head, tail = os.path.split(p)
        p = os.path.join(os.path.realpath(head), tail)
        m = _PROC_FD.match(p)
        if m is not None:
            if m.group(1) not in ("self", "thread-self", str(os.getpid())):
                raise UsageError(f"{path}: is a descriptor of another process; legalize writes only files"
                                 " and its own descriptors")
            fd = int(m.group(2))
            try:
                mode = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE
            except OSError:
                mode = None
            if mode not in (os.O_WRONLY, os.O_RDWR):
                raise UsageError(f"{path}: is descriptor {fd} of legalize, which is not open for writing")
            return fd
        if not os.path.islink(p):
            return None
        p = os.path.normpath(os.path.join(os.path.dirname(p), os.readlink(p)))
    return None


def _write_through(tmp: Path, fd: int) -> None:
    """Copy the finished ``tmp`` to descriptor ``fd`` (at its offset, as the command's own
    output goes), then remove it."""
    with open(tmp, "rb") as f:
        while True:
            chunk = f.read(1 << 20)
            if not chunk:
                break
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view):]
    os.unlink(tmp)


def _refuse_special(path: Path) -> None:
    """UsageError if ``path`` (or what a symbolic link there leads to) exists and is not
    a regular file: renaming over it would turn a device, a FIFO or a socket into a file."""
    try:
        st = os.stat(path)
    except OSError:
        return  # nothing there (or a dangling link, which is replaced)
    if stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{path}: is a directory")
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"{path}: is not a regular file (a device, a FIFO or a socket);"
                         " legalize replaces only regular files")


def _file_mode(path: Path) -> int:
    """The permissions of the file we replace, else those of a new file (umask)."""
    try:
        st = os.stat(path)
        if stat.S_ISREG(st.st_mode):
            return st.st_mode & 0o777
    except OSError:
        pass
    umask = os.umask(0o022)  # reading the umask means setting it; put it back at once
    os.umask(umask)
    return 0o666 & ~umask


def same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` name one file: the same path once links and ``..`` are
    resolved, or two names (hard links) of one existing file."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def check_distinct(outputs: Sequence[Tuple[str, Path]], inputs: Sequence[Path] = ()) -> None:
    """UsageError if one of ``atomic_files`` ((what it is, its path) pairs: "the report
    (--report)", ...) is one of ``inputs`` (paths of input models, or (what it is, path)
    pairs: "the external data of m.onnx") or another output: every file a run writes is
    its own, and no input is written. A path is one file with another when both resolve
    to one path (links, ``..``) or are two names (hard links) of one existing file. Call
    it before the work."""
    seen: Dict[object, str] = {}

    def keys(p: Path) -> List[object]:
        found: List[object] = [os.path.realpath(p)]
        try:
            st = os.stat(p)
            found.append((st.st_dev, st.st_ino))
        except OSError:
            pass
        return found

    read: Dict[object, str] = {}
    for item in inputs:
        what_in, path = item if isinstance(item, tuple) else ("an input model", item)
        for k in keys(Path(path)):
            read.setdefault(k, what_in)
    for what, p in outputs:
        if p is None:
            continue
        ks = keys(Path(p))
        for k in ks:
            if k in read:
                raise UsageError(f"{p}: is {read[k]} and {what}; refusing to overwrite it")
            if k in seen:
                raise UsageError(f"{p}: is both {seen[k]} and {what}; give each its own path")
        for k in ks:
            seen[k] = what


def check_output_path(path: Path, *, force: bool = False, protect: Optional[Path] = None) -> None:
    """UsageError unless ``path`` can be written by ``atomic_output``. Call it before
    the work, so that a bad output path fails at once and with nothing written."""
    path = Path(path)
    if descriptor(path) is not None:
        return  # written through (``commit``), its temporary in the temporary folder
    if path.is_dir():
        raise UsageError(f"{path}: is a directory")
    if protect is not None and path.exists() and Path(protect).exists() and os.path.samefile(path, protect):
        raise UsageError(f"{path}: refusing to overwrite the input model")
    if os.path.lexists(path) and not force:
        raise UsageError(f"{path}: already exists (use --force to replace it)")
    _refuse_special(path)
    if not path.parent.exists():
        raise UsageError(f"{path.parent}: output directory does not exist")
    if not path.parent.is_dir():
        raise UsageError(f"{path.parent}: is not a directory")
    temps: List[Path] = []
    try:  # the one sure test that a file can be made there (permissions, a read-only mount, /proc)
        temp_beside(path, temps)
    finally:
        remove_temps(temps)
