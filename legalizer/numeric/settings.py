"""The settings every check, localization and reduction of a run is given, as one record
(``CheckSettings``), so that the provider and the tolerances travel together. A light
module: the options (``job.RunOptions``) build it before any runtime is imported."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Optional

from . import ATOL, RTOL


@dataclass(frozen=True)
class CheckSettings:
    """What the user asks of every check, localization and reduction of a run, as one
    record (``RunOptions.check_settings``): the ``--provider`` its runners come from
    (``runtimes.py``), the tolerances (each a float or a ``Tolerance``), whether no
    dynamic dim is 1 (strict symbolic mode), whether the compared runs are kept, the
    seed of synthesized inputs and how many dim bindings to run at most."""

    provider: str = "auto"
    rtol: Any = RTOL  # a float, or a ``compare.Tolerance`` (per output)
    atol: Any = ATOL
    not_one: bool = False
    record: bool = False
    seed: int = 0
    max_bindings: int = 8


def settings_of(settings: Optional[CheckSettings] = None, **changes) -> CheckSettings:
    """``settings`` (the defaults when None) with some of its fields given anew, as the
    entry points take them by keyword (``check(a, b, provider="cpu")``)."""
    return replace(settings or CheckSettings(), **changes)
