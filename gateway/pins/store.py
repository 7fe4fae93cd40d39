"""Where pins live: the `dex_tool_pins` table in the gateway's database (`fences.store`), so
every replica holds the same tools and a pin survives a restart.

    all()          every pin
    put(pins)      insert or replace these pins; the stamp before and after, read in the
                   same transaction as the write (pin writers take turns), so a process
                   can tell its own write from another's
    stamp()        a number that changes whenever any pin changes (replicas poll it)
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from .records import Pin

__all__ = ["COLUMNS", "PINS_TABLE", "MemoryPinStore", "PinStore", "from_row", "to_row"]

PINS_TABLE = "dex_tool_pins"
COLUMNS = ("upstream", "tool", "state", "pinned_digest", "pinned_definition", "seen_digest", "seen_definition",
           "first_seen_at", "changed_at", "reviewed_by", "reviewed_at", "updated_at")


class PinStore(Protocol):
    async def open(self) -> None: ...
    async def close(self) -> None: ...
    async def all(self) -> list[Pin]: ...
    async def put(self, pins: list[Pin], at: float) -> tuple[float, float]: ...
    async def stamp(self) -> float: ...


def to_row(pin: Pin, at: float) -> tuple[Any, ...]:
    return (pin.upstream, pin.tool, pin.state, pin.pinned_digest,
            None if pin.pinned_definition is None else json.dumps(pin.pinned_definition), pin.seen_digest,
            json.dumps(pin.seen_definition), pin.first_seen_at, pin.changed_at, pin.reviewed_by, pin.reviewed_at, at)


def from_row(row: Any) -> Pin:
    values = dict(zip(COLUMNS, tuple(row), strict=True))
    values.pop("updated_at")
    pinned = values["pinned_definition"]
    values["pinned_definition"] = None if pinned is None else json.loads(pinned)
    values["seen_definition"] = json.loads(values["seen_definition"])
    return Pin(**values)


class MemoryPinStore:
    """In the process only (memory:// databases: unit tests)."""

    def __init__(self) -> None:
        self._rows: dict[tuple[str, str], Pin] = {}
        self._stamp = 0.0

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def all(self) -> list[Pin]:
        return list(self._rows.values())

    async def put(self, pins: list[Pin], at: float) -> tuple[float, float]:
        before = self._stamp
        for pin in pins:
            self._rows[(pin.upstream, pin.tool)] = pin
        self._stamp = max(self._stamp + 1e-6, at)
        return before, self._stamp

    async def stamp(self) -> float:
        return self._stamp
