"""The stages of one run, timed, feeding one Report. The CLI only parses and prints."""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterator, Optional

from .fileio import load
from .model import Model
from .report import Report
from .verify import VerifyResult, verify

EXIT_OK, EXIT_VIOLATIONS, EXIT_BAD_INPUT = 0, 1, 2

# Called as each stage starts, with what is known of its size: "load" gets
# {"bytes": file size}, "verify" {"nodes": top-level node count}. The CLI draws
# progress from it; the API ignores it.
StageCallback = Callable[[str, Dict[str, int]], None]


@dataclass
class RunOptions:
    target: str = "tosa"
    profile: str = "mlir"
    verify_only: bool = False


@dataclass
class RunResult:
    report: Report
    model: Optional[Model] = None
    input_verification: Optional[VerifyResult] = None
    exit_code: int = EXIT_OK
    timings: Dict[str, float] = field(default_factory=dict)


@contextmanager
def _timed(timings: Dict[str, float], stage: str, on_stage: Optional[StageCallback],
           **size: int) -> Iterator[None]:
    if on_stage is not None:
        on_stage(stage, size)
    t0 = time.perf_counter()
    try:
        yield
    finally:
        timings[stage] = timings.get(stage, 0.0) + time.perf_counter() - t0


def _file_size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0  # load() says what is wrong with it


def run(path: Path, options: RunOptions, on_stage: Optional[StageCallback] = None) -> RunResult:
    """Load and verify ``path`` (legalization comes with the passes). Raises
    LegalizeError for bad input; violations are in the result, with exit code 1."""
    timings: Dict[str, float] = {}
    with _timed(timings, "load", on_stage, bytes=_file_size(path)):
        model = load(path)
    report = Report(input=str(path), format=model.format, target=options.target, profile=options.profile)
    report.warnings.extend(model.warnings)
    with _timed(timings, "verify", on_stage, nodes=len(model.graph)):
        result = verify(model.graph, options.profile)
    report.add_verification(result, "input")
    report.timings_s = timings
    exit_code = EXIT_VIOLATIONS if result.violations else EXIT_OK
    return RunResult(report, model, result, exit_code, timings)
