"""The SSE event store of the stateful front: its byte budget per session and over the process
(gateway/front/event_store.py), with the SDK's own JSON-RPC messages."""

from __future__ import annotations

import pytest
from mcp.server.streamable_http import EventMessage
from mcp_types import JSONRPCResponse

from gateway.front.event_store import EventBudget, FrontEventStore

pytestmark = pytest.mark.anyio


def answer(request_id: int, size: int) -> JSONRPCResponse:
    return JSONRPCResponse(jsonrpc="2.0", id=request_id, result={"content": [{"type": "text", "text": "x" * size}]})


async def replayed(store: FrontEventStore, after: str) -> list[EventMessage] | None:
    got: list[EventMessage] = []

    async def send(event: EventMessage) -> None:
        got.append(event)

    return got if await store.replay_events_after(after, send) is not None else None


async def test_a_session_over_its_byte_budget_keeps_only_the_newest_events() -> None:
    store = FrontEventStore(max_bytes=3_500)
    ids = []
    for n in range(5):
        ids.append(await store.store_event(str(n), None))
        ids.append(await store.store_event(str(n), answer(n, 1_000)))
    assert store.stored_bytes <= 3_500
    assert await replayed(store, ids[0]) is None  # the oldest are gone
    newest = await replayed(store, ids[-2])
    assert newest is not None and [e.message for e in newest] == [answer(4, 1_000)]  # kept and replayed as sent


async def test_an_event_over_the_budget_is_not_kept_nor_anything_before_it() -> None:
    store = FrontEventStore(max_bytes=2_000)
    before = await store.store_event("1", answer(1, 100))
    big = await store.store_event("2", answer(2, 5_000))
    after = await store.store_event("2", answer(3, 100))
    assert await replayed(store, before) is None
    replays = await replayed(store, big)
    assert replays is not None and [e.event_id for e in replays] == [after]
    assert store.stored_bytes < 2_000


async def test_the_process_budget_drops_the_oldest_events_of_any_session() -> None:
    budget = EventBudget(5_000)
    first, second = FrontEventStore(budget=budget), FrontEventStore(budget=budget)
    early = await first.store_event("1", answer(1, 2_000))
    for n in range(3):
        await second.store_event(str(n), answer(n, 2_000))
    assert budget.total <= 5_000
    assert await replayed(first, early) is None  # first's event was the oldest in the process
    assert first.stored_bytes == 0 and second.stored_bytes == budget.total
    second.close()  # the session ended: its bytes go back
    assert budget.total == 0


async def test_an_adopted_session_goes_on_with_the_get_stream_and_refuses_a_lost_request_stream() -> None:
    """A session adopted from a replica that died starts empty: its client's GET stream resumes from
    now (the gap is what the dead replica had), a request stream of the dead replica is lost."""
    from mcp.server.streamable_http import GET_STREAM_KEY

    dead = FrontEventStore()
    get_id = await dead.store_event(GET_STREAM_KEY, answer(1, 10))
    post_id = await dead.store_event("7", answer(7, 10))
    assert get_id.endswith("-g") and not post_id.endswith("-g")

    adopted, plain = FrontEventStore(adopted=True), FrontEventStore()
    assert await adopted.replay_events_after(get_id, _never) == GET_STREAM_KEY
    assert adopted.lost_stream(post_id) and not adopted.lost_stream(get_id)
    # A session that was not adopted knows nothing of foreign ids, as before.
    assert await plain.replay_events_after(get_id, _never) is None and not plain.lost_stream(post_id)
    # Its own ids are never lost.
    own = await adopted.store_event("8", answer(8, 10))
    assert not adopted.lost_stream(own)


async def _never(event: EventMessage) -> None:
    raise AssertionError(f"nothing is replayed: {event}")
