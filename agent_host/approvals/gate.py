"""Approvals: decisions and deadlines on the session store (cards: `domain/cards.py`).

A card is built from the stored call (tool name and arguments), never from the model's
words about it. Decisions live in the session store, so the CLI prompt, the HTTP API (in
this process or another one on the same store) and a restarted host all see the first one.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Literal, Protocol

from pydantic import BaseModel

from ..domain.cards import (
    DEFAULT_APPROVAL_TIMEOUT_SECONDS,
    MAX_NAME_CHARS,
    ApprovalCard,
    approval_id,
    call_summary,
    display_name,
    target_call,
    time_left,
)
from ..domain.parking import TurnParked
from ..domain.records import ApprovalRecord, ApprovalStatus, ToolCallRecord
from ..store.session_store import SessionStore
from .decisions import first_decision

__all__ = [
    "DEFAULT_APPROVAL_TIMEOUT_SECONDS", "MAX_NAME_CHARS", "ApprovalCard", "ApprovalGate", "ApprovalMode", "ApprovalPrompter",
    "Decision", "approval_id", "call_summary", "card_for_approval", "display_name", "time_left",
]


async def card_for_approval(approval: ApprovalRecord, store: SessionStore, now: float | None = None) -> ApprovalCard:
    record = await store.get_tool_call(approval.session_id, approval.tool_call_id)
    return await card_for_call(record, store, approval.status, approval.deadline, now)


async def card_for_call(
    record: ToolCallRecord, store: SessionStore, status: ApprovalStatus, deadline: float | None, now: float | None
) -> ApprovalCard:
    """The card of a stored call; through call_tool, with the target's effect if the session found it."""
    target = target_call(record.name, record.arguments)[0]
    return ApprovalCard.for_call(record, status, deadline, now, await store.found_effect(record.session_id, target))


class Decision(BaseModel):
    allowed: bool
    status: ApprovalStatus
    decided_by: str
    reason: str | None = None

    @classmethod
    def of(cls, approval: ApprovalRecord) -> "Decision":
        return cls(
            allowed=approval.status is ApprovalStatus.ALLOWED,
            status=approval.status,
            decided_by=approval.decided_by or "",
            reason=approval.reason,
        )


class ApprovalPrompter(Protocol):
    async def ask(self, card: ApprovalCard) -> tuple[bool, str | None]:
        """Show the card to a person; (allowed, reason). Cancelled when decided elsewhere."""
        ...


ApprovalMode = Literal["prompt", "auto", "api"]


class ApprovalGate:
    """Waits for the decision on one call: from the prompt, the API, auto, or the deadline."""

    def __init__(
        self,
        store: SessionStore,
        mode: ApprovalMode,
        prompter: ApprovalPrompter | None = None,
        timeout_seconds: float | None = DEFAULT_APPROVAL_TIMEOUT_SECONDS,
        poll_seconds: float = 0.1,
        clock: Callable[[], float] = time.time,
        on_card: Callable[[ApprovalCard], Awaitable[None]] | None = None,
        park: bool = False,
    ) -> None:
        self._store = store
        self._mode = mode
        self._prompter = prompter
        self._timeout = timeout_seconds
        self._poll = poll_seconds
        self._clock = clock
        self._on_card = on_card
        # True in `dex-agent serve`: a pending approval parks the turn (`domain/parking.py`).
        self._park = park

    async def raise_approval(self, record: ToolCallRecord) -> ApprovalRecord:
        now = self._clock()
        return await self._store.create_approval(
            ApprovalRecord(
                id=approval_id(record.session_id, record.id),
                session_id=record.session_id,
                turn_id=record.turn_id,
                tool_call_id=record.id,
                tool_name=record.name,
                arguments=record.arguments,
                status=ApprovalStatus.PENDING,
                created_at=now,
                deadline=None if self._timeout is None else now + self._timeout,
            )
        )

    async def wait(self, record: ToolCallRecord) -> Decision:
        approval = await self.raise_approval(record)
        if approval.status is not ApprovalStatus.PENDING:
            return Decision.of(approval)
        card = await card_for_call(record, self._store, approval.status, approval.deadline, self._clock())
        if self._on_card is not None:
            await self._on_card(card)
        if self._mode == "auto":
            return await self._decide(approval.id, ApprovalStatus.ALLOWED, "auto (--approve auto)", None)
        if self._park:
            if approval.deadline is not None and self._clock() >= approval.deadline:
                return await self._decide(approval.id, ApprovalStatus.EXPIRED, "deadline", None)
            raise TurnParked("an approval", approval.deadline)
        prompter = self._prompter if self._mode == "prompt" else None

        async def prompt() -> None:
            assert prompter is not None
            allowed, reason = await prompter.ask(card)
            status = ApprovalStatus.ALLOWED if allowed else ApprovalStatus.DENIED
            await self._decide(approval.id, status, "cli", reason)

        async def read() -> Decision | None:
            current = await self._store.get_approval(approval.id)
            assert current is not None
            return None if current.status is ApprovalStatus.PENDING else Decision.of(current)

        async def expire() -> Decision:
            return await self._decide(approval.id, ApprovalStatus.EXPIRED, "deadline", None)

        return await first_decision(read, expire, approval.deadline, self._clock, self._poll, prompt if prompter else None)

    async def _decide(self, approval_id_: str, status: ApprovalStatus, by: str, reason: str | None) -> Decision:
        result = await self._store.decide_approval(approval_id_, status, by, reason, self._clock())
        assert result is not None
        return Decision.of(result[0])
