"""The verifier profiles, as records: what each adds to the Broadcastable trait's Verify.
The verifier reads these fields; no code compares a profile's name. A target's legal
form names the profile it satisfies (``targets.Target.profile``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Union


@dataclass(frozen=True)
class Profile:
    name: str
    # An inferred ``?`` against a static result dim is allowed (the trait's table, MLIR's
    # code); False: an error (the spec's pseudo-code: ``strict``).
    dynamic_to_static: bool = True
    # An operand of unknown rank cannot be proved legal (``unranked-operand``).
    ranked: bool = False
    # Every operand has the result's rank (TOSA: "operands don't have matching ranks").
    equal_ranks: bool = False
    # Implicit broadcasting is allowed; False: each broadcasting operand has exactly its
    # target's shape (XLA: every broadcast explicit).
    implicit_broadcast: bool = True


PROFILE_RECORDS: Dict[str, Profile] = {
    "mlir": Profile("mlir"),
    "strict": Profile("strict", dynamic_to_static=False),
    "tosa": Profile("tosa", ranked=True, equal_ranks=True),
    "xla": Profile("xla", ranked=True, implicit_broadcast=False),
}
PROFILES = tuple(PROFILE_RECORDS)


def profile_record(profile: Union[str, Profile]) -> Profile:
    """The record of ``profile`` (a name or a record); ValueError naming the profiles."""
    if isinstance(profile, Profile):
        return profile
    try:
        return PROFILE_RECORDS[profile]
    except KeyError:
        raise ValueError(f"unknown profile {profile!r}; expected one of {', '.join(PROFILES)}") from None
