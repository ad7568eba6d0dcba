"""What localization (``localize.py``) and reduction (``reduce.py``) share about the
intermediate values a ``Runner`` gives (``runner.values``): the chunks they are asked
for a few at a time, and their bounded summaries.

- ONNX (``ort_session.OrtRunner``): the values are added to the graph's outputs, as
  Polygraphy's ``--onnx-outputs mark all`` does (top-level values; a subgraph's stay
  inside it).
- TFLite (``litert.LiteRTRunner``): the values are made subgraph 0's outputs, by tensor
  name.
- TOSA MLIR (``iree_run.IreeRunner``): ``@main`` is cut at the values asked for
  (``iree_run.cut``: it returns them, and IREE drops the ops none of them needs), then
  compiled and run. Names are the SSA names of the module as MLIR prints it
  (``iree_run.printed``), without ``%``.
"""

from __future__ import annotations

from typing import List, Mapping, Sequence

import numpy as np


# Localization compares the values a chunk at a time: at most this many bytes of them (or
# one value, if bigger) are held at once, on each side, so that its memory stays near a
# plain run's (a model whose every intermediate is large would hold them all).
CHUNK_BYTES = 64 << 20
# Content matching compares this many elements of a value at most (evenly spaced, the same
# positions for every value of a size): a bounded summary of each, held for all at once.
SKETCH = 4096


def chunks(order: Sequence[str], sizes: Mapping[str, int], budget: int = CHUNK_BYTES) -> List[List[str]]:
    """``order`` cut into runs of names whose ``sizes`` add up to ``budget`` at most (a
    bigger value alone); a name without a size (not a tensor) is left out."""
    out: List[List[str]] = []
    chunk: List[str] = []
    held = 0
    for name in order:
        if name not in sizes:
            continue
        size = sizes[name]
        if chunk and held + size > budget:
            out.append(chunk)
            chunk, held = [], 0
        chunk.append(name)
        held += size
    if chunk:
        out.append(chunk)
    return out


def sketch(a: np.ndarray) -> np.ndarray:
    """``a`` flattened, or ``SKETCH`` of its elements evenly spaced when it has more."""
    flat = np.asarray(a).reshape(-1)
    if flat.size <= SKETCH:
        return np.array(flat)
    return flat[np.linspace(0, flat.size - 1, SKETCH).astype(np.int64)]
