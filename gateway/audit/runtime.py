"""The audit log of a running gateway: opened in the app's lifespan on the gateway's database,
its writer and retention sweeper started under the supervisor, every queued row written at close."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Protocol

from ..config.model import AuditConfig
from ..storage.database import Database, opened
from ..storage.loop_sqlite import Checkpointed
from .log import AuditLog
from .stores import open_audit_store

__all__ = ["open_audit", "start_audit"]


class _Loops(Protocol):
    def __call__(self, work: str, fn: Callable[[], Awaitable[object]]) -> object: ...


@asynccontextmanager
async def open_audit(config: AuditConfig, database: Database) -> AsyncIterator[AuditLog | None]:
    """The audit log (None when `audit.enabled: false`), open for the body; closing it writes
    every row still queued before the database closes."""
    if not config.enabled:
        yield None
        return
    log = AuditLog(open_audit_store(database), store_arguments=config.arguments, max_queued_rows=config.max_queued_rows,
                   flush_interval=config.flush_interval_ms / 1000)
    async with opened(log):
        yield log


def start_audit(config: AuditConfig, log: AuditLog, loop: _Loops) -> None:
    """The writer, the retention sweeper and (SQLite) the checkpointer, each as a supervised loop
    (`loop(work, fn)`)."""
    retention = timedelta(days=config.retention_days)
    loop("audit writer", log.run_writer)
    loop("audit sweeper", lambda: log.run_sweeper(retention, config.sweep_interval_seconds))
    if isinstance(log.store, Checkpointed):
        loop("audit log checkpointer", log.store.run_checkpointer)
