"""The session store (SQLite) as the async host uses it: sessions, turns, messages, tool-call
records, approvals, questions, controls (steer, cancel, plan execution), usage, compactions and
the session's event log.

Every state change is committed (WAL, synchronous=FULL) before the loop acts on it, so a host
killed at any instant resumes at a step boundary. The fsync of each commit happens off the
event loop: every statement runs in a worker thread, one at a time (a capacity-1 limiter,
first come first served), so commits land in the order they were asked for and the loop keeps
serving the model stream, the approvals API and parallel reads meanwhile. A caller that is
cancelled while its statement runs still waits for the commit (anyio does not abandon a
worker thread by default), so "committed before acting" holds under cancellation too.

Open the store in the event loop that uses it (`async with SessionStore(path) as store`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self, TypeVar

import anyio

from gateway.media.references import ImageReference

from ..models.base import Message
from ..domain.records import (
    ApprovalRecord,
    ApprovalStatus,
    CallStatus,
    CompactionRecord,
    ControlKind,
    ControlRecord,
    EventRecord,
    PlanStatus,
    QuestionRecord,
    QuestionStatus,
    SessionRecord,
    ToolCallRecord,
    TurnMode,
    TurnRecord,
    TurnStatus,
    UsageRecord,
)
from .sqlite_store import SqliteSessionStore

DEFAULT_STORE_PATH = "var/dex-agent.db"
STORE_ENV = "DEX_AGENT_STORE"

T = TypeVar("T")


def store_path(configured: str | None) -> Path:
    return Path(configured or os.environ.get(STORE_ENV) or DEFAULT_STORE_PATH)


class SessionStore:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._sqlite: SqliteSessionStore | None = None
        self._limiter: anyio.CapacityLimiter | None = None

    # Lifecycle --------------------------------------------------------------------------------

    async def open(self) -> None:
        if self._sqlite is None:
            self._limiter = anyio.CapacityLimiter(1)
            self._sqlite = await anyio.to_thread.run_sync(SqliteSessionStore, self.path, limiter=self._limiter)

    async def close(self) -> None:
        if self._sqlite is not None:
            sqlite, self._sqlite = self._sqlite, None
            await anyio.to_thread.run_sync(sqlite.close, limiter=self._limiter)

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        with anyio.CancelScope(shield=True):
            await self.close()

    async def _run(self, statement: Callable[[SqliteSessionStore], T]) -> T:
        sqlite = self._sqlite
        if sqlite is None:
            raise RuntimeError("the session store is not open")
        return await anyio.to_thread.run_sync(statement, sqlite, limiter=self._limiter)

    # Sessions ---------------------------------------------------------------------------------

    async def create_session(
        self, model: str, gateway: str, session_id: str | None = None, settings: dict[str, Any] | None = None
    ) -> SessionRecord:
        return await self._run(lambda db: db.create_session(model, gateway, session_id, settings))

    async def get_session(self, session_id: str) -> SessionRecord | None:
        return await self._run(lambda db: db.get_session(session_id))

    async def list_sessions(self) -> list[tuple[SessionRecord, int, str | None]]:
        """Each session with its number of turns and the status of its last turn."""
        return await self._run(SqliteSessionStore.list_sessions)

    async def set_settings(self, session_id: str, settings: dict[str, Any], model: str | None = None) -> SessionRecord:
        return await self._run(lambda db: db.set_settings(session_id, settings, model))

    async def set_plan(self, session_id: str, plan: list[dict[str, Any]] | None, status: PlanStatus | None = None) -> int:
        return await self._run(lambda db: db.set_plan(session_id, plan, status))

    async def set_plan_status(self, session_id: str, status: PlanStatus) -> None:
        await self._run(lambda db: db.set_plan_status(session_id, status))

    # Turns and messages -----------------------------------------------------------------------

    async def start_turn(
        self, session_id: str, user_text: str, mode: TurnMode = TurnMode.CHAT, images: list[ImageReference] | None = None
    ) -> TurnRecord:
        return await self._run(lambda db: db.start_turn(session_id, user_text, mode, images))

    async def get_turn(self, session_id: str, turn_id: str) -> TurnRecord | None:
        return await self._run(lambda db: db.get_turn(session_id, turn_id))

    async def turns(self, session_id: str) -> list[TurnRecord]:
        return await self._run(lambda db: db.turns(session_id))

    async def unfinished_turn(self, session_id: str) -> TurnRecord | None:
        return await self._run(lambda db: db.unfinished_turn(session_id))

    async def finish_turn(
        self, session_id: str, turn_id: str, status: TurnStatus, final_text: str | None, error: str | None,
        unless_steered: bool = False,
    ) -> bool:
        return await self._run(lambda db: db.finish_turn(session_id, turn_id, status, final_text, error, unless_steered))

    async def messages(self, session_id: str, turn_id: str | None = None) -> list[Message]:
        return await self._run(lambda db: db.messages(session_id, turn_id))

    async def stored_messages(self, session_id: str, after_seq: int = 0) -> list[tuple[int, str, Message]]:
        """(seq, turn id, message) after `after_seq`, in order."""
        return await self._run(lambda db: db.stored_messages(session_id, after_seq))

    async def append_message(self, session_id: str, turn_id: str, message: Message, continuation: bool = False) -> None:
        await self._run(lambda db: db.append_message(session_id, turn_id, message, continuation))

    async def record_model_response(
        self, turn: TurnRecord, message: Message, calls: list[ToolCallRecord],
        usage: tuple[str, int, int, float | None] | None = None,
    ) -> None:
        """The model's answer, its tool calls and its usage, in one commit: the step boundary."""
        await self._run(lambda db: db.record_model_response(turn, message, calls, usage))

    # Tool calls -------------------------------------------------------------------------------

    async def tool_call_ids(self, session_id: str) -> set[str]:
        return await self._run(lambda db: db.tool_call_ids(session_id))

    async def tool_calls(self, session_id: str, turn_id: str | None = None) -> list[ToolCallRecord]:
        return await self._run(lambda db: db.tool_calls(session_id, turn_id))

    async def get_tool_call(self, session_id: str, call_id: str) -> ToolCallRecord:
        return await self._run(lambda db: db.get_tool_call(session_id, call_id))

    async def update_tool_call(self, record: ToolCallRecord, **fields: Any) -> ToolCallRecord:
        return await self._run(lambda db: db.update_tool_call(record, **fields))

    # Approvals --------------------------------------------------------------------------------

    async def create_approval(self, record: ApprovalRecord) -> ApprovalRecord:
        """Idempotent: raising the same approval again (after a restart) keeps the first row."""
        return await self._run(lambda db: db.create_approval(record))

    async def get_approval(self, approval_id: str) -> ApprovalRecord | None:
        return await self._run(lambda db: db.get_approval(approval_id))

    async def pending_approvals(self, session_id: str | None = None) -> list[ApprovalRecord]:
        return await self._run(lambda db: db.pending_approvals(session_id))

    async def decide_approval(
        self, approval_id: str, status: ApprovalStatus, decided_by: str, reason: str | None, now: float
    ) -> tuple[ApprovalRecord, bool] | None:
        """Record the first decision; returns (record, replayed). A later one gets the first."""
        return await self._run(lambda db: db.decide_approval(approval_id, status, decided_by, reason, now))

    # Controls, questions, usage, compactions, events -------------------------------------------

    async def request_control(
        self, session_id: str, kind: ControlKind, source: str, text: str | None = None, revision: int | None = None
    ) -> ControlRecord | None:
        """A steer, cancel or plan execution, recorded only when it can apply now (else None)."""
        return await self._run(lambda db: db.request_control(session_id, kind, source, text, revision))

    async def pending_controls(self, session_id: str, turn_id: str | None) -> list[ControlRecord]:
        return await self._run(lambda db: db.pending_controls(session_id, turn_id))

    async def mark_applied(self, controls: list[ControlRecord]) -> None:
        await self._run(lambda db: db.mark_applied(controls))

    async def apply_steers(self, session_id: str, turn_id: str) -> list[str]:
        return await self._run(lambda db: db.apply_steers(session_id, turn_id))

    async def has_pending_steer(self, session_id: str, turn_id: str) -> bool:
        return await self._run(lambda db: db.has_pending_steer(session_id, turn_id))

    async def cancel_waits(self, session_id: str, turn_id: str, by: str) -> None:
        await self._run(lambda db: db.cancel_waits(session_id, turn_id, by))

    async def create_question(self, record: QuestionRecord) -> QuestionRecord:
        return await self._run(lambda db: db.create_question(record))

    async def get_question(self, question_id: str) -> QuestionRecord | None:
        return await self._run(lambda db: db.get_question(question_id))

    async def pending_questions(self, session_id: str | None = None) -> list[QuestionRecord]:
        return await self._run(lambda db: db.pending_questions(session_id))

    async def answer_question(
        self, question_id: str, status: QuestionStatus, answer: str | None, by: str, now: float
    ) -> tuple[QuestionRecord, bool] | None:
        return await self._run(lambda db: db.answer_question(question_id, status, answer, by, now))

    async def usage_totals(self, session_id: str, turn_id: str | None = None) -> UsageRecord:
        return await self._run(lambda db: db.usage_totals(session_id, turn_id))

    async def record_compaction(
        self, session_id: str, turn_id: str, summary: str, replaced: list[int], tool_call_ids: list[str],
        usage: tuple[str, int, int, float | None] | None,
    ) -> None:
        await self._run(lambda db: db.record_compaction(session_id, turn_id, summary, replaced, tool_call_ids, usage))

    async def compactions(self, session_id: str) -> list[CompactionRecord]:
        return await self._run(lambda db: db.compactions(session_id))

    async def append_event(self, session_id: str, turn_id: str | None, kind: str, data: dict[str, Any]) -> int:
        return await self._run(lambda db: db.append_event(session_id, turn_id, kind, data))

    async def events_after(self, session_id: str, after_id: int, limit: int = 500) -> list[EventRecord]:
        return await self._run(lambda db: db.events_after(session_id, after_id, limit))


__all__ = [
    "DEFAULT_STORE_PATH",
    "STORE_ENV",
    "ApprovalRecord",
    "ApprovalStatus",
    "CallStatus",
    "SessionRecord",
    "SessionStore",
    "ToolCallRecord",
    "TurnRecord",
    "TurnStatus",
    "store_path",
]
