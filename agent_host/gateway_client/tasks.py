"""Tools that need a task (`execution.taskSupport: required`), called as MCP tasks (2025-11-25).

Always on the 2025-11-25 era: these are the core tasks of 2025-11-25 (`task` on `tools/call`,
`tasks/result`), used when the host speaks 2025-11-25 to the gateway, and for a call that already
has such a task. On 2026-07-28 tasks are an extension (SEP-2663): `modern_tasks.py`.

The host sends `tools/call` with a `task` parameter and the call's idempotency key, records the
task id durably (`host_tasks` in the session store, SQLite or PostgreSQL) before it polls, polls
`tasks/get` at the task's pollInterval (its status messages become progress), and reads the end
with `tasks/result`. A host killed while a task runs finds the task id at its restart and polls the
same task again instead of calling the tool again. A retried creation is safe for every effect:
the gateway's fence answers the same key with the same task.

A poll loop that is cancelled (the turn was cancelled) cancels its task (`tasks/cancel`);
`cancel_tasks` cancels every task still open for a set of keys (e.g. a cancelled turn's calls).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
import mcp_types as types
from mcp.shared.exceptions import MCPError

from gateway.conventions.answers import Answer
from gateway.conventions.keys import IDEMPOTENCY_KEY
from gateway.conventions.outcomes import AttemptEvent, Interrupted, NotSent, Replied, RpcError
from gateway.internals import client_raw_request

from ..domain.parking import TurnParked
from ..domain.records import OPEN_TASK_STATUSES
from ..store.session_store import SessionStore
from .connection import HANDSHAKE, FormAsker, GatewayConnection, GatewayUnavailable, describe

__all__ = ["HostTasks", "TaskCaller", "TaskStatus"]

log = logging.getLogger(__name__)

_TERMINAL = frozenset({"completed", "failed", "cancelled"})
_TASK_TTL_MS = 24 * 3600 * 1000
_MIN_POLL, _MAX_POLL = 0.1, 30.0
# Polls that may fail in a row (the gateway restarting) before the call counts as interrupted.
_POLL_FAILURES = 30


class HostTasks:
    """The task ids of the host's tool calls, by idempotency key, in the session store
    (`store/sqlite_tasks.py`: SQLite or PostgreSQL, so every host process on the store knows them)."""

    def __init__(self, store: SessionStore) -> None:
        self.store = store

    async def task_of(self, key: str) -> tuple[str, str] | None:
        """(task id, last seen status) of the call with this key."""
        return await self.store.task_of(key)

    async def record(self, key: str, task_id: str, tool: str, status: str, poll_interval: float | None = None) -> None:
        await self.store.record_task(key, task_id, tool, status, poll_interval)


OnProgress = Callable[[float, float | None, str | None], Any]


@dataclass(frozen=True)
class TaskStatus:
    """What one `tasks/get` of the service said: the status (None: the poll failed; `unknown`: the
    gateway no longer knows the task) and the task's pollInterval in seconds."""

    status: str | None
    poll_interval: float | None = None


