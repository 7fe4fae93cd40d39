"""The task store contract (the backends and `open_task_store`, which picks one: `stores/`).

The tasks live in the fence store's database (`fences.store`): the SQLite file, or the PostgreSQL
schema on the shared pool, so every replica sees every task. Writes are compare-and-set on the
record's `version`: `save` changes nothing and answers False when someone else wrote first.

    dex_tasks          one row per task (columns: gateway/tasks/records.py COLUMNS)
    dex_tasks_schema   the schema version (one row)
"""

from __future__ import annotations

import builtins

from typing import Protocol

from ..storage.tables import SchemaVersion
from .records import TaskRecord, TaskStatus

__all__ = ["SCHEMA_VERSION", "TASKS_TABLE", "TASKS_VERSION", "TaskStore"]

SCHEMA_VERSION = 1
TASKS_TABLE = "dex_tasks"
TASKS_VERSION = SchemaVersion(SCHEMA_VERSION, "task store")  # both backends


class TaskStore(Protocol):
    async def open(self) -> None:
        """Create or check the schema (idempotent, safe from two processes at once)."""

    async def close(self) -> None: ...

    async def insert(self, record: TaskRecord) -> None:
        """Add a new task (its id is fresh and random: a clash is a bug, and raises)."""

    async def get(self, task_id: str, principal: str | None = None) -> TaskRecord | None:
        """The task; with `principal`, only when it is that principal's (else None, as if absent)."""

    async def save(self, record: TaskRecord, *, expected_version: int) -> bool:
        """Write `record` as version `expected_version + 1` if the stored one is still at
        `expected_version`; False, changing nothing, otherwise."""

    async def list(
        self, *, principal: str | None = None, status: TaskStatus | None = None, limit: int = 100, before: float | None = None
    ) -> list[TaskRecord]:
        """Newest first (by created_at); `before`: only tasks created before that time (paging)."""

    async def active(self) -> builtins.list[TaskRecord]:
        """Every task that is not terminal (the sweeper checks their TTLs and owners)."""

    async def delete_expired(self, cutoff: float) -> int:
        """Delete tasks whose TTL ended before `cutoff`; the number deleted."""

    async def held_bytes(self, principal: str) -> int:
        """The bytes of stored results and errors (their JSON text, UTF-8) of the principal's tasks."""
