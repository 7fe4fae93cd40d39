"""gateway/storage/events.py on the machine's PostgreSQL: what one replica publishes reaches the
others' handlers, never its own, and stays inside its schema; without PostgreSQL nothing happens."""

from __future__ import annotations

import uuid
from pathlib import Path

import anyio
import pytest

from gateway.storage.database import Database
from gateway.storage.events import ClusterEvents
from tests.support.postgres import schema_url, new_schema, drop_schema

pytestmark = pytest.mark.anyio


async def _received(events: ClusterEvents, kind: str, into: list[tuple[str, str]]) -> None:
    async def handler(ref: str) -> None:
        into.append((kind, ref))

    events.on(kind, handler)  # type: ignore[arg-type]


async def test_events_reach_the_other_replicas_only(pg_url: str) -> None:
    other_schema = new_schema("replicas_other")
    async with Database(pg_url) as db_a, Database(pg_url) as db_b, Database(schema_url(other_schema)) as db_c:
        a, b, c = (ClusterEvents(db, origin=uuid.uuid4().hex) for db in (db_a, db_b, db_c))
        heard: dict[str, list[tuple[str, str]]] = {"a": [], "b": [], "c": []}
        for name, events in (("a", a), ("b", b), ("c", c)):
            for kind in ("task", "connectors", "resource"):
                await _received(events, kind, heard[name])
        try:
            async with anyio.create_task_group() as tg:
                for events in (a, b, c):
                    tg.start_soon(events.run)
                with anyio.fail_after(10):  # each listener is up when it hears a probe
                    while not heard["b"]:
                        await a.publish("connectors")
                        await anyio.sleep(0.05)
                    while not heard["a"]:
                        await b.publish("connectors")
                        await anyio.sleep(0.05)
                for found in heard.values():
                    found.clear()
                await a.publish("task", "task-1")
                await a.publish("resource", "file:///notes/a.txt")
                with anyio.fail_after(10):
                    while len(heard["b"]) < 2:
                        await anyio.sleep(0.02)
                await anyio.sleep(0.3)  # anything a or c would wrongly hear has arrived by now
                tg.cancel_scope.cancel()
        finally:
            await drop_schema(other_schema)
    assert heard["b"] == [("task", "task-1"), ("resource", "file:///notes/a.txt")]
    assert heard["a"] == [] and heard["c"] == [], heard  # never its own; never another schema's


async def test_a_ref_too_long_for_notify_is_not_sent(pg_url: str) -> None:
    async with Database(pg_url) as db:
        await ClusterEvents(db, origin="x").publish("resource", "file:///" + "a" * 5_000)  # logged, not raised


@pytest.mark.parametrize("url", ["memory://", "sqlite"])
async def test_nothing_happens_without_postgresql(url: str, tmp_path: Path) -> None:
    async with Database(f"sqlite:///{tmp_path / 'g.db'}" if url == "sqlite" else url) as db:
        events = ClusterEvents(db, origin="x")
        assert not events.enabled
        await events.publish("task", "t")
        with anyio.fail_after(1):
            await events.run()  # returns at once
