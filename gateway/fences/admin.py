"""Operator functions behind `dex-gateway fences stats|show KEY|purge --older-than`."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

from ..protocol import JsonObject
from .ids import fence_id
from .records import FenceRecord
from .store import FenceStore


def _iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, timezone.utc).isoformat()


async def stats(store: FenceStore) -> JsonObject:
    s = await store.stats()
    return {
        "total": s.total,
        "pending": s.pending,
        "done": s.done,
        "unknown": s.unknown,
        "oldest_updated_at": _iso(s.oldest_updated_at),
        "newest_updated_at": _iso(s.newest_updated_at),
    }


async def show(store: FenceStore, principal: str, key: str) -> FenceRecord | None:
    """The fence of `key` as sent by `principal` (fences are per principal)."""
    return await store.get(fence_id(principal, key))


async def purge(store: FenceStore, older_than: timedelta, *, now: float | None = None) -> int:
    """Delete finished fences not updated for `older_than` (and long-abandoned pendings).

    A retry of a purged key is a new call, exactly as after the retention sweep.
    """
    if older_than < timedelta(0):
        raise ValueError("older_than must not be negative")
    current = time.time() if now is None else now
    return await store.sweep(current - older_than.total_seconds())
