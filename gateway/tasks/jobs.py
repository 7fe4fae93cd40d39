"""The tasks this process runs: background jobs, their leases, and cancellation.

A job runs one task's call (the pipeline's tail) in the gateway's task group, and writes its end
to the task record: its result, unless the principal's stored results already fill
`tasks.max_result_bytes_per_principal` (the task then fails, saying so; creation.py refuses new
tasks at the budget, this bounds what the tasks already running add). While it runs, the keeper renews the record's lease every third of the lease
time (so other replicas know the owner lives) and notices a cancel that another replica wrote.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import TaskGroup

from ..conventions.answers import Answer
from ..errors import RATE_LIMITED
from ..fences.records import Owner
from ..supervision import Supervisor
from .records import TaskRecord, TaskStatus
from ..pipeline.task_sink import UpstreamTaskSink
from .store import TaskStore
from .transitions import change, finish, lose

__all__ = ["Job", "RecordSink", "TaskJobs"]

logger = logging.getLogger(__name__)

# How long a job keeps trying to write its end to a failing store (busy, out of file descriptors)
# before it leaves the task to the lost-task rule (its lease then runs out: service.py `_check`).
END_WRITE_SECONDS = 120.0

# What a job runs: the call's answer, and the JSON-RPC error when an upstream task failed.
Job = Callable[[], Awaitable[tuple[Answer, dict[str, Any] | None]]]


@dataclass
class RecordSink(UpstreamTaskSink):
    """Writes what the upstream task says into the gateway task's record."""

    store: TaskStore
    task_id: str
    clock: Callable[[], float]
    carries_input: bool
    ttl_ms: int | None
    resume_task_id: str | None = None
    upstream_error: dict[str, Any] | None = field(default=None)
    # Set once the upstream made its task (a provisional call waits for it: creation.py).
    upstream_created: anyio.Event = field(default_factory=anyio.Event)

    async def created(self, task_id: str, *, era: str | None, stateless: bool, poll_interval_ms: int | None,
                      ttl_ms: int | None) -> None:
        def step(record: TaskRecord) -> TaskRecord | None:
            if record.status.terminal:
                return None
            ttl = record.ttl_ms if ttl_ms is None or record.ttl_ms is None else min(record.ttl_ms, ttl_ms)
            poll = poll_interval_ms if isinstance(poll_interval_ms, int) and poll_interval_ms > 0 else record.poll_interval_ms
            return dataclasses.replace(record, upstream_task_id=task_id, upstream_era=era, upstream_stateless=stateless,
                                       ttl_ms=ttl, poll_interval_ms=poll)

        await change(self.store, self.task_id, step, clock=self.clock)
        self.upstream_created.set()

    async def status(self, status: str, message: str | None, input_requests: dict[str, Any] | None) -> None:
        if status not in (TaskStatus.WORKING, TaskStatus.INPUT_REQUIRED):
            return  # the end is written by the job, after the rest of the call's tail
        carried = status == TaskStatus.INPUT_REQUIRED and self.carries_input

        def step(record: TaskRecord) -> TaskRecord | None:
            if record.status.terminal:
                return None
            return dataclasses.replace(
                record, status=TaskStatus.INPUT_REQUIRED if carried else TaskStatus.WORKING,
                status_message=message, input_requests=input_requests if carried else None,
            )

        await change(self.store, self.task_id, step, clock=self.clock)

    async def failed(self, error: dict[str, Any]) -> None:
        self.upstream_error = error


