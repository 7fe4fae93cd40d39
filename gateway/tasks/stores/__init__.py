"""The task store backends, and `open_task_store`, which picks the one for the gateway's database
(`storage.tables.open_table`)."""

from __future__ import annotations

from ...storage.database import Database
from ...storage.tables import open_table
from ..store import TaskStore
from .memory import MemoryTaskStore

__all__ = ["open_task_store"]


def open_task_store(where: str | Database) -> TaskStore:
    """The tasks tables in the gateway's database (not yet opened)."""
    return open_table(where, memory=MemoryTaskStore, sqlite="gateway.tasks.stores.sqlite:SqliteTaskStore",
                      postgres="gateway.tasks.stores.postgres:PostgresTaskStore")
