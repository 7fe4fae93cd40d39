"""gateway/storage/replicas.py on the machine's PostgreSQL: a live replica is found by its boot id;
one whose lease ran out, one that stopped cleanly, an unknown one and this process itself are not."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.pipeline.rounds import PARKED_STATE_PREFIX, parked_owner
from gateway.storage.database import Database
from gateway.storage.replicas import ReplicaDirectory

pytestmark = pytest.mark.anyio


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


async def test_live_replicas_are_found_dead_ones_are_not(pg_url: str) -> None:
    clock = Clock()
    async with Database(pg_url) as db:
        a = ReplicaDirectory(db, replica_id="a", boot_id="a" * 32, url="http://127.0.0.1:1/mcp", lease_seconds=10, clock=clock)
        b = ReplicaDirectory(db, replica_id="b", boot_id="b" * 32, url="http://127.0.0.1:2/mcp", lease_seconds=10, clock=clock)
        await a.open()
        await b.open()
        assert await a.url_of("b" * 32) == "http://127.0.0.1:2/mcp"
        assert await a.url_of("a" * 32) is None  # itself: served here, never forwarded
        assert await a.url_of("c" * 32) is None
        clock.now += 11  # b's lease ran out (a renews, b does not)
        await a.renew()
        assert await a.url_of("b" * 32) is None
        await b.renew()
        assert await a.url_of("b" * 32) == "http://127.0.0.1:2/mcp"
        # b restarted under the same replica id: its old boot is dead at once, for the new one.
        b2 = ReplicaDirectory(db, replica_id="b", boot_id="d" * 32, url="http://127.0.0.1:2/mcp", clock=clock)
        await b2.open()
        assert await b2.url_of("b" * 32) is None
        await b.close()
        assert await a.url_of("b" * 32) is None


async def test_nothing_without_postgresql(tmp_path: Path) -> None:
    async with Database(f"sqlite:///{tmp_path / 'g.db'}") as db:
        directory = ReplicaDirectory(db, replica_id="a", boot_id="a" * 32, url="http://x/mcp")
        await directory.open()
        assert not directory.enabled and await directory.url_of("b" * 32) is None


def test_a_parked_state_names_its_owner() -> None:
    assert parked_owner(f"{PARKED_STATE_PREFIX}{'a' * 32}.token") == "a" * 32
    assert parked_owner(f"{PARKED_STATE_PREFIX}token-without-owner") is None
    assert parked_owner("an upstream's own state") is None
