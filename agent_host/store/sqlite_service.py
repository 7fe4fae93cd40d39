"""The session store's statements for a host that drives sessions by itself (`dex-agent serve`):
the lease that lets one process drive a session, the queue of messages sent while a turn runs, and
the question the service asks on start and continuously: which sessions have work that is due.

The lease rule is the gateway's (`gateway.storage.leases.holder_dead`), written once: a session is
free when its lease holder is dead (its lease ran out, or it is this process's replica under an
older boot). Taking and renewing are one transaction each (`BEGIN IMMEDIATE`), so two processes on
one store never both hold a session.

Work is due for a session that is not held by a live process when
* it has a running turn that waits for nothing: an interrupted one, or one whose `durable_wait`
  time came (the wake-up time is the call's stored `wait_until`), whose approval or question got
  its answer or passed its deadline, whose upstream task ended or asks for input (its status as
  the service last polled it, `sqlite_tasks.py`), or that was steered or cancelled while it
  waited (a turn waiting for an upstream task: cancelled only, since a steer lets a started call
  run to its end);
* it has no running turn and a queued message, or an approval of its draft plan (`execute_plan`).
"""

from __future__ import annotations

import os
import socket
import sqlite3
import time
import uuid
from dataclasses import dataclass

from gateway.storage.leases import holder_dead

from ..domain import session_events as events
from ..domain.records import OPEN_TASK_STATUSES, CallStatus, ControlKind, TurnStatus
from .sqlite_base import SqliteBase

QUEUED, STARTED, WITHDRAWN = "queued", "started", "withdrawn"


# A running turn waits for an upstream task while one of its `sent` calls has a task that still
# runs by itself (`sqlite_tasks.py`); the service polls it, and its end makes the turn due.
_WAITS_FOR_TASK = (
    "SELECT 1 FROM host_tasks h JOIN tool_calls c ON c.session_id = h.session_id AND c.id = h.tool_call_id"
    " WHERE h.session_id = t.session_id AND h.turn_id = t.id AND c.status = ?"
    f" AND h.status IN ({', '.join('?' * len(OPEN_TASK_STATUSES))})"
)
_TASK_PARAMS = (CallStatus.SENT.value, *OPEN_TASK_STATUSES)


@dataclass(frozen=True)
class LeaseHolder:
    """Who drives a session: `replica_id` stable for a process's host and pid, `boot_id` new at
    every start (the gateway's `Holder`)."""

    replica_id: str
    boot_id: str


@dataclass(frozen=True)
class Lease:
    session_id: str
    holder: LeaseHolder
    lease_until: float


@dataclass(frozen=True)
class QueuedMessage:
    id: str
    session_id: str
    text: str
    status: str
    turn_id: str | None
    created_at: float


def _process_gone(holder: LeaseHolder) -> bool:
    """A holder on this machine (`host/pid`) whose process no longer exists: dead without waiting
    for its lease to run out (a killed `run` is resumed at once). Elsewhere, the lease decides."""
    host, _, pid = holder.replica_id.rpartition("/")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def lease_dead(holder: LeaseHolder, lease_until: float, me: LeaseHolder, now: float) -> bool:
    """The gateway's rule (`holder_dead`), and a gone process on this machine."""
    return holder_dead(holder, lease_until, me=me, now=now) or _process_gone(holder)


