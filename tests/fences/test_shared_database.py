"""One database, one PostgreSQL pool: the fence store and the connector registrations borrow the
gateway's `Database`; a store made from a bare URL owns its own."""

from __future__ import annotations

import asyncpg
import pytest

from gateway.connectors.storage import PostgresRegistrationStore, StoredRegistration, now_iso, open_registration_store
from gateway.storage.database import Database
from gateway.fences import FenceRecord, FenceState, Owner, open_fence_store
from gateway.fences.stores.postgres import PostgresFenceStore
from gateway.conventions.keys import Effect

pytestmark = pytest.mark.anyio


def record() -> FenceRecord:
    return FenceRecord(
        fence_id="f1", principal="alice", fingerprint="fp", tool="t", effect=Effect.IDEMPOTENT_WRITE,
        state=FenceState.PENDING, owner=Owner("r1", "boot"), lease_until=2000.0, answer=None,
        created_at=1000.0, updated_at=1000.0, attempts=1,
    )


async def backends(pool: asyncpg.Pool, schema: str) -> int:
    """Connections this test's pools hold to the server (application_name marks them)."""
    async with pool.acquire() as conn:
        return int(await conn.fetchval("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", schema))


async def test_fences_and_registrations_share_one_pool(pg_url: str) -> None:
    schema = pg_url.rsplit("schema=", 1)[1]
    url = f"{pg_url}&application_name={schema}&pool_min=2&pool_max=3"
    async with Database(url) as database:
        fences = open_fence_store(database)
        registrations = open_registration_store(database)
        assert isinstance(fences, PostgresFenceStore) and isinstance(registrations, PostgresRegistrationStore)
        async with fences:
            await registrations.open()
            try:
                assert fences.pool is database.pool
                await fences.insert_if_absent(record())
                now = now_iso()
                await registrations.put(StoredRegistration(connector_id="c", filename="c.yaml", manifest="x",
                                                           binding=None, created_at=now, updated_at=now))
                assert await fences.get("f1") == record()
                assert [r.connector_id for r in await registrations.all()] == ["c"]
                # One pool of at most pool_max connections serves both (two pools would hold 2 + 2).
                assert await backends(database.pool, schema) <= 3
            finally:
                await registrations.close()
        # Closing the stores leaves the shared pool to its owner.
        assert await backends(database.pool, schema) >= 1
    with pytest.raises(RuntimeError, match="not open"):
        _ = database.pool


async def test_a_store_from_a_url_owns_its_pool(pg_url: str) -> None:
    store = open_fence_store(pg_url)
    async with store:
        assert isinstance(store, PostgresFenceStore)
        await store.insert_if_absent(record())
    with pytest.raises(RuntimeError, match="not open"):
        await store.get("f1")


async def test_sqlite_and_memory_share_nothing(tmp_path: object) -> None:
    database = Database(f"sqlite:///{tmp_path}/g.db")
    await database.open()  # nothing to open: each SQLite store keeps its own connections
    with pytest.raises(ValueError, match="not a PostgreSQL URL"):
        _ = database.postgres
    async with open_fence_store(database) as store:
        await store.insert_if_absent(record())
        assert await store.get("f1") == record()
    await database.close()
