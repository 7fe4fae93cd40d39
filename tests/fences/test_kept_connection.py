"""The fence store's kept connection (gateway/storage/kept_connection.py) on the machine's PostgreSQL:
statements in turn share one backend, overlapping ones use the pool, and anything wrong with the
kept connection hands it back to the pool, which closes with every connection returned."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import asyncpg
import pytest

from gateway.conventions.keys import Effect
from gateway.fences import FenceState, Fences, Owner, Proceed
from gateway.fences.stores.postgres import PostgresFenceStore
from gateway.fences.store import open_fence_store
from gateway.storage.kept_connection import KeptConnection
from tests.support.postgres import PG_URL, unreachable_reason

pytestmark = pytest.mark.anyio

# What a statement on a connection the server has just ended may raise before the client saw it
# go: through the pool too, a statement sent right after pg_terminate_backend failed 6 times in 20
# with InternalClientError ("another operation is in progress") and ran on a new backend otherwise.
CONNECTION_ERRORS = PostgresFenceStore.transient_errors


@asynccontextmanager
async def pool_of(max_size: int) -> AsyncIterator[asyncpg.Pool]:
    reason = await unreachable_reason()
    if reason:
        pytest.skip(reason)
    pool = await asyncpg.create_pool(PG_URL, min_size=1, max_size=max_size)
    try:
        yield pool
    finally:
        # A connection never handed back would keep this waiting (asyncpg warns after 60 s).
        with anyio.fail_after(10):
            await pool.close()


@pytest.fixture
async def pool() -> AsyncIterator[asyncpg.Pool]:
    async with pool_of(4) as pool:
        yield pool


async def backend(kept: KeptConnection, extra: str = "") -> int:
    return int((await kept.fetchrow(f"SELECT pg_backend_pid(){extra}"))[0])


async def all_returned(pool: asyncpg.Pool) -> bool:
    return pool.get_idle_size() == pool.get_size()


async def test_statements_in_turn_share_one_backend_and_overlapping_ones_use_the_pool(pool: asyncpg.Pool) -> None:
    kept = KeptConnection(lambda: pool)
    first = await backend(kept)
    assert await backend(kept) == first
    assert await kept.execute("SELECT 1") == "SELECT 1"
    assert [tuple(r) for r in await kept.fetch("SELECT 1 UNION ALL SELECT 2")] == [(1,), (2,)]
    assert pool.get_idle_size() == pool.get_size() - 1  # kept out of the pool while in use

    seen: dict[str, int] = {}

    async def slow() -> None:
        seen["slow"] = await backend(kept, ", pg_sleep(0.3)")

    async with anyio.create_task_group() as tg:
        tg.start_soon(slow)
        await anyio.sleep(0.05)
        seen["overlapping"] = await backend(kept)
    assert seen["slow"] == first
    assert seen["overlapping"] != first  # the kept one was busy: the pool answered

    await kept.close()
    assert await all_returned(pool)


async def test_a_backend_the_server_ended_is_handed_back_and_replaced(pool: asyncpg.Pool) -> None:
    kept = KeptConnection(lambda: pool)
    first = await backend(kept)
    admin = await asyncpg.connect(PG_URL)
    try:
        assert await admin.fetchval("SELECT pg_terminate_backend($1)", first)
    finally:
        await admin.close()
    # The next statement runs on a new backend, or fails if it went out before the client saw the
    # connection end; the one after that runs on a new backend.
    try:
        second = await backend(kept)
    except CONNECTION_ERRORS:
        second = await backend(kept)
    assert second != first
    assert await backend(kept) == second
    await kept.close()
    assert await all_returned(pool)


async def test_a_cancelled_statement_hands_the_connection_back_and_stops_on_the_server(pool: asyncpg.Pool) -> None:
    kept = KeptConnection(lambda: pool)
    first = await backend(kept)
    with anyio.move_on_after(0.2) as scope:
        await kept.fetchrow("SELECT pg_sleep(30)")
    assert scope.cancelled_caught
    started = time.monotonic()
    assert await backend(kept) > 0  # the next statement runs at once
    assert time.monotonic() - started < 5
    admin = await asyncpg.connect(PG_URL)
    try:
        sleeping = await admin.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND state = 'active' AND query LIKE '%pg_sleep(30)%'",
            first,
        )
    finally:
        await admin.close()
    assert sleeping == 0  # the server stopped it (asyncpg's cancel request), not left it running
    await kept.close()
    assert await all_returned(pool)


async def test_handed_back_after_recycle_after_statements(pool: asyncpg.Pool) -> None:
    kept = KeptConnection(lambda: pool, recycle_after=3)
    await backend(kept)
    await backend(kept)
    assert pool.get_idle_size() == pool.get_size() - 1
    await backend(kept)
    assert await all_returned(pool)  # the pool's own recycling (max_queries) sees it again
    await backend(kept)  # and the next statement keeps one again
    assert pool.get_idle_size() == pool.get_size() - 1
    await kept.close()


async def test_close_while_a_statement_runs_hands_it_back_as_it_ends(pool: asyncpg.Pool) -> None:
    kept = KeptConnection(lambda: pool)
    result: list[int] = []

    async def slow() -> None:
        result.append(await backend(kept, ", pg_sleep(0.3)"))

    async with anyio.create_task_group() as tg:
        tg.start_soon(slow)
        await anyio.sleep(0.05)
        await kept.close()
        assert not await all_returned(pool)  # still running on it
    assert result and await all_returned(pool)
    # Closed: statements still run, through the pool, and keep nothing.
    assert await backend(kept) > 0
    assert await all_returned(pool)


async def end_backends(application_name: str) -> int:
    """pg_terminate_backend on every connection with this application_name (one test's store)."""
    admin = await asyncpg.connect(PG_URL)
    try:
        return int(await admin.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1", application_name
        ))
    finally:
        await admin.close()


async def test_an_answer_is_stored_when_postgresql_ended_the_stores_connections_after_the_claim(pg_url: str) -> None:
    # The finish's first try may meet the ended connection (the race above); it is a transient
    # error, so the fence tries again on another connection and the answer is stored.
    schema = pg_url.rsplit("schema=", 1)[1]
    store = open_fence_store(f"{pg_url}&application_name={schema}")
    async with store:
        fences = Fences(store, Owner.fresh("kept-test"))
        for i in range(8):
            begun = await fences.begin(principal="p", key=f"k{i}", tool="t", arguments={"i": i},
                                       effect=Effect.NON_IDEMPOTENT_WRITE)
            assert isinstance(begun, Proceed)
            assert await end_backends(schema) >= 1
            assert await fences.complete(begun.ticket, {"content": [], "isError": False})
            stored = await store.get(begun.ticket.fence_id)
            assert stored is not None and stored.state is FenceState.DONE


async def test_a_pool_of_one_connection_keeps_it_for_everyone() -> None:
    async with pool_of(1) as pool:
        kept = KeptConnection(lambda: pool)
        await backend(kept)
        assert await all_returned(pool)  # nothing set apart: other users of the pool are not starved
        with anyio.fail_after(5):
            assert await pool.fetchval("SELECT 1") == 1
        await kept.close()
