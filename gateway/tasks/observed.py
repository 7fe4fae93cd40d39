"""The task store as this process writes it, with listeners told of each record it saved.

The front uses it to send `notifications/tasks/status` (2025-11-25) to the live session that
created a task, when this process changes the task (and tells the other replicas: the app wires
that). Clients poll `tasks/get` all the same: the notification is optional in the protocol.
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Callable

from .records import TaskRecord, TaskStatus
from .store import TaskStore

__all__ = ["ObservedTaskStore", "SavedListener"]

logger = logging.getLogger(__name__)

# Called (synchronously, after the write committed) with the record as saved.
SavedListener = Callable[[TaskRecord], object]


class ObservedTaskStore:
    """A TaskStore that calls its listeners after every successful insert and save."""

    def __init__(self, store: TaskStore) -> None:
        self._store = store
        self.listeners: list[SavedListener] = []

    async def open(self) -> None:
        await self._store.open()

    async def close(self) -> None:
        await self._store.close()

    async def insert(self, record: TaskRecord) -> None:
        await self._store.insert(record)
        self._tell(record)

    async def get(self, task_id: str, principal: str | None = None) -> TaskRecord | None:
        return await self._store.get(task_id, principal)

    async def save(self, record: TaskRecord, *, expected_version: int) -> bool:
        saved = await self._store.save(record, expected_version=expected_version)
        if saved:
            self._tell(record)
        return saved

    async def list(
        self, *, principal: str | None = None, status: TaskStatus | None = None, limit: int = 100, before: float | None = None
    ) -> builtins.list[TaskRecord]:
        return await self._store.list(principal=principal, status=status, limit=limit, before=before)

    async def active(self) -> builtins.list[TaskRecord]:
        return await self._store.active()

    async def delete_expired(self, cutoff: float) -> int:
        return await self._store.delete_expired(cutoff)

    async def held_bytes(self, principal: str) -> int:
        return await self._store.held_bytes(principal)

    def _tell(self, record: TaskRecord) -> None:
        for listener in self.listeners:
            try:
                listener(record)
            except Exception:  # noqa: BLE001 - a listener's bug must not fail the task's own write
                logger.exception("task %s: a listener of task changes failed", record.task_id)
