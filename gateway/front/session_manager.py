"""The SDK's Streamable HTTP session manager, with session caps and one SSE event store per session.

The SDK hands the one `event_store` it is given to every session's transport. The gateway's
store must be per session (`event_store.py` says why), and the SDK has no public hook for that,
so this subclass gives each transport its own store right after the SDK admits the session.

It also caps sessions per authenticated principal (`server.max_sessions_per_principal`), so one
principal cannot take every session of the process (`server.max_sessions`) from the others (without
`auth.tokens` every client is `anonymous` and only the process cap applies): past its cap
that principal's new session is answered 429 with a JSON-RPC error naming the limit, and past the
process's cap any new session is answered 503 the same way. A session ends when its client
deletes it or after `server.session_idle_timeout_seconds` without a request (the SDK's idle timer);
its count and its buffered events are given back then.

With replicas (`session_store`, gateway/storage/front_sessions.py) a session outlives the process
that holds it: what it set is in the shared store (`save`), and a request for a session whose
holder died is served by the replica it reaches, which adopts the session (`_serve_adopted`):
its connection is rebuilt initialized, from the stored state, without a new `initialize`. The
sessions' GET-stream events go to a shared log too (`event_log`, gateway/storage/front_events.py),
so the adopting replica replays what the client missed (event_store.py).

It touches SDK internals: `_admit_session`, `_discard_session`, `_handle_stateful_request`,
`_server_instances` and the transport's `_event_store`; `tests/unit/test_sdk_internals.py` fails
loudly when an SDK upgrade moves them.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
from pydantic import ValidationError

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, AuthorizationContext, authorization_context
from mcp.server.streamable_http import StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.types import Receive, Scope, Send

from ..auth.principals import ANONYMOUS
from ..errors import SessionLimitReached
from ..http.asgi import header, refuse
from ..internals import admit_session, rekey_session, serve_restored_loop, set_event_store
from .event_store import DEFAULT_SESSION_BYTES, EventBudget, FrontEventStore
from .forwarding import Adoption, SessionForwarding
from .session_state import SessionState

if TYPE_CHECKING:
    from ..pipeline.subscriptions import ResourceWatch
    from ..storage.front_events import FrontEventLog
    from ..storage.front_sessions import FrontSessionStore
    from .sessions import Sessions, Spawn

__all__ = ["GatewaySessionManager", "principal_of", "share_sessions"]

logger = logging.getLogger(__name__)

# An adopted session's connection, its stored state and its principal: the front restores what the session set.
OnAdopt = Callable[[Any, SessionState, str], None]
# An adopted session's connection, the ids of the tasks it watched, its principal: re-attached (app wiring).
TasksAdopted = Callable[[Any, list[str], str], Coroutine[Any, Any, None]]


def principal_of(requestor: AuthorizationContext | None) -> str:
    """Who opened a session: the authenticated client id, else `anonymous` (no auth.tokens)."""
    return requestor["client_id"] if requestor is not None else ANONYMOUS


class GatewaySessionManager(StreamableHTTPSessionManager):
    """`event_buffer`: events kept per session for `Last-Event-ID` resumption (0: none, and no
    priming events), at most `event_buffer_bytes` of them per session and `event_buffer_total_bytes`
    over all sessions. `max_sessions_per_principal`: open sessions per principal (None: no cap).
    Everything else is the SDK's manager."""

    def __init__(self, *args: Any, event_buffer: int = 0, event_buffer_bytes: int = DEFAULT_SESSION_BYTES,
                 event_buffer_total_bytes: int | None = None, max_sessions_per_principal: int | None = None,
                 forwarding: SessionForwarding | None = None, **kwargs: Any) -> None:
        kwargs.pop("event_store", None)  # one store per session, below; never a shared one
        super().__init__(*args, **kwargs)
        self._event_buffer = event_buffer if not self.stateless else 0
        self._event_buffer_bytes = event_buffer_bytes
        self._budget = EventBudget(event_buffer_total_bytes) if event_buffer_total_bytes is not None else None
        self._max_per_principal = max_sessions_per_principal
        self._principal_of: dict[str, str] = {}  # session id -> the principal that opened it
        self._open_by_principal: Counter[str] = Counter()
        self.forwarding = forwarding  # sessions other replicas hold (front/forwarding.py); set by the app
        self.session_store: FrontSessionStore | None = None  # sessions' state, shared (replicas); set by the app
        self.event_log: FrontEventLog | None = None  # sessions' GET-stream events, shared (replicas); set by the app
        self.on_adopt: OnAdopt | None = None
        self._stopping = False
        self._adopting: dict[str, anyio.Lock] = {}  # session id -> held while a request adopts it

    @asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        async with super().run():
            try:
                yield
            finally:
                self._stopping = True  # sessions ended by the stop stay in the store: another replica adopts them

    async def save(self, session_id: str, state: SessionState) -> None:
        """Write a session's state to the shared store (replicas); a failure is logged, the request goes on."""
        store, principal = self.session_store, self._principal_of.get(session_id)
        if store is None or principal is None:
            return
        try:
            if not await store.save(session_id, principal, state.model_dump()):
                logger.warning("session …%s: another replica adopted it", session_id[-12:])
        except Exception:  # noqa: BLE001 - the session goes on here; only its adoption elsewhere suffers
            logger.warning("session …%s: could not save its state", session_id[-12:], exc_info=True)

    def open_sessions(self, principal: str) -> int:
        return self._open_by_principal[principal]

    async def _handle_stateful_request(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            if self.forwarding is not None:
                found = header(scope, b"mcp-session-id")
                session_id = found.decode("latin-1") if found is not None else None
                if session_id is not None and session_id not in self._server_instances:
                    if await self._arriving_elsewhere(session_id, scope, receive, send):
                        return
                elif session_id is not None and await self._refused_lost_stream(session_id, scope, send):
                    return
            await super()._handle_stateful_request(scope, receive, send)
        except SessionLimitReached as exc:  # raised by _admit_session, before any response
            headers = [(b"retry-after", b"1")] if exc.status == 503 else []
            await refuse(send, exc.status, exc.code, exc.message, headers)

    async def _arriving_elsewhere(self, session_id: str, scope: Scope, receive: Receive, send: Send) -> bool:
        """A request for a session this process does not hold: forwarded to its live holder, or the
        session adopted here (True: answered); False: the SDK answers (404, or the session is here now)."""
        assert self.forwarding is not None
        lock = self._adopting.setdefault(session_id, anyio.Lock())
        try:
            user = scope.get("user")
            requestor = authorization_context(user) if isinstance(user, AuthenticatedUser) else None
            outcome = await self.forwarding.handle(session_id, scope, receive, send, principal_of(requestor),
                                                   adopting=lock, held_here=lambda: session_id in self._server_instances)
            if isinstance(outcome, Adoption):
                await self._serve_adopted(session_id, outcome, requestor, scope, send)
                return True
            return outcome
        finally:
            if not lock.locked() and not lock.statistics().tasks_waiting:
                self._adopting.pop(session_id, None)

    async def _serve_adopted(self, session_id: str, adoption: Adoption, requestor: AuthorizationContext | None,
                             scope: Scope, send: Send) -> None:
        """The session, rebuilt here from its stored state, serves the request that adopted it."""
        try:
            state = SessionState.model_validate(adoption.state)
            params = state.client_params()
        except ValidationError:
            logger.warning("session …%s: its stored state is not readable; the client initializes again",
                           session_id[-12:], exc_info=True)
            await refuse(send, 404, -32600, "Session not found: its stored state is not readable; initialize again")
            return
        transport = self._admit(requestor, session_id, adopted=True)
        if transport is None:
            raise SessionLimitReached(503, f"Too many open sessions: {self.max_sessions} (server.max_sessions); "
                                           "try again later")
        on_adopt, principal = self.on_adopt, principal_of(requestor)

        def restored(connection: Any) -> None:
            if on_adopt is not None:
                on_adopt(connection, state, principal)

        async def run_server(*, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
            async with transport.connect() as (read_stream, write_stream):
                task_status.started()
                try:
                    idle_scope = transport.idle_scope if transport.idle_scope is not None else anyio.CancelScope()
                    with idle_scope:
                        await serve_restored_loop(self.app, read_stream, write_stream, lifespan_state=self._lifespan_state,
                                                  session_id=session_id, version=state.version, client_params=params,
                                                  restored=restored)
                except Exception:
                    logger.exception("adopted session …%s crashed", session_id[-12:])
                finally:
                    await self._discard_session(session_id, transport)

        logger.info("session …%s: adopted from a replica that stopped", session_id[-12:])
        assert self._task_group is not None
        await self._task_group.start(run_server)
        await self._serve_held(session_id, transport, scope, adoption.receive, send)

    async def _serve_held(self, session_id: str, transport: StreamableHTTPServerTransport, scope: Scope,
                          receive: Receive, send: Send) -> None:
        if not await self._refused_lost_stream(session_id, scope, send):
            await transport.handle_request(scope, receive, send)

    async def _refused_lost_stream(self, session_id: str, scope: Scope, send: Send) -> bool:
        """An adopted session's client resuming a request stream of the replica that died: that
        request is lost, refused (410, True) so the client's request fails at once instead of waiting."""
        transport = self._server_instances.get(session_id)
        last_event = header(scope, b"last-event-id")
        if scope.get("method") != "GET" or last_event is None or transport is None:
            return False
        store = transport._event_store
        if not isinstance(store, FrontEventStore) or not store.lost_stream(last_event.decode("latin-1")):
            return False
        await refuse(send, 410, -32600, "The replica that served this request stopped; the request is lost "
                                        "(a keyed write answers from its fence when sent again)")
        return True

    def _admit_session(self, requestor: AuthorizationContext | None) -> StreamableHTTPServerTransport | None:
        return self._admit(requestor, None)

    def _admit(self, requestor: AuthorizationContext | None, session_id: str | None, *,
               adopted: bool = False) -> StreamableHTTPServerTransport | None:
        """A new session (`session_id` None) or one adopted from a replica that died (its own id)."""
        # No requestor: no auth.tokens, every client is `anonymous` and one per-principal cap would only
        # be a smaller process cap; server.max_sessions alone applies then.
        principal = principal_of(requestor)
        limit = self._max_per_principal if requestor is not None else None
        if limit is not None and self._open_by_principal[principal] >= limit:
            raise SessionLimitReached(
                429, f"Too many open sessions for this principal: {self._max_per_principal} "
                     "(server.max_sessions_per_principal); end one (DELETE) or wait for an idle one to expire")
        if self.max_sessions is not None and len(self._server_instances) >= self.max_sessions:
            raise SessionLimitReached(
                503, f"Too many open sessions: {self.max_sessions} (server.max_sessions); try again later")
        transport = admit_session(self, requestor)
        if transport is None or transport.mcp_session_id is None:
            return transport
        if session_id is not None:
            rekey_session(self, transport, session_id)
        elif self.forwarding is not None:  # the id names this process, so other replicas forward to it
            rekey_session(self, transport, self.forwarding.new_session_id())
        assert transport.mcp_session_id is not None
        self._principal_of[transport.mcp_session_id] = principal
        self._open_by_principal[principal] += 1
        if self._event_buffer > 0:
            durable = self.event_log.session(transport.mcp_session_id) if self.event_log is not None else None
            set_event_store(transport, FrontEventStore(self._event_buffer, max_bytes=self._event_buffer_bytes,
                                                       budget=self._budget, adopted=adopted, durable=durable))
        return transport

    async def _discard_session(self, session_id: str, transport: StreamableHTTPServerTransport) -> None:
        # Called once per ending, sometimes twice (a DELETE, then the session's task winding down).
        principal = self._principal_of.pop(session_id, None)
        if principal is not None:
            self._open_by_principal[principal] -= 1
            if self._open_by_principal[principal] <= 0:
                del self._open_by_principal[principal]
        store = transport._event_store
        if isinstance(store, FrontEventStore):
            store.close()
        if principal is not None and self.session_store is not None and not self._stopping:
            try:
                await self.session_store.forget(session_id)  # ended (DELETE, idle): nobody adopts it
                if self.event_log is not None:
                    await self.event_log.forget(session_id)
            except Exception:  # noqa: BLE001 - the rows are swept later
                logger.info("session …%s: could not remove its stored state", session_id[-12:], exc_info=True)
        await super()._discard_session(session_id, transport)



def share_sessions(manager: GatewaySessionManager, store: FrontSessionStore, sessions: Sessions, watch: ResourceWatch,
                   *, spawn: Spawn, tasks_adopted: TasksAdopted | None = None, event_log: FrontEventLog | None = None) -> None:
    """Replicas: the sessions' state goes to `store` as it changes, and an adopted session gets its
    log level, subscriptions and watched tasks back (the upstream watched again for each URI; the
    tasks re-attached by `tasks_adopted`, which checks them against the task store). `event_log`:
    the sessions' GET-stream events, replayed by an adopting replica."""
    manager.session_store = store
    manager.event_log = event_log
    sessions.on_save(manager.save)

    def adopted(connection: Any, state: SessionState, principal: str) -> None:
        sessions.restore(connection, state)

        async def watch_again() -> None:
            for uri in state.resources:
                await watch.hold(uri)

        async def tasks_again() -> None:
            if tasks_adopted is not None:
                await tasks_adopted(connection, list(state.tasks), principal)

        spawn(watch_again)
        if state.tasks:
            spawn(tasks_again)  # apart: an upstream that cannot be watched again does not stop it

    manager.on_adopt = adopted
