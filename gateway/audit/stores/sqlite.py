"""The audit log in the gateway's SQLite file (beside the fences and tasks, WAL mode).

The writer's batches go through one kept connection (`storage.loop_sqlite.LoopSqlite`), like the
fences' statements: on the event loop with the URL's `synchronous=NORMAL` (the default), so a
batch never holds the file's write lock while a fence statement waits for it, and costs no
thread hop, new connection or fsync; with `synchronous=FULL` on a worker thread. A batch of rows
is one `BEGIN IMMEDIATE` transaction. Reads, exports and sweeps use `SqliteTable`'s short
connections on worker threads. A trigger refuses UPDATE: rows are only appended, and deleted only
by the retention sweep.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio

from ...storage.database import write_transaction
from ...storage.loop_sqlite import LoopSqlite
from ...storage.tables import SqliteTable
from ..records import COLUMNS, AuditEntry, AuditRow
from ..store import AUDIT_VERSION, AuditQuery, by_id_pages

TABLE = "audit_log"

# Rows deleted per write transaction by the sweep (a few ms of the write lock each).
SWEEP_BATCH_ROWS = 500
_COLS = ", ".join(COLUMNS)
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    id INTEGER PRIMARY KEY AUTOINCREMENT, time INTEGER NOT NULL, principal TEXT NOT NULL, tool TEXT NOT NULL,
    upstream TEXT, effect TEXT NOT NULL, arguments_digest TEXT NOT NULL, arguments TEXT, idempotency_key TEXT,
    approval_by TEXT, approval_how TEXT, approval_at INTEGER, fence_state TEXT NOT NULL, outcome TEXT NOT NULL,
    reason TEXT, latency_ms REAL, trace_id TEXT, span_id TEXT
);
CREATE INDEX IF NOT EXISTS {TABLE}_time ON {TABLE} (time);
CREATE INDEX IF NOT EXISTS {TABLE}_principal ON {TABLE} (principal, id);
CREATE INDEX IF NOT EXISTS {TABLE}_tool ON {TABLE} (tool, id);
CREATE TRIGGER IF NOT EXISTS {TABLE}_append_only BEFORE UPDATE ON {TABLE}
BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END
"""
_INSERT = f"INSERT INTO {TABLE} ({_COLS}) VALUES ({', '.join('?' * len(COLUMNS))})"
_SWEEP = f"DELETE FROM {TABLE} WHERE id IN (SELECT id FROM {TABLE} WHERE time < ? ORDER BY time LIMIT ?)"


class SqliteAuditStore(SqliteTable):
    SCHEMA = _SCHEMA  # the trigger's body keeps its own `;` (`statements`)

    def __init__(self, path: str | Path, *, busy_timeout_ms: int = 10_000, synchronous: str = "NORMAL") -> None:
        super().__init__(path, busy_timeout_ms=busy_timeout_ms, synchronous=synchronous)
        self._writer = LoopSqlite(self.path, synchronous=self.synchronous, busy_timeout_ms=busy_timeout_ms,
                                  name="SQLite audit log")

    @classmethod
    def created(cls, c: sqlite3.Connection) -> None:
        AUDIT_VERSION.sqlite(c, TABLE)

    async def open(self) -> None:
        await super().open()
        await self._writer.open()

    async def close(self) -> None:
        await self._writer.close()
        await super().close()

    async def run_checkpointer(self) -> None:
        """The WAL's checkpoints off the event loop, until cancelled (`LoopSqlite`)."""
        await self._writer.run_checkpointer()

    async def append(self, entries: list[AuditEntry]) -> None:
        rows: list[AuditRow] = [entry.to_row() for entry in entries]
        await self._writer.run(lambda conn: write_transaction(conn, lambda c: c.executemany(_INSERT, rows)))

    async def newest(self, query: AuditQuery, *, before: int | None = None, limit: int = 100) -> list[AuditEntry]:
        clauses, params = query.where(lambda _: "?")
        if before is not None:
            clauses.append("id < ?")
            params.append(before)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        sql = f"SELECT id, {_COLS} FROM {TABLE} {where} ORDER BY id DESC LIMIT ?"
        params.append(int(limit))

        def op(conn: sqlite3.Connection) -> list[AuditEntry]:
            return [AuditEntry.from_row(r) for r in conn.execute(sql, params).fetchall()]

        return await self._db.run(op)

    def oldest_first(self, query: AuditQuery, *, page: int = 1000) -> AsyncIterator[AuditEntry]:
        async def read(after: int) -> list[AuditEntry]:
            clauses, params = query.where(lambda _: "?")
            clauses.append("id > ?")
            params.append(after)
            sql = f"SELECT id, {_COLS} FROM {TABLE} WHERE {' AND '.join(clauses)} ORDER BY id LIMIT ?"
            params.append(int(page))

            def op(conn: sqlite3.Connection) -> list[AuditEntry]:
                return [AuditEntry.from_row(r) for r in conn.execute(sql, params).fetchall()]

            return await self._db.run(op)

        return by_id_pages(read, page)

    async def sweep(self, cutoff: int) -> int:
        """In batches of `SWEEP_BATCH_ROWS` found by the time index, each its own short write
        transaction; after each it rests as long as the batch took, so calls waiting for the file's
        write lock (fences, other rows) get it between batches."""
        total = 0
        while True:
            started = time.monotonic()
            deleted = await self._db.run(
                lambda conn: write_transaction(conn, lambda c: c.execute(_SWEEP, (cutoff, SWEEP_BATCH_ROWS)).rowcount))
            total += deleted
            if deleted < SWEEP_BATCH_ROWS:
                return total
            await anyio.sleep(max(time.monotonic() - started, 0.005))
