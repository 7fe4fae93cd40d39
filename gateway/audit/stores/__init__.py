"""The audit store backends, and `open_audit_store`, which picks the one for the gateway's database
(each backend is imported only when chosen)."""

from __future__ import annotations

from ...storage.database import Database
from ..store import AuditStore

__all__ = ["open_audit_store"]


def open_audit_store(where: str | Database) -> AuditStore:
    """The audit tables (not yet opened) in the gateway's database: an open `Database` (PostgreSQL:
    the store borrows its pool) or a URL (the store owns its connections: the CLI)."""
    database = where if isinstance(where, Database) else Database(where)
    if database.scheme == "memory":
        from .memory import MemoryAuditStore

        return MemoryAuditStore()
    if database.scheme == "sqlite":
        from .sqlite import SqliteAuditStore

        return SqliteAuditStore.from_url(database.url)
    if database.scheme == "postgresql":
        from .postgres import PostgresAuditStore

        return PostgresAuditStore(database, owns_database=not isinstance(where, Database))
    raise ValueError(f"unsupported database URL scheme {database.scheme!r}: use memory://, sqlite:///PATH or postgresql://…")
