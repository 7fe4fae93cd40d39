"""What `Fences.begin` decides for a call, and the ticket a proceeding call holds."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gateway.conventions.keys import REPLAYED_KEY, Effect

from ..protocol import Result
from .records import Owner


@dataclass(frozen=True, slots=True)
class Ticket:
    """The right to send one call upstream; every later write checks (owner, attempts)."""

    fence_id: str
    principal: str
    tool: str
    effect: Effect
    owner: Owner
    attempts: int
    # True when an earlier holder died mid-call: the upstream may already have seen this
    # key, which is why only resendable effects are ever taken over.
    takeover: bool


@dataclass(frozen=True, slots=True)
class Proceed:
    """Send the call upstream (with the same idempotency key), inside `Fences.holding`."""

    ticket: Ticket

    @property
    def takeover(self) -> bool:
        return self.ticket.takeover


@dataclass(frozen=True, slots=True)
class Replay:
    """The stored answer of the first call, marked with REPLAYED_KEY; upstream not called."""

    fence_id: str
    answer: Result


class UnknownReason(StrEnum):
    STORED = "stored"  # the fence itself is unknown (terminal)
    OWNER_DIED = "owner_died"  # the holder died and the effect is not resendable: now stored unknown
    WAIT_TIMEOUT = "wait_timeout"  # still pending after the bounded wait; the fence is unchanged


@dataclass(frozen=True, slots=True)
class FenceUnknown:
    fence_id: str
    reason: UnknownReason
    text: str
    # For STORED: the answer given to `mark_unknown`, if any (Answer wire form).
    answer: Result | None = None


@dataclass(frozen=True, slots=True)
class FenceRejected:
    """The key names another call (other tool or arguments): refused, nothing changed."""

    fence_id: str
    text: str


BeginResult = Proceed | Replay | FenceUnknown | FenceRejected


def mark_replayed(answer: Result) -> Result:
    """A copy of a stored wire answer with `_meta[REPLAYED_KEY] = True`.

    Only the top level and `_meta` are new objects: the stored content is passed through
    untouched, so a replay is the first answer plus the marker and nothing else.
    """
    meta = dict(answer.get("_meta") or {})
    meta[REPLAYED_KEY] = True
    return {**answer, "_meta": meta}


def reused_key_text(*, first_tool: str, tool: str) -> str:
    if first_tool != tool:
        return (
            f"Idempotency key reused: it was first sent with a call to tool '{first_tool}', and this call is to "
            f"'{tool}'. A key names exactly one call; send a new key for a new call."
        )
    return (
        f"Idempotency key reused: it was first sent with a call to '{tool}' with other arguments. A key names "
        "exactly one call; resend the same arguments to get its answer, or send a new key for a new call."
    )


def unknown_text(reason: UnknownReason, *, effect: Effect, waited: float) -> str:
    if reason is UnknownReason.WAIT_TIMEOUT:
        return (
            f"A call with this idempotency key is still in progress after waiting {waited:g} s, so its outcome is "
            "not known yet. Retry later with the same key to get its answer."
        )
    if reason is UnknownReason.OWNER_DIED:
        return (
            "Whether this call took effect is unknown: the gateway handling the first attempt with this "
            f"idempotency key stopped before it finished, and a {effect.value} tool is not safe to send twice. "
            "It will not be sent again with this key; check the target system before retrying with a new key."
        )
    return (
        "Whether this call took effect is unknown: an earlier attempt with this idempotency key ended without a "
        "known outcome. It will not be sent again with this key; check the target system before retrying with a "
        "new key."
    )