class SqliteService(SqliteBase):
    # Leases -------------------------------------------------------------------------------------

    def get_lease(self, session_id: str) -> Lease | None:
        row = self._db.execute("SELECT * FROM leases WHERE session_id = ?", (session_id,)).fetchone()
        return None if row is None else Lease(session_id, LeaseHolder(row["replica_id"], row["boot_id"]), row["lease_until"])

    def take_lease(self, session_id: str, me: LeaseHolder, seconds: float, now: float | None = None) -> Lease | None:
        """Take or renew the session's lease for `seconds`; None when a live other process holds it
        (then `get_lease` says who, until when)."""
        now = time.time() if now is None else now
        with self._tx() as db:
            row = db.execute("SELECT * FROM leases WHERE session_id = ?", (session_id,)).fetchone()
            if row is not None:
                holder = LeaseHolder(row["replica_id"], row["boot_id"])
                if holder != me and not lease_dead(holder, row["lease_until"], me, now):
                    return None
            db.execute(
                "INSERT INTO leases (session_id, replica_id, boot_id, lease_until) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (session_id) DO UPDATE SET replica_id = excluded.replica_id,"
                " boot_id = excluded.boot_id, lease_until = excluded.lease_until",
                (session_id, me.replica_id, me.boot_id, now + seconds),
            )
        return Lease(session_id, me, now + seconds)

    def release_lease(self, session_id: str, me: LeaseHolder) -> None:
        with self._tx() as db:
            db.execute(
                "DELETE FROM leases WHERE session_id = ? AND replica_id = ? AND boot_id = ?",
                (session_id, me.replica_id, me.boot_id),
            )

    # Queued messages ----------------------------------------------------------------------------

    @staticmethod
    def _queued(row: sqlite3.Row) -> QueuedMessage:
        return QueuedMessage(row["id"], row["session_id"], row["text"], row["status"], row["turn_id"], row["created_at"])

    def queue_message(self, session_id: str, text: str, planning: bool = False) -> tuple[QueuedMessage, bool]:
        """Queue a user message (`planning`: it starts a planning turn); (it, whether it waits
        behind a running turn or other messages)."""
        message_id = "m-" + uuid.uuid4().hex[:16]
        with self._tx() as db:
            busy = db.execute(
                "SELECT 1 FROM turns WHERE session_id = ? AND status = ? UNION ALL"
                " SELECT 1 FROM queued_messages WHERE session_id = ? AND status = ? LIMIT 1",
                (session_id, TurnStatus.RUNNING.value, session_id, QUEUED),
            ).fetchone() is not None
            db.execute(
                "INSERT INTO queued_messages (id, session_id, text, status, created_at, mode) VALUES (?, ?, ?, ?, ?, ?)",
                (message_id, session_id, text, QUEUED, time.time(), "planning" if planning else "chat"),
            )
            self._event(db, session_id, None, events.QUEUE, events.queued(message_id, text, QUEUED))
            row = db.execute("SELECT * FROM queued_messages WHERE id = ?", (message_id,)).fetchone()
        return self._queued(row), busy

    def withdraw_message(self, session_id: str, message_id: str) -> str | None:
        """Withdraw a queued message: None when it was; else why not (`not_found`, `started`)."""
        with self._tx() as db:
            row = db.execute(
                "SELECT * FROM queued_messages WHERE id = ? AND session_id = ?", (message_id, session_id)
            ).fetchone()
            if row is None or row["status"] == WITHDRAWN:
                return "not_found"
            if row["status"] != QUEUED:
                return STARTED
            db.execute("UPDATE queued_messages SET status = ? WHERE id = ?", (WITHDRAWN, message_id))
            self._event(db, session_id, None, events.QUEUE, events.queued(message_id, row["text"], WITHDRAWN))
        return None

    def queued_messages(self, session_id: str) -> list[QueuedMessage]:
        rows = self._db.execute(
            "SELECT * FROM queued_messages WHERE session_id = ? AND status = ? ORDER BY seq", (session_id, QUEUED)
        ).fetchall()
        return [self._queued(r) for r in rows]

    def transcript(
        self, session_id: str, limit: int, before: str | None = None
    ) -> list[tuple[str, str, str]] | None:
        """Up to `limit` stored messages before the message `before` (all: None), oldest first, as
        (id, turn id, JSON body); None when `before` is not a message of the session. One more
        than `limit` is read, so the caller knows whether older messages remain (it drops it)."""
        bound = None
        if before is not None:
            row = self._db.execute(
                "SELECT seq FROM messages WHERE session_id = ? AND (message_id = ? OR (message_id IS NULL AND 'seq-' || seq = ?))",
                (session_id, before, before),
            ).fetchone()
            if row is None:
                return None
            bound = int(row["seq"])
        rows = self._db.execute(
            "SELECT seq, message_id, turn_id, body FROM messages WHERE session_id = ? AND seq < ? ORDER BY seq DESC LIMIT ?",
            (session_id, bound if bound is not None else 2**62, limit + 1),
        ).fetchall()
        return [(r["message_id"] or f"seq-{r['seq']}", r["turn_id"], r["body"]) for r in reversed(rows)]

    # Due work -----------------------------------------------------------------------------------

    def due_sessions(self, me: LeaseHolder, now: float | None = None) -> list[str]:
        """The sessions with work due now that no live other process holds (module docstring)."""
        now = time.time() if now is None else now
        rows = self._db.execute(
            f"""
            SELECT t.session_id AS id FROM turns t WHERE t.status = ?
              AND (NOT EXISTS (SELECT 1 FROM tool_calls c WHERE c.session_id = t.session_id AND c.turn_id = t.id
                               AND c.status = ? AND c.wait_until > ?)
                   AND NOT EXISTS (SELECT 1 FROM approvals a WHERE a.session_id = t.session_id AND a.turn_id = t.id
                               AND a.status = 'pending' AND (a.deadline IS NULL OR a.deadline > ?))
                   AND NOT EXISTS (SELECT 1 FROM questions q WHERE q.session_id = t.session_id AND q.turn_id = t.id
                               AND q.status = 'pending' AND (q.deadline IS NULL OR q.deadline > ?))
                   AND NOT EXISTS ({_WAITS_FOR_TASK})
                   OR EXISTS (SELECT 1 FROM controls k WHERE k.session_id = t.session_id AND k.turn_id = t.id
                               AND k.applied_at IS NULL AND (k.kind = ? OR NOT EXISTS ({_WAITS_FOR_TASK}))))
            UNION
            SELECT q.session_id AS id FROM queued_messages q WHERE q.status = ?
              AND NOT EXISTS (SELECT 1 FROM turns t WHERE t.session_id = q.session_id AND t.status = ?)
            UNION
            SELECT k.session_id AS id FROM controls k WHERE k.turn_id IS NULL AND k.kind = ? AND k.applied_at IS NULL
              AND NOT EXISTS (SELECT 1 FROM turns t WHERE t.session_id = k.session_id AND t.status = ?)
            """,
            (TurnStatus.RUNNING.value, CallStatus.WAITING.value, now, now, now, *_TASK_PARAMS, ControlKind.CANCEL.value,
             *_TASK_PARAMS, QUEUED, TurnStatus.RUNNING.value,
             ControlKind.EXECUTE_PLAN.value, TurnStatus.RUNNING.value),
        ).fetchall()
        due = []
        for row in rows:
            lease = self.get_lease(row["id"])
            if lease is None or lease.holder == me or lease_dead(lease.holder, lease.lease_until, me, now):
                due.append(row["id"])
        return due
