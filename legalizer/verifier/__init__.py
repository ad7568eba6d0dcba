"""The Broadcastable verifier and its diagnostics.

The profiles' table is imported at once; the verifier (onnx, the rules) on first use
(PEP 562), so that ``legalize --help`` reads the profiles without a model library."""

from importlib import import_module

from .profiles import DEFAULT_PROFILE, PROFILE_RECORDS, PROFILES, Profile, register_profile

# name -> the submodule that defines it
_LAZY = {"VerifyResult": ".broadcastable", "verify": ".broadcastable", "Diagnostic": ".diagnostics",
         "ConstraintSet": ".diagnostics"}

__all__ = ["PROFILES", "PROFILE_RECORDS", "DEFAULT_PROFILE", "Profile", "register_profile", "VerifyResult", "verify",
           "Diagnostic", "ConstraintSet"]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(_LAZY[name], __name__), name)
    globals()[name] = value
    return value
