"""Tasks in the gateway's SQLite file (beside the fences, WAL mode).

`SqliteConnections`: worker threads, one short connection per operation (like the registrations
and media grants); the fence store's own connection is never touched. Writes are `BEGIN IMMEDIATE`; a busy file waits `busy_timeout`.
"""

from __future__ import annotations

import builtins

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ...storage.database import SqliteConnections, write_transaction
from ...storage.private_files import private_file
from ...storage.urls import parse_sqlite_url
from ..records import COLUMNS, TaskRecord, TaskStatus, record_from_row, record_to_row
from ..store import SCHEMA_VERSION, TASKS_TABLE

T = TypeVar("T")
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
CREATE INDEX IF NOT EXISTS {TASKS_TABLE}_status ON {TASKS_TABLE} (status);
CREATE TABLE IF NOT EXISTS {TASKS_TABLE}_schema (version INTEGER NOT NULL)
"""


class SqliteTaskStore:
    def __init__(self, path: str | Path, *, busy_timeout_ms: int = 10_000) -> None:
        self.path = Path(path)
        self._db = SqliteConnections(path, busy_timeout_ms=busy_timeout_ms)

    @classmethod
    def from_url(cls, url: str) -> "SqliteTaskStore":
        parsed = parse_sqlite_url(url)
        return cls(parsed.path, busy_timeout_ms=int(parsed.options.get("busy_timeout_ms", 10_000)))

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await self._db.run(fn, *args)

    async def open(self) -> None:
        private_file(self.path)
        await self._run(self._migrate)

    @classmethod
    def _migrate(cls, conn: sqlite3.Connection) -> None:
        conn.execute("PRAGMA journal_mode=WAL")

        def migrate(c: sqlite3.Connection) -> None:
            for statement in filter(None, (s.strip() for s in _SCHEMA.split(";"))):
                c.execute(statement)
            version = c.execute(f"SELECT max(version) FROM {TASKS_TABLE}_schema").fetchone()[0]
            if version is not None and version > SCHEMA_VERSION:
                raise RuntimeError(f"task store schema is at version {version}; this gateway knows up to {SCHEMA_VERSION}")
            if version is None:
                c.execute(f"INSERT INTO {TASKS_TABLE}_schema (version) VALUES (?)", (SCHEMA_VERSION,))

        write_transaction(conn, migrate)

    async def close(self) -> None:
        return None

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
