"""The shared log of stateful sessions' GET-stream events (gateway/storage/front_events.py), on a
real PostgreSQL: written in batches off the request path, bounded per session by count and age,
read back per session only; and an adopted session's event store replays from it
(gateway/front/event_store.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import mcp_types as types
import pytest
from mcp.server.streamable_http import GET_STREAM_KEY, EventMessage

from gateway.front.event_store import FrontEventStore
from gateway.storage.database import Database
from gateway.storage.front_events import FrontEventLog

pytestmark = pytest.mark.anyio


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def _note(n: int) -> types.JSONRPCNotification:
    return types.JSONRPCNotification(jsonrpc="2.0", method="notifications/resources/updated",
                                     params={"uri": f"notes://{n}"})


@pytest.fixture
async def database(pg_url: str) -> AsyncIterator[Database]:
    database = Database(pg_url)
    await database.open()
    try:
        yield database
    finally:
        await database.close()


async def _written(log: FrontEventLog, count: int) -> None:
    with anyio.fail_after(5):
        while log.written < count:
            await anyio.sleep(0.01)


async def _uris(store: FrontEventStore, last_event_id: str) -> tuple[object, list[str]]:
    sent: list[EventMessage] = []

    async def send(message: EventMessage) -> None:
        sent.append(message)

    stream = await store.replay_events_after(last_event_id, send)
    return stream, [m.message.params["uri"] for m in sent]  # type: ignore[union-attr,index]


async def test_an_adopted_store_replays_the_dead_stores_get_events_of_its_session_only(database: Database) -> None:
    log = FrontEventLog(database, max_events=100, max_age_seconds=300)
    await log.open()
    async with anyio.create_task_group() as tg:
        tg.start_soon(log.run)
        dead = FrontEventStore(durable=log.session("s1"))
        other = FrontEventStore(durable=log.session("s2"))
        ids = [await dead.store_event(GET_STREAM_KEY, _note(n)) for n in range(2)]
        await dead.store_event("7", _note(99))  # a POST stream's event: never written
        ids.append(await dead.store_event(GET_STREAM_KEY, _note(2)))
        theirs = [await other.store_event(GET_STREAM_KEY, _note(50 + n)) for n in range(2)]
        await _written(log, 4)

        adopter = FrontEventStore(adopted=True, durable=log.session("s1"))
        await adopter.store_event(GET_STREAM_KEY, _note(3))  # the adopter's own, maybe not written yet
        assert await _uris(adopter, ids[0]) == (GET_STREAM_KEY, ["notes://1", "notes://2", "notes://3"])
        # Another session's id replays nothing (the stream goes on from now); so does an unknown one.
        assert await _uris(adopter, theirs[0]) == (GET_STREAM_KEY, [])
        assert await _uris(adopter, "nothing-g") == (GET_STREAM_KEY, [])
        # A POST stream's id of the dead store: that request is lost (the manager answers 410).
        assert adopter.lost_stream("x-1") and not adopter.lost_stream(ids[0])
        tg.cancel_scope.cancel()
    await log.close()


async def test_each_session_is_bounded_by_count_and_age(database: Database) -> None:
    clock = Clock()
    log = FrontEventLog(database, max_events=3, max_age_seconds=300, clock=clock)
    await log.open()
    async with anyio.create_task_group() as tg:
        tg.start_soon(log.run)
        store = FrontEventStore(durable=log.session("s4"))
        ids = [await store.store_event(GET_STREAM_KEY, _note(n)) for n in range(5)]
        await _written(log, 5)
        assert await log.after("s4", ids[1]) is None  # past `max_events` the oldest went
        assert [event_id for event_id, _ in await log.after("s4", ids[2]) or []] == ids[3:]
        clock.now += 301
        assert await log.after("s4", ids[3]) is None  # past the age every one goes
        tg.cancel_scope.cancel()
    await log.close()


async def test_an_event_too_large_to_keep_cuts_what_came_before(database: Database) -> None:
    log = FrontEventLog(database, max_events=100, max_age_seconds=300)
    await log.open()
    async with anyio.create_task_group() as tg:
        tg.start_soon(log.run)
        store = FrontEventStore(durable=log.session("s3"), max_bytes=200)
        first = await store.store_event(GET_STREAM_KEY, _note(1))
        big = types.JSONRPCNotification(jsonrpc="2.0", method="notifications/message",
                                        params={"level": "info", "data": "x" * 500})
        cut = await store.store_event(GET_STREAM_KEY, big)
        await store.store_event(GET_STREAM_KEY, _note(2))
        await _written(log, 3)
        assert await log.after("s3", first) is None  # no replay passes over the event it could not keep
        assert [d for _, d in await log.after("s3", cut) or []] != []
        tg.cancel_scope.cancel()
    await log.close()
