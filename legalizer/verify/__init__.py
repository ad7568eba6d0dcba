"""The Broadcastable verifier and its diagnostics."""

from .broadcastable import PROFILES, VerifyResult, verify
from .diagnostics import ConstraintSet, Diagnostic

__all__ = ["PROFILES", "VerifyResult", "verify", "Diagnostic", "ConstraintSet"]
