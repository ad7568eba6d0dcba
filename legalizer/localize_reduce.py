"""After a check that failed (or with ``--localize``): where the candidate starts to
differ from its reference (``numeric.localize``), and with ``--reduce PATH`` the smallest
subgraph that still differs, or still violates the trait (``numeric.reduce``). The driver
(``pipeline.py``) calls these; the candidate's format (``formats``) makes the runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

from .numeric.localize import Localization
from .numeric.results import BindingResult, CheckResult
from .numeric.reduce import Reduced
from .numeric.settings import CheckSettings
from .errors import UsageError, first_line


def failing_binding(chk: CheckResult, forced: bool) -> Optional[BindingResult]:
    """The first binding whose outputs differ in value (not a failed run); with
    ``forced``, else the first compared one."""
    compared = [b for b in chk.bindings if not b.skipped]
    for b in compared:
        if any(not o.ok and o.stats is not None for o in b.outputs):
            return b
    return compared[0] if forced and compared else None


def localize(sides, chk: CheckResult, settings: CheckSettings, *, given, budget: int = 8,
             forced: bool = False) -> Optional[Localization]:
    """Localize the first binding that differs (with ``forced``, else the first
    compared): None when no binding was compared. A runtime that refuses the probes
    gives a Localization whose ``note`` says why. ``sides``: ``formats.Sides``."""
    binding = failing_binding(chk, forced)
    if binding is None:
        return None
    try:
        return sides.fmt.localize(sides, binding, given or {}, settings, budget=budget)
    except Exception as e:  # noqa: BLE001 - a runtime refusing a probe: the check's result stands
        return Localization("", dict(binding.dims), note=f"could not localize: {first_line(e)}")


def reduce_divergence(sides, loc: Localization, path: Path, settings: CheckSettings, *, given,
                      force: bool = False, protect: Sequence[Path] = ()) -> Reduced:
    """``--reduce`` after a localization with a culprit."""
    return sides.fmt.reduce(sides, loc, path, given or {}, settings, force=force, protect=protect)


def reduce_violation(model, fmt, source: Path, violation: dict, profile: str, path: Path, *, force: bool = False,
                     protect: Sequence[Path] = ()) -> Reduced:
    """``--reduce`` of a model whose input violates the trait: its first violation."""
    if violation.get("graph"):
        raise UsageError("--reduce reduces the main graph: the first violation is in subgraph"
                         f" '{violation['graph']}'")
    return fmt.reduce_violation(model, source, violation["code"], violation["node"], profile, path, force=force,
                                protect=protect)
