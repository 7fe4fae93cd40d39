"""The session store (SQLite): sessions, turns, messages, tool-call records, approvals.

Every state change is committed before the loop acts on it (WAL, synchronous=FULL), so a
host killed at any instant finds the turn at a step boundary and resumes from here.
The store is synchronous on purpose: each statement is a local, sub-millisecond write, and
one connection owned by the event-loop thread keeps the ordering of commits obvious.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from .models.base import Message

DEFAULT_STORE_PATH = "var/dex-agent.db"
STORE_ENV = "DEX_AGENT_STORE"


class CallStatus(StrEnum):
    PENDING = "pending"  # recorded with the model response, nothing done yet
    AWAITING_APPROVAL = "awaiting_approval"
    APPROVED = "approved"
    SENT = "sent"  # a request may have left: a restart re-sends with the same key
    WAITING = "waiting"  # durable_wait: wait_until is set
    AWAITING_ANSWER = "awaiting_answer"  # ask_user
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    OUTCOME_UNKNOWN = "outcome_unknown"
    REJECTED = "rejected"  # approval denied or deadline passed
    SKIPPED = "skipped"
    NOT_RUN = "not_run"

    @property
    def final(self) -> bool:
        return self in _FINAL


_FINAL = frozenset(
    {CallStatus.SUCCEEDED, CallStatus.FAILED, CallStatus.OUTCOME_UNKNOWN, CallStatus.REJECTED, CallStatus.SKIPPED, CallStatus.NOT_RUN}
)


class TurnStatus(StrEnum):
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"


class SessionRecord(BaseModel):
    id: str
    created_at: float
    model: str
    gateway: str
    plan: list[dict[str, Any]] | None = None
    plan_revision: int = 0


class TurnRecord(BaseModel):
    session_id: str
    id: str
    seq: int
    status: TurnStatus
    user_text: str
    final_text: str | None = None
    error: str | None = None
    model_calls: int = 0
    started_at: float
    finished_at: float | None = None


class ToolCallRecord(BaseModel):
    session_id: str
    turn_id: str
    id: str
    model_call: int
    position: int
    name: str
    arguments: dict[str, Any]
    kind: str  # "gateway" | "builtin" | "unknown"
    effect: str
    requires_approval: bool
    idempotency_key: str
    status: CallStatus
    result_text: str | None = None
    attempts: int = 0
    wait_until: float | None = None
    updated_at: float

    @property
    def is_write(self) -> bool:
        return self.kind == "gateway" and self.effect != "read"


class ApprovalStatus(StrEnum):
    PENDING = "pending"
    ALLOWED = "allowed"
    DENIED = "denied"
    EXPIRED = "expired"


class ApprovalRecord(BaseModel):
    id: str
    session_id: str
    turn_id: str
    tool_call_id: str
    tool_name: str
    arguments: dict[str, Any]
    status: ApprovalStatus
    reason: str | None = None
    decided_by: str | None = None
    created_at: float
    decided_at: float | None = None
    deadline: float | None = None


_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
  id TEXT PRIMARY KEY, created_at REAL NOT NULL, model TEXT NOT NULL, gateway TEXT NOT NULL,
  plan TEXT, plan_revision INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS turns (
  session_id TEXT NOT NULL, id TEXT NOT NULL, seq INTEGER NOT NULL, status TEXT NOT NULL,
  user_text TEXT NOT NULL, final_text TEXT, error TEXT, model_calls INTEGER NOT NULL DEFAULT 0,
  started_at REAL NOT NULL, finished_at REAL, PRIMARY KEY (session_id, id));
CREATE TABLE IF NOT EXISTS messages (
  seq INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL, turn_id TEXT NOT NULL,
  body TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS messages_by_session ON messages (session_id, seq);
CREATE TABLE IF NOT EXISTS tool_calls (
  session_id TEXT NOT NULL, turn_id TEXT NOT NULL, id TEXT NOT NULL, model_call INTEGER NOT NULL,
  position INTEGER NOT NULL, name TEXT NOT NULL, arguments TEXT NOT NULL, kind TEXT NOT NULL,
  effect TEXT NOT NULL, requires_approval INTEGER NOT NULL, idempotency_key TEXT NOT NULL,
  status TEXT NOT NULL, result_text TEXT, attempts INTEGER NOT NULL DEFAULT 0, wait_until REAL,
  updated_at REAL NOT NULL, PRIMARY KEY (session_id, id));
CREATE TABLE IF NOT EXISTS approvals (
  id TEXT PRIMARY KEY, session_id TEXT NOT NULL, turn_id TEXT NOT NULL, tool_call_id TEXT NOT NULL,
  tool_name TEXT NOT NULL, arguments TEXT NOT NULL, status TEXT NOT NULL, reason TEXT,
  decided_by TEXT, created_at REAL NOT NULL, decided_at REAL, deadline REAL);
"""


