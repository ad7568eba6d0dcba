"""Building a large graph allocates millions of objects that all stay alive; the
cyclic collector would rescan them again and again (measured: half the import time of
a 100,000-node model). It is paused while a graph is built, or rewritten and written.

When it resumes, what was made in the meantime is put in the oldest generation at once
(``gc.freeze`` then ``gc.unfreeze``, which moves every tracked object there without
looking at it): else the first young collections would each walk all of it again (three
walks of a 1,000,000-node graph: seconds). It is left to full collections, as objects
that have survived two collections would be. Only where nobody else has frozen objects
(``gc.get_freeze_count()``), whose freeze this must not undo."""

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
            if gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()
            gc.enable()
