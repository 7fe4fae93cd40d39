"""A `tools/call` run as a task on the upstream, in the upstream's era, polled to its end.

`UpstreamTaskCall.request` has the shape of `Upstream.request` for `tools/call`, so the call
pipeline sends with it instead when a tool needs it (`taskSupport: required`, or a gateway task
on a tool that supports tasks) and reads the result exactly as a plain call's:

* 2025-11-25: `tools/call` with `task: {ttl}` answers `{"task": Task}`; `tasks/get` is polled; once
  the task ends or asks for input, `tasks/result` (which blocks, and relays the upstream's
  requests) gives the tool result or the JSON-RPC error.
* 2026-07-28: `tools/call` declaring the `io.modelcontextprotocol/tasks` extension answers the flat
  task (`resultType: "task"`); `tasks/get` is polled and inlines `result`, `error` or
  `inputRequests` (answered with `tasks/update`).

An upstream may answer the call at once with a plain result; that result is used as it is.
A task the upstream forgot (tasks/get refused, or its TTL passed) is lost: the call answers
failed for a `read` tool and failed with `outcome: unknown` for any other (the upstream may
have done the work).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio

from ..auth.principals import Identity
from ..conventions.keys import OUTCOME_KEY, Effect, Outcome
from ..errors import RelayRefused, UpstreamError, UpstreamRpcError
from ..upstreams.relay import CAPABILITY_OF, CallRelay
from ..upstreams.upstream import Upstream
from .polling import next_interval
from ..pipeline.task_sink import UpstreamTaskSink
from ..protocol import Era
from .wire import declaring_tasks

__all__ = ["UpstreamTaskCall", "lost_result"]

logger = logging.getLogger(__name__)

_TERMINAL = frozenset({"completed", "failed", "cancelled"})
# Polls in a row that may fail (connection trouble) before the task counts as lost.
_MAX_POLL_FAILURES = 8


def lost_result(tool: str, effect: Effect, reason: str) -> dict[str, Any]:
    """The tool result of a lost task: failed for a read, failed + outcome unknown otherwise."""
    if effect is Effect.READ:
        text = f"The task running {tool} was lost ({reason}); it is a read, so it is safe to call again."
        return {"content": [{"type": "text", "text": text}], "isError": True}
    text = (
        f"The task running {tool} was lost ({reason}), so whether it took effect is unknown. It will not be "
        "sent again with this key; check the target system before retrying with a new key."
    )
    return {"content": [{"type": "text", "text": text}], "isError": True, "_meta": {OUTCOME_KEY: Outcome.UNKNOWN.value}}


@dataclass
class UpstreamTaskCall:
    """One tool call run as an upstream task; `request` is handed to the pipeline."""

    upstream: Upstream
    tool: str  # the exposed name (for texts)
    effect: Effect
    task_support: str  # what a handshake-era upstream listed: forbidden, optional, required
    sink: UpstreamTaskSink | None
    default_ttl_ms: int
    clock: Callable[[], float]
    refuse_plain: bool = False  # tasks.plain_required: refuse
    # Who calls: the upstream may take each caller's own token (auth.mode token_exchange).
    caller: Identity | None = None

    async def request(self, method: str, params: dict[str, Any] | None, *, relay: CallRelay | None = None,
                      timeout: float | None = None) -> dict[str, Any]:
        assert method == "tools/call" and params is not None
        version, stateless = await self.upstream.connection_facts()
        era = Era.of(version)
        modern = era is Era.MODERN
        resume = self.sink.resume_task_id if self.sink is not None else None
        wanted = self.task_support == "required" or (self.sink is not None and self.task_support == "optional")
        if resume is None and not modern and not wanted:
            return await self.upstream.request("tools/call", params, relay=relay, timeout=timeout, caller=self.caller)
        if resume is None and modern and self.sink is None and self.refuse_plain:
            # A plain client's call, as it is: the upstream refuses a task-required tool itself.
            return await self.upstream.request("tools/call", params, relay=relay, timeout=timeout, caller=self.caller)
        ttl_ms = (self.sink.ttl_ms if self.sink is not None else None) or self.default_ttl_ms
        if resume is not None:
            task_id, interval_ms = resume, None
        else:
            created = await self.upstream.request("tools/call", _task_params(params, era, ttl_ms), relay=relay, caller=self.caller)
            task = _task_of(created, era)
            if task is None:
                return created  # the upstream answered at once
            task_id = str(task["taskId"])
            interval_ms = task.get("pollIntervalMs" if modern else "pollInterval")
            granted = task.get("ttlMs" if modern else "ttl")
            if isinstance(granted, int) and granted > 0:
                ttl_ms = min(ttl_ms, granted)
            if self.sink is not None:
                await self.sink.created(task_id, era=version, stateless=stateless, poll_interval_ms=interval_ms, ttl_ms=ttl_ms)
        deadline = self.clock() + ttl_ms / 1000
        try:
            return await self._poll(task_id, era, interval_ms, deadline, relay)
        except anyio.get_cancelled_exc_class():
            await self._cancel_quietly(task_id)  # the caller went away or the task was cancelled
            raise

    async def _poll(self, task_id: str, era: Era, interval_ms: Any, deadline: float,
                    relay: CallRelay | None) -> dict[str, Any]:
        interval: float | None = None
        failures = 0
        seen: tuple[Any, ...] | None = None
        answered: set[str] = set()  # input requests already answered (a poll may still list them)
        steps = 0
        modern = era is Era.MODERN
        while True:
            interval = next_interval(interval, interval_ms)
            if self.clock() >= deadline:
                await self._cancel_quietly(task_id)
                return lost_result(self.tool, self.effect, "its time to live ran out before it finished")
            await anyio.sleep(max(0.0, min(interval, deadline - self.clock())))
            if self.clock() >= deadline:
                continue
            try:
                task = await self.upstream.request("tasks/get", declaring_tasks({"taskId": task_id}, era), caller=self.caller)
            except UpstreamRpcError as exc:
                return lost_result(self.tool, self.effect, f"the upstream no longer knows it: {exc.reason}")
            except UpstreamError as exc:
                failures += 1
                logger.info("upstream %s: tasks/get %s failed (%s)", self.upstream.name, task_id, exc.reason)
                if failures >= _MAX_POLL_FAILURES:
                    return lost_result(self.tool, self.effect, f"the upstream stopped answering: {exc.reason}")
                continue
            failures = 0
            status = str(task.get("status"))
            interval_ms = task.get("pollIntervalMs" if modern else "pollInterval", interval_ms)
            message = task.get("statusMessage") if isinstance(task.get("statusMessage"), str) else None
            inputs = task.get("inputRequests") if isinstance(task.get("inputRequests"), dict) else None
            if (status, message, inputs) != seen:
                seen = (status, message, inputs)
                steps += 1
                if self.sink is not None:
                    await self.sink.status(status, message, inputs)
                if relay is not None and message:
                    await relay.progress(steps, None, message)
            if modern:
                done = await self._modern_step(task_id, status, task, inputs, relay, answered)
            else:
                done = await self._handshake_step(task_id, status, relay)
            if done is not None:
                return done

    async def _modern_step(self, task_id: str, status: str, task: dict[str, Any], inputs: dict[str, Any] | None,
                           relay: CallRelay | None, answered: set[str]) -> dict[str, Any] | None:
        if status == "completed":
            result = task.get("result")
            return result if isinstance(result, dict) else {"content": [], "isError": False}
        if status == "failed":
            found = task.get("error")
            error: dict[str, Any] = found if isinstance(found, dict) else {}
            await self._failed(error)
            raise UpstreamRpcError(self.upstream.name, int(error.get("code", -32603)), str(error.get("message", "")),
                                   error.get("data"))
        if status == "cancelled":
            return _cancelled(self.tool)
        if status == "input_required" and inputs and not (self.sink is not None and self.sink.carries_input):
            fresh = {k: v for k, v in inputs.items() if k not in answered}
            if fresh:
                done = await self._answer_inputs(task_id, fresh, relay)
                answered.update(fresh)
                return done
        return None

    async def _handshake_step(self, task_id: str, status: str, relay: CallRelay | None) -> dict[str, Any] | None:
        if status == "cancelled":
            return _cancelled(self.tool)
        if status not in _TERMINAL and status != "input_required":
            return None
        # tasks/result blocks until the task ends and carries its requests (elicitation...) to us.
        try:
            return await self.upstream.request("tasks/result", {"taskId": task_id}, relay=relay, timeout=24 * 3600, caller=self.caller)
        except UpstreamRpcError as exc:
            await self._failed({"code": exc.code, "message": exc.rpc_message, **({"data": exc.data} if exc.data else {})})
            raise

    async def _answer_inputs(self, task_id: str, inputs: dict[str, Any], relay: CallRelay | None) -> dict[str, Any] | None:
        """A client that cannot see the task answers its input requests on its own request, if it
        can: a handshake-era client on its session; a 2026-07-28 client in `input_required` rounds
        of its call (the pipeline parked it: gateway/pipeline/rounds.py). The answers (a decline or
        cancel too) go to the task with `tasks/update`, and the task is followed on."""
        asked = {k: r for k, r in inputs.items() if isinstance(r, dict) and isinstance(r.get("method"), str)}
        try:
            if relay is None:
                raise RelayRefused(-32601, "nobody is waiting on this call")
            responses = await _ask_all(relay, asked)
        except RelayRefused as exc:
            await self._cancel_quietly(task_id)
            text = (f"The tool {self.tool} needs input from the user ({', '.join(inputs)}), and this client cannot "
                    f"provide it ({exc.message}); the task was cancelled. Call it from a client that declares "
                    f"{_capabilities_text(asked)} in its requests (2026-07-28: the questions come as input_required "
                    "rounds of the call) or on a live session, or call it as a task from a client that "
                    "declares the io.modelcontextprotocol/tasks extension to answer its questions.")
            return {"content": [{"type": "text", "text": text}], "isError": True}
        await self.upstream.request("tasks/update", declaring_tasks({"taskId": task_id, "inputResponses": responses}, Era.MODERN), caller=self.caller)
        return None

    async def _failed(self, error: dict[str, Any]) -> None:
        if self.sink is not None:
            await self.sink.failed(error)

    async def _cancel_quietly(self, task_id: str) -> None:
        with anyio.CancelScope(shield=True), anyio.move_on_after(10):
            try:
                version, _ = await self.upstream.connection_facts()
                await self.upstream.request("tasks/cancel", declaring_tasks({"taskId": task_id}, Era.of(version)), caller=self.caller)
            except UpstreamError as exc:
                logger.info("upstream %s: tasks/cancel %s: %s", self.upstream.name, task_id, exc.reason)


async def _ask_all(relay: CallRelay, asked: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Each input request's answer from the client. A 2026-07-28 client's relay is asked them all
    at once (a parked call puts questions asked together in one round); a session, one by one.
    Raises the first RelayRefused."""
    responses: dict[str, Any] = {}
    if not relay.modern:
        for key, request in asked.items():
            responses[key] = await relay.request(request["method"], request.get("params"))
        return responses
    refused: list[RelayRefused] = []
    async with anyio.create_task_group() as tg:
        async def ask(key: str, request: dict[str, Any]) -> None:
            try:
                responses[key] = await relay.request(request["method"], request.get("params"))
            except RelayRefused as exc:
                refused.append(exc)
                tg.cancel_scope.cancel()

        for key, request in asked.items():
            tg.start_soon(ask, key, request)
    if refused:
        raise refused[0]
    return responses


def _capabilities_text(asked: dict[str, dict[str, Any]]) -> str:
    names = sorted({CAPABILITY_OF.get(r["method"], r["method"]) for r in asked.values()})
    return " and ".join(names) or "the capability its questions need"


def _task_params(params: dict[str, Any], era: Era, ttl_ms: int) -> dict[str, Any]:
    return declaring_tasks(params, era) if era is Era.MODERN else {**params, "task": {"ttl": ttl_ms}}


def _task_of(result: dict[str, Any], era: Era) -> dict[str, Any] | None:
    """The task an upstream handed out for a task-augmented call, or None for a plain result."""
    if era is Era.MODERN:
        return result if result.get("resultType") == "task" and isinstance(result.get("taskId"), str) else None
    task = result.get("task")
    return task if isinstance(task, dict) and isinstance(task.get("taskId"), str) else None


def _cancelled(tool: str) -> dict[str, Any]:
    text = f"The task running {tool} was cancelled on the upstream server before it finished."
    return {"content": [{"type": "text", "text": text}], "isError": True}
