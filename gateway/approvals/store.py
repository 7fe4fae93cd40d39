"""Where held calls live: the `dex_approvals` table in the gateway's database (`fences.store`),
so every replica sees the same approvals and one survives a restart.

    insert(approval)        the stored approval of that id (the new one, or the one already there)
    get(id)                 one, or None
    list(view, now, limit)  newest first; view "pending" (undecided, not expired), "decided", "all"
    decide(id, state, ...)  the first decision wins: (the stored approval, whether this call decided it)
    purge(before)           delete approvals whose deadline is before `before` (retention)
"""

from __future__ import annotations

import json
from typing import Any, Literal, Protocol

from .records import Approval, ApprovalState

__all__ = ["APPROVALS_TABLE", "COLUMNS", "ApprovalStore", "MemoryApprovalStore", "View", "from_row", "to_row"]

APPROVALS_TABLE = "dex_approvals"
COLUMNS = ("id", "principal", "tool", "upstream", "arguments_digest", "arguments", "card", "idempotency_key",
           "created_at", "expires_at", "state", "decided_by", "decided_at", "reason", "channel")
View = Literal["pending", "decided", "all"]


class ApprovalStore(Protocol):
    # Errors of a busy or unreachable database: the held call is answered (nothing ran), never a 500.
    transient_errors: tuple[type[BaseException], ...]

    async def open(self) -> None: ...
    async def close(self) -> None: ...
    async def insert(self, approval: Approval) -> Approval: ...
    async def get(self, approval_id: str) -> Approval | None: ...
    async def list(self, view: View, now: float, limit: int) -> list[Approval]: ...
    async def decide(self, approval_id: str, state: ApprovalState, *, by: str, reason: str | None, channel: str,
                     at: float) -> tuple[Approval, bool] | None: ...
    async def purge(self, expired_before: float) -> int:
        """Delete the approvals whose deadline is before `expired_before`; how many."""
        ...


def to_row(a: Approval) -> tuple[Any, ...]:
    return (a.id, a.principal, a.tool, a.upstream, a.arguments_digest, json.dumps(a.arguments), a.card,
            a.idempotency_key, a.created_at, a.expires_at, a.state.value, a.decided_by, a.decided_at, a.reason,
            a.channel)


def from_row(row: Any) -> Approval:
    values = dict(zip(COLUMNS, tuple(row), strict=True))
    values["arguments"] = json.loads(values["arguments"])
    return Approval.model_validate(values)


def in_view(a: Approval, view: View, now: float) -> bool:
    pending = a.state_at(now) is ApprovalState.PENDING
    return view == "all" or (view == "pending") == pending


class MemoryApprovalStore:
    """In the process only (memory:// databases: unit tests)."""

    transient_errors: tuple[type[BaseException], ...] = ()

    def __init__(self) -> None:
        self._rows: dict[str, Approval] = {}

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def insert(self, approval: Approval) -> Approval:
        return self._rows.setdefault(approval.id, approval)

    async def get(self, approval_id: str) -> Approval | None:
        return self._rows.get(approval_id)

    async def list(self, view: View, now: float, limit: int) -> list[Approval]:
        rows = sorted(self._rows.values(), key=lambda a: a.created_at, reverse=True)
        return [a for a in rows if in_view(a, view, now)][:limit]

    async def decide(self, approval_id: str, state: ApprovalState, *, by: str, reason: str | None, channel: str,
                     at: float) -> tuple[Approval, bool] | None:
        found = self._rows.get(approval_id)
        if found is None:
            return None
        if found.state_at(at) is not ApprovalState.PENDING:
            return found, False
        decided = found.model_copy(update={"state": state, "decided_by": by, "reason": reason, "channel": channel,
                                           "decided_at": at})
        self._rows[approval_id] = decided
        return decided, True

    async def purge(self, expired_before: float) -> int:
        gone = [k for k, a in self._rows.items() if a.expires_at < expired_before]
        for k in gone:
            del self._rows[k]
        return len(gone)