class TaskJobs:
    def __init__(self, store: TaskStore, owner: Owner, task_group: TaskGroup, *, lease_seconds: float,
                 clock: Callable[[], float], max_held_bytes: int | None = None,
                 supervisor: Supervisor | None = None) -> None:
        self.store = store
        self._max_held_bytes = max_held_bytes
        self.supervisor = supervisor or Supervisor()
        self.owner = owner
        self.lease_seconds = lease_seconds
        self._task_group = task_group
        self._clock = clock
        self._running: dict[str, anyio.CancelScope] = {}

    def running(self, task_id: str) -> bool:
        return task_id in self._running

    def start(self, task_id: str, job: Job) -> None:
        scope = anyio.CancelScope()
        self._running[task_id] = scope
        self._task_group.start_soon(self.supervisor.once, "task job", lambda: self._run(task_id, job, scope))

    def cancel_local(self, task_id: str) -> bool:
        scope = self._running.get(task_id)
        if scope is not None:
            scope.cancel()
        return scope is not None

    async def _run(self, task_id: str, job: Job, scope: anyio.CancelScope) -> None:
        outcome: tuple[Answer, dict[str, Any] | None] | None = None
        try:
            with scope:
                try:
                    outcome = await job()
                except Exception:  # noqa: BLE001 - a gateway bug must end the task, not leave it working
                    logger.exception("task %s: the call failed inside the gateway", task_id)
                    outcome = (Answer.error_text("The call failed inside the gateway; see the gateway log."), None)
            if outcome is None:
                return  # cancelled: the canceller wrote the task's status
            with anyio.CancelScope(shield=True):
                try:
                    outcome = await self._within_budget(task_id, *outcome)
                except Exception:  # noqa: BLE001 - the store failed: the task still ends, with its result
                    logger.warning("task %s: its principal's stored results could not be counted", task_id, exc_info=True)
            ended, expired = finish(*outcome), lose("its time to live ran out")

            def step(record: TaskRecord) -> TaskRecord | None:
                return expired(record) if record.expired(self._clock()) else ended(record)

            async def write_end() -> None:
                await change(self.store, task_id, step, clock=self._clock)

            # Still listed as running meanwhile: the keeper renews its lease, so no replica calls
            # it lost while its answer waits for the store.
            with anyio.CancelScope(shield=True):
                if not await self.supervisor.retry("task end", write_end, give_up_after=END_WRITE_SECONDS):
                    logger.error("task %s: its end could not be stored; it ends by the lost-task rule", task_id)
        finally:
            self._running.pop(task_id, None)

    async def _within_budget(self, task_id: str, answer: Answer,
                             error: dict[str, Any] | None) -> tuple[Answer, dict[str, Any] | None]:
        """The outcome to store: the call's, or a failure when the principal's stored results already
        fill the budget (tasks created before it filled, ending after)."""
        if self._max_held_bytes is None or error is not None:
            return answer, error
        size = len(json.dumps(answer.to_wire(), ensure_ascii=False, separators=(",", ":")).encode())
        record = await self.store.get(task_id)
        if record is None:
            return answer, error
        held = await self.store.held_bytes(record.principal)
        if held < self._max_held_bytes:
            return answer, error  # the result that crosses the budget is kept; no later one is
        text = (f"The tool {record.tool} ran, but its result ({size} bytes) was not kept: the principal "
                f"{record.principal!r} holds {held} bytes of task results, and tasks.max_result_bytes_per_principal "
                f"allows {self._max_held_bytes} bytes.")
        logger.warning("task %s: %s", task_id, text)
        data = {"limit": "tasks.max_result_bytes_per_principal", "maxBytes": self._max_held_bytes,
                "heldBytes": held, "resultBytes": size}
        return Answer.error_text(text), {"code": RATE_LIMITED, "message": text, "data": data}

    async def run_keeper(self) -> None:
        """Renew the leases of running tasks; stop the ones another replica cancelled."""
        while True:
            await anyio.sleep(self.lease_seconds / 3)
            for task_id in list(self._running):
                try:
                    await self._keep(task_id)
                except Exception:  # noqa: BLE001 - a store hiccup: the lease has two more renewals of slack
                    logger.warning("task %s: lease renewal failed", task_id, exc_info=True)

    async def _keep(self, task_id: str) -> None:
        def renew(record: TaskRecord) -> TaskRecord | None:
            if record.status.terminal or record.owner != self.owner:
                return None
            return dataclasses.replace(record, lease_until=self._clock() + self.lease_seconds)

        record = await change(self.store, task_id, renew, clock=self._clock)
        if record is None:
            return  # deleted (long expired): nothing left to keep
        if record.status.terminal or record.owner != self.owner:
            self.cancel_local(task_id)  # cancelled, lost or taken over elsewhere: stop working on it