def store_path(configured: str | None) -> Path:
    return Path(configured or os.environ.get(STORE_ENV) or DEFAULT_STORE_PATH)


class SessionStore:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if str(path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: we open transactions ourselves, so one step commits atomically.
        self._db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False, timeout=30)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    # Sessions ---------------------------------------------------------------------------------

    def create_session(self, model: str, gateway: str, session_id: str | None = None) -> SessionRecord:
        sid = session_id or "s-" + uuid.uuid4().hex[:12]
        with self._tx() as db:
            db.execute(
                "INSERT INTO sessions (id, created_at, model, gateway) VALUES (?, ?, ?, ?)",
                (sid, time.time(), model, gateway),
            )
        session = self.get_session(sid)
        assert session is not None
        return session

    def get_session(self, session_id: str) -> SessionRecord | None:
        row = self._db.execute("SELECT * FROM sessions WHERE id = ?", (session_id,)).fetchone()
        if row is None:
            return None
        data = dict(row)
        data["plan"] = json.loads(data["plan"]) if data["plan"] else None
        return SessionRecord.model_validate(data)

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

    def set_plan(self, session_id: str, plan: list[dict[str, Any]] | None) -> int:
        with self._tx() as db:
            db.execute(
                "UPDATE sessions SET plan = ?, plan_revision = plan_revision + 1 WHERE id = ?",
                (json.dumps(plan) if plan is not None else None, session_id),
            )
            row = db.execute("SELECT plan_revision FROM sessions WHERE id = ?", (session_id,)).fetchone()
        return int(row["plan_revision"])

    # Turns and messages -----------------------------------------------------------------------

    def start_turn(self, session_id: str, user_text: str) -> TurnRecord:
        with self._tx() as db:
            seq = db.execute("SELECT COUNT(*) FROM turns WHERE session_id = ?", (session_id,)).fetchone()[0] + 1
            turn_id = f"turn-{seq}"
            db.execute(
                "INSERT INTO turns (session_id, id, seq, status, user_text, started_at) VALUES (?, ?, ?, ?, ?, ?)",
                (session_id, turn_id, seq, TurnStatus.RUNNING.value, user_text, time.time()),
            )
            self._append(db, session_id, turn_id, Message(role="user", text=user_text))
        turn = self.get_turn(session_id, turn_id)
        assert turn is not None
        return turn

    def get_turn(self, session_id: str, turn_id: str) -> TurnRecord | None:
        row = self._db.execute("SELECT * FROM turns WHERE session_id = ? AND id = ?", (session_id, turn_id)).fetchone()
        return TurnRecord.model_validate(dict(row)) if row else None

    def turns(self, session_id: str) -> list[TurnRecord]:
        rows = self._db.execute("SELECT * FROM turns WHERE session_id = ? ORDER BY seq", (session_id,)).fetchall()
        return [TurnRecord.model_validate(dict(r)) for r in rows]

    def unfinished_turn(self, session_id: str) -> TurnRecord | None:
        running = [t for t in self.turns(session_id) if t.status is TurnStatus.RUNNING]
        return running[-1] if running else None

    def finish_turn(self, session_id: str, turn_id: str, status: TurnStatus, final_text: str | None, error: str | None) -> None:
        with self._tx() as db:
            db.execute(
                "UPDATE turns SET status = ?, final_text = ?, error = ?, finished_at = ? WHERE session_id = ? AND id = ?",
                (status.value, final_text, error, time.time(), session_id, turn_id),
            )

    def messages(self, session_id: str, turn_id: str | None = None) -> list[Message]:
        query = "SELECT body FROM messages WHERE session_id = ?"
        params: tuple[str, ...] = (session_id,)
        if turn_id is not None:
            query += " AND turn_id = ?"
            params += (turn_id,)
        rows = self._db.execute(query + " ORDER BY seq", params).fetchall()
        return [Message.model_validate_json(r["body"]) for r in rows]

    @staticmethod
    def _append(db: sqlite3.Connection, session_id: str, turn_id: str, message: Message) -> None:
        db.execute(
            "INSERT INTO messages (session_id, turn_id, body) VALUES (?, ?, ?)",
            (session_id, turn_id, message.model_dump_json()),
        )

    def record_model_response(self, turn: TurnRecord, message: Message, calls: list[ToolCallRecord]) -> None:
        """The model's answer and its tool calls, in one commit: the step boundary."""
        with self._tx() as db:
            self._append(db, turn.session_id, turn.id, message)
            db.execute(
                "UPDATE turns SET model_calls = model_calls + 1 WHERE session_id = ? AND id = ?",
                (turn.session_id, turn.id),
            )
            for record in calls:
                db.execute(
                    "INSERT INTO tool_calls (session_id, turn_id, id, model_call, position, name, arguments, kind, effect,"
                    " requires_approval, idempotency_key, status, result_text, attempts, wait_until, updated_at)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        record.session_id, record.turn_id, record.id, record.model_call, record.position, record.name,
                        json.dumps(record.arguments), record.kind, record.effect, int(record.requires_approval),
                        record.idempotency_key, record.status.value, record.result_text, record.attempts,
                        record.wait_until, record.updated_at,
                    ),
                )

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

    def get_tool_call(self, session_id: str, call_id: str) -> ToolCallRecord:
        row = self._db.execute("SELECT * FROM tool_calls WHERE session_id = ? AND id = ?", (session_id, call_id)).fetchone()
        if row is None:
            raise KeyError(call_id)
        return self._call(row)

    @staticmethod
    def _call(row: sqlite3.Row) -> ToolCallRecord:
        data = dict(row)
        data["arguments"] = json.loads(data["arguments"])
        data["requires_approval"] = bool(data["requires_approval"])
        return ToolCallRecord.model_validate(data)

    _CALL_FIELDS = frozenset({"status", "result_text", "attempts", "wait_until"})

    def update_tool_call(self, record: ToolCallRecord, **fields: Any) -> ToolCallRecord:
        unknown = set(fields) - self._CALL_FIELDS
        if unknown:
            raise ValueError(f"not updatable: {sorted(unknown)}")
        values = {k: (v.value if isinstance(v, StrEnum) else v) for k, v in fields.items()}
        values["updated_at"] = time.time()
        assignments = ", ".join(f"{k} = ?" for k in values)
        with self._tx() as db:
            db.execute(
                f"UPDATE tool_calls SET {assignments} WHERE session_id = ? AND id = ?",
                (*values.values(), record.session_id, record.id),
            )
        return self.get_tool_call(record.session_id, record.id)

    # Approvals --------------------------------------------------------------------------------

    def create_approval(self, record: ApprovalRecord) -> ApprovalRecord:
        """Idempotent: raising the same approval again (after a restart) keeps the first row."""
        with self._tx() as db:
            db.execute(
                "INSERT OR IGNORE INTO approvals (id, session_id, turn_id, tool_call_id, tool_name, arguments, status,"
                " created_at, deadline) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    record.id, record.session_id, record.turn_id, record.tool_call_id, record.tool_name,
                    json.dumps(record.arguments), record.status.value, record.created_at, record.deadline,
                ),
            )
        stored = self.get_approval(record.id)
        assert stored is not None
        return stored

    def get_approval(self, approval_id: str) -> ApprovalRecord | None:
        row = self._db.execute("SELECT * FROM approvals WHERE id = ?", (approval_id,)).fetchone()
        if row is None:
            return None
        data = dict(row)
        data["arguments"] = json.loads(data["arguments"])
        return ApprovalRecord.model_validate(data)

    def pending_approvals(self) -> list[ApprovalRecord]:
        rows = self._db.execute("SELECT id FROM approvals WHERE status = ? ORDER BY created_at", (ApprovalStatus.PENDING.value,))
        return [a for a in (self.get_approval(r["id"]) for r in rows.fetchall()) if a is not None]

    def decide_approval(
        self, approval_id: str, status: ApprovalStatus, decided_by: str, reason: str | None, now: float
    ) -> tuple[ApprovalRecord, bool] | None:
        """Record the first decision; returns (record, replayed). A later one gets the first."""
        with self._tx() as db:
            row = db.execute("SELECT status, deadline FROM approvals WHERE id = ?", (approval_id,)).fetchone()
            if row is None:
                return None
            replayed = row["status"] != ApprovalStatus.PENDING.value
            if not replayed:
                # A decision after the deadline does not count: the deadline decided first.
                if row["deadline"] is not None and now >= row["deadline"] and status is not ApprovalStatus.EXPIRED:
                    status, decided_by, reason = ApprovalStatus.EXPIRED, "deadline", None
                db.execute(
                    "UPDATE approvals SET status = ?, decided_by = ?, reason = ?, decided_at = ? WHERE id = ?",
                    (status.value, decided_by, reason, now, approval_id),
                )
        record = self.get_approval(approval_id)
        assert record is not None
        return record, replayed
