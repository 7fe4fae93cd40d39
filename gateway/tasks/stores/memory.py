"""An in-process task store for unit tests (not durable, one process)."""

from __future__ import annotations

import builtins

import dataclasses
import json

from ..records import TaskRecord, TaskStatus


class MemoryTaskStore:
    # No await inside a method body: each one is atomic on the event loop.
    def __init__(self) -> None:
        self._rows: dict[str, TaskRecord] = {}

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def insert(self, record: TaskRecord) -> None:
        if record.task_id in self._rows:
            raise ValueError(f"task {record.task_id} exists")
        self._rows[record.task_id] = record

    async def get(self, task_id: str, principal: str | None = None) -> TaskRecord | None:
        record = self._rows.get(task_id)
        if record is None or (principal is not None and record.principal != principal):
            return None
        return record

    async def save(self, record: TaskRecord, *, expected_version: int) -> bool:
        current = self._rows.get(record.task_id)
        if current is None or current.version != expected_version:
            return False
        self._rows[record.task_id] = dataclasses.replace(record, version=expected_version + 1)
        return True

    async def list(
        self, *, principal: str | None = None, status: TaskStatus | None = None, limit: int = 100, before: float | None = None
    ) -> list[TaskRecord]:
        rows = [
            r for r in self._rows.values()
            if (principal is None or r.principal == principal) and (status is None or r.status is status)
            and (before is None or r.created_at < before)
        ]  # fmt: skip
        return sorted(rows, key=lambda r: r.created_at, reverse=True)[:limit]

    async def active(self) -> builtins.list[TaskRecord]:
        return [r for r in self._rows.values() if not r.status.terminal]

    async def held_bytes(self, principal: str) -> int:
        return sum(len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())
                   for r in self._rows.values() if r.principal == principal
                   for value in (r.result, r.error) if value is not None)

    async def delete_expired(self, cutoff: float) -> int:
        gone = [k for k, r in self._rows.items() if r.expires_at is not None and r.expires_at < cutoff]
        for key in gone:
            del self._rows[key]
        return len(gone)
