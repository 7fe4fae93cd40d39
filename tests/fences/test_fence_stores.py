"""The store contract itself, on the durable stores (SQLite file, PostgreSQL schema)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio
import asyncpg
import pytest

from gateway.conventions.keys import Effect
from gateway.errors import StoreError
from gateway.fences import FenceRecord, FenceState, Owner, open_fence_store
from gateway.fences.stores.memory import MemoryFenceStore
from gateway.fences.stores.postgres import PostgresFenceStore
from gateway.fences.stores.sqlite import SqliteFenceStore

pytestmark = pytest.mark.anyio

A = Owner("r1", "boot-a")
B = Owner("r2", "boot-b")


def pending(fid: str = "f1", owner: Owner = A, now: float = 1000.0) -> FenceRecord:
    return FenceRecord(
        fence_id=fid, principal="alice", fingerprint="fp", tool="t", effect=Effect.IDEMPOTENT_WRITE,
        state=FenceState.PENDING, owner=owner, lease_until=now + 15, answer=None,
        created_at=now, updated_at=now, attempts=1,
    )


async def test_insert_if_absent_and_cas_primitives(durable_url: str) -> None:
    async with open_fence_store(durable_url) as store:
        rec = pending()
        assert await store.insert_if_absent(rec) == (True, rec)
        other = pending(owner=B, now=2000.0)
        inserted, existing = await store.insert_if_absent(other)
        assert not inserted and existing == rec
        # Wrong owner or wrong attempts: every CAS refuses and changes nothing.
        assert not await store.renew("f1", owner=B, attempts=1, lease_until=9e9, now=1)
        assert not await store.renew("f1", owner=A, attempts=2, lease_until=9e9, now=1)
        assert not await store.take_over("f1", expected=B, attempts=1, owner=B, lease_until=9e9, now=1)
        assert not await store.finish("f1", expected=A, attempts=7, state=FenceState.DONE, answer={}, now=1)
        assert not await store.delete_if_owner("f1", owner=Owner("r1", "boot-x"), attempts=1)
        assert await store.get("f1") == rec
        # The right one succeeds once.
        assert await store.renew("f1", owner=A, attempts=1, lease_until=1100.0, now=1010.0)
        assert await store.take_over("f1", expected=A, attempts=1, owner=B, lease_until=1200.0, now=1020.0)
        assert not await store.take_over("f1", expected=A, attempts=1, owner=B, lease_until=1200.0, now=1020.0)
        got = await store.get("f1")
        assert got is not None and (got.owner, got.attempts, got.lease_until, got.updated_at) == (B, 2, 1200.0, 1020.0)
        answer = {"content": [{"type": "text", "text": "ünïcødé ✓"}], "isError": False, "_meta": {"z": 1, "a": 2}}
        assert await store.finish("f1", expected=B, attempts=2, state=FenceState.DONE, answer=answer, now=1030.0)
        done = await store.get("f1")
        assert done is not None and done.state is FenceState.DONE and done.lease_until is None
        assert done.answer == answer and list(done.answer["_meta"]) == ["z", "a"]  # order kept
        # Finished fences are no longer pending: no CAS applies.
        assert not await store.delete_if_owner("f1", owner=B, attempts=2)
        assert not await store.finish("f1", expected=B, attempts=2, state=FenceState.UNKNOWN, answer=None, now=1)
        with pytest.raises(ValueError):
            await store.finish("f1", expected=B, attempts=2, state=FenceState.PENDING, answer=None, now=1)
        assert await store.get("missing") is None


async def test_delete_if_owner(durable_url: str) -> None:
    async with open_fence_store(durable_url) as store:
        await store.insert_if_absent(pending())
        assert await store.delete_if_owner("f1", owner=A, attempts=1)
        assert await store.get("f1") is None
        assert (await store.insert_if_absent(pending(owner=B)))[0]


async def test_stats_and_list_on_empty_store(durable_url: str) -> None:
    async with open_fence_store(durable_url) as store:
        s = await store.stats()
        assert (s.total, s.pending, s.done, s.unknown, s.oldest_updated_at) == (0, 0, 0, 0, None)
        assert await store.list_records() == []


async def test_concurrent_open_and_reopen_keep_data(durable_url: str) -> None:
    stores = [open_fence_store(durable_url) for _ in range(4)]
    async with anyio.create_task_group() as tg:
        for s in stores:
            tg.start_soon(s.open)
    await stores[0].insert_if_absent(pending())
    for s in stores:
        assert await s.get("f1") == pending()
        await s.close()
    async with open_fence_store(durable_url) as again:
        assert await again.get("f1") == pending()


async def test_newer_schema_version_is_refused(durable_url: str) -> None:
    async with open_fence_store(durable_url) as store:
        pass
    if isinstance(store, SqliteFenceStore):
        with sqlite3.connect(store.path) as conn:
            conn.execute("PRAGMA user_version = 99")
    else:
        assert isinstance(store, PostgresFenceStore)
        conn = await asyncpg.connect(store.dsn)
        await conn.execute(f'UPDATE "{store.schema}".dex_fences_schema SET version = 99')
        await conn.close()
    with pytest.raises(RuntimeError, match="version 99"):
        await open_fence_store(durable_url).open()


async def test_sqlite_file_is_wal(sqlite_url: str) -> None:
    async with open_fence_store(sqlite_url) as store:
        assert isinstance(store, SqliteFenceStore)
        with sqlite3.connect(store.path) as conn:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_store_urls(tmp_path: Path) -> None:
    assert isinstance(open_fence_store("memory://"), MemoryFenceStore)
    rel = open_fence_store("sqlite:///data/fences.db")
    assert isinstance(rel, SqliteFenceStore) and rel.path == Path("data/fences.db")
    absolute = open_fence_store(f"sqlite:///{tmp_path}/f.db?synchronous=FULL&busy_timeout_ms=500")
    assert isinstance(absolute, SqliteFenceStore)
    assert absolute.path == tmp_path / "f.db" and absolute.synchronous == "FULL" and absolute.busy_timeout_ms == 500
    with pytest.raises(ValueError, match="unknown sqlite"):
        open_fence_store("sqlite:///f.db?journal=x")
    with pytest.raises(ValueError, match="needs a path"):
        open_fence_store("sqlite://")
    pg = open_fence_store("postgresql://u@127.0.0.1:5432/db?schema=dex&pool_max=3&sslmode=disable")
    assert isinstance(pg, PostgresFenceStore)
    assert (pg.schema, pg.pool_max) == ("dex", 3) and pg.dsn == "postgresql://u@127.0.0.1:5432/db?sslmode=disable"
    with pytest.raises(ValueError, match="schema"):
        open_fence_store("postgresql://u@h/db?schema=a;drop")
    with pytest.raises(ValueError, match="unsupported"):
        open_fence_store("redis://x")


async def test_unopened_store_says_so(sqlite_url: str) -> None:
    # StoreError: one of the store's transient errors (a store closed at shutdown is tried again).
    with pytest.raises(StoreError, match="not open"):
        await open_fence_store(sqlite_url).get("f1")
