"""The SQLite connection of the session store: schema, migrations, transactions, the event log.

Every state change is one transaction (`BEGIN IMMEDIATE` … `COMMIT`, WAL, `synchronous=FULL`),
and the event that reports it is written in the same transaction: the live stream can never
show a change that was not committed, nor miss one that was. Event ids come from an
AUTOINCREMENT key, so they only grow and are never reused, and since writers take the lock in
turn, a reader never sees a later id before an earlier one.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

from ..domain import session_events as events
from ..domain.cards import ApprovalCard, target_call
from ..domain.records import ApprovalRecord, EventRecord, SessionRecord, ToolCallRecord, TurnRecord, TurnStatus
from ..models.base import Message
from .postgres import PgConnection, is_postgres_url

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
CREATE TABLE IF NOT EXISTS questions (
  id TEXT PRIMARY KEY, session_id TEXT NOT NULL, turn_id TEXT NOT NULL, tool_call_id TEXT NOT NULL,
  question TEXT NOT NULL, choices TEXT, allows_free_text INTEGER NOT NULL, status TEXT NOT NULL,
  answer TEXT, answered_by TEXT, created_at REAL NOT NULL, decided_at REAL, deadline REAL);
CREATE TABLE IF NOT EXISTS controls (
  id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL, turn_id TEXT, kind TEXT NOT NULL,
  text TEXT, revision INTEGER, source TEXT NOT NULL, created_at REAL NOT NULL, applied_at REAL);
CREATE INDEX IF NOT EXISTS controls_by_session ON controls (session_id, id);
CREATE TABLE IF NOT EXISTS usage (
  id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL, turn_id TEXT NOT NULL,
  kind TEXT NOT NULL, model TEXT NOT NULL, input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL,
  cost REAL, at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS usage_by_session ON usage (session_id, turn_id);
CREATE TABLE IF NOT EXISTS compactions (
  id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL, turn_id TEXT NOT NULL,
  summary TEXT NOT NULL, first_seq INTEGER NOT NULL, last_seq INTEGER NOT NULL,
  replaced TEXT NOT NULL, tool_call_ids TEXT NOT NULL, created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS events (
  id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL, turn_id TEXT, type TEXT NOT NULL,
  data TEXT NOT NULL, at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS events_by_session ON events (session_id, id);
CREATE TABLE IF NOT EXISTS queued_messages (
  seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, session_id TEXT NOT NULL,
  text TEXT NOT NULL, status TEXT NOT NULL, turn_id TEXT, created_at REAL NOT NULL, mode TEXT NOT NULL DEFAULT 'chat');
CREATE INDEX IF NOT EXISTS queued_by_session ON queued_messages (session_id, status, seq);
CREATE TABLE IF NOT EXISTS leases (
  session_id TEXT PRIMARY KEY, replica_id TEXT NOT NULL, boot_id TEXT NOT NULL, lease_until REAL NOT NULL);
CREATE TABLE IF NOT EXISTS found_tools (
  session_id TEXT NOT NULL, name TEXT NOT NULL, definition TEXT NOT NULL, found_at REAL NOT NULL,
  PRIMARY KEY (session_id, name));
CREATE INDEX IF NOT EXISTS compactions_by_session ON compactions (session_id, last_seq);
CREATE TABLE IF NOT EXISTS host_tasks (
  key TEXT PRIMARY KEY, task_id TEXT NOT NULL, tool TEXT NOT NULL, status TEXT NOT NULL, updated_at REAL NOT NULL,
  session_id TEXT, turn_id TEXT, tool_call_id TEXT, next_poll_at REAL NOT NULL DEFAULT 0,
  polls INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS host_images (
  sha256 TEXT PRIMARY KEY, mime_type TEXT NOT NULL, size_bytes INTEGER NOT NULL, data BLOB NOT NULL,
  created_at REAL NOT NULL);
"""

# Stored messages a compaction summarized are deleted once this many newer ones are stored (the
# seeds' retainedMessageLimit; None keeps every message).
DEFAULT_RETAINED_MESSAGES = 1000

# Columns added after the first release of the store: added to an older file when it is opened.
_ADDED_COLUMNS: dict[str, list[tuple[str, str]]] = {
    "sessions": [("plan_status", "TEXT"), ("settings", "TEXT")],
    "turns": [
        ("mode", "TEXT NOT NULL DEFAULT 'chat'"), ("settings", "TEXT"),
        ("continuations", "INTEGER NOT NULL DEFAULT 0"),
    ],
    "tool_calls": [("cancel_reason", "TEXT"), ("images", "TEXT")],
    "messages": [("message_id", "TEXT")],
    "questions": [("kind", "TEXT NOT NULL DEFAULT 'ask_user'"), ("form", "TEXT"), ("input_round", "TEXT")],
    # An older host kept only (key, task_id, tool, status, updated_at), in this file.
    "host_tasks": [("session_id", "TEXT"), ("turn_id", "TEXT"), ("tool_call_id", "TEXT"),
                   ("next_poll_at", "REAL NOT NULL DEFAULT 0"), ("polls", "INTEGER NOT NULL DEFAULT 0")],
}
# Indexes on added columns: created once the columns exist.
_INDEXES = """
CREATE INDEX IF NOT EXISTS host_tasks_by_status ON host_tasks (status, next_poll_at);
CREATE INDEX IF NOT EXISTS host_tasks_by_turn ON host_tasks (session_id, turn_id);
"""


