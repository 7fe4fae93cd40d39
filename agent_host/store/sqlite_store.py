"""The session store's SQLite statements (synchronous; `store.SessionStore` runs them off the
event loop): sessions, turns, messages, tool calls, approvals. Controls and questions are in
`sqlite_controls.py`, usage and compactions in `sqlite_ledger.py`, the connection, migrations and
the event log in `sqlite_base.py`.

Every state change is one transaction committed with `synchronous=FULL` in WAL mode, together
with the event that reports it, so a host killed at any instant finds the turn at a step
boundary and resumes from there, and the live stream misses nothing.
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from enum import StrEnum
from typing import Any

from gateway.media.references import ImageReference

from ..domain.session_ids import check_session_id
from ..domain import session_events as events
from ..domain import texts
from ..domain.records import (
    ApprovalRecord,
    ApprovalStatus,
    ControlKind,
    PlanStatus,
    SessionRecord,
    ToolCallRecord,
    TurnMode,
    TurnRecord,
    TurnStatus,
)
from ..models.base import Message
from .sqlite_controls import SqliteControls
from .sqlite_ledger import SqliteLedger
from .sqlite_service import QUEUED, STARTED
from .sqlite_images import SqliteImages
from .sqlite_tasks import SqliteTasks


class SqliteSessionStore(SqliteControls, SqliteLedger, SqliteTasks, SqliteImages):
    """The statements, synchronous: call them from one thread at a time (`SessionStore` does)."""

    # Sessions ---------------------------------------------------------------------------------

    def create_session(
        self, model: str, gateway: str, session_id: str | None = None, settings: dict[str, Any] | None = None
    ) -> SessionRecord:
        sid = check_session_id(session_id) if session_id is not None else "s-" + uuid.uuid4().hex[:12]
        with self._tx() as db:
            db.execute(
                "INSERT INTO sessions (id, created_at, model, gateway, settings) VALUES (?, ?, ?, ?, ?)",
                (sid, time.time(), model, gateway, json.dumps(settings or {})),
            )
        session = self.get_session(sid)
        assert session is not None
        return session

    def list_sessions(self) -> list[tuple[SessionRecord, int, str | None]]:
        """Each session with its number of turns and the status of its last turn."""
        rows = self._db.execute("SELECT id FROM sessions ORDER BY created_at").fetchall()
        listed = []
        for row in rows:
            session = self.get_session(row["id"])
            assert session is not None
            turns = self.turns(session.id)
            listed.append((session, len(turns), turns[-1].status.value if turns else None))
        return listed

    def set_settings(self, session_id: str, settings: dict[str, Any], model: str | None = None) -> SessionRecord:
        with self._tx() as db:
            db.execute(
                "UPDATE sessions SET settings = ?, model = COALESCE(?, model) WHERE id = ?",
                (json.dumps(settings), model, session_id),
            )
            self._event(db, session_id, None, events.SETTINGS, events.inert(settings))
        session = self.get_session(session_id)
        assert session is not None
        return session

    def set_plan(self, session_id: str, plan: list[dict[str, Any]] | None, status: PlanStatus | None = None) -> int:
        """Replace the plan (a new revision); the status defaults from the tasks."""
        if status is None:
            status = _plan_status(plan)
        with self._tx() as db:
            db.execute(
                "UPDATE sessions SET plan = ?, plan_revision = plan_revision + 1, plan_status = ? WHERE id = ?",
                (json.dumps(plan) if plan is not None else None, status.value, session_id),
            )
            row = db.execute("SELECT plan_revision FROM sessions WHERE id = ?", (session_id,)).fetchone()
            revision = int(row["plan_revision"])
            self._event(db, session_id, None, events.PLAN, events.plan(revision, status.value, plan))
        return revision

    def set_plan_status(self, session_id: str, status: PlanStatus) -> None:
        """The same revision, another status (a draft the user approved becomes active)."""
        with self._tx() as db:
            db.execute("UPDATE sessions SET plan_status = ? WHERE id = ?", (status.value, session_id))
            row = db.execute("SELECT plan, plan_revision FROM sessions WHERE id = ?", (session_id,)).fetchone()
            plan = json.loads(row["plan"]) if row["plan"] else None
            self._event(db, session_id, None, events.PLAN, events.plan(int(row["plan_revision"]), status.value, plan))

    # Turns and messages -----------------------------------------------------------------------

    def start_turn(
        self, session_id: str, user_text: str, mode: TurnMode = TurnMode.CHAT, images: list[ImageReference] | None = None
    ) -> TurnRecord:
        """A new turn with the user's message (and references to its images); it keeps a copy of
        the session's settings."""
        with self._tx() as db:
            return self._start_turn(db, session_id, user_text, mode, images)

    def _start_turn(
        self, db: sqlite3.Connection, session_id: str, user_text: str, mode: TurnMode,
        images: list[ImageReference] | None = None, message_id: str | None = None,
    ) -> TurnRecord:
        """`start_turn` inside the caller's transaction."""
        seq = db.execute("SELECT COUNT(*) FROM turns WHERE session_id = ?", (session_id,)).fetchone()[0] + 1
        turn_id = f"turn-{seq}"
        settings = db.execute("SELECT settings FROM sessions WHERE id = ?", (session_id,)).fetchone()
        db.execute(
            "INSERT INTO turns (session_id, id, seq, status, user_text, started_at, mode, settings)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (session_id, turn_id, seq, TurnStatus.RUNNING.value, user_text, time.time(), mode.value,
             settings["settings"] if settings and settings["settings"] else "{}"),
        )
        turn = self._turn(db.execute("SELECT * FROM turns WHERE session_id = ? AND id = ?", (session_id, turn_id)).fetchone())
        self._event(db, session_id, turn_id, events.TURN_STARTED, events.turn_started(turn))
        self._append(db, session_id, turn_id, Message(role="user", text=user_text, images=images or []), message_id)
        return turn

    def start_queued_turn(self, session_id: str) -> TurnRecord | None:
        """The oldest queued message starts a turn (one transaction: it starts exactly once); None
        when a turn runs or nothing is queued. A planning message starts a planning turn, and so
        does a message about a draft plan (it revises it)."""
        with self._tx() as db:
            if self._running(db, session_id):
                return None
            row = db.execute(
                "SELECT * FROM queued_messages WHERE session_id = ? AND status = ? ORDER BY seq LIMIT 1", (session_id, QUEUED)
            ).fetchone()
            if row is None:
                return None
            plan = db.execute("SELECT plan_status FROM sessions WHERE id = ?", (session_id,)).fetchone()
            draft = plan is not None and plan["plan_status"] == PlanStatus.DRAFT.value
            mode = TurnMode.PLANNING if draft or row["mode"] == TurnMode.PLANNING.value else TurnMode.CHAT
            turn = self._start_turn(db, session_id, row["text"], mode, message_id=row["id"])
            db.execute("UPDATE queued_messages SET status = ?, turn_id = ? WHERE id = ?", (STARTED, turn.id, row["id"]))
            self._event(db, session_id, turn.id, events.QUEUE, events.queued(row["id"], row["text"], STARTED))
        return turn

    def start_plan_execution(self, session_id: str) -> TurnRecord | None:
        """An approval of the current draft plan (an `execute_plan` control) starts its executing
        turn, in one transaction (approvals of replaced revisions are settled unused); None when a
        turn runs or no approval waits. `dex-agent serve` runs it after the queued messages."""
        with self._tx() as db:
            if self._running(db, session_id):
                return None
            rows = db.execute(
                "SELECT * FROM controls WHERE session_id = ? AND turn_id IS NULL AND kind = ? AND applied_at IS NULL ORDER BY id",
                (session_id, ControlKind.EXECUTE_PLAN.value),
            ).fetchall()
            if not rows:
                return None
            plan = db.execute("SELECT plan, plan_revision, plan_status FROM sessions WHERE id = ?", (session_id,)).fetchone()
            chosen = None
            for row in rows:
                control = self._control(row)
                if chosen is None and plan["plan_status"] == PlanStatus.DRAFT.value and control.revision == plan["plan_revision"]:
                    chosen = control
                db.execute("UPDATE controls SET applied_at = ? WHERE id = ?", (time.time(), control.id))
                self._event(db, session_id, None, events.CONTROL, events.control(control, applied=True))
            if chosen is None:
                return None
            revision = int(plan["plan_revision"])
            db.execute("UPDATE sessions SET plan_status = ? WHERE id = ?", (PlanStatus.ACTIVE.value, session_id))
            todos = json.loads(plan["plan"]) if plan["plan"] else None
            self._event(db, session_id, None, events.PLAN, events.plan(revision, PlanStatus.ACTIVE.value, todos))
            return self._start_turn(db, session_id, texts.plan_approved(revision), TurnMode.EXECUTING)

    @staticmethod
    def _running(db: sqlite3.Connection, session_id: str) -> bool:
        return db.execute(
            "SELECT 1 FROM turns WHERE session_id = ? AND status = ? LIMIT 1", (session_id, TurnStatus.RUNNING.value)
        ).fetchone() is not None

    def unfinished_turn(self, session_id: str) -> TurnRecord | None:
        return self.running_turn(session_id)

    def finish_turn(
        self, session_id: str, turn_id: str, status: TurnStatus, final_text: str | None, error: str | None,
        unless_steered: bool = False,
    ) -> bool:
        """End the turn; with `unless_steered`, only when no steer message waits for it (checked in
        the same transaction that a steer is recorded in, so none is lost). False: not ended."""
        with self._tx() as db:
            if unless_steered and self._steer_waiting(db, session_id, turn_id):
                return False
            db.execute(
                "UPDATE turns SET status = ?, final_text = ?, error = ?, finished_at = ? WHERE session_id = ? AND id = ?",
                (status.value, final_text, error, time.time(), session_id, turn_id),
            )
            turn = self._turn(db.execute("SELECT * FROM turns WHERE session_id = ? AND id = ?", (session_id, turn_id)).fetchone())
            self._event(db, session_id, turn_id, events.TURN_FINISHED, events.turn_finished(turn))
        return True

    def messages(self, session_id: str, turn_id: str | None = None) -> list[Message]:
        return [m for _, _, m in self.stored_messages(session_id, turn_id=turn_id)]

    def stored_messages(
        self, session_id: str, after_seq: int = 0, turn_id: str | None = None
    ) -> list[tuple[int, str, Message]]:
        """(seq, turn id, message) in order, after `after_seq`."""
        query = "SELECT seq, turn_id, body FROM messages WHERE session_id = ? AND seq > ?"
        params: tuple[Any, ...] = (session_id, after_seq)
        if turn_id is not None:
            query += " AND turn_id = ?"
            params += (turn_id,)
        rows = self._db.execute(query + " ORDER BY seq", params).fetchall()
        return [(int(r["seq"]), r["turn_id"], Message.model_validate_json(r["body"])) for r in rows]

    def append_message(self, session_id: str, turn_id: str, message: Message, continuation: bool = False) -> None:
        """A message the host adds to a turn (a continuation, a cancellation note); with
        `continuation`, one more continuation in a row is counted."""
        with self._tx() as db:
            self._append(db, session_id, turn_id, message)
            if continuation:
                db.execute(
                    "UPDATE turns SET continuations = continuations + 1 WHERE session_id = ? AND id = ?",
                    (session_id, turn_id),
                )

    def record_model_response(
        self, turn: TurnRecord, message: Message, calls: list[ToolCallRecord],
        usage: tuple[str, int, int, float | None] | None = None,
    ) -> None:
        """The model's answer, its tool calls and its usage (model, in, out, cost), in one commit:
        the step boundary. Tool calls end a run of continuations."""
        with self._tx() as db:
            self._append(db, turn.session_id, turn.id, message)
            db.execute(
                "UPDATE turns SET model_calls = model_calls + 1,"
                " continuations = CASE WHEN ? THEN 0 ELSE continuations END WHERE session_id = ? AND id = ?",
                (bool(calls), turn.session_id, turn.id),
            )
            for record in calls:
                db.execute(
                    "INSERT INTO tool_calls (session_id, turn_id, id, model_call, position, name, arguments, kind, effect,"
                    " requires_approval, idempotency_key, status, result_text, attempts, wait_until, updated_at, cancel_reason)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        record.session_id, record.turn_id, record.id, record.model_call, record.position, record.name,
                        json.dumps(record.arguments), record.kind, record.effect, int(record.requires_approval),
                        record.idempotency_key, record.status.value, record.result_text, record.attempts,
                        record.wait_until, record.updated_at, record.cancel_reason,
                    ),
                )
                self._event(db, turn.session_id, turn.id, events.TOOL_CALL, events.tool_call(record))
            if usage is not None:
                self._usage(db, turn.session_id, turn.id, "turn", *usage)

    # Tool calls -------------------------------------------------------------------------------

    def tool_call_ids(self, session_id: str) -> set[str]:
        rows = self._db.execute("SELECT id FROM tool_calls WHERE session_id = ?", (session_id,)).fetchall()
        return {r["id"] for r in rows}

    def tool_calls(self, session_id: str, turn_id: str | None = None) -> list[ToolCallRecord]:
        query = "SELECT * FROM tool_calls WHERE session_id = ?"
        params: tuple[str, ...] = (session_id,)
        if turn_id is not None:
            query += " AND turn_id = ?"
            params += (turn_id,)
        rows = self._db.execute(query + " ORDER BY model_call, position", params).fetchall()
        return [self._call(r) for r in rows]

    _CALL_FIELDS = frozenset({"status", "result_text", "attempts", "wait_until", "cancel_reason", "images"})

    def update_tool_call(self, record: ToolCallRecord, /, **fields: Any) -> ToolCallRecord:
        unknown = set(fields) - self._CALL_FIELDS
        if unknown:
            raise ValueError(f"not updatable: {sorted(unknown)}")
        values: dict[str, Any] = {k: (v.value if isinstance(v, StrEnum) else v) for k, v in fields.items()}
        if "images" in values:  # references only (ImageReference), as JSON
            values["images"] = json.dumps([i.model_dump() for i in values["images"]])
        values["updated_at"] = time.time()
        assignments = ", ".join(f"{k} = ?" for k in values)
        with self._tx() as db:
            db.execute(
                f"UPDATE tool_calls SET {assignments} WHERE session_id = ? AND id = ?",
                (*values.values(), record.session_id, record.id),
            )
            updated = self.get_tool_call(record.session_id, record.id)
            self._event(db, record.session_id, record.turn_id, events.TOOL_CALL, events.tool_call(updated))
        return updated

    # Tools found by discovery (docs/discovery.md) ----------------------------------------------

    def add_found_tools(self, session_id: str, definitions: list[dict[str, Any]]) -> None:
        """Tool definitions the session's search_tools calls answered (each with a `name`): they
        join its tool set for the rest of the session; a tool found again keeps its newest one."""
        now = time.time()
        with self._tx() as db:
            for definition in definitions:
                name = str(definition["name"])
                db.execute("DELETE FROM found_tools WHERE session_id = ? AND name = ?", (session_id, name))
                db.execute(
                    "INSERT INTO found_tools (session_id, name, definition, found_at) VALUES (?, ?, ?, ?)",
                    (session_id, name, json.dumps(definition), now),
                )

    def found_tools(self, session_id: str) -> list[dict[str, Any]]:
        """The session's found tool definitions, in the order they were (last) found."""
        rows = self._db.execute(
            "SELECT definition FROM found_tools WHERE session_id = ? ORDER BY found_at, name", (session_id,)
        ).fetchall()
        return [dict(json.loads(r["definition"])) for r in rows]

    # Approvals --------------------------------------------------------------------------------

    def create_approval(self, record: ApprovalRecord) -> ApprovalRecord:
        """Idempotent: raising the same approval again (after a restart) keeps the first row."""
        with self._tx() as db:
            cursor = db.execute(
                "INSERT OR IGNORE INTO approvals (id, session_id, turn_id, tool_call_id, tool_name, arguments, status,"
                " created_at, deadline) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    record.id, record.session_id, record.turn_id, record.tool_call_id, record.tool_name,
                    json.dumps(record.arguments), record.status.value, record.created_at, record.deadline,
                ),
            )
            if cursor.rowcount:
                self._approval_event(db, record)
        stored = self.get_approval(record.id)
        assert stored is not None
        return stored

    def pending_approvals(self, session_id: str | None = None) -> list[ApprovalRecord]:
        query, params = "SELECT id FROM approvals WHERE status = ?", [ApprovalStatus.PENDING.value]
        if session_id is not None:
            query += " AND session_id = ?"
            params.append(session_id)
        rows = self._db.execute(query + " ORDER BY created_at", params)
        return [a for a in (self.get_approval(r["id"]) for r in rows.fetchall()) if a is not None]

    def decide_approval(
        self, approval_id: str, status: ApprovalStatus, decided_by: str, reason: str | None, now: float
    ) -> tuple[ApprovalRecord, bool] | None:
        """Record the first decision; returns (record, replayed). A later one gets the first."""
        with self._tx() as db:
            replayed = self._decide_first(db, "approvals", approval_id, status.value, decided_by, reason, now)
            if replayed is None:
                return None
            if not replayed:
                decided = self.get_approval(approval_id)
                assert decided is not None
                self._approval_event(db, decided)
        record = self.get_approval(approval_id)
        assert record is not None
        return record, replayed


def _plan_status(plan: list[dict[str, Any]] | None) -> PlanStatus:
    if not plan:
        return PlanStatus.CLEARED
    if all(t.get("status") == "completed" for t in plan):
        return PlanStatus.COMPLETED
    return PlanStatus.ACTIVE
