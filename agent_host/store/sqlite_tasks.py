"""The session store's statements for upstream tasks: the task id of each tool call the host ran
as an MCP task (by its idempotency key, filed under the session, turn and call the key names),
its last seen status, and when the service polls it next.

A turn that `dex-agent serve` parked on a task (`gateway_client/tasks.py`) waits for it: the
service claims the tasks due for a poll (`claim_task_polls`, one process per task per round:
the claim is a transaction that moves `next_poll_at` ahead), asks the gateway (`tasks/get`), and
records what it saw (`record_task_poll`). Once a task is terminal or asks for input, its turn is
due work (`sqlite_service.py`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..domain.call_keys import call_of_key
from ..domain.records import OPEN_TASK_STATUSES, CallStatus, TurnStatus
from .sqlite_service import LeaseHolder, SqliteService, lease_dead

MIN_POLL_SECONDS = 0.25
MAX_POLL_SECONDS = 15.0  # the most an unchanged task waits between polls
MAX_FAILED_POLL_SECONDS = 60.0  # the most a task waits after polls that failed (gateway down)


def _marks(values: tuple[str, ...]) -> str:
    return ", ".join("?" * len(values))


@dataclass(frozen=True)
class HostTask:
    key: str
    task_id: str
    tool: str
    status: str
    polls: int
    session_id: str | None


def next_poll_delay(interval: float | None, polls: int, failed: bool) -> float:
    """Seconds before the next poll: the task's pollInterval, growing by half at each poll that saw
    nothing new (to MAX_POLL_SECONDS); after failed polls 1, 2, 4, … s (to MAX_FAILED_POLL_SECONDS)."""
    if failed:
        return float(min(2.0 ** max(polls - 1, 0), MAX_FAILED_POLL_SECONDS))
    base = max(interval if interval is not None else 1.0, MIN_POLL_SECONDS)
    return float(min(base * 1.5 ** min(polls, 20), MAX_POLL_SECONDS))


class SqliteTasks(SqliteService):
    def task_of(self, key: str) -> tuple[str, str] | None:
        """(task id, last seen status) of the call with this key."""
        row = self._db.execute("SELECT task_id, status FROM host_tasks WHERE key = ?", (key,)).fetchone()
        return (row["task_id"], row["status"]) if row is not None else None

    def record_task(self, key: str, task_id: str, tool: str, status: str, poll_interval: float | None = None,
                    now: float | None = None) -> None:
        """The call's task and its status as the turn saw it (its polls start again from the task's
        pollInterval)."""
        now = time.time() if now is None else now
        call = call_of_key(key)
        with self._tx() as db:
            db.execute(
                "INSERT INTO host_tasks (key, task_id, tool, status, updated_at, session_id, turn_id, tool_call_id,"
                " next_poll_at, polls) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 0) ON CONFLICT (key) DO UPDATE SET"
                " task_id = excluded.task_id, status = excluded.status, updated_at = excluded.updated_at,"
                " next_poll_at = excluded.next_poll_at, polls = 0",
                (key, task_id, tool, status, now, *(call or (None, None, None)),
                 now + next_poll_delay(poll_interval, 0, False)),
            )

    def claim_task_polls(self, me: LeaseHolder, limit: int, claim_seconds: float, now: float | None = None) -> list[HostTask]:
        """Up to `limit` open tasks whose poll is due, of parked turns (a running turn whose call
        is `sent` and whose session no live process holds: a turn being driven polls its own task),
        claimed for `claim_seconds`: another process does not poll them meanwhile."""
        now = time.time() if now is None else now
        claimed: list[HostTask] = []
        with self._tx() as db:
            rows = db.execute(
                "SELECT h.key, h.task_id, h.tool, h.status, h.polls, h.session_id FROM host_tasks h"
                " JOIN turns t ON t.session_id = h.session_id AND t.id = h.turn_id"
                " JOIN tool_calls c ON c.session_id = h.session_id AND c.id = h.tool_call_id"
                f" WHERE h.status IN ({_marks(OPEN_TASK_STATUSES)}) AND h.next_poll_at <= ? AND t.status = ? AND c.status = ?"
                " ORDER BY h.next_poll_at LIMIT ?",
                (*OPEN_TASK_STATUSES, now, TurnStatus.RUNNING.value, CallStatus.SENT.value, limit * 4),
            ).fetchall()
            for row in rows:
                lease = self.get_lease(row["session_id"])
                if len(claimed) >= limit or (lease is not None and not lease_dead(lease.holder, lease.lease_until, me, now)):
                    continue
                db.execute("UPDATE host_tasks SET next_poll_at = ? WHERE key = ?", (now + claim_seconds, row["key"]))
                claimed.append(HostTask(row["key"], row["task_id"], row["tool"], row["status"], row["polls"],
                                        row["session_id"]))
        return claimed

    def record_task_poll(self, key: str, status: str | None, poll_interval: float | None = None,
                         now: float | None = None) -> None:
        """What a poll of the service saw: the task's status (None: the poll failed), and when the
        next poll is due (`next_poll_delay`)."""
        now = time.time() if now is None else now
        with self._tx() as db:
            row = db.execute("SELECT status, polls FROM host_tasks WHERE key = ?", (key,)).fetchone()
            if row is None:
                return
            failed = status is None
            polls = 0 if not failed and status != row["status"] else int(row["polls"]) + 1
            delay = next_poll_delay(poll_interval, polls, failed)
            db.execute(
                "UPDATE host_tasks SET status = ?, polls = ?, next_poll_at = ?, updated_at = ? WHERE key = ?",
                (row["status"] if failed else status, polls, now + delay, now, key),
            )
