"""Operators' resolutions of unknown fences (gateway/fences/resolutions.py) on every store: the
first note stands, a second store on the same database (another replica) sees it."""

from __future__ import annotations

import pytest

from gateway.fences.resolutions import Resolution, open_resolution_store
from gateway.storage.database import opened

pytestmark = pytest.mark.anyio


async def test_the_first_resolution_stands_and_every_replica_sees_it(any_url: str) -> None:
    first = Resolution(fence_id="f1", note="charged once <b>checked</b>\u202e", resolved_by="admin", resolved_at=1000.5)
    async with opened(open_resolution_store(any_url)) as store:
        assert await store.of([]) == {}
        assert await store.of(["f1", "f2"]) == {}
        assert await store.resolve(first) == (True, first)
        made, kept = await store.resolve(Resolution(fence_id="f1", note="other", resolved_by="admin", resolved_at=2000.0))
        assert not made and kept == first
        assert await store.of(["f1", "f2"]) == {"f1": first}
        if any_url != "memory://":
            async with opened(open_resolution_store(any_url)) as replica:  # opening again is idempotent
                assert await replica.of(["f1"]) == {"f1": first}
