"""Tasks in the gateway's SQLite file (beside the fences, WAL mode).

`SqliteTable`: worker threads, one short connection per operation (like the registrations
and media grants); the fence store's own connection is never touched. Writes are `BEGIN IMMEDIATE`; a busy file waits `busy_timeout`.
"""

from __future__ import annotations

import builtins

import sqlite3
from typing import Any

from ...storage.database import write_transaction
from ...storage.tables import SqliteTable
from ..records import COLUMNS, TaskRecord, TaskStatus, record_from_row, record_to_row
from ..store import TASKS_TABLE, TASKS_VERSION

_COLS = ", ".join(COLUMNS)
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {TASKS_TABLE} (
    task_id TEXT PRIMARY KEY, principal TEXT NOT NULL, tool TEXT NOT NULL, effect TEXT NOT NULL,
    era TEXT NOT NULL, status TEXT NOT NULL, created_at REAL NOT NULL, updated_at REAL NOT NULL,
    poll_interval_ms INTEGER NOT NULL, ttl_ms INTEGER, status_message TEXT, result TEXT, error TEXT,
    fence_id TEXT, upstream TEXT, upstream_task_id TEXT, upstream_era TEXT,
    upstream_stateless INTEGER NOT NULL, owner_replica TEXT, owner_boot TEXT, lease_until REAL,
    input_requests TEXT, cancel_requested INTEGER NOT NULL, version INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS {TASKS_TABLE}_principal_created ON {TASKS_TABLE} (principal, created_at);
CREATE INDEX IF NOT EXISTS {TASKS_TABLE}_status ON {TASKS_TABLE} (status)
"""


class SqliteTaskStore(SqliteTable):
    SCHEMA = _SCHEMA

    @classmethod
    def created(cls, c: sqlite3.Connection) -> None:
        TASKS_VERSION.sqlite(c, TASKS_TABLE)

    async def insert(self, record: TaskRecord) -> None:
        sql = f"INSERT INTO {TASKS_TABLE} ({_COLS}) VALUES ({', '.join('?' * len(COLUMNS))})"
        row = record_to_row(record)
        await self._run(lambda conn: write_transaction(conn, lambda c: c.execute(sql, row)))

    async def get(self, task_id: str, principal: str | None = None) -> TaskRecord | None:
        sql = f"SELECT {_COLS} FROM {TASKS_TABLE} WHERE task_id = ?"
        params: tuple[Any, ...] = (task_id,)
        if principal is not None:
            sql += " AND principal = ?"
            params += (principal,)
        row = await self._run(lambda conn: conn.execute(sql, params).fetchone())
        return None if row is None else record_from_row(row)

    async def save(self, record: TaskRecord, *, expected_version: int) -> bool:
        row = record_to_row(record)[1:-1]  # every column but the key and the version
        sets = ", ".join(f"{c} = ?" for c in COLUMNS[1:-1])
        sql = f"UPDATE {TASKS_TABLE} SET {sets}, version = ? WHERE task_id = ? AND version = ?"
        params = (*row, expected_version + 1, record.task_id, expected_version)
        return await self._run(lambda conn: write_transaction(conn, lambda c: c.execute(sql, params).rowcount == 1))

    async def list(
        self, *, principal: str | None = None, status: TaskStatus | None = None, limit: int = 100, before: float | None = None
    ) -> list[TaskRecord]:
        where, params = _filters(principal, status, before)
        sql = f"SELECT {_COLS} FROM {TASKS_TABLE}{where} ORDER BY created_at DESC LIMIT ?"
        rows = await self._run(lambda conn: conn.execute(sql, (*params, int(limit))).fetchall())
        return [record_from_row(r) for r in rows]

    async def active(self) -> builtins.list[TaskRecord]:
        sql = f"SELECT {_COLS} FROM {TASKS_TABLE} WHERE status IN ('working', 'input_required')"
        return [record_from_row(r) for r in await self._run(lambda conn: conn.execute(sql).fetchall())]

    async def held_bytes(self, principal: str) -> int:
        sql = (f"SELECT COALESCE(SUM(COALESCE(length(CAST(result AS BLOB)), 0) + COALESCE(length(CAST(error AS BLOB)), 0)),"
               f" 0) FROM {TASKS_TABLE} WHERE principal = ?")
        return int(await self._run(lambda conn: conn.execute(sql, (principal,)).fetchone()[0]))

    async def delete_expired(self, cutoff: float) -> int:
        sql = f"DELETE FROM {TASKS_TABLE} WHERE ttl_ms IS NOT NULL AND created_at + ttl_ms / 1000.0 < ?"
        return await self._run(lambda conn: write_transaction(conn, lambda c: c.execute(sql, (cutoff,)).rowcount))


def _filters(principal: str | None, status: TaskStatus | None, before: float | None) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    params: list[Any] = []
    for clause, value in (("principal = ?", principal), ("status = ?", status and status.value), ("created_at < ?", before)):
        if value is not None:
            clauses.append(clause)
            params.append(value)
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), params
