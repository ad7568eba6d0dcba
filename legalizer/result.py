"""What one run gives a library caller: ``Result``, made from the run's JSON report.

The report (``report.Report.to_json``, defined by ``report.schema.json``) is the one
record of a run; ``Result`` reads it, so that every face that runs the job (the
library's ``legalize`` of a path, and the PyTorch form) answers alike, and ``NotLegal``
carries the same object as a success. It imports nothing: a report is a dict."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

# The three answers to "did the numeric check run?"
RAN, RAN_IN_PART, NOT_RUN = "ran", "ran in part", "not run"


@dataclass(frozen=True)
class CheckStatus:
    """Whether the numeric check ran (``state``: ``"ran"``, ``"ran in part"`` or
    ``"not run"``), why not fully (``why``, empty when it ran fully) and, when it
    compared outputs, whether they match (``ok``; None when it compared nothing)."""

    state: str
    why: str = ""
    ok: Optional[bool] = None

    @property
    def ran(self) -> bool:
        """It ran, fully or in part."""
        return self.state != NOT_RUN

    @property
    def full(self) -> bool:
        return self.state == RAN

    @classmethod
    def from_report(cls, report: dict) -> "CheckStatus":
        chk = report.get("check") or {"ran": False}
        if not chk.get("ran"):
            why = chk.get("error") or _not_run_why(report)
            return cls(NOT_RUN, why, None)
        torch = chk.get("torch")
        if chk.get("error"):
            return cls(RAN_IN_PART, chk["error"], chk.get("ok"))
        if torch is not None and not torch.get("ran"):
            return cls(RAN_IN_PART, f"the check against PyTorch did not run: {torch.get('error', '')}", chk.get("ok"))
        return cls(RAN, "", chk.get("ok"))

    def __str__(self) -> str:
        return self.state + (f": {self.why}" if self.why else "")


def _not_run_why(report: dict) -> str:
    """Why a check that left no error did not run: a model was not legal, or it was
    not asked for."""
    stages = {v.get("stage") for v in report.get("violations", [])}
    if "input" in stages:
        return "the input violates the Broadcastable trait"
    if "output" in stages:
        return "the legalized model is not legal under its target's profile"
    return "not asked for (check=False, --no-check, --verify-only)"


@dataclass(frozen=True)
class Result:
    """One run of ``legalize``: ``output`` (the path written, or the model given back;
    None when nothing was written), ``report`` (the JSON report, a dict:
    ``legalize --schema`` defines it), ``check`` (a ``CheckStatus``), ``warnings`` and
    ``refused`` (the ops the target still refuses after legalizing: each ``node``,
    ``op``, ``reasons``; they stay off the accelerator, on the CPU). ``exit_code`` is the
    command's for the same run: 0 legal (and checked), 1 not legal or not equivalent,
    2 bad input. A path-like ``output`` makes the result path-like (``os.fspath``)."""

    output: Any
    report: Dict[str, Any]
    check: CheckStatus
    warnings: Tuple[str, ...] = ()
    refused: Tuple[dict, ...] = ()
    exit_code: int = 0
    violations: Tuple[dict, ...] = field(default=(), repr=False)

    @classmethod
    def from_report(cls, report: dict, output: Any = None, exit_code: Optional[int] = None) -> "Result":
        """The result a report describes; ``output`` defaults to the report's
        ``output`` path, ``exit_code`` to its own (a batch entry's) or 0."""
        from pathlib import Path

        if output is None and report.get("output") is not None:
            output = Path(report["output"])
        rules = report.get("target_rules") or {}
        code = exit_code if exit_code is not None else int(report.get("exit_code", 0))
        return cls(output, report, CheckStatus.from_report(report), tuple(report.get("warnings", ())),
                   tuple(rules.get("refused_after", ())), code, tuple(report.get("violations", ())))

    @property
    def ok(self) -> bool:
        """The run's exit code is 0."""
        return self.exit_code == 0

    @property
    def on_cpu(self) -> List[str]:
        """The nodes the target leaves to the CPU (``refused``'s node names)."""
        return [r["node"] for r in self.refused]

    def __fspath__(self) -> str:
        if isinstance(self.output, (str, os.PathLike)):
            return os.fspath(self.output)
        raise TypeError(f"this result's output is a {type(self.output).__name__}, not a path")
