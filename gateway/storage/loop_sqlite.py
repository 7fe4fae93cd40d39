"""One kept SQLite connection for a store whose writes are short: the fences' statements, the
audit log's batches.

    writer = LoopSqlite(path, synchronous="NORMAL", busy_timeout_ms=10_000)
    await writer.open(setup)                        # setup(connection): the store's pragmas, schema
    inserted = await writer.run(lambda c: c.execute(sql, params).rowcount == 1)
    await writer.close()

With `synchronous=NORMAL` (the default) in WAL mode a commit is a write(2) without fsync: tens of
microseconds, less than a hop to a worker thread, so `run` calls `fn` on the event loop. `fn` runs
to its end without awaiting, so no other task uses the connection meanwhile, and two such
connections of one process (the fences', the audit log's) never wait for each other: each
statement has finished before the loop runs anything else. SQLite's own busy timeout would sleep
inside the call and stall the loop, so it is 0 here: when another process (a second worker, a CLI)
or a worker-thread connection of this one (a sweep) holds the file's write lock, `fn` fails at
once, before it changed anything (a failed statement or `BEGIN IMMEDIATE` leaves no transaction
open), and `run` waits asynchronously and calls it again, up to `busy_timeout_ms`.

With `synchronous=FULL` or `EXTRA` (an fsync per commit, milliseconds on most disks) `fn` runs on
one worker thread at a time instead, and SQLite's busy timeout does the waiting. A transaction is
never abandoned half-way on cancel: the thread finishes `fn` (commit or rollback) before the
connection is used again.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import anyio
import anyio.to_thread

from ..errors import StoreError

__all__ = ["SYNCHRONOUS_MODES", "LoopSqlite", "is_busy", "synchronous_mode"]

T = TypeVar("T")

SYNCHRONOUS_MODES = ("OFF", "NORMAL", "FULL", "EXTRA")
_FIRST_WAIT = 0.001  # seconds; the event loop's timers are as fine as a millisecond
_LONGEST_WAIT = 0.01


def synchronous_mode(value: str) -> str:
    """`value` as SQLite's `PRAGMA synchronous` takes it; ValueError naming the choices."""
    mode = value.upper()
    if mode not in SYNCHRONOUS_MODES:
        raise ValueError(f"sqlite synchronous must be one of {', '.join(SYNCHRONOUS_MODES)}, not {value!r}")
    return mode


def is_busy(exc: sqlite3.OperationalError) -> bool:
    """The file's lock is held by another connection (SQLITE_BUSY / SQLITE_LOCKED)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    return "locked" in str(exc) or "busy" in str(exc)


class LoopSqlite:
    def __init__(self, path: str | Path, *, synchronous: str = "NORMAL", busy_timeout_ms: int = 10_000,
                 name: str = "SQLite store") -> None:
        self.path = Path(path)
        self.synchronous = synchronous_mode(synchronous)
        self.busy_timeout_ms = busy_timeout_ms
        self.on_loop = self.synchronous in ("OFF", "NORMAL")
        self._name = name
        self._conn: sqlite3.Connection | None = None
        self._limiter = anyio.CapacityLimiter(1)

    @property
    def is_open(self) -> bool:
        return self._conn is not None

    async def open(self, setup: Callable[[sqlite3.Connection], None] = lambda conn: None) -> None:
        """Connect (autocommit: `fn`s issue their own `BEGIN IMMEDIATE` when they need one), set
        the busy timeout and `synchronous`, then `setup(connection)`; on a worker thread."""
        if self._conn is None:
            self._conn = await anyio.to_thread.run_sync(self._connect, setup, limiter=self._limiter)

    def _connect(self, setup: Callable[[sqlite3.Connection], None]) -> sqlite3.Connection:
        # `setup` runs on this thread, so SQLite may wait for the lock there (replicas starting
        # together); afterwards the loop's statements do not wait inside SQLite.
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False,
                               timeout=self.busy_timeout_ms / 1000)
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
            setup(conn)
            if self.on_loop:
                conn.execute("PRAGMA busy_timeout = 0")
        except BaseException:
            conn.close()
            raise
        return conn

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(conn.close, limiter=self._limiter)

    def connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError(f"the {self._name} ({self.path}) is not open")
        return self._conn

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """`fn(connection)`: on the event loop, tried again while the file is busy; or on the
        worker thread (see the module's docstring)."""
        conn = self.connection()
        if not self.on_loop:
            return await anyio.to_thread.run_sync(fn, conn, limiter=self._limiter)
        deadline = time.monotonic() + self.busy_timeout_ms / 1000
        delay = _FIRST_WAIT
        while True:
            try:
                return fn(conn)
            except sqlite3.OperationalError as exc:
                if not is_busy(exc) or time.monotonic() > deadline:
                    raise
            await anyio.sleep(delay)
            delay = min(delay * 2, _LONGEST_WAIT)
