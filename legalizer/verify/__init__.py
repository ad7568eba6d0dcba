"""The Broadcastable verifier and its diagnostics."""

from .broadcastable import PROFILES, VerifyResult, verify
from .profiles import PROFILE_RECORDS, Profile
from .diagnostics import ConstraintSet, Diagnostic

__all__ = ["PROFILES", "PROFILE_RECORDS", "Profile", "VerifyResult", "verify", "Diagnostic", "ConstraintSet"]
