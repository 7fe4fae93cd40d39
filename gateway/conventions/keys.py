"""The Dex MCP convention keys and their value sets: the one place they are spelled."""

from __future__ import annotations

from enum import StrEnum

DEX_PREFIX = "io.superdurable.dex/"
EFFECT_KEY = DEX_PREFIX + "effect"
APPROVAL_KEY = DEX_PREFIX + "approval"
OUTCOME_KEY = DEX_PREFIX + "outcome"
IDEMPOTENCY_KEY = DEX_PREFIX + "idempotencyKey"

# The gateway's own keys live under its own prefix, never under DEX_PREFIX.
GATEWAY_PREFIX = "dex-gateway/"
REPLAYED_KEY = GATEWAY_PREFIX + "replayed"

# Reserved keys of the MCP protocol that belong to one hop (client -> gateway) and are
# never forwarded to the next hop (gateway -> upstream).
MCP_RESERVED_PREFIX = "io.modelcontextprotocol/"

APPROVAL_RECOMMENDED = "recommended"


class Effect(StrEnum):
    """What calling a tool does to the world, from least to most conservative."""

    READ = "read"
    IDEMPOTENT_WRITE = "idempotent_write"
    NON_IDEMPOTENT_WRITE = "non_idempotent_write"
    # Never written as a key value: what a tool without a usable declaration is.
    UNCLASSIFIED = "unclassified"

    @property
    def rank(self) -> int:
        return _EFFECT_RANK[self]

    @property
    def asks_by_default(self) -> bool:
        """Whether a tool of this effect needs approval when nothing else says."""
        return self in (Effect.NON_IDEMPOTENT_WRITE, Effect.UNCLASSIFIED)

    @property
    def is_write(self) -> bool:
        return self is not Effect.READ

    @property
    def resendable(self) -> bool:
        """Whether an interrupted call may be sent again with the same key."""
        return self in (Effect.READ, Effect.IDEMPOTENT_WRITE)

    @property
    def declared_value(self) -> str | None:
        """The value published under EFFECT_KEY (None for unclassified: no key)."""
        return None if self is Effect.UNCLASSIFIED else self.value

    @classmethod
    def most_conservative(cls, *effects: "Effect") -> "Effect":
        return max(effects, key=lambda e: e.rank)


_EFFECT_RANK = {
    Effect.READ: 0,
    Effect.IDEMPOTENT_WRITE: 1,
    Effect.NON_IDEMPOTENT_WRITE: 2,
    Effect.UNCLASSIFIED: 3,
}

DECLARABLE_EFFECTS = frozenset(e.value for e in Effect if e is not Effect.UNCLASSIFIED)


class Outcome(StrEnum):
    UNKNOWN = "unknown"
    REJECTED = "rejected"

    @classmethod
    def of(cls, value: object) -> "Outcome | None":
        """The outcome a key value names; None for anything else (reserved values included)."""
        return cls(value) if isinstance(value, str) and value in _OUTCOME_VALUES else None


_OUTCOME_VALUES = frozenset(o.value for o in Outcome)
