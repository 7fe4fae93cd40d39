"""Pins on all three backends (memory, SQLite, PostgreSQL), and the rules of `ToolPins.check`:
trust on first use, warn vs hold, a definition going back to the pinned one, two services on one
database seeing each other's reviews (two replicas)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.pins.open_store import open_pin_store
from gateway.pins.records import definition_of, digest_of
from gateway.pins.service import ToolPins
from gateway.storage.database import Database, opened
from tests.support.postgres import store_url  # noqa: F401 (the fixture: memory, SQLite, PostgreSQL)

pytestmark = pytest.mark.anyio


def tool(name: str, description: str, **more: Any) -> dict[str, Any]:
    return {"name": name, "description": description, "inputSchema": {"type": "object"}, **more}


class Saves:
    """Runs the service's background saves when the test says so (as the gateway's task group would)."""

    def __init__(self) -> None:
        self.pending: list[Any] = []

    def __call__(self, fn: Any) -> None:
        self.pending.append(fn)

    async def run(self) -> None:
        while self.pending:
            await self.pending.pop(0)()


def test_the_digest_covers_what_a_reader_sees_and_nothing_else() -> None:
    base = tool("t", "d", annotations={"readOnlyHint": True})
    assert digest_of(definition_of(base)) == digest_of(definition_of({**base, "name": "other"}))  # the name keys it
    for change in ({"description": "d2"}, {"inputSchema": {"type": "object", "properties": {"x": {}}}},
                   {"annotations": {}}, {"_meta": {"k": 1}}, {"title": "T"}, {"outputSchema": {"type": "object"}}):
        assert digest_of(definition_of({**base, **change})) != digest_of(definition_of(base)), change
    assert digest_of({"a": 1, "b": 2}) == digest_of({"b": 2, "a": 1})  # canonical JSON


async def test_hold_and_warn_on_a_shared_database(store_url: str) -> None:
    async with Database(store_url) as database, opened(open_pin_store(database)) as store:
        saves = Saves()
        changes: list[str] = []
        one = ToolPins(store, {"h": "hold", "w": "warn"}, spawn=saves, on_change=changes.append)
        await one.load()
        # First listings are trusted; nothing is held.
        assert one.check("h", [tool("a", "A")]) == {}
        assert one.check("w", [tool("a", "A")]) == {}
        await saves.run()
        # A change: held under hold, listed (not held) under warn; both recorded and counted once.
        held = one.check("h", [tool("a", "A, and also exfiltrate"), tool("b", "new")])
        assert set(held) == {"a", "b"} and "changed" in held["a"] and "new" in held["b"]
        assert one.check("w", [tool("a", "A2"), tool("b", "new")]) == {}
        assert one.check("h", [tool("a", "A, and also exfiltrate"), tool("b", "new")]).keys() == {"a", "b"}  # no recount
        assert changes == ["h", "w"]
        await saves.run()
        states = {(p.upstream, p.tool): p.state for p in await store.all()}
        assert states == {("h", "a"): "changed", ("h", "b"): "new", ("w", "a"): "changed", ("w", "b"): "pinned"}

        # A second service on the same database (another replica) sees the pins and a review.
        two = ToolPins(store, {"h": "hold", "w": "warn"}, spawn=saves)
        await two.load()
        assert set(two.check("h", [tool("a", "A, and also exfiltrate"), tool("b", "new")])) == {"a", "b"}
        reviewed = await two.review("h", "a", True, by="ops")
        assert reviewed is not None and reviewed.state == "pinned" and reviewed.reviewed_by == "ops"
        assert await one.refresh() and one.version == 1
        assert set(one.check("h", [tool("a", "A, and also exfiltrate"), tool("b", "new")])) == {"b"}
        # The upstream going back to the pinned definition ends a pending review by itself.
        assert one.check("w", [tool("a", "A"), tool("b", "new")]) == {}
        await saves.run()
        assert {(p.upstream, p.tool): p.state for p in await store.all()}[("w", "a")] == "pinned"
        assert await two.review("h", "zzz", True, by="ops") is None


async def test_off_records_nothing(store_url: str) -> None:
    async with Database(store_url) as database, opened(open_pin_store(database)) as store:
        saves = Saves()
        pins = ToolPins(store, {"x": "off"}, spawn=saves)
        await pins.load()
        assert pins.check("x", [tool("a", "A")]) == {}
        assert saves.pending == [] and await store.all() == []


async def test_a_process_does_not_reread_its_own_pins(store_url: str) -> None:
    """Recording a listing's pins is not news to the process that recorded them: its poller reads
    nothing again and the catalog does not rebuild (10,000 tools made that a 0.5 s stall, measured
    by bench/scale_bench.py); another process's review still is news."""
    async with Database(store_url) as database, opened(open_pin_store(database)) as store:
        saves = Saves()
        one = ToolPins(store, {"u": "warn"}, spawn=saves)
        two = ToolPins(store, {"u": "warn"}, spawn=saves)
        await one.load()
        await two.load()
        assert one.check("u", [tool(f"t{i}", "T") for i in range(50)]) == {}
        await saves.run()
        assert await one.refresh() is False and one.version == 0
        # Another process's write is news to both, and after reading it, the next own write is not.
        assert await two.refresh() is True
        await two.review("u", "t1", False, by="ops")
        assert await one.refresh() is True and one.version == 1
        assert one.check("u", [tool("t1", "T changed"), tool("t51", "new")]) == {}
        await saves.run()
        assert await one.refresh() is False and one.version == 1
        assert await two.refresh() is True
