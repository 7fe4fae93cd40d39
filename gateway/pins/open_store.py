"""`open_pin_store`: the pins backend for the gateway's database (`storage.tables.open_table`)."""

from __future__ import annotations

from ..storage.database import Database
from ..storage.tables import open_table
from .store import MemoryPinStore, PinStore

__all__ = ["open_pin_store"]


def open_pin_store(where: str | Database) -> PinStore:
    """The pins table in the gateway's database (not yet opened)."""
    return open_table(where, memory=MemoryPinStore, sqlite="gateway.pins.sqlite:SqlitePinStore",
                      postgres="gateway.pins.postgres:PostgresPinStore")
