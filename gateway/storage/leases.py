"""The lease rule, once: when the process that holds a stored row (a fence, a task) is dead.

A holder is dead when the row has none, when its lease ran out, or at once when it is this
replica under an older boot id (this replica restarted). Leases are compared with the wall
clock, so replicas sharing PostgreSQL need synchronized clocks.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["Holder", "holder_dead"]


class Holder(Protocol):
    """Who holds a row: stable per replica, new at every start (gateway/fences/records.py `Owner`)."""

    @property
    def replica_id(self) -> str: ...

    @property
    def boot_id(self) -> str: ...


def holder_dead(holder: Holder | None, lease_until: float | None, *, me: Holder, now: float) -> bool:
    """Whether the row's holder is dead, seen by `me` at `now`."""
    if holder is None:
        return True
    if holder.replica_id == me.replica_id and holder.boot_id != me.boot_id:
        return True
    return lease_until is None or lease_until <= now
