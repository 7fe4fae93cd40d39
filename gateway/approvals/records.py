"""One held call: what it is bound to, its card, its state.

An approval is bound to {principal, tool, argument digest, idempotency key, expiry}. With a key
its id is derived from (principal, tool, key), so a retry with the same key finds the same
approval (and does not ask again); a keyless call gets a random id. The card is built from the
call itself (tool, upstream, arguments), each value escaped as the host's cards are
(gateway/safe_text.py, the rule the agent host's cards use too), never from the model's words about it.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict

from ..safe_text import arguments_view, terminal_text

from ..fences.ids import arguments_digest

__all__ = ["Approval", "ApprovalState", "Channel", "approval_id", "arguments_digest", "build_card", "iso"]

MAX_SHOWN = 200


class ApprovalState(StrEnum):
    PENDING = "pending"
    ALLOWED = "allowed"
    DENIED = "denied"
    EXPIRED = "expired"


class Channel(StrEnum):
    """How the decision was made."""

    ELICITATION = "elicitation"  # the client asked its user (2025-11-25 session)
    INPUT_REQUIRED = "input_required"  # the client asked its user (2026-07-28 round)
    ADMIN_API = "admin_api"  # an approver on /admin/approvals (the console)
    CLI = "cli"  # an operator with `dex-gateway approvals decide`


def approval_id(principal: str, tool: str, key: str | None) -> str:
    """Stable for (principal, tool, key): a retry with the key finds its approval; random without a key."""
    if key is None:
        return secrets.token_hex(16)
    parts = b"\x00".join(p.encode("utf-8") for p in ("dex-approval-v1", principal, tool, key))
    return hashlib.sha256(parts).hexdigest()[:32]


def iso(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def build_card(*, tool: str, upstream: str | None, arguments: dict[str, Any], principal: str, why: str) -> str:
    """The plain text a person decides from: every value from the call, escaped and cut."""
    where = f"upstream {terminal_text(upstream, MAX_SHOWN)}" if upstream else "a connector"
    return "\n".join([
        f"Allow {terminal_text(principal, MAX_SHOWN)} to run {terminal_text(tool, MAX_SHOWN)} ({where})?",
        f"Arguments: {arguments_view(arguments) or '(none)'}",
        f"Why it needs approval: {terminal_text(why, MAX_SHOWN)}",
    ])


class Approval(BaseModel):
    """A held call and its decision. Times are seconds since the epoch (ISO 8601 UTC on the wire)."""

    model_config = ConfigDict(frozen=True)

    id: str
    principal: str
    tool: str
    upstream: str | None
    arguments_digest: str
    arguments: dict[str, Any]
    card: str
    idempotency_key: str | None
    created_at: float
    expires_at: float
    state: ApprovalState = ApprovalState.PENDING
    decided_by: str | None = None
    decided_at: float | None = None
    reason: str | None = None
    channel: str | None = None

    def state_at(self, now: float) -> ApprovalState:
        """Pending past its expiry is expired (stored or not)."""
        if self.state is ApprovalState.PENDING and now >= self.expires_at:
            return ApprovalState.EXPIRED
        return self.state

    def to_json(self, now: float) -> dict[str, Any]:
        """The admin API's shape (docs/approvals.md)."""
        return {
            "id": self.id, "principal": self.principal, "tool": self.tool, "upstream": self.upstream,
            "arguments_digest": self.arguments_digest, "arguments": self.arguments, "card": self.card,
            "idempotency_key": self.idempotency_key, "created_at": iso(self.created_at),
            "expires_at": iso(self.expires_at), "state": self.state_at(now).value, "decided_by": self.decided_by,
            "decided_at": iso(self.decided_at), "reason": self.reason, "channel": self.channel,
        }
