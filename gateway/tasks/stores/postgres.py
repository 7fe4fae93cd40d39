"""Tasks in the gateway's PostgreSQL schema, on the pool the fence store shares (replicas).

Schema creation runs under a transaction-scoped advisory lock, so replicas starting together
neither race on `CREATE ... IF NOT EXISTS` nor see a half-built schema. Each operation is one
statement; `save` re-checks `version` in its WHERE clause (the compare-and-set).
"""

from __future__ import annotations

import builtins

from typing import Any

import asyncpg

from ...storage.database import Database
from ...storage.tables import PostgresTable
from ..records import COLUMNS, TaskRecord, TaskStatus, record_from_row, record_to_row
from ..store import TASKS_TABLE, TASKS_VERSION

_COLS = ", ".join(COLUMNS)


class PostgresTaskStore(PostgresTable):
    PURPOSE = "dex-gateway tasks"

    def __init__(self, database: Database, *, owns_database: bool = False) -> None:
        super().__init__(database, owns_database=owns_database)
        self._t = self.table(TASKS_TABLE)

    async def create(self, conn: asyncpg.Connection) -> None:
        new = await TASKS_VERSION.postgres_check(conn, self._t)
        await conn.execute(
            f"""CREATE TABLE IF NOT EXISTS {self._t} (
                task_id text PRIMARY KEY, principal text NOT NULL, tool text NOT NULL, effect text NOT NULL,
                era text NOT NULL, status text NOT NULL, created_at double precision NOT NULL,
                updated_at double precision NOT NULL, poll_interval_ms integer NOT NULL, ttl_ms bigint,
                status_message text, result text, error text, fence_id text, upstream text,
                upstream_task_id text, upstream_era text, upstream_stateless integer NOT NULL,
                owner_replica text, owner_boot text, lease_until double precision, input_requests text,
                cancel_requested integer NOT NULL, version integer NOT NULL)"""
        )
        await conn.execute(f"CREATE INDEX IF NOT EXISTS {TASKS_TABLE}_principal_created ON {self._t} (principal, created_at)")
        await conn.execute(f"CREATE INDEX IF NOT EXISTS {TASKS_TABLE}_status ON {self._t} (status)")
        if new:
            await TASKS_VERSION.postgres_write(conn, self._t)

    async def insert(self, record: TaskRecord) -> None:
        placeholders = ", ".join(f"${i}" for i in range(1, len(COLUMNS) + 1))
        await self.pool.execute(f"INSERT INTO {self._t} ({_COLS}) VALUES ({placeholders})", *record_to_row(record))

    async def get(self, task_id: str, principal: str | None = None) -> TaskRecord | None:
        if principal is None:
            row = await self.pool.fetchrow(f"SELECT {_COLS} FROM {self._t} WHERE task_id = $1", task_id)
        else:
            row = await self.pool.fetchrow(
                f"SELECT {_COLS} FROM {self._t} WHERE task_id = $1 AND principal = $2", task_id, principal
            )
        return None if row is None else record_from_row(row)

    async def save(self, record: TaskRecord, *, expected_version: int) -> bool:
        columns = COLUMNS[1:-1]
        sets = ", ".join(f"{c} = ${i}" for i, c in enumerate(columns, start=1))
        n = len(columns)
        status: str = await self.pool.execute(
            f"UPDATE {self._t} SET {sets}, version = ${n + 1} WHERE task_id = ${n + 2} AND version = ${n + 3}",
            *record_to_row(record)[1:-1], expected_version + 1, record.task_id, expected_version,
        )
        return status.rsplit(" ", 1)[-1] == "1"

    async def list(
        self, *, principal: str | None = None, status: TaskStatus | None = None, limit: int = 100, before: float | None = None
    ) -> list[TaskRecord]:
        clauses: list[str] = []
        params: list[Any] = []
        for column, op, value in (("principal", "=", principal), ("status", "=", status and status.value),
                                  ("created_at", "<", before)):
            if value is not None:
                params.append(value)
                clauses.append(f"{column} {op} ${len(params)}")
        params.append(int(limit))
        where = " WHERE " + " AND ".join(clauses) if clauses else ""
        rows = await self.pool.fetch(
            f"SELECT {_COLS} FROM {self._t}{where} ORDER BY created_at DESC LIMIT ${len(params)}", *params
        )
        return [record_from_row(r) for r in rows]

    async def active(self) -> builtins.list[TaskRecord]:
        rows = await self.pool.fetch(f"SELECT {_COLS} FROM {self._t} WHERE status IN ('working', 'input_required')")
        return [record_from_row(r) for r in rows]

    async def held_bytes(self, principal: str) -> int:
        held = await self.pool.fetchval(
            f"SELECT COALESCE(SUM(COALESCE(octet_length(result), 0) + COALESCE(octet_length(error), 0)), 0) "
            f"FROM {self._t} WHERE principal = $1", principal,
        )
        return int(held)

    async def delete_expired(self, cutoff: float) -> int:
        status: str = await self.pool.execute(
            f"DELETE FROM {self._t} WHERE ttl_ms IS NOT NULL AND created_at + ttl_ms / 1000.0 < $1", cutoff
        )
        return int(status.rsplit(" ", 1)[-1])
