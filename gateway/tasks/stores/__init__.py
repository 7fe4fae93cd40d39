"""The task store backends, and `open_task_store`, which picks the one for the gateway's database
(each backend is imported only when chosen)."""

from __future__ import annotations

from ...storage.database import Database
from ..store import TaskStore

__all__ = ["open_task_store"]


def open_task_store(database: Database) -> TaskStore:
    """The tasks tables in the gateway's database (not yet opened)."""
    if database.scheme == "memory":
        from .memory import MemoryTaskStore

        return MemoryTaskStore()
    if database.scheme == "sqlite":
        from .sqlite import SqliteTaskStore

        return SqliteTaskStore.from_url(database.url)
    if database.scheme == "postgresql":
        from .postgres import PostgresTaskStore

        return PostgresTaskStore(database)
    raise ValueError(f"unsupported database URL scheme {database.scheme!r}")
