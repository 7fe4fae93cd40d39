"""The session store (SQLite; or PostgreSQL through the same statements, `postgres.py`) as the
async host uses it: sessions, turns, messages, tool-call records, approvals, questions, controls
(steer, cancel, plan execution), usage, compactions, the session's event log, and for `serve`
leases, queued messages, the upstream tasks its turns wait for and the images it keeps.

Every state change is committed (WAL, synchronous=FULL) before the loop acts on it, so a host
killed at any instant resumes at a step boundary. The fsync of each commit happens off the
event loop: every statement runs in a worker thread, one at a time (a capacity-1 limiter,
first come first served), so commits land in the order they were asked for and the loop keeps
serving the model stream, the approvals API and parallel reads meanwhile. A caller that is
cancelled while its statement runs still waits for the commit (anyio does not abandon a
worker thread by default), so "committed before acting" holds under cancellation too.

Open the store in the event loop that uses it (`async with SessionStore(path) as store`).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Concatenate, Generic, ParamSpec, Self, TypeVar, overload

import anyio

from ..domain.records import ApprovalRecord, ApprovalStatus, CallStatus, SessionRecord, ToolCallRecord, TurnRecord, TurnStatus
from .postgres import is_postgres_url
from .sqlite_base import DEFAULT_RETAINED_MESSAGES
from .sqlite_store import SqliteSessionStore

DEFAULT_STORE_PATH = "var/dex-agent.db"
STORE_ENV = "DEX_AGENT_STORE"
LOCAL_STORE_ENV = "DEX_AGENT_LOCAL_STORE"

T = TypeVar("T")
P = ParamSpec("P")


def store_target(configured: str | None) -> str | Path:
    """The session store: a SQLite file, or a PostgreSQL URL (`postgresql://...?schema=NAME`)."""
    value = configured or os.environ.get(STORE_ENV) or DEFAULT_STORE_PATH
    return value if is_postgres_url(value) else Path(value)


def store_path(configured: str | None) -> Path:
    """The local file the host keeps its `login` beside: the SQLite store; with a PostgreSQL
    store, $DEX_AGENT_LOCAL_STORE or the default path (its folder created). Upstream task ids and
    images are kept in the session store itself."""
    target = store_target(configured)
    if isinstance(target, Path):
        return target
    local = Path(os.environ.get(LOCAL_STORE_ENV) or DEFAULT_STORE_PATH)
    local.parent.mkdir(parents=True, exist_ok=True)
    return local


class _OffThread(Generic[P, T]):
    """A statement of `SqliteSessionStore` as an async method of `SessionStore`: same arguments,
    run in the store's worker thread like every statement (looked up by name at each call)."""

    def __init__(self, statement: Callable[Concatenate[SqliteSessionStore, P], T]) -> None:
        self.name = statement.__name__
        self.__doc__ = statement.__doc__

    @overload
    def __get__(self, store: None, owner: type[SessionStore]) -> Self: ...

    @overload
    def __get__(self, store: SessionStore, owner: type[SessionStore]) -> Callable[P, Awaitable[T]]: ...

    def __get__(self, store: SessionStore | None, owner: type[SessionStore]) -> Self | Callable[P, Awaitable[T]]:
        if store is None:
            return self
        name = self.name

        async def call(*args: P.args, **kwargs: P.kwargs) -> T:
            return await store._run(lambda db: getattr(db, name)(*args, **kwargs))

        call.__name__ = call.__qualname__ = name
        call.__doc__ = self.__doc__
        return call


