"""The audit log in the process (memory:// stores, unit tests only)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

from ..records import AuditEntry
from ..store import AuditQuery


def _matches(entry: AuditEntry, query: AuditQuery) -> bool:
    return ((query.since is None or entry.time >= query.since) and (query.until is None or entry.time < query.until)
            and (query.principal is None or entry.principal == query.principal)
            and (query.tool is None or entry.tool == query.tool)
            and (query.outcome is None or entry.outcome == query.outcome))


class MemoryAuditStore:
    def __init__(self) -> None:
        self._rows: list[AuditEntry] = []
        self._next_id = 1

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def append(self, entries: list[AuditEntry]) -> None:
        for entry in entries:
            self._rows.append(replace(entry, id=self._next_id))
            self._next_id += 1

    async def newest(self, query: AuditQuery, *, before: int | None = None, limit: int = 100) -> list[AuditEntry]:
        found = [e for e in reversed(self._rows) if (before is None or (e.id or 0) < before) and _matches(e, query)]
        return found[:limit]

    async def oldest_first(self, query: AuditQuery, *, page: int = 1000) -> AsyncIterator[AuditEntry]:
        for entry in list(self._rows):
            if _matches(entry, query):
                yield entry

    async def sweep(self, cutoff: int) -> int:
        kept = [e for e in self._rows if e.time >= cutoff]
        swept = len(self._rows) - len(kept)
        self._rows = kept
        return swept
