"""Approvals in the gateway's PostgreSQL database, on its shared pool (`PoolLease`)."""

from __future__ import annotations

import asyncpg

from ..storage.database import Database
from ..storage.postgres_errors import TRANSIENT_ERRORS
from ..storage.tables import PostgresTable
from .records import Approval, ApprovalState
from .store import APPROVALS_TABLE, COLUMNS, View, from_row, to_row

__all__ = ["PostgresApprovalStore"]

_COLS = ", ".join(COLUMNS)


class PostgresApprovalStore(PostgresTable):
    transient_errors: tuple[type[BaseException], ...] = TRANSIENT_ERRORS  # storage/postgres_errors.py

    PURPOSE = "dex approvals"

    def __init__(self, database: Database, *, owns_database: bool = False) -> None:
        super().__init__(database, owns_database=owns_database)
        self._table = self.table(APPROVALS_TABLE)

    async def create(self, conn: asyncpg.Connection) -> None:
        await conn.execute(
            f"CREATE TABLE IF NOT EXISTS {self._table} (id text PRIMARY KEY, principal text NOT NULL,"
            " tool text NOT NULL, upstream text, arguments_digest text NOT NULL, arguments text NOT NULL,"
            " card text NOT NULL, idempotency_key text, created_at double precision NOT NULL,"
            " expires_at double precision NOT NULL, state text NOT NULL, decided_by text,"
            " decided_at double precision, reason text, channel text)")
        await conn.execute(f"CREATE INDEX IF NOT EXISTS {APPROVALS_TABLE}_created ON {self._table} (created_at)")
        await conn.execute(f"CREATE INDEX IF NOT EXISTS {APPROVALS_TABLE}_expires ON {self._table} (expires_at)")

    async def insert(self, approval: Approval) -> Approval:
        placeholders = ", ".join(f"${i}" for i in range(1, len(COLUMNS) + 1))
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(f"INSERT INTO {self._table} ({_COLS}) VALUES ({placeholders}) ON CONFLICT (id) DO NOTHING",
                               *to_row(approval))
            row = await conn.fetchrow(f"SELECT {_COLS} FROM {self._table} WHERE id = $1", approval.id)
        return from_row(row)

    async def get(self, approval_id: str) -> Approval | None:
        row = await self.pool.fetchrow(f"SELECT {_COLS} FROM {self._table} WHERE id = $1", approval_id)
        return None if row is None else from_row(row)

    async def list(self, view: View, now: float, limit: int) -> list[Approval]:
        pending = "state = 'pending' AND expires_at > $1"
        where = {"pending": f"WHERE {pending}", "decided": f"WHERE NOT ({pending})", "all": "WHERE $1::float8 IS NOT NULL"}[view]
        rows = await self.pool.fetch(
            f"SELECT {_COLS} FROM {self._table} {where} ORDER BY created_at DESC LIMIT $2", now, limit)
        return [from_row(r) for r in rows]

    async def decide(self, approval_id: str, state: ApprovalState, *, by: str, reason: str | None, channel: str,
                     at: float) -> tuple[Approval, bool] | None:
        async with self.pool.acquire() as conn, conn.transaction():
            changed = await conn.fetchval(
                f"UPDATE {self._table} SET state = $1, decided_by = $2, reason = $3, channel = $4, decided_at = $5"
                " WHERE id = $6 AND state = 'pending' AND expires_at > $5 RETURNING id",
                state.value, by, reason, channel, at, approval_id)
            row = await conn.fetchrow(f"SELECT {_COLS} FROM {self._table} WHERE id = $1", approval_id)
        return None if row is None else (from_row(row), changed is not None)

    async def purge(self, expired_before: float) -> int:
        status = await self.pool.execute(f"DELETE FROM {self._table} WHERE expires_at < $1", expired_before)
        return int(status.rsplit(" ", 1)[-1])
