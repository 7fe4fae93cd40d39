"""LoopSqlite: the kept connection of the fences and the audit log's writer (gateway/storage/loop_sqlite.py).

A real SQLite file; another connection holds its write lock, as another process or a sweep would.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from gateway.audit.stores.sqlite import SqliteAuditStore
from gateway.errors import StoreError
from gateway.storage.loop_sqlite import RESTART_PAGES, LoopSqlite

pytestmark = pytest.mark.anyio


def _setup(conn: sqlite3.Connection) -> None:
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE IF NOT EXISTS t (v)")


def _insert(conn: sqlite3.Connection) -> int:
    return conn.execute("INSERT INTO t (v) VALUES (1)").rowcount


PAGE = 4096


def _insert_page(conn: sqlite3.Connection) -> None:
    # A row bigger than a page: each commit appends at least one page to the WAL.
    conn.execute("INSERT INTO t (v) VALUES (?)", (b"x" * PAGE,))


def _wal_pages(path: Path) -> int:
    wal = path.with_name(path.name + "-wal")
    return wal.stat().st_size // PAGE if wal.exists() else 0


def _autocheckpoint(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0])


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[LoopSqlite]:
    """An open LoopSqlite (synchronous=NORMAL) on a new WAL file, closed after the test."""
    kept = LoopSqlite(tmp_path / "x.db")
    await kept.open(_setup)
    try:
        yield kept
    finally:
        await kept.close()


def _hold_write_lock(path: Path) -> sqlite3.Connection:
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    return other


async def test_normal_runs_on_the_loop_and_waits_for_a_busy_file_without_blocking_it(tmp_path: Path) -> None:
    db = LoopSqlite(tmp_path / "x.db", busy_timeout_ms=5_000)
    await db.open(_setup)
    try:
        assert db.on_loop
        assert await db.run(lambda conn: threading.get_ident()) == threading.get_ident()
        other = _hold_write_lock(db.path)
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await anyio.sleep(0.005)

        async def release_later() -> None:
            await anyio.sleep(0.2)
            other.execute("COMMIT")

        async with anyio.create_task_group() as tg:
            tg.start_soon(ticker)
            tg.start_soon(release_later)
            started = time.monotonic()
            assert await db.run(_insert) == 1
            waited = time.monotonic() - started
            tg.cancel_scope.cancel()
        other.close()
        assert waited >= 0.15
        assert ticks >= 10  # the loop ran other tasks while the statement waited for the lock
    finally:
        await db.close()


async def test_a_lock_held_past_the_busy_timeout_fails_with_sqlites_error(tmp_path: Path) -> None:
    db = LoopSqlite(tmp_path / "x.db", busy_timeout_ms=100)
    await db.open(_setup)
    other = _hold_write_lock(db.path)
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            await db.run(_insert)
    finally:
        other.close()
        await db.close()


async def test_full_runs_on_a_worker_thread(tmp_path: Path) -> None:
    db = LoopSqlite(tmp_path / "x.db", synchronous="full")
    await db.open(_setup)
    try:
        assert not db.on_loop and db.synchronous == "FULL"
        assert await db.run(lambda conn: threading.get_ident()) != threading.get_ident()
        assert await db.run(lambda conn: conn.execute("PRAGMA synchronous").fetchone()[0]) == 2
        assert await db.run(_insert) == 1
    finally:
        await db.close()


async def test_unopened_or_closed_says_so_and_a_bad_mode_is_named(tmp_path: Path) -> None:
    db = LoopSqlite(tmp_path / "x.db", name="test store")
    with pytest.raises(StoreError, match="test store .* is not open"):
        await db.run(_insert)
    await db.open(_setup)
    await db.close()
    with pytest.raises(StoreError, match="not open"):
        await db.run(_insert)
    with pytest.raises(ValueError, match="synchronous must be one of OFF, NORMAL, FULL, EXTRA, not 'sometimes'"):
        LoopSqlite(tmp_path / "x.db", synchronous="sometimes")


async def test_a_statement_waiting_for_the_lock_when_the_store_closes_never_uses_the_closed_connection(
        tmp_path: Path) -> None:
    # The app closes its stores while background loops still run: a statement retrying on a busy
    # file must not use the connection `close()` is closing on another thread (a crash in CI).
    db = LoopSqlite(tmp_path / "x.db", busy_timeout_ms=5_000, name="test store")
    await db.open(_setup)
    other = _hold_write_lock(db.path)
    failed: list[BaseException] = []

    async def insert() -> None:
        try:
            await db.run(_insert)
        except Exception as exc:  # noqa: BLE001 - what it raised is the assertion
            failed.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(insert)
        await anyio.sleep(0.05)  # retrying: the file is busy
        await db.close()
        other.execute("COMMIT")
    other.close()
    assert [type(e) for e in failed] == [StoreError] and "test store" in str(failed[0])


class _SlowToConnect(LoopSqlite):
    def _checkpoint_connection(self) -> sqlite3.Connection:
        time.sleep(0.2)  # the store closes meanwhile
        return super()._checkpoint_connection()


async def test_a_store_closed_while_the_checkpointer_starts_is_left_alone(tmp_path: Path) -> None:
    db = _SlowToConnect(tmp_path / "x.db")
    await db.open(_setup)
    outcome: list[str] = []

    async def checkpointer() -> None:
        try:
            await db.run_checkpointer(interval=0.01)
        except anyio.get_cancelled_exc_class():
            outcome.append("cancelled")
            raise
        except Exception as exc:  # noqa: BLE001 - what it raised is the assertion
            outcome.append(repr(exc))

    async with anyio.create_task_group() as tg:
        tg.start_soon(checkpointer)
        await anyio.sleep(0.05)  # connecting its own connection on a worker thread
        await db.close()
        await anyio.sleep(0.3)
        tg.cancel_scope.cancel()
    assert outcome == ["cancelled"]  # not "Cannot operate on a closed database"


async def test_the_audit_store_takes_synchronous_from_the_url(tmp_path: Path) -> None:
    default = SqliteAuditStore.from_url(f"sqlite:///{tmp_path}/a.db")
    full = SqliteAuditStore.from_url(f"sqlite:///{tmp_path}/a.db?synchronous=FULL")
    assert default.synchronous == "NORMAL" and full.synchronous == "FULL"
    with pytest.raises(ValueError, match="synchronous"):
        SqliteAuditStore.from_url(f"sqlite:///{tmp_path}/a.db?synchronous=maybe")


async def test_without_the_checkpointer_commits_checkpoint_by_themselves(db: LoopSqlite) -> None:
    """The baseline the next test departs from: SQLite's automatic checkpoint keeps the WAL near
    1,000 pages (inside a commit, i.e. on the event loop)."""
    for _ in range(2 * RESTART_PAGES):
        await db.run(_insert_page)
    assert _wal_pages(db.path) < 1.5 * RESTART_PAGES
    assert await db.run(_autocheckpoint) == RESTART_PAGES


async def test_while_the_checkpointer_runs_no_commit_on_the_loop_checkpoints(db: LoopSqlite) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: db.run_checkpointer(3600))  # its first pass never comes
        await anyio.sleep(0.1)
        assert await db.run(_autocheckpoint) == 0
        for _ in range(2 * RESTART_PAGES):
            await db.run(_insert_page)
        assert _wal_pages(db.path) >= 2 * RESTART_PAGES  # nothing copied back, nothing restarted
        tg.cancel_scope.cancel()
    assert await db.run(_autocheckpoint) == RESTART_PAGES  # on its own again once it stopped


async def test_the_checkpointer_copies_and_restarts_the_wal_off_the_loop(db: LoopSqlite) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: db.run_checkpointer(0.02))
        await anyio.sleep(0.1)
        for i in range(6 * RESTART_PAGES):
            await db.run(_insert_page)
            if i % 25 == 0:
                await anyio.sleep(0.005)  # a gateway's loop is not a tight loop of commits
        await anyio.sleep(0.2)
        tg.cancel_scope.cancel()
    # Restarted over and over: the file never held all the pages written (a busy box lets
    # it run past the threshold before a pass comes).
    assert _wal_pages(db.path) < 4 * RESTART_PAGES
    with sqlite3.connect(db.path) as other:
        assert other.execute("SELECT count(*) FROM t").fetchone()[0] == 6 * RESTART_PAGES


async def test_a_long_reader_keeps_the_wal_from_restarting_but_never_holds_the_writes(db: LoopSqlite) -> None:
    await db.run(_insert_page)
    reader = sqlite3.connect(db.path, isolation_level=None, check_same_thread=False)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM t").fetchone()  # a snapshot the restart must wait for
    slowest = 0.0
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: db.run_checkpointer(0.01))
            for i in range(3 * RESTART_PAGES):
                started = time.monotonic()
                await db.run(_insert_page)
                slowest = max(slowest, time.monotonic() - started)
                if i % 20 == 0:
                    await anyio.sleep(0.001)  # the checkpointer's passes run meanwhile
            grown = _wal_pages(db.path)
            tg.cancel_scope.cancel()
        assert grown >= 3 * RESTART_PAGES  # the reader's snapshot pinned the WAL
        assert slowest < 0.3  # a restart holds the write lock 10 ms at most waiting for the reader
    finally:
        reader.close()


async def test_with_full_the_checkpointer_leaves_the_commits_to_checkpoint(tmp_path: Path) -> None:
    db = LoopSqlite(tmp_path / "x.db", synchronous="FULL")
    await db.open(_setup)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(db.run_checkpointer)
            await anyio.sleep(0.05)
            assert await db.run(_autocheckpoint) == RESTART_PAGES  # they run on a worker thread already
            tg.cancel_scope.cancel()
    finally:
        await db.close()
