"""The approvals service: open an approval for a held call, decide it (the first decision wins),
wait for a decision made anywhere (any replica, the CLI) by reading the database.

    open_for(...)          the approval of this call: new and pending, or the one a retry with the
                           same key finds (already decided, or still pending)
    decide(id, allow, ...) (the approval, whether this decision was the first); SelfApproval when the
                           approver is the calling principal, ApprovalNotFound
    wait(id, until)        the approval once decided, or as it is at `until`
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio

from ..config.model import ApprovalsConfig
from ..errors import ApprovalNotFound, SelfApproval
from .records import Approval, ApprovalState, approval_id, arguments_digest, build_card
from .store import ApprovalStore, View

__all__ = ["Approvals", "Decided"]

MAX_LISTED = 500
logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Decided:
    """A held call's decision as the pipeline leaves it on the call for the audit log: who decided,
    how (the channel) and when; `state` allowed, denied, expired (no decision: all None) or pending
    (the client stopped waiting)."""

    approval_id: str
    state: ApprovalState
    decided_by: str | None = None
    channel: str | None = None
    decided_at: float | None = None
    reason: str | None = None

    @property
    def allowed(self) -> bool:
        return self.state is ApprovalState.ALLOWED

    @classmethod
    def of(cls, approval: Approval, now: float) -> "Decided":
        return cls(approval.id, approval.state_at(now), approval.decided_by, approval.channel, approval.decided_at,
                   approval.reason)


class Approvals:
    def __init__(self, store: ApprovalStore, config: ApprovalsConfig, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.config = config
        self.clock = clock

    async def open_for(self, *, principal: str, tool: str, upstream: str | None, arguments: dict[str, Any],
                       key: str | None, why: str) -> Approval:
        """Raises ValueError for arguments without canonical JSON (NaN, infinities)."""
        now = self.clock()
        approval = Approval(
            id=approval_id(principal, tool, key), principal=principal, tool=tool, upstream=upstream,
            arguments_digest=arguments_digest(arguments), arguments=arguments,
            card=build_card(tool=tool, upstream=upstream, arguments=arguments, principal=principal, why=why),
            idempotency_key=key, created_at=now, expires_at=now + self.config.deadline_seconds,
        )
        return await self.store.insert(approval)

    async def get(self, approval_id: str) -> Approval:
        found = await self.store.get(approval_id)
        if found is None:
            raise ApprovalNotFound(f"no approval has the id {approval_id!r}")
        return found

    async def list(self, view: View = "pending", limit: int = MAX_LISTED) -> list[Approval]:
        return await self.store.list(view, self.clock(), limit)

    async def decide(self, approval_id: str, allow: bool, *, by: str, channel: str, reason: str | None = None,
                     approver_principal: str | None = None) -> tuple[Approval, bool]:
        """`approver_principal`: the principal the approver would call as (an approver's name): it
        may not be the calling principal's. The clients' own channels pass None (their user decides)."""
        if approver_principal is not None:
            found = await self.get(approval_id)
            if found.principal == approver_principal:
                raise SelfApproval(f"{approver_principal!r} is the principal whose call this is; another person decides")
        state = ApprovalState.ALLOWED if allow else ApprovalState.DENIED
        decided = await self.store.decide(approval_id, state, by=by, reason=reason, channel=channel, at=self.clock())
        if decided is None:
            raise ApprovalNotFound(f"no approval has the id {approval_id!r}")
        return decided

    async def run_sweeper(self, interval_seconds: float) -> None:
        """Delete approvals `retention_hours` past their deadline, every `interval_seconds`."""
        while True:
            gone = await self.store.purge(self.clock() - self.config.retention_hours * 3600)
            if gone:
                logger.info("approvals: deleted %d past their retention", gone)
            await anyio.sleep(interval_seconds)

    async def wait(self, approval_id: str, until: float) -> Approval:
        """The approval once decided (or expired), else as it is at `until` (polls the database)."""
        while True:
            approval = await self.get(approval_id)
            now = self.clock()
            if approval.state_at(now) is not ApprovalState.PENDING or now >= until:
                return approval
            await anyio.sleep(min(self.config.poll_seconds, max(0.0, until - now)))
