"""LoopSqlite: the kept connection of the fences and the audit log's writer (gateway/storage/loop_sqlite.py).

A real SQLite file; another connection holds its write lock, as another process or a sweep would.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import anyio
import pytest

from gateway.audit.stores.sqlite import SqliteAuditStore
from gateway.errors import StoreError
from gateway.storage.loop_sqlite import LoopSqlite

pytestmark = pytest.mark.anyio


def _setup(conn: sqlite3.Connection) -> None:
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE IF NOT EXISTS t (v INTEGER)")


def _insert(conn: sqlite3.Connection) -> int:
    return conn.execute("INSERT INTO t (v) VALUES (1)").rowcount


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


async def test_the_audit_store_takes_synchronous_from_the_url(tmp_path: Path) -> None:
    default = SqliteAuditStore.from_url(f"sqlite:///{tmp_path}/a.db")
    full = SqliteAuditStore.from_url(f"sqlite:///{tmp_path}/a.db?synchronous=FULL")
    assert default.synchronous == "NORMAL" and full.synchronous == "FULL"
    with pytest.raises(ValueError, match="synchronous"):
        SqliteAuditStore.from_url(f"sqlite:///{tmp_path}/a.db?synchronous=maybe")
