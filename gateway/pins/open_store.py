"""`open_pin_store`: the pins backend for the gateway's database (each backend imported only when chosen)."""

from __future__ import annotations

from ..storage.database import Database
from .store import MemoryPinStore, PinStore

__all__ = ["open_pin_store"]


def open_pin_store(database: Database) -> PinStore:
    """The pins table in the gateway's database (not yet opened)."""
    if database.scheme == "memory":
        return MemoryPinStore()
    if database.scheme == "sqlite":
        from .sqlite import SqlitePinStore

        return SqlitePinStore.from_url(database.url)
    if database.scheme == "postgresql":
        from .postgres import PostgresPinStore

        return PostgresPinStore(database)
    raise ValueError(f"unsupported database URL scheme {database.scheme!r}")
