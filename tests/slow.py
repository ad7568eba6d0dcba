"""The long suites (the whole conformance corpus, fuzzing, the real-model corpus, sweeps)
run under the ``slow`` marker: ``pytest -m slow`` runs them, and pyproject.toml's
addopts leave them out of the default ``pytest``, which keeps a sample of each, so
that it still covers every feature in a few minutes."""

from __future__ import annotations

from typing import Callable, Collection, Iterable, List

import pytest


def sample(values: Iterable, keep: Collection, key: Callable = lambda v: v) -> List:
    """``values`` as parameters, those whose ``key`` is in ``keep`` in the default run,
    the others marked slow. A tuple value gives a parameter per argument name."""
    params, found = [], set()
    for v in values:
        args = v if isinstance(v, tuple) else (v,)
        found.add(key(v))
        params.append(pytest.param(*args) if key(v) in keep else pytest.param(*args, marks=pytest.mark.slow))
    assert set(keep) <= found, f"the sample names what is not there: {sorted(set(keep) - found)}"
    return params
