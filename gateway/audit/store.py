"""The audit store contract and the query it answers. The backends live in `stores/`, where
`open_audit_store` picks the one for the gateway's database (`fences.store`: the SQLite file, the
PostgreSQL schema, or memory).

    audit_log / dex_audit_log   one row per audited call (gateway/audit/records.py COLUMNS), append-only:
                                the backends refuse UPDATE with a trigger; only the retention sweep deletes
    ..._schema                  the schema version (one row)

Indexes: the primary key `id` (newest first, `before` paging: the last 100 rows of any log are an
index range), (time) for `since` and the sweep, (principal, id) and (tool, id) for the filters.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from ..storage.tables import SchemaVersion
from .records import AuditEntry

__all__ = ["AUDIT_VERSION", "AuditQuery", "AuditStore", "SCHEMA_VERSION", "by_id_pages"]

SCHEMA_VERSION = 1
AUDIT_VERSION = SchemaVersion(SCHEMA_VERSION, "audit log")  # both backends


@dataclass(frozen=True, slots=True)
class AuditQuery:
    """Which rows: each set field narrows (all of them: AND). Times in microseconds since the epoch."""

    since: int | None = None  # time >= since
    until: int | None = None  # time < until
    principal: str | None = None
    tool: str | None = None
    outcome: str | None = None

    def where(self, placeholder: "Placeholders") -> tuple[list[str], list[object]]:
        """SQL conditions and their parameters, `placeholder()` naming each parameter."""
        clauses: list[str] = []
        params: list[object] = []
        for column, op, value in (("time", ">=", self.since), ("time", "<", self.until), ("principal", "=", self.principal),
                                  ("tool", "=", self.tool), ("outcome", "=", self.outcome)):
            if value is not None:
                params.append(value)
                clauses.append(f"{column} {op} {placeholder(len(params))}")
        return clauses, params


class Placeholders(Protocol):
    def __call__(self, index: int) -> str: ...


class AuditStore(Protocol):
    async def open(self) -> None:
        """Create or check the schema (idempotent, safe from two processes at once)."""

    async def close(self) -> None: ...

    async def append(self, entries: list[AuditEntry]) -> None:
        """Store `entries` in one transaction, in order (each gets the next id)."""

    async def newest(self, query: AuditQuery, *, before: int | None = None, limit: int = 100) -> list[AuditEntry]:
        """The matching rows with `id < before`, newest first, at most `limit`."""

    def oldest_first(self, query: AuditQuery, *, page: int = 1000) -> AsyncIterator[AuditEntry]:
        """Every matching row, oldest first, read `page` rows at a time (`audit export`)."""

    async def sweep(self, cutoff: int) -> int:
        """Delete the rows older than `cutoff` (microseconds) in short batches; the number deleted."""


async def by_id_pages(read: Callable[[int], Awaitable[list[AuditEntry]]], page: int) -> AsyncIterator[AuditEntry]:
    """Every row, oldest first: `read(after)` gives the next `page` rows with an id above `after`
    (a short read is the last)."""
    after = 0
    while True:
        found = await read(after)
        for entry in found:
            yield entry
        if len(found) < page:
            return
        after = found[-1].id or after