class TaskCaller:
    """One tool call as a task: create (or find) it, poll it, read its end.

    `park` (`dex-agent serve`): once the task runs by itself (`working`), the turn is parked
    (`TurnParked`) instead of polling in memory; the service polls the stored task (`statuses`,
    `service/task_watcher.py`) and drives the turn again when the task ended or asks for input,
    and the turn then reads its end here (the same task, found by the call's key)."""

    def __init__(self, connection: GatewayConnection, tasks: HostTasks, park: bool = False) -> None:
        self._connection = connection
        self._tasks = tasks
        self._park = park

    @property
    def tasks(self) -> HostTasks:
        return self._tasks

    async def known(self, key: str) -> bool:
        """Whether this call already has a task (a restarted host resumes it)."""
        return await self._task_of(key) is not None

    async def _task_of(self, key: str) -> tuple[str, str] | None:
        """The call's task (id, status). Cancelled here (a cancelled turn resuming a call that was
        parked on its task), the task is cancelled upstream, as from a cancelled poll."""
        try:
            return await self._tasks.task_of(key)
        except anyio.get_cancelled_exc_class():
            await self._cancel_shielded(key)
            raise

    async def _cancel_shielded(self, key: str) -> None:
        with anyio.CancelScope(shield=True), anyio.move_on_after(10):
            await self.cancel(key)

    async def call(self, name: str, arguments: dict[str, Any], key: str,
                   on_progress: OnProgress | None = None, on_sent: Callable[[], Any] | None = None,
                   ask_form: FormAsker | None = None, on_task: Callable[[], Any] | None = None) -> AttemptEvent:
        """The call's end as an attempt event (the re-issue rules read it like a plain call's)."""
        known = await self._task_of(key)
        if known is not None:
            log.info("%s (key %s): resuming task %s", name, key, known[0])
            task_id = known[0]
        else:
            try:
                async with self._connection.session(era=HANDSHAKE) as client:
                    if on_sent is not None:
                        await on_sent()
                    created = await _raw(client, "tools/call", {"name": name, "arguments": arguments,
                                                                "_meta": {IDEMPOTENCY_KEY: key},
                                                                "task": {"ttl": _TASK_TTL_MS}})
            except GatewayUnavailable as exc:
                return NotSent(str(exc))
            except MCPError as exc:
                return RpcError(exc.error.code, exc.error.message, exc.error.data)
            except Exception as exc:  # noqa: BLE001 - the request may have left: the same key finds the same task
                return Interrupted(describe(exc))
            task = created.get("task")
            if not isinstance(task, dict):  # the gateway answered at once
                return Replied(Answer.from_wire(created))
            task_id = str(task["taskId"])
            await self._tasks.record(key, task_id, name, str(task.get("status")), _interval(task))
        try:
            if on_task is not None:
                await on_task()
            return await self._poll(name, key, task_id, on_progress, ask_form)
        except anyio.get_cancelled_exc_class():
            await self._cancel_shielded(key)
            raise

    async def _poll(self, name: str, key: str, task_id: str, on_progress: OnProgress | None,
                    ask_form: FormAsker | None = None) -> AttemptEvent:
        state = _PollState()
        while True:
            try:
                async with self._connection.session(ask_form, era=HANDSHAKE) as client:
                    outcome = await self._poll_session(client, name, key, task_id, on_progress, ask_form is not None, state)
                if outcome is None:  # runs by itself (recorded): the service polls it, the turn is parked
                    raise TurnParked(f"upstream task {task_id}", None)
                return outcome
            except TurnParked:
                raise
            except MCPError as exc:
                if exc.error.code == types.INVALID_PARAMS:  # the gateway no longer knows the task
                    return Interrupted(f"the gateway no longer knows task {task_id}: {exc.error.message}")
                state.failures += 1
            except Exception as exc:  # noqa: BLE001 - the gateway may be restarting: poll again
                state.failures += 1
                log.info("%s: polling task %s failed (%s)", name, task_id, describe(exc))
            if state.failures >= _POLL_FAILURES:
                return Interrupted(f"task {task_id} could not be polled")
            await anyio.sleep(min(0.2 * state.failures, 2.0))

    async def _poll_session(self, client: Any, name: str, key: str, task_id: str, on_progress: OnProgress | None,
                            asks_forms: bool, state: "_PollState") -> AttemptEvent | None:
        """Poll on one session until the task ends (None: it runs by itself and the turn parks). A
        2025-11-25 task asks its questions on tasks/result (elicitation on this session): while it
        is input_required, one tasks/result is held open beside the polls. An error of a poll is
        raised as itself (not in a group)."""
        error: Exception | None = None
        outcome: AttemptEvent | None = None
        async with anyio.create_task_group() as asks:
            try:
                while outcome is None:
                    task = await _raw(client, "tasks/get", {"taskId": task_id})
                    state.failures = 0
                    status, message = str(task.get("status")), task.get("statusMessage")
                    if (status, message) != state.seen:
                        state.seen, state.step = (status, message), state.step + 1
                        await self._tasks.record(key, task_id, name, status, _interval(task))
                        if on_progress is not None and isinstance(message, str):
                            await on_progress(state.step, None, message)
                    if status in _TERMINAL:
                        outcome = await self._end(client, task_id)
                        break
                    if self._park and status in OPEN_TASK_STATUSES and not state.asking:
                        break  # outcome None: parks the turn (`_poll`, outside the session)
                    if status == "input_required" and asks_forms and not state.asking:
                        state.asking = True
                        asks.start_soon(self._carry_questions, client, task_id, state)
                    await anyio.sleep(min(max(_interval(task) or 1.0, _MIN_POLL), _MAX_POLL))
            except Exception as exc:  # noqa: BLE001 - handed to _poll outside the task group
                error = exc
            asks.cancel_scope.cancel()
        if error is not None:
            raise error
        return outcome

    async def _carry_questions(self, client: Any, task_id: str, state: "_PollState") -> None:
        """Hold a tasks/result open, so the task's questions reach this session; its answer (or its
        timeout) is not the call's end, which the poll reads."""
        try:
            await _raw(client, "tasks/result", {"taskId": task_id})
        except Exception as exc:  # noqa: BLE001 - the poll decides the end; a later question asks again
            log.info("tasks/result of %s (carrying its questions) ended: %s", task_id, describe(exc))
        finally:
            state.asking = False

    async def _end(self, client: Any, task_id: str) -> AttemptEvent:
        try:
            return Replied(Answer.from_wire(await _raw(client, "tasks/result", {"taskId": task_id})))
        except MCPError as exc:
            return RpcError(exc.error.code, exc.error.message, exc.error.data)

    async def statuses(self, task_ids: list[str]) -> dict[str, TaskStatus]:
        """One `tasks/get` per task, in order, on one gateway session (the service's poll of the
        tasks its parked turns wait for). A failed session fails every poll (status None)."""
        found: dict[str, TaskStatus] = {}
        try:
            async with self._connection.session(era=HANDSHAKE) as client:  # the era the tasks were made on
                for task_id in task_ids:
                    try:
                        task = await _raw(client, "tasks/get", {"taskId": task_id})
                    except MCPError as exc:
                        known = exc.error.code != types.INVALID_PARAMS
                        found[task_id] = TaskStatus(None if known else "unknown")
                        continue
                    found[task_id] = TaskStatus(str(task.get("status")), _interval(task))
        except Exception as exc:  # noqa: BLE001 - the gateway is unreachable or restarting: polled again later
            log.info("polling %d upstream task(s) failed: %s", len(task_ids), describe(exc))
        return {task_id: found.get(task_id, TaskStatus(None)) for task_id in task_ids}

    async def cancel(self, key: str) -> bool:
        """Cancel the task of this call, if it has one that is still open."""
        known = await self._tasks.task_of(key)
        if known is None or known[1] in _TERMINAL:
            return False
        try:
            async with self._connection.session(era=HANDSHAKE) as client:
                await _raw(client, "tasks/cancel", {"taskId": known[0]})
        except Exception as exc:  # noqa: BLE001 - best effort: the task's TTL ends it anyway
            log.warning("cancelling task %s failed: %s", known[0], describe(exc))
            return False
        return True

    async def cancel_tasks(self, keys: list[str]) -> int:
        """Cancel the open tasks of these calls (a cancelled turn's); how many were cancelled."""
        return sum([await self.cancel(key) for key in keys])


class _PollState:
    """A task's polls across sessions: failures in a row, the last status seen, and whether a
    tasks/result is open to carry the task's questions."""

    def __init__(self) -> None:
        self.failures = 0
        self.seen: tuple[str, Any] | None = None
        self.step = 0
        self.asking = False


def _interval(task: dict[str, Any]) -> float | None:
    """A task's pollInterval in seconds (None when it names none)."""
    interval = task.get("pollInterval")
    return interval / 1000 if isinstance(interval, (int, float)) and interval > 0 else None


async def _raw(client: Any, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """A request the SDK's typed methods do not know (tasks), through the client's own dispatcher
    (which, as for every request, puts the trace context in `_meta` when the host is traced)."""
    return await client_raw_request(client.session, method, params)
