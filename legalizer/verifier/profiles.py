"""The verifier profiles, as records in one table: what each adds to the Broadcastable
trait's Verify. The verifier reads these fields; no code compares a profile's name. A
target's legal form names the profile it satisfies (``targets.Target.profile``).

A new profile is one ``register_profile`` call (or one entry below): ``--profile``'s
choices and help, and the codes the verifier reports, follow from its record. This
module imports nothing heavy: ``legalize --help`` reads it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Mapping, Optional, Tuple, Union

# The codes any profile reports: the trait's table itself (``diagnostics.MESSAGES``).
TRAIT_CODES = ("incompatible-operands", "result-rank-mismatch", "result-incompatible", "not-unidirectional",
               "shape-mismatch", "legacy-axis")


@dataclass(frozen=True)
class Profile:
    name: str
    help: str  # what it adds to the trait, one phrase (``--profile``'s help)
    # Broadcasting forms. An inferred ``?`` against a static result dim is allowed (the
    # trait's table, MLIR's code); False: an error (the spec's pseudo-code: ``strict``).
    dynamic_to_static: bool = True
    # Every operand has the result's rank (TOSA: "operands don't have matching ranks").
    equal_ranks: bool = False
    # Implicit broadcasting is allowed; False: each broadcasting operand has exactly its
    # target's shape (XLA: every broadcast explicit).
    implicit_broadcast: bool = True
    # Whether an operand of unknown rank passes; False: it cannot be proved legal
    # (``unranked-operand``).
    unknown_ranks: bool = True
    # The highest rank an operand or the result of a broadcasting op may have (``rank-limit``).
    max_rank: Optional[int] = None
    # The profile's own wording of a code (code -> text, with the code's fields), in
    # place of ``diagnostics.MESSAGES``'s.
    messages: Mapping[str, str] = field(default_factory=dict)

    @property
    def broadcasting(self) -> str:
        """The broadcasting its legal graphs keep: numpy's (any), TOSA's (equal ranks,
        through size-1 dims), or none (every broadcast explicit)."""
        return "numpy" if self.implicit_broadcast and not self.equal_ranks else \
            "size-1" if self.implicit_broadcast else "none"

    @property
    def codes(self) -> Tuple[str, ...]:
        """Every diagnostic code the verifier may report under this profile."""
        extra = (("result-dynamic-to-static", not self.dynamic_to_static), ("operand-rank-mismatch", self.equal_ranks),
                 ("implicit-broadcast", not self.implicit_broadcast), ("unranked-operand", not self.unknown_ranks),
                 ("rank-limit", self.max_rank is not None))
        return TRAIT_CODES + tuple(code for code, on in extra if on)


PROFILE_RECORDS: Dict[str, Profile] = {}
# The names, live: a profile registered later is a choice at once.
PROFILES = PROFILE_RECORDS.keys()


def register_profile(profile: Profile) -> Profile:
    """Add ``profile`` to the table (the same record again is a no-op); ValueError for
    another record under a name already taken."""
    have = PROFILE_RECORDS.setdefault(profile.name, profile)
    if have != profile:
        raise ValueError(f"profile '{profile.name}' is already registered, as another record")
    return profile


for _p in (
    Profile("mlir", "MLIR's Broadcastable trait; the default"),
    Profile("strict", "also no inferred ? against a static result dim", dynamic_to_static=False),
    Profile("tosa", "also equal operand ranks; the default for TOSA MLIR", equal_ranks=True, unknown_ranks=False),
    Profile("xla", "also no implicit broadcasting", implicit_broadcast=False, unknown_ranks=False),
):
    register_profile(_p)
DEFAULT_PROFILE = "mlir"


def profile_record(profile: Union[str, Profile]) -> Profile:
    """The record of ``profile`` (a name or a record); ValueError naming the profiles."""
    if isinstance(profile, Profile):
        return profile
    try:
        return PROFILE_RECORDS[profile]
    except KeyError:
        raise ValueError(f"unknown profile {profile!r}; expected one of {', '.join(PROFILES)}") from None
