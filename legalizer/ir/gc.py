"""Building a large graph allocates millions of objects that all stay alive; the
cyclic collector would rescan them again and again (measured: half the import time of
a 100,000-node model). It is paused while a graph is built."""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def paused_gc() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