class SessionStore:
    """The async face of `SqliteSessionStore`: each of its statements below, off the event loop."""

    def __init__(self, path: str | Path, retained_message_limit: int | None = DEFAULT_RETAINED_MESSAGES) -> None:
        self.path: str | Path = path if is_postgres_url(path) else Path(path)
        self.retained_message_limit = retained_message_limit
        self._sqlite: SqliteSessionStore | None = None
        self._limiter: anyio.CapacityLimiter | None = None

    # Lifecycle --------------------------------------------------------------------------------

    async def open(self) -> None:
        if self._sqlite is None:
            self._limiter = anyio.CapacityLimiter(1)
            self._sqlite = await anyio.to_thread.run_sync(
                SqliteSessionStore, self.path, self.retained_message_limit, limiter=self._limiter)

    async def close(self) -> None:
        if self._sqlite is not None:
            sqlite, self._sqlite = self._sqlite, None
            await anyio.to_thread.run_sync(sqlite.close, limiter=self._limiter)

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        with anyio.CancelScope(shield=True):
            await self.close()

    async def _run(self, statement: Callable[[SqliteSessionStore], T]) -> T:
        sqlite = self._sqlite
        if sqlite is None:
            raise RuntimeError("the session store is not open")
        return await anyio.to_thread.run_sync(statement, sqlite, limiter=self._limiter)

    # Sessions ---------------------------------------------------------------------------------
    create_session = _OffThread(SqliteSessionStore.create_session)
    get_session = _OffThread(SqliteSessionStore.get_session)
    list_sessions = _OffThread(SqliteSessionStore.list_sessions)
    set_settings = _OffThread(SqliteSessionStore.set_settings)
    set_plan = _OffThread(SqliteSessionStore.set_plan)
    set_plan_status = _OffThread(SqliteSessionStore.set_plan_status)

    # Turns and messages -----------------------------------------------------------------------
    start_turn = _OffThread(SqliteSessionStore.start_turn)
    get_turn = _OffThread(SqliteSessionStore.get_turn)
    turns = _OffThread(SqliteSessionStore.turns)
    unfinished_turn = _OffThread(SqliteSessionStore.unfinished_turn)
    finish_turn = _OffThread(SqliteSessionStore.finish_turn)
    messages = _OffThread(SqliteSessionStore.messages)
    stored_messages = _OffThread(SqliteSessionStore.stored_messages)
    append_message = _OffThread(SqliteSessionStore.append_message)
    record_model_response = _OffThread(SqliteSessionStore.record_model_response)

    # Tool calls -------------------------------------------------------------------------------
    tool_call_ids = _OffThread(SqliteSessionStore.tool_call_ids)
    tool_calls = _OffThread(SqliteSessionStore.tool_calls)
    get_tool_call = _OffThread(SqliteSessionStore.get_tool_call)
    update_tool_call = _OffThread(SqliteSessionStore.update_tool_call)
    add_found_tools = _OffThread(SqliteSessionStore.add_found_tools)
    found_tools = _OffThread(SqliteSessionStore.found_tools)
    found_effect = _OffThread(SqliteSessionStore.found_effect)

    # Approvals --------------------------------------------------------------------------------
    create_approval = _OffThread(SqliteSessionStore.create_approval)
    get_approval = _OffThread(SqliteSessionStore.get_approval)
    pending_approvals = _OffThread(SqliteSessionStore.pending_approvals)
    decide_approval = _OffThread(SqliteSessionStore.decide_approval)

    # Controls, questions, usage, compactions, events -------------------------------------------
    request_control = _OffThread(SqliteSessionStore.request_control)
    pending_controls = _OffThread(SqliteSessionStore.pending_controls)
    mark_applied = _OffThread(SqliteSessionStore.mark_applied)
    apply_steers = _OffThread(SqliteSessionStore.apply_steers)
    has_pending_steer = _OffThread(SqliteSessionStore.has_pending_steer)
    cancel_waits = _OffThread(SqliteSessionStore.cancel_waits)
    create_question = _OffThread(SqliteSessionStore.create_question)
    get_question = _OffThread(SqliteSessionStore.get_question)
    call_questions = _OffThread(SqliteSessionStore.call_questions)
    pending_questions = _OffThread(SqliteSessionStore.pending_questions)
    answer_question = _OffThread(SqliteSessionStore.answer_question)
    usage_totals = _OffThread(SqliteSessionStore.usage_totals)
    record_compaction = _OffThread(SqliteSessionStore.record_compaction)
    compactions = _OffThread(SqliteSessionStore.compactions)
    apply_retention = _OffThread(SqliteSessionStore.apply_retention)
    append_event = _OffThread(SqliteSessionStore.append_event)
    events_after = _OffThread(SqliteSessionStore.events_after)

    # The service: leases, queued messages, due work (`sqlite_service.py`) -------------------------
    get_lease = _OffThread(SqliteSessionStore.get_lease)
    take_lease = _OffThread(SqliteSessionStore.take_lease)
    release_lease = _OffThread(SqliteSessionStore.release_lease)
    queue_message = _OffThread(SqliteSessionStore.queue_message)
    withdraw_message = _OffThread(SqliteSessionStore.withdraw_message)
    queued_messages = _OffThread(SqliteSessionStore.queued_messages)
    start_queued_turn = _OffThread(SqliteSessionStore.start_queued_turn)
    start_plan_execution = _OffThread(SqliteSessionStore.start_plan_execution)
    transcript = _OffThread(SqliteSessionStore.transcript)
    due_sessions = _OffThread(SqliteSessionStore.due_sessions)

    # Upstream tasks and the host's images (`sqlite_tasks.py`, `sqlite_images.py`) ----------------
    task_of = _OffThread(SqliteSessionStore.task_of)
    record_task = _OffThread(SqliteSessionStore.record_task)
    claim_task_polls = _OffThread(SqliteSessionStore.claim_task_polls)
    record_task_poll = _OffThread(SqliteSessionStore.record_task_poll)
    put_image = _OffThread(SqliteSessionStore.put_image)
    get_image = _OffThread(SqliteSessionStore.get_image)

__all__ = [
    "DEFAULT_STORE_PATH",
    "STORE_ENV",
    "ApprovalRecord",
    "ApprovalStatus",
    "CallStatus",
    "SessionRecord",
    "SessionStore",
    "ToolCallRecord",
    "TurnRecord",
    "TurnStatus",
    "store_path",
    "store_target",
]
