"""The gateway's tasks (SPEC 5): the one implementation every entry calls.

    start       the pipeline's task stage (gateway/pipeline/stages.py): a tools/call the gateway answers
                with a task (2025: the client sent `task`; 2026: the client declares the extension
                and the tool supports tasks), created under the call's fence, its call run in the
                background by this process
    get / result / cancel / list / update      the task methods of both eras
    resolve     a plain retry whose fence holds a task answers the task's end
    sweep       TTLs, and tasks whose process died: taken over (an upstream task any replica can
                poll) or lost (failed; `outcome: unknown` unless the tool is a read)
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import anyio
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS

from ..pipeline.catalog import ToolRoute
from ..pipeline.stages import TaskCreated, ToolCall
from ..conventions.answers import Answer
from ..protocol import Era, Result
from ..storage.leases import holder_dead
from ..errors import RequestError, UpstreamError, UpstreamNotSent, UpstreamRpcError
from . import wire
from .creation import TaskParts, TaskSettings, TaskStarter, call_job
from .jobs import RecordSink
from .markers import TASK_MARKER_KEY, marker_task
from .records import TaskRecord, TaskStatus
from .transitions import cancelled_error, change, lose

__all__ = ["TaskSettings", "Tasks"]

logger = logging.getLogger(__name__)

_LIST_PAGE = 50


class Tasks:
    def __init__(self, parts: TaskParts) -> None:
        self._p = parts
        self.store = parts.store
        self._starter = TaskStarter(parts, check=self._check)

    # -- tools/call -------------------------------------------------------------------------

    async def start(self, route: ToolRoute, call: ToolCall) -> TaskCreated | Answer | None:
        """TaskCreated (the CreateTaskResult of the call's era) when this call runs as a task; an
        Answer when the policy refused it or the upstream was asked and answered at once (2026-07-28,
        it decides); None: a plain call. Raises RequestError when a plain call of a task-required
        tool is refused (tasks.plain_required)."""
        return await self._starter.start(route, call)

    async def resolve(self, principal: str, answer: Answer) -> Answer:
        """A plain call whose fence holds a task (the client asked for a task before, and retries
        without one, e.g. after a restart): the task's end, waited for."""
        found = marker_task(answer.to_wire()) if TASK_MARKER_KEY in (answer.meta or {}) else None
        if found is None:
            return answer
        record = await self._until_terminal(principal, found[0], past_ttl=True)
        if record.status is TaskStatus.COMPLETED and record.result is not None:
            return Answer.from_wire(record.result)
        error = record.error or cancelled_error(record)
        meta = (error.get("data") or {}).get("_meta") if isinstance(error.get("data"), dict) else None
        return Answer(content=[{"type": "text", "text": f"MCP error {error['code']}: {error['message']}"}],
                      is_error=True, meta=dict(meta) if meta else None)

    # -- the task methods -------------------------------------------------------------------

    async def get(self, principal: str, task_id: str, *, era: Era) -> Result:
        return wire.detailed(await self._current(principal, task_id), era=era, server_info=self._p.server_info)

    async def result(self, principal: str, task_id: str) -> dict[str, Any]:
        """2025-11-25 `tasks/result`: blocks until the task ends; its result, or its error raised."""
        record = await self._until_terminal(principal, task_id)
        if record.status is TaskStatus.COMPLETED:
            return wire.related_result(record)
        error = record.error or cancelled_error(record)
        raise RequestError(int(error.get("code", INTERNAL_ERROR)), str(error.get("message", "")), error.get("data"))

    async def _until_terminal(self, principal: str, task_id: str, *, past_ttl: bool = False) -> TaskRecord:
        while True:
            record = await self._current(principal, task_id, past_ttl=past_ttl)
            if record.status.terminal:
                return record
            await anyio.sleep(min(max(record.poll_interval_ms / 1000, 0.05), 1.0))

    async def cancel(self, principal: str, task_id: str, *, era: Era) -> Result:
        record = await self._current(principal, task_id)
        if record.status.terminal:
            if era is Era.MODERN:
                return wire.ack(self._p.server_info)
            if record.status is TaskStatus.CANCELLED:
                return wire.detailed(record, era=era, server_info=self._p.server_info)
            raise RequestError(INVALID_PARAMS, f"task {task_id} has already ended ({record.status.value}); it cannot be cancelled")

        def step(current: TaskRecord) -> TaskRecord | None:
            if current.status.terminal:
                return None
            return dataclasses.replace(current, status=TaskStatus.CANCELLED, cancel_requested=True,
                                       status_message="cancelled by the client", error=cancelled_error(current),
                                       owner=None, lease_until=None, input_requests=None)

        updated = await change(self.store, task_id, step, clock=self._p.clock) or record
        if not self._p.jobs.cancel_local(task_id) and record.upstream_task_id and record.upstream_stateless:
            await self._upstream_request(record, "tasks/cancel", {"taskId": record.upstream_task_id}, quiet=True)
        if era is Era.MODERN:
            return wire.ack(self._p.server_info)
        return wire.detailed(updated, era=era, server_info=self._p.server_info)

    async def list(self, principal: str, cursor: str | None) -> dict[str, Any]:
        try:
            before = float(cursor) if cursor else None
        except ValueError:
            raise RequestError(INVALID_PARAMS, f"tasks/list: invalid cursor {cursor!r}") from None
        records = await self.store.list(principal=principal, limit=_LIST_PAGE + 1, before=before)
        page = records[:_LIST_PAGE]
        now = self._p.clock()
        result: dict[str, Any] = {"tasks": [wire.task_fields(r, era=Era.HANDSHAKE) for r in page if not r.expired(now)]}
        if len(records) > _LIST_PAGE:
            result["nextCursor"] = repr(page[-1].created_at)
        return result

    async def update(self, principal: str, task_id: str, responses: dict[str, Any]) -> dict[str, Any]:
        """2026-07-28 `tasks/update`: answers to the task's input requests, passed to its upstream task."""
        record = await self._current(principal, task_id)
        outstanding = record.input_requests or {}
        answered = {k: v for k, v in responses.items() if k in outstanding}
        if record.status is TaskStatus.INPUT_REQUIRED and answered and record.upstream_task_id:
            await self._upstream_request(record, "tasks/update",
                                         {"taskId": record.upstream_task_id, "inputResponses": answered})

            def step(current: TaskRecord) -> TaskRecord | None:
                if current.status is not TaskStatus.INPUT_REQUIRED:
                    return None
                left = {k: v for k, v in (current.input_requests or {}).items() if k not in answered}
                return dataclasses.replace(current, input_requests=left or None,
                                           status=TaskStatus.INPUT_REQUIRED if left else TaskStatus.WORKING)

            await change(self.store, task_id, step, clock=self._p.clock)
        return wire.ack(self._p.server_info)

    async def _upstream_request(self, record: TaskRecord, method: str, params: dict[str, Any], *,
                                quiet: bool = False) -> None:
        """Forwards a task method to the task's upstream task. The client is told which upstream
        failed and how (`reason`: no address, no exception class); the details go to the log."""
        upstream = self._p.upstreams.get(record.upstream or "")
        if upstream is None:
            text = f"{method}: the task's upstream {record.upstream!r} is not configured"
            logger.warning("task %s: %s", record.task_id, text)
            if not quiet:
                raise RequestError(INTERNAL_ERROR, text)
            return
        try:
            await upstream.request(method, wire.declaring_tasks(params, Era.of(record.upstream_era)))
        except UpstreamError as exc:
            logger.log(logging.INFO if quiet else logging.WARNING, "task %s: %s to upstream task %s failed: %s",
                       record.task_id, method, record.upstream_task_id, exc)
            if not quiet:
                raise RequestError(INTERNAL_ERROR, _upstream_failure(method, exc)) from None

    # -- liveness: TTL, dead owners, takeover ---------------------------------------------------

    async def _current(self, principal: str, task_id: str, *, past_ttl: bool = False) -> TaskRecord:
        """The principal's task, checked. Its advertised ttl is the promise: past it the task is gone
        for its client (its call stopped; the row deleted by the sweeper), unless `past_ttl` (a plain
        retry of a key whose task expired is told how it ended)."""
        record = await self.store.get(task_id, principal)
        if record is None:
            raise RequestError(INVALID_PARAMS, f"unknown task {task_id!r}")
        record = await self._check(record)
        if not past_ttl and record.expired(self._p.clock()):
            raise RequestError(INVALID_PARAMS, f"unknown task {task_id!r}: its ttl ({record.ttl_ms} ms) has passed")
        return record

    def _owner_dead(self, record: TaskRecord) -> bool:
        return holder_dead(record.owner, record.lease_until, me=self._p.jobs.owner, now=self._p.clock())

    async def _check(self, record: TaskRecord) -> TaskRecord:
        """The record after the lost-task rule and a takeover, when either applies."""
        if record.status.terminal:
            return record
        if record.expired(self._p.clock()):
            self._p.jobs.cancel_local(record.task_id)
            return await change(self.store, record.task_id, lose("its time to live ran out"), clock=self._p.clock) or record
        if self._p.jobs.running(record.task_id) or not self._owner_dead(record):
            return record
        if record.upstream_task_id and record.upstream_stateless:
            return await self._take_over(record)
        return await change(self.store, record.task_id, lose("the gateway process that ran it stopped"),
                            clock=self._p.clock) or record

    async def _take_over(self, record: TaskRecord) -> TaskRecord:
        dead = record.owner

        def step(current: TaskRecord) -> TaskRecord | None:
            if current.status.terminal or current.owner != dead:
                return None
            return dataclasses.replace(current, owner=self._p.jobs.owner,
                                       lease_until=self._p.clock() + self._p.jobs.lease_seconds)

        taken = await change(self.store, record.task_id, step, clock=self._p.clock)
        if taken is None or taken.owner != self._p.jobs.owner or taken.status.terminal:
            return taken or record
        logger.info("task %s: its process stopped; polling upstream task %s from here", record.task_id,
                    record.upstream_task_id)
        sink = RecordSink(self.store, record.task_id, self._p.clock, carries_input=record.era is Era.MODERN,
                          ttl_ms=record.ttl_ms, resume_task_id=record.upstream_task_id)
        call = ToolCall(principal=record.principal, name=record.tool, arguments={}, meta={}, era=record.era,
                        sink=sink)
        self._p.jobs.start(record.task_id, call_job(self._p.pipeline, call, sink, record.fence_id, settled=True))
        return taken

    async def sweep_once(self) -> None:
        for record in await self.store.active():
            await self._check(record)
        await self.store.delete_expired(self._p.clock() - self._p.settings.keep_expired_seconds)

    async def run_sweeper(self, interval: float) -> None:
        while True:
            await anyio.sleep(interval)
            try:
                await self.sweep_once()
            except Exception:  # noqa: BLE001 - housekeeping: log any failure, try again next round
                logger.warning("task sweep failed; will retry", exc_info=True)


def _upstream_failure(method: str, exc: UpstreamError) -> str:
    """The client's text for a task method its upstream did not take: safe words only."""
    if isinstance(exc, UpstreamRpcError):
        return f"{method}: the task's upstream {exc.upstream!r} refused it ({exc.reason})"
    what = "could not be reached" if isinstance(exc, UpstreamNotSent) else "did not answer"
    return f"{method}: the task's upstream {exc.upstream!r} {what} ({exc.reason}); see the gateway log"
