"""Errors that reach the user as one clear line, and the exit statuses they map to."""

# 0 legal (and checked); 1 violations or a numeric mismatch; 2 bad input or usage.
EXIT_OK, EXIT_VIOLATIONS, EXIT_BAD_INPUT = 0, 1, 2


class LegalizeError(Exception):
    """Base class; ``exit_code`` is what the CLI exits with. ``multiline``: the message
    quotes a tool's diagnostic (MLIR's) whose lines are printed as lines, each escaped
    for the terminal; any other message is printed as one line."""

    exit_code = 2
    multiline = False


class BadInput(LegalizeError):
    """A missing, unreadable, corrupt or unsupported input (exit 2)."""

    exit_code = 2


class UsageError(LegalizeError):
    """A wrong combination of options or paths (exit 2)."""

    exit_code = 2


class NotLegal(LegalizeError):
    """The library's ``legalize`` could not give a legal, equivalent model: the input
    violates the Broadcastable trait, the output its target's profile (a legalize bug),
    or the numeric check found different outputs. ``result`` is the run's
    ``legalizer.result.Result`` (what a success would have given: ``.report``,
    ``.check``, ``.warnings``, ``.refused``), ``report`` its JSON report and
    ``violations`` the diagnostics."""

    exit_code = 1

    def __init__(self, message: str, violations=(), report=None, result=None):
        super().__init__(message)
        self.violations = list(violations)
        self.result = result
        self.report = report if report is not None or result is None else result.report


class CheckUnavailable(Exception):
    """A runtime cannot run this model, or the inputs for it cannot be made (a check
    that cannot run, as opposed to one that fails)."""


def first_line(e: BaseException) -> str:
    """The first line of an exception's message (a library's own words), or its type."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
