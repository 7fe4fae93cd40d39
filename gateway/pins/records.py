"""One pinned tool definition and the digest that pins it.

A definition is what a model and a person read of a tool: its `title`, `description`,
`inputSchema`, `outputSchema`, `annotations` and `_meta`, exactly as the upstream lists it (the
gateway's own additions are not part of it). Its digest is the SHA-256 of that as canonical JSON
(sorted keys, no spaces), so the same definition always has the same digest.

States:
    pinned     the seen definition is the reviewed one
    changed    the upstream now lists another definition than the pinned one: awaiting review
    new        a tool the upstream started listing after its first listing: awaiting review (hold)
    rejected   an operator rejected the seen definition: the pinned one stays, the tool stays held
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from typing import Any, Literal

__all__ = ["DEFINITION_KEYS", "PENDING", "Pin", "PinState", "definition_of", "digest_of"]

PinState = Literal["pinned", "changed", "new", "rejected"]
PENDING: frozenset[str] = frozenset({"changed", "new"})
DEFINITION_KEYS = ("title", "description", "inputSchema", "outputSchema", "annotations", "_meta")


def definition_of(tool: dict[str, Any]) -> dict[str, Any]:
    """The reviewed part of an upstream's tool entry (keys it does not carry are left out)."""
    return {key: tool[key] for key in DEFINITION_KEYS if key in tool}


def digest_of(definition: dict[str, Any]) -> str:
    canonical = json.dumps(definition, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Pin:
    upstream: str
    tool: str  # the upstream's own name for it
    state: PinState
    pinned_digest: str | None  # None: never reviewed (a new tool of a held upstream)
    pinned_definition: dict[str, Any] | None
    seen_digest: str
    seen_definition: dict[str, Any]
    first_seen_at: float
    changed_at: float | None = None
    reviewed_by: str | None = None
    reviewed_at: float | None = None

    @property
    def pending(self) -> bool:
        return self.state in PENDING

    def accepted(self, by: str, at: float) -> "Pin":
        return replace(self, state="pinned", pinned_digest=self.seen_digest, pinned_definition=self.seen_definition,
                       reviewed_by=by, reviewed_at=at)

    def rejected(self, by: str, at: float) -> "Pin":
        return replace(self, state="rejected", reviewed_by=by, reviewed_at=at)
