"""The live handshake-era client sessions (stateful front), and what each one set.

The SDK hands handlers a per-request session; the connection under it lives as long as the
client's MCP session, and its standalone GET stream is where notifications that belong to no
request go. For each such connection the gateway keeps:

* the log level the client chose with `logging/setLevel` (log messages below it are not
  relayed; a 2026-07-28 upstream is asked for that level in each request's `_meta`);
* the resources it subscribed to (`resources/subscribe`): `notifications/resources/updated`
  reach only those sessions, and the upstream is watched while any session holds the URI;
* the tasks it watches, with the status it was last told: those it created (`tools/call` with
  `task`) or asked `tasks/get` of (its principal's only: the method answers no other task), until
  they end. `notifications/tasks/status` goes to that session when a task changes (here, or on
  another replica sharing PostgreSQL: gateway/storage/events.py).

Connections are held weakly: a closed session is forgotten, and its subscriptions released.
A stateless request has no connection that outlives it, so nothing is kept for it.

With replicas (`on_save`), what a session set is also written to the shared store each time it
changes (`save`), so another replica can adopt the session when this process dies (`restore`:
gateway/front/session_manager.py). Its watched tasks are written when one is added or ends, not
on every status notice (a task's messages may change often): after an adoption the session
may so be told a status again that it had heard from the dead replica.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any

from mcp.server import ServerRequestContext

from ..internals import session_connection
from ..tasks.records import TaskStatus
from .session_state import SessionState, Told

__all__ = ["LOG_LEVELS", "Sessions", "level_allows"]

logger = logging.getLogger(__name__)

LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
_LIST_CHANGED = {
    "tools": "send_tool_list_changed",
    "prompts": "send_prompt_list_changed",
    "resources": "send_resource_list_changed",
}

# Called with a URI when the last session holding it lets go (the upstream stops watching it).
Release = Callable[[str], Coroutine[Any, Any, None]]
Spawn = Callable[[Callable[[], Coroutine[Any, Any, None]]], object]  # a task group's start_soon
# Writes a session's state to the shared store, by session id.
Save = Callable[[str, SessionState], Coroutine[Any, Any, None]]


def level_allows(threshold: str | None, level: Any) -> bool:
    """Whether a message at `level` passes a session's `logging/setLevel` threshold."""
    if threshold is None or level not in LOG_LEVELS:
        return True
    return LOG_LEVELS.index(level) >= LOG_LEVELS.index(threshold)


@dataclass
class _State:
    level: str | None = None
    resources: set[str] = field(default_factory=set)
    # task id -> (status, status message) the session was last told (created: the CreateTaskResult).
    tasks: dict[str, Told] = field(default_factory=dict)


