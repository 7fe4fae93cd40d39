"""The audit log's writer: rows queued by the call path, written in batches by one background task.

    log = AuditLog(store, store_arguments=False, max_queued_rows=10_000, flush_interval=0.05)
    async with opened(log):                       # the store opened; at close every queued row is written
        tg.start_soon(supervisor.loop, "audit writer", log.run_writer)
        log.record(pending)                       # on the call path: an append to a deque, no I/O
        if log.full: await log.wait_for_room()    # backpressure past max_queued_rows

The call path never waits for the database: `record` appends the row to a queue and wakes the
writer, which gathers rows for `flush_interval` seconds (`audit.flush_interval_ms`, 50 ms by
default), then writes everything queued in one transaction per `batch_rows` rows, letting the
event loop run between batches (a SQLite batch is written on the loop: ~20 µs a row, so 100 rows
hold it ~2 ms). One transaction per 50 ms instead of one per call keeps the writer's cost per call
small at any rate (measured: bench/call_profile.py, docs/audit.md). The arguments' digest (and
their JSON, when kept) is computed by the writer, after the answer. A clean shutdown writes every
queued row before the database closes (`close`); a SIGKILL loses the rows queued and not yet
committed: the calls answered in the last `flush_interval` plus one batch write, whose fences
still hold the outcome of every keyed write (docs/audit.md).
"""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import anyio
import anyio.lowlevel

from ..fences.ids import canonical_json
from .records import NO_DIGEST, Approval, AuditEntry, arguments_digest, now_micros
from .store import AuditStore

__all__ = ["AuditLog", "PendingEntry"]

logger = logging.getLogger(__name__)

BATCH_ROWS = 100
# How long a call waits for room in a full queue before the oldest rows go to the log instead.
FULL_WAIT_SECONDS = 5.0
_CLOSE_TRIES = 3


@dataclass(slots=True)
class PendingEntry:
    """A row as the call path knows it; `entry()` makes the stored row (digest, JSON) off the path."""

    time: float  # Unix seconds
    principal: str
    tool: str
    upstream: str | None
    effect: str
    arguments: Mapping[str, Any] | None
    idempotency_key: str | None
    approval: Approval | None
    fence_state: str
    outcome: str
    reason: str | None
    latency_ms: float | None
    trace_id: str | None
    span_id: str | None

    def entry(self, store_arguments: bool) -> AuditEntry:
        try:
            digest = arguments_digest(self.arguments)
        except ValueError:  # NaN or infinities: no JSON form, so neither a digest nor the arguments
            digest, arguments = NO_DIGEST, None
        else:
            arguments = canonical_json(dict(self.arguments or {})) if store_arguments else None
        return AuditEntry(
            now_micros(self.time), self.principal, self.tool, self.upstream, self.effect,
            digest, arguments, self.idempotency_key, self.approval, self.fence_state,
            self.outcome, self.reason, None if self.latency_ms is None else round(self.latency_ms, 3),
            self.trace_id, self.span_id,
        )


class AuditLog:
    def __init__(self, store: AuditStore, *, store_arguments: bool = False, max_queued_rows: int = 10_000,
                 batch_rows: int = BATCH_ROWS, flush_interval: float = 0.05, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.store_arguments = store_arguments
        self.max_queued_rows = max_queued_rows
        self.batch_rows = batch_rows
        self.flush_interval = flush_interval
        self.clock = clock
        self._queue: deque[PendingEntry] = deque()
        self._wake = anyio.Event()
        self._written = anyio.Event()
        self._lock = anyio.Lock()
        self._closed = False
        self.rows_written = 0

    # -- the call path -----------------------------------------------------------------

    def record(self, pending: PendingEntry) -> None:
        """Queue one row (no I/O; safe inside a cancelled scope). After `close`, the row goes to
        the gateway's log instead, so it is never silently dropped."""
        if self._closed:
            _spill([pending], self.store_arguments, "the audit log was closed")
            return
        self._queue.append(pending)
        if not self._wake.is_set():
            self._wake.set()

    @property
    def full(self) -> bool:
        return len(self._queue) >= self.max_queued_rows

    async def wait_for_room(self) -> None:
        """Wait while the queue is full (the database is slower than the calls); after
        FULL_WAIT_SECONDS, the oldest rows past the bound go to the gateway's log (ERROR)."""
        with anyio.move_on_after(FULL_WAIT_SECONDS):
            while self.full:
                await self._written.wait()
        extra = len(self._queue) - self.max_queued_rows + 1
        if extra > 0:
            _spill([self._queue.popleft() for _ in range(extra)], self.store_arguments,
                   "the audit queue stayed full (is the database answering?)")

    # -- the writer --------------------------------------------------------------------

    async def run_writer(self) -> None:
        """Write queued rows as they come, until cancelled (run under the supervisor: a failed
        write keeps its rows queued, is logged, and the loop starts again)."""
        while True:
            await self._wake.wait()
            if self.flush_interval > 0:
                await anyio.sleep(self.flush_interval)  # more rows for the same transaction
            self._wake = anyio.Event()
            await self.flush()

    async def flush(self) -> None:
        """Write every row queued so far (the admin API calls this before it reads)."""
        async with self._lock:
            while self._queue:
                count = min(len(self._queue), self.batch_rows)
                batch = [self._queue.popleft() for _ in range(count)]
                # Shielded: a batch once begun is committed or put back whole, never half-known.
                with anyio.CancelScope(shield=True):
                    try:
                        await self.store.append([p.entry(self.store_arguments) for p in batch])
                    except BaseException:
                        self._queue.extendleft(reversed(batch))
                        raise
                self.rows_written += count
                self._written.set()
                self._written = anyio.Event()
                if self._queue:
                    await anyio.lowlevel.checkpoint()  # the calls run between two batches

    # -- retention ---------------------------------------------------------------------

    async def sweep_once(self, retention: timedelta) -> int:
        return await self.store.sweep(now_micros(self.clock() - retention.total_seconds()))

    async def run_sweeper(self, retention: timedelta, interval: float) -> None:
        """Delete rows past retention every `interval` seconds (batched by the store)."""
        while True:
            swept = await self.sweep_once(retention)
            if swept:
                logger.info("audit sweep: %d rows past retention deleted", swept)
            await anyio.sleep(interval)

    # -- lifecycle ---------------------------------------------------------------------

    async def open(self) -> None:
        await self.store.open()

    async def close(self) -> None:
        """Write every queued row, then close the store. Rows that cannot be written (the
        database is gone) are logged as JSON at ERROR, not dropped."""
        with anyio.CancelScope(shield=True):
            for attempt in range(_CLOSE_TRIES):
                try:
                    await self.flush()
                    break
                except Exception:  # noqa: BLE001 - tried again, then spilled to the log
                    logger.warning("audit log: writing the queued rows failed (try %d)", attempt + 1, exc_info=True)
                    await anyio.sleep(0.1 * (attempt + 1))
            self._closed = True
            if self._queue:
                _spill(list(self._queue), self.store_arguments, "the database did not take them at shutdown")
                self._queue.clear()
            await self.store.close()


def _spill(rows: list[PendingEntry], store_arguments: bool, why: str) -> None:
    for row in rows:
        logger.error("audit row not stored (%s): %s", why, json.dumps(row.entry(store_arguments).to_json()))
