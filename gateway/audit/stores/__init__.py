"""The audit store backends, and `open_audit_store`, which picks the one for the gateway's database
(`storage.tables.open_table`)."""

from __future__ import annotations

from ...storage.database import Database
from ...storage.tables import open_table
from ..store import AuditStore
from .memory import MemoryAuditStore

__all__ = ["open_audit_store"]


def open_audit_store(where: str | Database) -> AuditStore:
    """The audit tables (not yet opened) in the gateway's database: an open `Database` (PostgreSQL:
    the store borrows its pool) or a URL (the store owns its connections: the CLI)."""
    return open_table(where, memory=MemoryAuditStore, sqlite="gateway.audit.stores.sqlite:SqliteAuditStore",
                      postgres="gateway.audit.stores.postgres:PostgresAuditStore")
