"""What code that a runtime's memory bug reached in the run child could try, as
functions the child runs (tests/test_child_filter.py builds them there with
``child.Remote``): each raises the OSError the child met, or returns None."""

from __future__ import annotations

import fcntl
import os


def tiocsti(tty: str, text: str) -> None:
    """Open another process's terminal read-only and push ``text`` into its input queue."""
    import termios

    fd = os.open(tty, os.O_RDONLY | os.O_NOCTTY)
    try:
        for ch in text.encode():
            fcntl.ioctl(fd, termios.TIOCSTI, bytes([ch]))
    finally:
        os.close(fd)


def ioctl(fd: int, request: int) -> None:
    """``ioctl(fd, request)`` on a descriptor the child holds."""
    fcntl.ioctl(fd, request, b"\0" * 64)


def flock(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(fd)


def lease(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)
    finally:
        os.close(fd)


def fcntl_lock(path: str) -> None:
    import struct

    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.fcntl(fd, fcntl.F_SETLK, struct.pack("hhqqi", fcntl.F_RDLCK, 0, 0, 0, 0))
    finally:
        os.close(fd)


class Read:
    """A file's bytes (``data``), read in the child; the path given by keyword, so that
    the child is not told to read its folder (``child.readable``)."""

    def __init__(self, *, path: str):
        with open(path, "rb") as f:
            self.data = f.read()


class Listing:
    def __init__(self, *, path: str):
        self.names = sorted(os.listdir(path))


# -- replies a compromised child could send --------------------------------------------

class ForgedHeader:
    """Writes a reply header claiming ``claim`` bytes on the run child's reply pipe (its
    fd is the child's first argument), ahead of the real reply."""

    def __init__(self, claim: int):
        import struct
        import sys

        os.write(int(sys.argv[1]), struct.pack("<Q", claim))


class NotArrays:
    """A runner whose outputs are not arrays."""

    name = "forged"

    def __init__(self):
        pass

    def activate(self):
        return self

    def infer(self, feed):
        return {"y": "not an array"}


def helper_read(path: str) -> bytes:
    """In the bounded helper: a file's bytes."""
    with open(path, "rb") as f:
        return f.read()


def helper_write(path: str) -> bytes:
    with open(path, "wb") as f:
        f.write(b"x")
    return b""


def helper_forge(claim: int) -> bytes:
    """In the bounded helper: a reply header claiming ``claim`` bytes on its reply pipe
    (the pipe it holds other than its requests, fd 0)."""
    import struct

    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if fd != 0 and os.readlink(f"/proc/self/fd/{name}").startswith("pipe:"):
                os.write(fd, struct.pack("<Q", claim))
        except OSError:
            pass
    return b""
