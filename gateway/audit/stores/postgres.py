"""The audit log in the gateway's PostgreSQL schema, on the pool the fence store shares (replicas).

Schema creation runs under a transaction-scoped advisory lock (replicas starting together). A
batch of rows is one transaction (`executemany`, pipelined: one round trip's worth of latency).
A trigger refuses UPDATE: rows are only appended, and deleted only by the retention sweep.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg

from ...storage.database import Database
from ...storage.tables import PostgresTable
from ..records import COLUMNS, AuditEntry
from ..store import AUDIT_VERSION, AuditQuery, by_id_pages

TABLE = "dex_audit_log"
SWEEP_BATCH_ROWS = 2000  # rows deleted per statement by the sweep
_COLS = ", ".join(COLUMNS)


def _dollar(index: int) -> str:
    return f"${index}"


class PostgresAuditStore(PostgresTable):
    PURPOSE = "dex-gateway audit"

    def __init__(self, database: Database, *, owns_database: bool = False) -> None:
        super().__init__(database, owns_database=owns_database)
        self._t = self.table(TABLE)
        placeholders = ", ".join(f"${i}" for i in range(1, len(COLUMNS) + 1))
        self._insert = f"INSERT INTO {self._t} ({_COLS}) VALUES ({placeholders})"

    async def create(self, conn: asyncpg.Connection) -> None:
        s = f'"{self.schema}"'
        new = await AUDIT_VERSION.postgres_check(conn, self._t)
        await conn.execute(
            f"""CREATE TABLE IF NOT EXISTS {self._t} (
                id bigserial PRIMARY KEY, time bigint NOT NULL, principal text NOT NULL, tool text NOT NULL,
                upstream text, effect text NOT NULL, arguments_digest text NOT NULL, arguments text,
                idempotency_key text, approval_by text, approval_how text, approval_at bigint,
                fence_state text NOT NULL, outcome text NOT NULL, reason text, latency_ms double precision,
                trace_id text, span_id text)"""
        )
        await conn.execute(f"CREATE INDEX IF NOT EXISTS {TABLE}_time ON {self._t} (time)")
        await conn.execute(f"CREATE INDEX IF NOT EXISTS {TABLE}_principal ON {self._t} (principal, id)")
        await conn.execute(f"CREATE INDEX IF NOT EXISTS {TABLE}_tool ON {self._t} (tool, id)")
        await conn.execute(
            f"""CREATE OR REPLACE FUNCTION {s}.{TABLE}_append_only() RETURNS trigger LANGUAGE plpgsql AS
            $$ BEGIN RAISE EXCEPTION 'the audit log is append-only'; END $$"""
        )
        if new:
            await conn.execute(
                f"CREATE TRIGGER {TABLE}_append_only BEFORE UPDATE ON {self._t}"
                f" FOR EACH ROW EXECUTE FUNCTION {s}.{TABLE}_append_only()"
            )
            await AUDIT_VERSION.postgres_write(conn, self._t)

    async def append(self, entries: list[AuditEntry]) -> None:
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.executemany(self._insert, [entry.to_row() for entry in entries])

    async def newest(self, query: AuditQuery, *, before: int | None = None, limit: int = 100) -> list[AuditEntry]:
        clauses, params = query.where(_dollar)
        if before is not None:
            params.append(before)
            clauses.append(f"id < ${len(params)}")
        params.append(int(limit))
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        sql = f"SELECT id, {_COLS} FROM {self._t} {where} ORDER BY id DESC LIMIT ${len(params)}"
        return [AuditEntry.from_row(r) for r in await self.pool.fetch(sql, *params)]

    def oldest_first(self, query: AuditQuery, *, page: int = 1000) -> AsyncIterator[AuditEntry]:
        async def read(after: int) -> list[AuditEntry]:
            clauses, params = query.where(_dollar)
            params.append(after)
            clauses.append(f"id > ${len(params)}")
            params.append(int(page))
            sql = f"SELECT id, {_COLS} FROM {self._t} WHERE {' AND '.join(clauses)} ORDER BY id LIMIT ${len(params)}"
            return [AuditEntry.from_row(r) for r in await self.pool.fetch(sql, *params)]

        return by_id_pages(read, page)

    async def sweep(self, cutoff: int) -> int:
        sql = (f"DELETE FROM {self._t} WHERE id IN (SELECT id FROM {self._t} WHERE time < $1"
               f" ORDER BY time LIMIT $2)")
        total = 0
        while True:
            deleted = int((await self.pool.execute(sql, cutoff, SWEEP_BATCH_ROWS)).rsplit(" ", 1)[-1])
            total += deleted
            if deleted < SWEEP_BATCH_ROWS:
                return total
