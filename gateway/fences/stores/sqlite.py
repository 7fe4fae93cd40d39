"""The embedded fence store: one SQLite file in WAL mode.

Durability choice: `synchronous=NORMAL` in WAL mode. A commit is written to the WAL with
write(2) before `COMMIT` returns, so it is in the OS page cache and survives the gateway
process being killed at any instant (the crash the fences exist for). Only an OS crash or
power loss can drop the last commits, because the WAL is fsynced at checkpoints rather
than at every commit. Deployments that need that guarantee too set `?synchronous=FULL`
in the URL (an fsync per commit, a few ms on most disks).

All SQL runs on one kept connection (`storage.loop_sqlite.LoopSqlite`): on the event loop, or
with `synchronous=FULL` on one worker thread at a time. Every write is one statement in autocommit
(a claim that finds the key taken reads the row with a second one): a writing statement takes
the write lock as it starts, before it reads, like `BEGIN IMMEDIATE`, so two processes on one
file never act on a stale read, and a busy file makes it wait and try again. Sweeps, which
delete in batches, use `BEGIN IMMEDIATE` transactions of their own.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import anyio
import anyio.to_thread

from ...protocol import Result
from ...storage.database import write_transaction
from ...errors import StoreError
from ...storage.loop_sqlite import LoopSqlite
from ...storage.private_files import private_file
from ...storage.urls import parse_sqlite_url
from ..records import (
    COLUMNS,
    FenceRecord,
    FenceState,
    FenceStats,
    Owner,
    dump_answer,
    record_from_row,
    record_to_row,
)

SCHEMA_VERSION = 1
_COLS = ", ".join(COLUMNS)
_HELD = "fence_id = ? AND state = 'pending' AND owner_replica = ? AND owner_boot = ? AND attempts = ?"


# Rows deleted per write transaction by a sweep or purge (a few ms of write lock each).
SWEEP_BATCH_ROWS = 500
# Free pages given back to the file system per transaction after a sweep (4 MiB of 4 KiB pages).
VACUUM_PAGES = 1000
_SWEEPS = tuple(
    f"DELETE FROM fences WHERE fence_id IN (SELECT fence_id FROM fences WHERE state = '{state}' AND updated_at < ?1"
    f"{extra} LIMIT ?2)"
    for state, extra in (("done", ""), ("unknown", ""), ("pending", " AND lease_until < ?1"))
)

_SCHEMA_V1 = """
CREATE TABLE IF NOT EXISTS fences (
    fence_id      TEXT PRIMARY KEY,
    principal     TEXT NOT NULL,
    fingerprint   TEXT NOT NULL,
    tool          TEXT NOT NULL,
    effect        TEXT NOT NULL,
    state         TEXT NOT NULL CHECK (state IN ('pending', 'done', 'unknown')),
    owner_replica TEXT,
    owner_boot    TEXT,
    lease_until   REAL,
    answer        TEXT,
    created_at    REAL NOT NULL,
    updated_at    REAL NOT NULL,
    attempts      INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS fences_state_updated ON fences (state, updated_at);
"""


class SqliteFenceStore:
    # Busy or locked database, disk I/O; StoreError: used while not open (e.g. at shutdown).
    transient_errors: tuple[type[BaseException], ...] = (sqlite3.OperationalError, OSError, StoreError)
    def __init__(self, path: str | Path, *, synchronous: str = "NORMAL", busy_timeout_ms: int = 10_000) -> None:
        # With synchronous=NORMAL a WAL commit writes without fsync, so statements run on the
        # event loop and lock waits are asynchronous; FULL keeps a worker thread (loop_sqlite.py).
        self._db = LoopSqlite(path, synchronous=synchronous, busy_timeout_ms=busy_timeout_ms, name="SQLite fence store")
        self._claim = f"INSERT INTO fences ({_COLS}) VALUES ({', '.join('?' * len(COLUMNS))}) ON CONFLICT (fence_id) DO NOTHING"
        self._read = f"SELECT {_COLS} FROM fences WHERE fence_id = ?"

    @property
    def path(self) -> Path:
        return self._db.path

    @property
    def synchronous(self) -> str:
        return self._db.synchronous

    @property
    def busy_timeout_ms(self) -> int:
        return self._db.busy_timeout_ms

    @classmethod
    def from_url(cls, url: str) -> "SqliteFenceStore":
        parsed = parse_sqlite_url(url)
        options = parsed.options
        unknown = set(options) - {"synchronous", "busy_timeout_ms"}
        if unknown:
            raise ValueError(f"unknown sqlite fence store options: {', '.join(sorted(unknown))}")
        return cls(
            parsed.path,
            synchronous=options.get("synchronous", "NORMAL"),
            busy_timeout_ms=int(options.get("busy_timeout_ms", 10_000)),
        )

    # -- lifecycle ---------------------------------------------------------------------

    async def open(self) -> None:
        if not self._db.is_open:
            private_file(self.path)
            await self._db.open(self._migrate)

    def _migrate(self, conn: sqlite3.Connection) -> None:
        # A new file gives the pages its sweeps free back to the file system (`sweep`); on an
        # existing file it takes effect at the next VACUUM (docs/fences.md).
        conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise RuntimeError(f"could not put {self.path} in WAL mode (got {mode!r})")

        def create(c: sqlite3.Connection) -> None:
            version = c.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise RuntimeError(
                    f"fence store {self.path} has schema version {version}; this gateway knows up to {SCHEMA_VERSION}"
                )
            if version < SCHEMA_VERSION:
                # One statement at a time: executescript() would COMMIT our transaction.
                for statement in filter(None, (s.strip() for s in _SCHEMA_V1.split(";"))):
                    c.execute(statement)
                c.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

        write_transaction(conn, create)

    async def close(self) -> None:
        await self._db.close()

    async def run_checkpointer(self) -> None:
        """The WAL's checkpoints off the event loop, until cancelled (`LoopSqlite`)."""
        await self._db.run_checkpointer()

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # -- plumbing ----------------------------------------------------------------------

    @staticmethod
    def _update(conn: sqlite3.Connection, sql: str, params: tuple[Any, ...]) -> bool:
        # One statement in autocommit is its own transaction, and a writing statement takes the
        # write lock as it starts (before it reads), as BEGIN IMMEDIATE would: no BEGIN/COMMIT
        # round of its own needed.
        return conn.execute(sql, params).rowcount == 1

    # -- operations --------------------------------------------------------------------

    async def insert_if_absent(self, record: FenceRecord) -> tuple[bool, FenceRecord]:
        row = record_to_row(record)

        def op(conn: sqlite3.Connection) -> tuple[bool, FenceRecord] | None:
            # The insert is one autocommit statement (see `_update`); on a conflict the row is read
            # by a second one, and is gone only if deleted in between (swept, or released by its
            # owner): then claim again.
            if conn.execute(self._claim, row).rowcount == 1:
                return True, record
            existing = conn.execute(self._read, (record.fence_id,)).fetchone()
            return None if existing is None else (False, record_from_row(existing))

        while True:
            found = await self._db.run(op)
            if found is not None:
                return found

    async def get(self, fence_id: str) -> FenceRecord | None:
        def op(conn: sqlite3.Connection) -> FenceRecord | None:
            row = conn.execute(self._read, (fence_id,)).fetchone()
            return None if row is None else record_from_row(row)

        return await self._db.run(op)

    async def take_over(
        self, fence_id: str, *, expected: Owner, attempts: int, owner: Owner, lease_until: float, now: float
    ) -> bool:
        sql = f"UPDATE fences SET owner_replica = ?, owner_boot = ?, lease_until = ?, attempts = attempts + 1, updated_at = ? WHERE {_HELD}"
        params = (owner.replica_id, owner.boot_id, lease_until, now, fence_id, expected.replica_id, expected.boot_id, attempts)
        return await self._db.run(lambda conn: self._update(conn, sql, params))

    async def renew(self, fence_id: str, *, owner: Owner, attempts: int, lease_until: float, now: float) -> bool:
        sql = f"UPDATE fences SET lease_until = ?, updated_at = ? WHERE {_HELD}"
        params = (lease_until, now, fence_id, owner.replica_id, owner.boot_id, attempts)
        return await self._db.run(lambda conn: self._update(conn, sql, params))

    async def finish(
        self,
        fence_id: str,
        *,
        expected: Owner,
        attempts: int,
        state: FenceState,
        answer: Result | None,
        now: float,
    ) -> bool:
        if state is FenceState.PENDING:
            raise ValueError("finish() moves a fence to done or unknown, not pending")
        sql = f"UPDATE fences SET state = ?, answer = ?, lease_until = NULL, updated_at = ? WHERE {_HELD}"
        params = (state.value, dump_answer(answer), now, fence_id, expected.replica_id, expected.boot_id, attempts)
        return await self._db.run(lambda conn: self._update(conn, sql, params))

    async def delete_if_owner(self, fence_id: str, *, owner: Owner, attempts: int) -> bool:
        sql = f"DELETE FROM fences WHERE {_HELD}"
        params = (fence_id, owner.replica_id, owner.boot_id, attempts)
        return await self._db.run(lambda conn: self._update(conn, sql, params))

    async def sweep(self, cutoff: float) -> int:
        """In batches of `SWEEP_BATCH_ROWS` found by the (state, updated_at) index, each its own
        short write transaction on a connection of its own in a worker thread (never on the event
        loop); after each batch it rests as long as the batch took, so calls waiting for the write
        lock get it between batches. A pending fence's lease ends after its last update, so
        `lease_until < cutoff` implies `updated_at < cutoff`: the index finds those too."""
        self._db.connection()  # StoreError when not open
        total = 0
        conn = await anyio.to_thread.run_sync(self._housekeeping_connection)
        try:
            for sql in _SWEEPS:
                while True:
                    started = time.monotonic()
                    deleted = await anyio.to_thread.run_sync(self._sweep_batch, conn, sql, cutoff)
                    total += deleted
                    if deleted < SWEEP_BATCH_ROWS:
                        break
                    await anyio.sleep(max(time.monotonic() - started, 0.005))
            if total:
                await self._give_back(conn)
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(conn.close)
        return total

    def _housekeeping_connection(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=self.busy_timeout_ms / 1000)
        conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")
        conn.execute(f"PRAGMA synchronous = {self.synchronous}")
        return conn

    async def _give_back(self, conn: sqlite3.Connection) -> None:
        """Return the pages the sweep freed to the file system, `VACUUM_PAGES` at a time, when the
        file is in incremental auto-vacuum mode (new files are; older ones after one VACUUM)."""
        if (await anyio.to_thread.run_sync(lambda: conn.execute("PRAGMA auto_vacuum").fetchone()[0])) != 2:
            return
        while (await anyio.to_thread.run_sync(lambda: conn.execute("PRAGMA freelist_count").fetchone()[0])) > 0:
            started = time.monotonic()
            # Its own transaction; executescript steps the pragma to its end (execute() frees one page).
            await anyio.to_thread.run_sync(lambda: conn.executescript(f"PRAGMA incremental_vacuum({VACUUM_PAGES});"))
            await anyio.sleep(max(time.monotonic() - started, 0.005))
        await anyio.to_thread.run_sync(lambda: conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall())

    @staticmethod
    def _sweep_batch(conn: sqlite3.Connection, sql: str, cutoff: float) -> int:
        return write_transaction(conn, lambda c: c.execute(sql, (cutoff, SWEEP_BATCH_ROWS)).rowcount)

    async def ping(self) -> None:
        """One indexed probe: the file is open and readable (no scan, whatever its size)."""
        await self._db.run(lambda conn: conn.execute("SELECT 1 FROM fences LIMIT 1").fetchall())

    async def stats(self) -> FenceStats:
        def op(conn: sqlite3.Connection) -> FenceStats:
            counts = dict(conn.execute("SELECT state, count(*) FROM fences GROUP BY state").fetchall())
            oldest, newest = conn.execute("SELECT min(updated_at), max(updated_at) FROM fences").fetchone()
            return FenceStats(
                total=sum(counts.values()),
                pending=counts.get("pending", 0),
                done=counts.get("done", 0),
                unknown=counts.get("unknown", 0),
                oldest_updated_at=oldest,
                newest_updated_at=newest,
            )

        return await self._db.run(op)

    async def list_records(
        self, *, state: FenceState | None = None, principal: str | None = None, limit: int = 100
    ) -> list[FenceRecord]:
        where: list[str] = []
        params: list[Any] = []
        if state is not None:
            where.append("state = ?")
            params.append(state.value)
        if principal is not None:
            where.append("principal = ?")
            params.append(principal)
        sql = f"SELECT {_COLS} FROM fences {'WHERE ' + ' AND '.join(where) if where else ''} ORDER BY updated_at DESC LIMIT ?"
        params.append(int(limit))

        def op(conn: sqlite3.Connection) -> list[FenceRecord]:
            return [record_from_row(r) for r in conn.execute(sql, params).fetchall()]

        return await self._db.run(op)

