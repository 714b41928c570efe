"""Where a candidate comes from. The kb_candidate fixture is the one place that chooses."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field


@dataclass
class Candidate:
    kind: str                  # reference | shipped | dir | llm
    label: str                 # what the report shows: "self-check", "shipped:symm_mem", ...
    source: str | None         # module text; None when there is no code (then `failure` says why)
    origin: str = ""           # file it came from, for people
    is_reference: bool = False  # the reference checked against itself: forbid does not apply
    failure: tuple | None = None   # (category, message) decided before launch, e.g. ("no_code", ...)
    meta: dict = field(default_factory=dict)

    @property
    def sha256(self) -> str | None:
        return hashlib.sha256(self.source.encode()).hexdigest() if self.source is not None else None

    def record(self) -> dict:
        return {"kind": self.kind, "label": self.label, "origin": self.origin, "sha256": self.sha256, **self.meta}
