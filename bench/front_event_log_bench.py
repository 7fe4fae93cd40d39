"""The cost of writing stateful sessions' GET-stream events to PostgreSQL (issue 26, resumption
across adoption; gateway/storage/front_events.py).

    .venv/bin/python bench/front_event_log_bench.py [--events 10000]

On a fresh schema of $DEX_TEST_POSTGRES_URL (loopback `test` by default, dropped afterwards):

1. `FrontEventStore.store_event` per event (the call the SDK's message router awaits for every
   message, POST answers included): memory only, with the log on a POST stream (not written), and
   with the log on the GET stream (queued for the writer);
2. the writer: how long the queued events take to reach PostgreSQL (batches of up to 200);
3. a lone event: from `store_event` to its row written (the writer's latency when idle).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import anyio
import mcp_types as types
from mcp.server.streamable_http import GET_STREAM_KEY

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.front.event_store import FrontEventStore  # noqa: E402
from gateway.storage.database import Database  # noqa: E402
from gateway.storage.front_events import FrontEventLog  # noqa: E402
from tests.support.postgres import fresh_schema_url  # noqa: E402


def _note(n: int) -> types.JSONRPCNotification:
    return types.JSONRPCNotification(jsonrpc="2.0", method="notifications/resources/updated",
                                     params={"uri": f"notes://{n}"})


async def _per_event_us(store: FrontEventStore, stream: str, count: int) -> float:
    messages = [_note(i) for i in range(count)]
    started = time.perf_counter()
    for message in messages:
        await store.store_event(stream, message)
        if stream == GET_STREAM_KEY:
            await anyio.sleep(0)  # the router awaits its send after each event: the writer gets turns
    return (time.perf_counter() - started) / count * 1e6


async def _run(url: str, count: int) -> None:
    database = Database(url)
    await database.open()
    log = FrontEventLog(database, max_events=10_000, max_age_seconds=300)
    await log.open()
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(log.run)
            memory = await _per_event_us(FrontEventStore(), GET_STREAM_KEY, count)
            post = await _per_event_us(FrontEventStore(durable=log.session("post")), "7", count)
            started = time.perf_counter()
            get = await _per_event_us(FrontEventStore(durable=log.session("get")), GET_STREAM_KEY, count)
            while log.written < count:
                await anyio.sleep(0.001)
            drained = time.perf_counter() - started
            print(f"store_event, memory only (GET stream):   {memory:6.2f} us/event")
            print(f"store_event, with the log, POST stream:   {post:6.2f} us/event (not written)")
            print(f"store_event, with the log, GET stream:    {get:6.2f} us/event (queued)")
            print(f"writer: {count} GET events in PostgreSQL {drained:.2f} s after the first ({count / drained:,.0f}/s)")
            lone, store = [], FrontEventStore(durable=log.session("lone"))
            for i in range(50):
                before, started = log.written, time.perf_counter()
                await store.store_event(GET_STREAM_KEY, _note(i))
                while log.written == before:
                    await anyio.sleep(0.0005)
                lone.append((time.perf_counter() - started) * 1e3)
            print(f"a lone event written after {statistics.median(lone):.1f} ms (median of 50), {max(lone):.1f} ms max")
            tg.cancel_scope.cancel()
    finally:
        await log.close()
        await database.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=10_000)
    args = parser.parse_args()
    with fresh_schema_url("front_event_bench") as url:
        anyio.run(_run, url, args.events)


if __name__ == "__main__":
    main()
