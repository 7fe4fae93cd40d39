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

Checkpoints. SQLite copies the WAL back into the database file inside whichever commit makes the
WAL pass 1,000 pages, fsyncing both files: on the event loop that stopped every task for 1–40 ms
about once per 200 fenced writes on this project's benchmark box (~70 µs per write on average).
While `run_checkpointer()` runs (the gateway starts it under its supervisor) the kept connection's
commits never checkpoint: a worker thread, on a connection of its own, copies the WAL back every
`CHECKPOINT_INTERVAL` (`PRAGMA wal_checkpoint(PASSIVE)`, taking no lock writers wait for) and,
once the WAL holds `RESTART_PAGES`, restarts it from its beginning (`RESTART`: holds the write lock
for the pages committed since and for readers to finish, at most `RESTART_WAIT_MS`; the loop's
statements wait for it asynchronously). A reader holding an older snapshot keeps the WAL growing
until it ends, as it would with SQLite's own checkpoints; restarts it foiled are tried again less
and less often (up to every 5 s), so it costs the writes at most 10 ms per try. When it stops, the
connection checkpoints by itself again, so a store used without it (the CLI) keeps its WAL bounded.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, TypeVar, runtime_checkable

import anyio
import anyio.to_thread

from ..errors import StoreError

__all__ = ["CHECKPOINT_INTERVAL", "RESTART_PAGES", "RESTART_WAIT_MS", "SYNCHRONOUS_MODES", "Checkpointed",
           "LoopSqlite", "is_busy", "synchronous_mode"]

T = TypeVar("T")

SYNCHRONOUS_MODES = ("OFF", "NORMAL", "FULL", "EXTRA")
_FIRST_WAIT = 0.001  # seconds; the event loop's timers are as fine as a millisecond
_LONGEST_WAIT = 0.01
CHECKPOINT_INTERVAL = 0.2  # seconds between the checkpointer's passes
RESTART_PAGES = 1000  # SQLite's own automatic checkpoint threshold (wal_autocheckpoint's default)
RESTART_WAIT_MS = 10  # the longest a restart waits for readers while holding the write lock
_LONGEST_RESTART_PAUSE = 5.0  # seconds without a restart after readers kept the last ones from it


@runtime_checkable
class Checkpointed(Protocol):
    """A store with a kept connection whose WAL checkpoints run in the background (the app starts
    `run_checkpointer` under its supervisor)."""

    async def run_checkpointer(self) -> None: ...


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
        if not self.on_loop:
            return await anyio.to_thread.run_sync(self._call, fn, limiter=self._limiter)
        deadline = time.monotonic() + self.busy_timeout_ms / 1000
        delay = _FIRST_WAIT
        while True:
            try:
                return self._call(fn)
            except sqlite3.OperationalError as exc:
                if not is_busy(exc) or time.monotonic() > deadline:
                    raise
            await anyio.sleep(delay)
            delay = min(delay * 2, _LONGEST_WAIT)

    def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        # The connection is read right before each use, never kept across an await: `close()`
        # forgets it at once and closes it on a worker thread, and a statement on a connection
        # being closed by another thread can crash the process (it did: a segfault in CI).
        return fn(self.connection())

    async def run_checkpointer(self, interval: float = CHECKPOINT_INTERVAL) -> None:
        """Until cancelled: the connection's checkpoints on a worker thread (module docstring).
        With `synchronous=FULL` its commits already run on a worker thread: nothing to do."""
        if not self.on_loop:
            await anyio.sleep_forever()
        conn = self.connection()
        checkpointer = await anyio.to_thread.run_sync(self._checkpoint_connection)
        limiter = anyio.CapacityLimiter(1)
        # RESTART holds the write lock while it waits for readers: after one that readers kept
        # from restarting (a long export, another process's snapshot) the next waits a while.
        pause, restart_after = interval, 0.0
        try:
            if self._conn is not conn:  # closed while the checkpointer connected: nothing to do
                await anyio.sleep_forever()
            conn.execute("PRAGMA wal_autocheckpoint = 0")
            while True:
                await anyio.sleep(interval)
                restarted = await anyio.to_thread.run_sync(
                    _checkpoint, checkpointer, time.monotonic() >= restart_after, limiter=limiter)
                if restarted is False:
                    restart_after = time.monotonic() + pause
                    pause = min(pause * 2, _LONGEST_RESTART_PAUSE)
                elif restarted:
                    pause = interval
        finally:
            if self._conn is conn:
                conn.execute(f"PRAGMA wal_autocheckpoint = {RESTART_PAGES}")
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(checkpointer.close, limiter=limiter)

    def _checkpoint_connection(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {RESTART_WAIT_MS}")
        return conn


def _checkpoint(conn: sqlite3.Connection, restart: bool) -> bool | None:
    """PASSIVE, then RESTART if `restart` and the WAL is long: whether it restarted (None: not
    tried). A checkpoint that finds a lock taken reports busy in its row; it does not raise."""
    _, pages, _ = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    if not restart or pages < RESTART_PAGES:
        return None
    busy, _, _ = conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()
    return not busy
