"""The audit log: who called which write (or was refused), with whose approval, and what came of it.

Rows are appended to the gateway's database (`fences.store`) by a background writer
(`log.py`), read by `dex-gateway audit list|export` (`admin.py`) and `GET /admin/audit`
(`admin_api.py`). docs/audit.md describes the rows, the settings and what a crash can lose.
"""

from __future__ import annotations

from .log import AuditLog, PendingEntry
from .records import OUTCOMES, Approval, AuditEntry, arguments_digest
from .store import AuditQuery, AuditStore
from .stores import open_audit_store

__all__ = [
    "OUTCOMES", "Approval", "AuditEntry", "AuditLog", "AuditQuery", "AuditStore", "PendingEntry", "arguments_digest",
    "open_audit_store",
]
