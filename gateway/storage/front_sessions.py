"""What a stateful (handshake-era) front session set, in the shared PostgreSQL, and which process holds it.

    dex_front_sessions   session_id, owner (the holding process's boot id), principal,
                         state (JSON: gateway/front/session_state.py), updated (epoch seconds)

The holder writes the row when the client's handshake completes and again whenever the session's
state changes (`logging/setLevel`, `resources/subscribe` / `unsubscribe`); a write from a process
that no longer owns the row changes nothing. When the holder died, the replica a request reaches
takes the row over with one conditional `UPDATE ... WHERE owner = <the dead holder>`: of replicas
adopting at once exactly one changes the row and gets its state; the others see the new owner and
forward to it. Only with PostgreSQL (replicas); SQLite and memory stores keep nothing here.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .database import Database
from .tables import PostgresTable

if TYPE_CHECKING:
    import asyncpg

__all__ = ["FrontSessionStore"]

_TABLE = "dex_front_sessions"
# Rows of sessions nobody used or adopted for this long, whose holder left the replica directory.
_RETENTION_SECONDS = 24 * 3600.0


class FrontSessionStore(PostgresTable):
    PURPOSE = "front session store"

    def __init__(self, database: Database, *, boot_id: str, clock: Callable[[], float] = time.time) -> None:
        super().__init__(database)
        self.boot_id = boot_id
        self._clock = clock
        self._table = self.table(_TABLE)

    async def create(self, conn: "asyncpg.Connection") -> None:
        await conn.execute(f"CREATE TABLE IF NOT EXISTS {self._table} (session_id TEXT PRIMARY KEY, "
                           "owner TEXT NOT NULL, principal TEXT NOT NULL, state TEXT NOT NULL, "
                           "updated DOUBLE PRECISION NOT NULL)")

    async def save(self, session_id: str, principal: str, state: dict[str, Any]) -> bool:
        """Write the session's state; False when another process owns the row now (it adopted it)."""
        row = await self.pool.fetchrow(
            f"INSERT INTO {self._table} (session_id, owner, principal, state, updated) VALUES ($1, $2, $3, $4, $5) "
            f"ON CONFLICT (session_id) DO UPDATE SET state = EXCLUDED.state, updated = EXCLUDED.updated "
            f"WHERE {self._table}.owner = EXCLUDED.owner RETURNING session_id",
            session_id, self.boot_id, principal, json.dumps(state), self._clock())
        return row is not None

    async def owner(self, session_id: str) -> str | None:
        """The boot id of the process that holds the session; None when it is not stored."""
        value = await self.pool.fetchval(f"SELECT owner FROM {self._table} WHERE session_id = $1", session_id)
        return str(value) if value is not None else None

    async def adopt(self, session_id: str, *, dead_owner: str, principal: str) -> dict[str, Any] | None:
        """Take the session over from `dead_owner`, for the principal that opened it: its state, or
        None when another replica took it first (or it is not stored, or not this principal's)."""
        value = await self.pool.fetchval(
            f"UPDATE {self._table} SET owner = $1, updated = $2 WHERE session_id = $3 AND owner = $4 "
            "AND principal = $5 RETURNING state",
            self.boot_id, self._clock(), session_id, dead_owner, principal)
        if value is None:
            return None
        state = json.loads(value)
        return state if isinstance(state, dict) else None

    async def forget(self, session_id: str) -> None:
        """The session ended here (its client deleted it, or it idled out): the row goes."""
        await self.pool.execute(f"DELETE FROM {self._table} WHERE session_id = $1 AND owner = $2",
                                session_id, self.boot_id)

    async def sweep(self, directory_table: str) -> None:
        """Housekeeping: rows of long-dead holders that nobody adopted."""
        await self.pool.execute(
            f"DELETE FROM {self._table} WHERE updated < $1 AND owner NOT IN (SELECT boot_id FROM {directory_table})",
            self._clock() - _RETENTION_SECONDS)
