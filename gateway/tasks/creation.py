"""Starting a task for a `tools/call`, under the call's fence.

The fence of a keyed call is settled at once with a marker naming the task (one insert: see
`Fences.settle`), so a retry with the same key gets the same task and never a second upstream
task; the task's call then runs the pipeline's tail without the fence (`tail_settled`). A key
that already names a plain call runs the fenced pipeline instead (it replays, waits or refuses).

Two ways in:

* definite: the client asked (2025-11-25 `task`), or it takes tasks and the tool supports them
  (2026-07-28): the task is written, its call started, its handle answered;
* provisional (2026-07-28, an upstream that decides per call): the task is written and its call
  started; if the upstream makes a task, the client gets the gateway's task; if it answers at
  once, so does the gateway (the task record ends completed with that answer, so a retry with
  the key finds it).
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
from mcp_types import INTERNAL_ERROR, METHOD_NOT_FOUND, MISSING_REQUIRED_CLIENT_CAPABILITY

from ..pipeline.calls import CallPipeline
from ..pipeline.stages import TaskCreated, ToolCall
from ..pipeline.catalog import ToolRoute
from ..conventions.answers import Answer
from ..errors import RATE_LIMITED, RequestError, TaskBudgetExceeded, UpstreamError
from ..fences import Fences, fingerprint
from ..protocol import Era
from ..upstreams.upstream import Upstream
from . import wire
from .jobs import Job, RecordSink, TaskJobs
from .markers import marker_answer, marker_task
from .records import TaskRecord, TaskStatus
from .store import TaskStore
from .transitions import lose

__all__ = ["TaskParts", "TaskSettings", "TaskStarter", "call_job"]

logger = logging.getLogger(__name__)



@dataclass(frozen=True)
class TaskSettings:
    augment: bool = True  # any tool runs as a task for a 2025-11-25 client that asks
    default_ttl_ms: int = 24 * 3600 * 1000
    max_ttl_ms: int = 24 * 3600 * 1000
    poll_interval_ms: int = 500
    plain_required: str = "wait"  # or "refuse": a taskSupport=required tool called without a task
    keep_expired_seconds: float = 0.0  # rows kept for operators after the TTL; never served past it
    max_result_bytes_per_principal: int = 256 * 1024 * 1024


@dataclass
class _Start:
    """A task about to start: its record, and whether its fence is settled (run without the fence)."""

    record: TaskRecord
    settled: bool = False
    existing: TaskRecord | None = None  # the key already names this task: answer it


def call_job(pipeline: CallPipeline, call: ToolCall, sink: RecordSink, fence_id: str | None, *, settled: bool,
             route: ToolRoute | None = None) -> Job:
    """The job of a task: the pipeline's tail (without the fence when the task holds it; the rate
    limit was applied when the task was created), on the route the call was created with (none for a
    task taken over from a dead process: resolved then)."""

    async def run() -> tuple[Answer, dict[str, Any] | None]:
        if settled or route is None:
            answer = await pipeline.tail_settled(call, fence_id=fence_id, route=route)
        else:
            answer = await pipeline.tail(route, call, admitted=True)
        return answer, sink.upstream_error

    return run


@dataclass(frozen=True)
class TaskParts:
    """What the task service and its starter work with (made once: gateway/tasks/runtime.py)."""

    store: TaskStore
    pipeline: CallPipeline
    fences: Fences
    upstreams: Mapping[str, Upstream]
    jobs: TaskJobs
    settings: TaskSettings
    server_info: Mapping[str, Any]
    clock: Callable[[], float]


class TaskStarter:
    def __init__(self, parts: TaskParts, check: Callable[[TaskRecord], Awaitable[TaskRecord]]) -> None:
        self._p = parts
        self._check = check  # the lost-task rule, applied to a task a retry finds

    async def start(self, route: ToolRoute, call: ToolCall) -> TaskCreated | Answer | None:
        """The task stage of a routed call (gateway/pipeline/stages.py `TaskStage.start`)."""
        era, principal = call.era, call.principal
        if era is Era.MODERN:
            takes = wire.client_takes_tasks(call.meta)
            if takes and route.task_support == "forbidden" and await self._upstream_decides(route):
                return await self._provisional(route, call)
            wanted = takes and route.task_support != "forbidden"
        else:
            wanted = call.task is not None and (self._p.settings.augment or route.task_support != "forbidden")
        if not wanted:
            if route.task_support == "required" and self._p.settings.plain_required == "refuse":
                raise _refusal(route.name, era)
            return None
        refused = await self._admit(route, call)
        if refused is not None:
            return refused
        start = await self._settle(self._new_record(principal, route, era, self._ttl(call.task)), route, call)
        if start.existing is not None:
            return TaskCreated(wire.created(start.existing, era=era, server_info=self._p.server_info))
        record = start.record
        sink = RecordSink(self._p.store, record.task_id, self._p.clock, carries_input=era is Era.MODERN, ttl_ms=record.ttl_ms)
        job_call = ToolCall(principal=principal, name=call.name, arguments=call.arguments, meta=call.meta, era=era,
                            sink=sink, identity=call.identity)
        await self._p.store.insert(record)
        self._p.jobs.start(record.task_id, call_job(self._p.pipeline, job_call, sink, record.fence_id,
                                                    settled=start.settled, route=route))
        return TaskCreated(wire.created(record, era=era, server_info=self._p.server_info))

    async def _admit(self, route: ToolRoute, call: ToolCall) -> Answer | None:
        """Before a task is made: the policy's refusal (answered as for a plain call, no task), the
        rate limit (RateLimited, -32029) and the principal's budget of stored results."""
        principal = call.principal
        refused = self._p.pipeline.refusal(route, call)
        if refused is not None:
            return refused
        await self._p.pipeline.admit(principal, route)
        limit = self._p.settings.max_result_bytes_per_principal
        held = await self._p.store.held_bytes(principal)
        if held >= limit:
            raise TaskBudgetExceeded(principal, held, limit)
        return None

    def _new_record(self, principal: str, route: ToolRoute, era: Era, ttl_ms: int) -> TaskRecord:
        now = self._p.clock()
        return TaskRecord(
            task_id=secrets.token_urlsafe(24), principal=principal, tool=route.name, effect=route.effect, era=era,
            status=TaskStatus.WORKING, created_at=now, updated_at=now, poll_interval_ms=self._p.settings.poll_interval_ms,
            ttl_ms=ttl_ms, upstream=route.upstream, owner=self._p.jobs.owner, lease_until=now + self._p.jobs.lease_seconds,
        )

    def _ttl(self, task_param: Mapping[str, Any] | None) -> int:
        asked = (task_param or {}).get("ttl")
        if isinstance(asked, int) and not isinstance(asked, bool) and asked > 0:
            return min(asked, self._p.settings.max_ttl_ms)
        return self._p.settings.default_ttl_ms

    async def _settle(self, record: TaskRecord, route: ToolRoute, call: ToolCall) -> _Start:
        key, arguments = call.idempotency_key, call.arguments
        if key is None:
            return _Start(record)
        inserted, fence = await self._p.fences.settle(principal=record.principal, key=key, tool=route.name,
                                                    arguments=arguments, effect=route.effect,
                                                    answer=marker_answer(record))
        if inserted:
            return _Start(dataclasses.replace(record, fence_id=fence.fence_id), settled=True)
        same_call = fence.principal == record.principal and fence.fingerprint == fingerprint(route.name, arguments)
        marker = marker_task(fence.answer) if same_call else None
        if marker is None:
            return _Start(record)  # the key names a plain call: the fenced pipeline decides
        task_id, expires_at = marker
        found = await self._p.store.get(task_id, record.principal)
        if found is not None:
            return _Start(record, existing=await self._check(found))
        again = dataclasses.replace(record, task_id=task_id, fence_id=fence.fence_id)
        if expires_at is not None and self._p.clock() >= expires_at:
            lost = lose("its time to live ran out")(again) or again
            await self._p.store.insert(lost)
            return _Start(again, existing=lost)
        # The process that settled the fence died before writing the task: nothing was sent.
        logger.info("task %s: its fence was settled but the task never started; starting it now", task_id)
        return _Start(again, settled=True)

    async def _upstream_decides(self, route: ToolRoute) -> bool:
        """A 2026-07-28 upstream lists no taskSupport: it decides per call whether to make a task."""
        upstream = self._p.upstreams.get(route.upstream or "")
        if upstream is None:
            return False
        try:
            version, _ = await upstream.connection_facts()
        except UpstreamError:
            return False
        return Era.of(version) is Era.MODERN

    async def _provisional(self, route: ToolRoute, call: ToolCall) -> TaskCreated | Answer:
        era = call.era
        refused = await self._admit(route, call)
        if refused is not None:
            return refused
        start = await self._settle(self._new_record(call.principal, route, era, self._p.settings.default_ttl_ms), route,
                                   call)
        if start.existing is not None:
            return TaskCreated(wire.created(start.existing, era=era, server_info=self._p.server_info))
        record = start.record
        sink = RecordSink(self._p.store, record.task_id, self._p.clock, carries_input=True, ttl_ms=record.ttl_ms)
        # Written before the call starts, like any task: a process that dies mid-call leaves a task
        # that the lost-task rule ends, never a key whose retry would send the call again.
        await self._p.store.insert(record)
        job_call = ToolCall(principal=call.principal, name=call.name, arguments=call.arguments, meta=call.meta, era=era,
                            sink=sink, rounds=call.rounds, identity=call.identity)
        job = call_job(self._p.pipeline, job_call, sink, record.fence_id, settled=start.settled, route=route)
        finished = anyio.Event()
        answers: list[Answer] = []

        async def run() -> tuple[Answer, dict[str, Any] | None]:
            try:
                outcome = await job()
                answers.append(outcome[0])
                return outcome
            finally:
                finished.set()

        self._p.jobs.start(record.task_id, run)
        async with anyio.create_task_group() as tg:
            for event in (finished, sink.upstream_created):
                tg.start_soon(_set_then_cancel, event, tg.cancel_scope)
        if sink.upstream_created.is_set():
            stored = await self._p.store.get(record.task_id)
            return TaskCreated(wire.created(stored or record, era=era, server_info=self._p.server_info))
        if not answers:
            raise RequestError(INTERNAL_ERROR, "internal gateway error; see the gateway log")
        return answers[0]  # answered at once (the job writes it as the task's end too)


def _refusal(tool: str, era: Era) -> RequestError:
    if era is Era.MODERN:
        return RequestError(MISSING_REQUIRED_CLIENT_CAPABILITY, f"the tool {tool} runs only as a task; declare the "
                            f"{wire.TASKS_EXTENSION} extension in the request's client capabilities",
                            {"requiredCapabilities": {"extensions": {wire.TASKS_EXTENSION: {}}}})
    return RequestError(METHOD_NOT_FOUND, f"the tool {tool} runs only as a task: send tools/call with a task parameter")


async def _set_then_cancel(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()
