"""`open_approval_store`: the approvals backend for the gateway's database (each backend is
imported only when chosen)."""

from __future__ import annotations

from ..storage.database import Database
from .store import ApprovalStore, MemoryApprovalStore

__all__ = ["open_approval_store"]


def open_approval_store(database: Database) -> ApprovalStore:
    """The approvals table in the gateway's database (not yet opened)."""
    if database.scheme == "memory":
        return MemoryApprovalStore()
    if database.scheme == "sqlite":
        from .sqlite import SqliteApprovalStore

        return SqliteApprovalStore.from_url(database.url)
    if database.scheme == "postgresql":
        from .postgres import PostgresApprovalStore

        return PostgresApprovalStore(database)
    raise ValueError(f"unsupported database URL scheme {database.scheme!r}")