class Sessions:
    def __init__(self) -> None:
        self._states: weakref.WeakKeyDictionary[Any, _State] = weakref.WeakKeyDictionary()
        self._release: Release | None = None
        self._spawn: Spawn | None = None
        self._save: Save | None = None

    def on_save(self, save: Save) -> None:
        """`save(session_id, state)` runs whenever a session's state changes (replicas)."""
        self._save = save

    async def save(self, ctx: ServerRequestContext[Any]) -> None:
        """Write the session's state to the shared store (nothing without replicas, or before the
        handshake completed)."""
        connection = session_connection(ctx.session)
        state = self._state(ctx)
        if state is not None and connection is not None:
            await self._save_connection(connection, state)

    async def _save_connection(self, connection: Any, state: _State) -> None:
        if self._save is None:
            return
        params, session_id = getattr(connection, "client_params", None), getattr(connection, "session_id", None)
        if params is None or not isinstance(session_id, str):
            return
        await self._save(session_id, SessionState.of(connection.protocol_version, params, state.level, state.resources,
                                                     state.tasks))

    def restore(self, connection: Any, state: SessionState) -> None:
        """An adopted session's connection takes the state it had on the replica that died (its
        watched tasks too: the caller checks them against the task store, `unwatch_task`)."""
        kept = self._state_of(connection)
        kept.level = state.level
        kept.resources.update(state.resources)
        kept.tasks.update(state.tasks)

    def unwatch_task(self, connection: Any, task_id: str) -> None:
        """An adopted session's task that is no longer there (expired, deleted): not watched."""
        if (state := self._states.get(connection)) is not None:
            state.tasks.pop(task_id, None)

    def on_release(self, release: Release, spawn: Spawn) -> None:
        """`release(uri)` runs (through `spawn`, in the background) for each URI a closed session held."""
        self._release, self._spawn = release, spawn

    def remember(self, ctx: ServerRequestContext[Any]) -> None:
        self._state(ctx)

    def _state(self, ctx: ServerRequestContext[Any]) -> _State | None:
        connection = session_connection(ctx.session)
        if connection is None or not getattr(connection, "has_standalone_channel", False):
            return None  # a stateless request, or a 2026-07-28 one: nothing outlives it
        return self._state_of(connection)

    def _state_of(self, connection: Any) -> _State:
        state = self._states.get(connection)
        if state is None:
            state = self._states[connection] = _State()
            weakref.finalize(connection, self._closed, state.resources).atexit = False
        return state

    # -- what a session set -------------------------------------------------------------------

    def log_level(self, ctx: ServerRequestContext[Any]) -> str | None:
        """The session's `logging/setLevel` threshold (None: never set, or no session)."""
        state = self._state(ctx)
        return state.level if state is not None else None

    def set_log_level(self, ctx: ServerRequestContext[Any], level: str) -> None:
        if (state := self._state(ctx)) is not None:
            state.level = level

    def subscribe(self, ctx: ServerRequestContext[Any], uri: str) -> bool:
        """Note the session's subscription; True when it is new (the caller watches the upstream)."""
        state = self._state(ctx)
        if state is None or uri in state.resources:
            return False
        state.resources.add(uri)
        return True

    def unsubscribe(self, ctx: ServerRequestContext[Any], uri: str) -> bool:
        """True when the session held the subscription (the caller releases the upstream's watch)."""
        state = self._state(ctx)
        if state is None or uri not in state.resources:
            return False
        state.resources.discard(uri)
        return True

    def watch_task(self, ctx: ServerRequestContext[Any], task: dict[str, Any]) -> bool:
        """The session was told of this task (a CreateTaskResult's `task`, a `tasks/get` answer):
        tell it of changes until it ends. True when the session did not watch it yet (the caller saves)."""
        state = self._state(ctx)
        task_id, status, message = task.get("taskId"), task.get("status"), task.get("statusMessage")
        if state is None or not isinstance(task_id, str) or not isinstance(status, str):
            return False
        try:
            if TaskStatus(status).terminal:
                return False
        except ValueError:
            return False
        new = task_id not in state.tasks
        state.tasks[task_id] = (status, message if isinstance(message, str) else None)
        return new

    def _closed(self, resources: set[str]) -> None:
        if self._release is None or self._spawn is None:
            return
        release = self._release
        for uri in list(resources):
            try:
                self._spawn(lambda uri=uri: release(uri))  # type: ignore[misc]
            except RuntimeError:
                return  # shutting down: the upstreams are closed anyway

    # -- telling sessions -------------------------------------------------------------------------

    async def lists_changed(self, kinds: Iterable[str]) -> None:
        """`notifications/<kind>/list_changed` to every live session."""
        for kind in kinds:
            method = _LIST_CHANGED.get(kind)
            if method is None:
                continue
            for connection in list(self._states.keys()):
                await _send(connection, method)

    async def resource_updated(self, uri: str) -> None:
        """`notifications/resources/updated` to the sessions subscribed to `uri`."""
        for connection, state in list(self._states.items()):
            if uri in state.resources:
                await _send(connection, "send_resource_updated", uri)


    def watches_task(self, task_id: str) -> bool:
        """Whether a live session is waiting to hear of this task."""
        return any(task_id in state.tasks for state in self._states.values())

    async def task_status(self, task: dict[str, Any], *, terminal: bool) -> None:
        """`notifications/tasks/status` with `task` (a 2025-11-25 Task object) to the session that
        created it, when its status or message differs from what that session was last told."""
        task_id = task["taskId"]
        seen = (task["status"], task.get("statusMessage"))
        for connection, state in list(self._states.items()):
            told = state.tasks.get(task_id)
            if told is None or told == seen:
                continue
            if terminal:
                del state.tasks[task_id]
            else:
                state.tasks[task_id] = seen
            await _send(connection, "notify", "notifications/tasks/status", task)
            if terminal:
                await self._save_connection(connection, state)  # no longer watched: not carried to an adopter


async def _send(connection: Any, method: str, *args: Any) -> None:
    try:
        await getattr(connection, method)(*args)
    except Exception:  # noqa: BLE001 - a closed session just misses the notice
        logger.debug("could not send %s to a session", method, exc_info=True)