class SqliteBase:
    """The connection and the helpers every group of statements uses."""

    def __init__(self, path: str | Path, retained_message_limit: int | None = DEFAULT_RETAINED_MESSAGES) -> None:
        if retained_message_limit is not None and retained_message_limit < 1:
            raise ValueError(f"the retained message limit must be at least 1, not {retained_message_limit}")
        self.retained_message_limit = retained_message_limit
        if is_postgres_url(path):
            # PostgreSQL: the same statements through a connection that speaks them (`postgres.py`).
            self.path = Path("postgresql")
            self._db = cast(sqlite3.Connection, PgConnection(str(path)))
            return
        self.path = Path(path)
        if str(path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: we open transactions ourselves, so one step commits atomically.
        self._db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False, timeout=30)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)
        self._migrate()

    def _migrate(self) -> None:
        with self._tx() as db:
            for table, columns in _ADDED_COLUMNS.items():
                present = {row["name"] for row in db.execute(f"PRAGMA table_info({table})")}
                for column, declaration in columns:
                    if column not in present:
                        db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
            for statement in filter(str.strip, _INDEXES.split(";")):
                db.execute(statement)

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

    # The event log ----------------------------------------------------------------------------

    @staticmethod
    def _event(db: sqlite3.Connection, session_id: str, turn_id: str | None, kind: str, data: dict[str, Any]) -> int:
        """Append one event inside the caller's transaction; its id."""
        cursor = db.execute(
            "INSERT INTO events (session_id, turn_id, type, data, at) VALUES (?, ?, ?, ?, ?)",
            (session_id, turn_id, kind, json.dumps(data, ensure_ascii=False), time.time()),
        )
        return int(cursor.lastrowid or 0)

    def append_event(self, session_id: str, turn_id: str | None, kind: str, data: dict[str, Any]) -> int:
        with self._tx() as db:
            return self._event(db, session_id, turn_id, kind, data)

    def events_after(self, session_id: str, after_id: int, limit: int = 500) -> list[EventRecord]:
        rows = self._db.execute(
            "SELECT * FROM events WHERE session_id = ? AND id > ? ORDER BY id LIMIT ?", (session_id, after_id, limit)
        ).fetchall()
        return [EventRecord.model_validate({**dict(r), "data": json.loads(r["data"])}) for r in rows]

    # Readers every group needs -----------------------------------------------------------------

    def get_session(self, session_id: str) -> SessionRecord | None:
        row = self._db.execute("SELECT * FROM sessions WHERE id = ?", (session_id,)).fetchone()
        if row is None:
            return None
        data = dict(row)
        data["plan"] = json.loads(data["plan"]) if data["plan"] else None
        data["settings"] = json.loads(data["settings"]) if data["settings"] else {}
        return SessionRecord.model_validate(data)

    @staticmethod
    def _turn(row: sqlite3.Row) -> TurnRecord:
        data = dict(row)
        data["settings"] = json.loads(data["settings"]) if data["settings"] else {}
        return TurnRecord.model_validate(data)

    def get_turn(self, session_id: str, turn_id: str) -> TurnRecord | None:
        row = self._db.execute("SELECT * FROM turns WHERE session_id = ? AND id = ?", (session_id, turn_id)).fetchone()
        return self._turn(row) if row else None

    def turns(self, session_id: str) -> list[TurnRecord]:
        rows = self._db.execute("SELECT * FROM turns WHERE session_id = ? ORDER BY seq", (session_id,)).fetchall()
        return [self._turn(r) for r in rows]

    def running_turn(self, session_id: str) -> TurnRecord | None:
        row = self._db.execute(
            "SELECT * FROM turns WHERE session_id = ? AND status = ? ORDER BY seq DESC LIMIT 1",
            (session_id, TurnStatus.RUNNING.value),
        ).fetchone()
        return self._turn(row) if row else None

    @staticmethod
    def _call(row: sqlite3.Row) -> ToolCallRecord:
        data = dict(row)
        data["arguments"] = json.loads(data["arguments"])
        data["requires_approval"] = bool(data["requires_approval"])
        data["images"] = json.loads(data["images"]) if data.get("images") else []
        return ToolCallRecord.model_validate(data)

    def get_tool_call(self, session_id: str, call_id: str) -> ToolCallRecord:
        row = self._db.execute("SELECT * FROM tool_calls WHERE session_id = ? AND id = ?", (session_id, call_id)).fetchone()
        if row is None:
            raise KeyError(call_id)
        return self._call(row)

    def _append(
        self, db: sqlite3.Connection, session_id: str, turn_id: str, message: Message, message_id: str | None = None
    ) -> int:
        """Append a message (and its event) inside the caller's transaction; its seq. `message_id`:
        the id the API gave a user's message (a queued one keeps it in the transcript)."""
        cursor = db.execute(
            "INSERT INTO messages (session_id, turn_id, body, message_id) VALUES (?, ?, ?, ?)",
            (session_id, turn_id, message.model_dump_json(), message_id),
        )
        self._event(db, session_id, turn_id, events.MESSAGE, events.message(turn_id, message))
        self._retain(db, session_id)
        return int(cursor.lastrowid or 0)

    def _retain(self, db: sqlite3.Connection, session_id: str, limit: int | None = None) -> int:
        """Retention, inside the caller's transaction (every append, every compaction): delete the
        oldest stored messages that the latest compaction summarized while at least `limit` (the
        store's `retained_message_limit`) stored messages come after them; how many went. The
        newest `limit` messages and every message after the summary always stay.

        Cheap on the common path: two index lookups (the latest summary's last seq, the session's
        oldest message) find that nothing summarized is left, before any count."""
        limit = self.retained_message_limit if limit is None else limit
        if limit is None:
            return 0
        latest = db.execute("SELECT MAX(last_seq) AS s FROM compactions WHERE session_id = ?", (session_id,)).fetchone()
        if latest is None or latest["s"] is None:
            return 0
        oldest = db.execute("SELECT MIN(seq) AS s FROM messages WHERE session_id = ?", (session_id,)).fetchone()
        if oldest is None or oldest["s"] is None or int(oldest["s"]) > int(latest["s"]):
            return 0  # nothing summarized is still stored
        kept = db.execute(
            "SELECT seq FROM messages WHERE session_id = ? ORDER BY seq DESC LIMIT 1 OFFSET ?", (session_id, limit - 1)
        ).fetchone()
        if kept is None:
            return 0  # fewer than `limit` messages: nothing to delete
        below = min(int(latest["s"]) + 1, int(kept["seq"]))
        deleted = db.execute("DELETE FROM messages WHERE session_id = ? AND seq < ?", (session_id, below)).rowcount
        return int(deleted or 0)

    def found_effect(self, session_id: str, name: str) -> str | None:
        """The effect of a tool the session found (its Dex classification), None when not found."""
        row = self._db.execute(
            "SELECT definition FROM found_tools WHERE session_id = ? AND name = ?", (session_id, name)
        ).fetchone()
        effect = json.loads(row["definition"]).get("effect") if row is not None else None
        return effect if isinstance(effect, str) else None

    def _approval_event(self, db: sqlite3.Connection, approval: ApprovalRecord) -> None:
        call = self.get_tool_call(approval.session_id, approval.tool_call_id)
        target = target_call(call.name, call.arguments)[0]
        card = ApprovalCard.for_call(call, approval.status, approval.deadline, approval.decided_at or approval.created_at,
                                     self.found_effect(call.session_id, target))
        data = events.approval(card, approval.decided_by, approval.reason)
        self._event(db, approval.session_id, approval.turn_id, events.APPROVAL, data)

    def get_approval(self, approval_id: str) -> ApprovalRecord | None:
        row = self._db.execute("SELECT * FROM approvals WHERE id = ?", (approval_id,)).fetchone()
        if row is None:
            return None
        data = dict(row)
        data["arguments"] = json.loads(data["arguments"])
        return ApprovalRecord.model_validate(data)

    # Approvals and questions: the first decision wins -------------------------------------------

    _DECIDED = {"approvals": ("decided_by", "reason"), "questions": ("answered_by", "answer")}

    def _decide_first(
        self, db: sqlite3.Connection, table: str, row_id: str, status: str, by: str, detail: str | None, now: float
    ) -> bool | None:
        """Record the decision of an approval or a question unless one was made: True when it was
        (a replay: the first stands), None when there is no such row. Past the deadline, the
        deadline decided first (`expired`)."""
        row = db.execute(f"SELECT status, deadline FROM {table} WHERE id = ?", (row_id,)).fetchone()
        if row is None:
            return None
        if row["status"] != "pending":
            return True
        if row["deadline"] is not None and now >= row["deadline"] and status != "expired":
            status, by, detail = "expired", "deadline", None
        who, what = self._DECIDED[table]
        db.execute(
            f"UPDATE {table} SET status = ?, {who} = ?, {what} = ?, decided_at = ? WHERE id = ?",
            (status, by, detail, now, row_id),
        )
        return False

    def _pending_ids(self, db: sqlite3.Connection, table: str, session_id: str, turn_id: str) -> list[str]:
        rows = db.execute(
            f"SELECT id FROM {table} WHERE session_id = ? AND turn_id = ? AND status = 'pending'", (session_id, turn_id)
        ).fetchall()
        return [r["id"] for r in rows]
