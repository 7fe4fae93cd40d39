"""`open_approval_store`: the approvals backend for the gateway's database (`storage.tables.open_table`)."""

from __future__ import annotations

from ..storage.database import Database
from ..storage.tables import open_table
from .store import ApprovalStore, MemoryApprovalStore

__all__ = ["open_approval_store"]


def open_approval_store(where: str | Database) -> ApprovalStore:
    """The approvals table in the gateway's database (not yet opened)."""
    return open_table(where, memory=MemoryApprovalStore, sqlite="gateway.approvals.sqlite:SqliteApprovalStore",
                      postgres="gateway.approvals.postgres:PostgresApprovalStore")
