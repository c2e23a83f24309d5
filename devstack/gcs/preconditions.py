"""GCS request preconditions: ifGenerationMatch, ifGenerationNotMatch, ifMetagenerationMatch,
ifMetagenerationNotMatch (query parameters of the JSON API).

A missing object counts as generation 0, which is what makes `ifGenerationMatch=0` mean
"create only" and `ifGenerationNotMatch=0` mean "must exist". A metageneration condition on a
missing object can only fail (Match) or hold (NotMatch).
"""

from __future__ import annotations

from dataclasses import dataclass


class PreconditionFailed(Exception):
    """Answered as HTTP 412, like GCS."""


class InvalidPrecondition(ValueError):
    """A precondition value that is not an integer: HTTP 400."""


_PARAMS = {
    "ifGenerationMatch": "generation_match",
    "ifGenerationNotMatch": "generation_not_match",
    "ifMetagenerationMatch": "metageneration_match",
    "ifMetagenerationNotMatch": "metageneration_not_match",
}


@dataclass(frozen=True)
class Preconditions:
    generation_match: int | None = None
    generation_not_match: int | None = None
    metageneration_match: int | None = None
    metageneration_not_match: int | None = None

    @classmethod
    def from_query(cls, query: dict[str, list[str]]) -> Preconditions:
        # Matched without regard to case: google-cloud-storage 3.x spells the last one
        # "ifMetaGenerationNotMatch" on uploads, and it plainly means the same condition.
        by_lower = {key.lower(): values for key, values in query.items() if values}
        values = {}
        for param, field in _PARAMS.items():
            if param.lower() in by_lower:
                raw = by_lower[param.lower()][0]
                try:
                    values[field] = int(raw)
                except ValueError:
                    raise InvalidPrecondition(f"Invalid value for {param}: {raw!r}") from None
        return cls(**values)

    def check(self, current: dict | None) -> None:
        """Raise PreconditionFailed unless every given condition holds for `current`
        (the live object resource, or None when there is none)."""
        generation = int(current["generation"]) if current else 0
        metageneration = int(current["metageneration"]) if current else None
        if self.generation_match is not None and generation != self.generation_match:
            raise PreconditionFailed("ifGenerationMatch")
        if self.generation_not_match is not None and generation == self.generation_not_match:
            raise PreconditionFailed("ifGenerationNotMatch")
        if self.metageneration_match is not None and metageneration != self.metageneration_match:
            raise PreconditionFailed("ifMetagenerationMatch")
        if self.metageneration_not_match is not None and metageneration == self.metageneration_not_match:
            raise PreconditionFailed("ifMetagenerationNotMatch")
