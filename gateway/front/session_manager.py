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

It touches SDK internals: `_admit_session`, `_discard_session`, `_handle_stateful_request`,
`_server_instances` and the transport's `_event_store`; `tests/unit/test_sdk_internals.py` fails
loudly when an SDK upgrade moves them.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthorizationContext
from mcp.server.streamable_http import StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.types import Receive, Scope, Send

from ..auth.principals import ANONYMOUS
from ..errors import SessionLimitReached
from ..http.asgi import header, refuse
from ..internals import admit_session, rekey_session, set_event_store
from .event_store import DEFAULT_SESSION_BYTES, EventBudget, FrontEventStore
from .forwarding import SessionForwarding

__all__ = ["GatewaySessionManager"]


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

    def open_sessions(self, principal: str) -> int:
        return self._open_by_principal[principal]

    async def _handle_stateful_request(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.forwarding is not None:
            found = header(scope, b"mcp-session-id")
            session_id = found.decode("latin-1") if found is not None else None
            if session_id is not None and session_id not in self._server_instances:
                if await self.forwarding.handle(session_id, scope, receive, send):
                    return
        try:
            await super()._handle_stateful_request(scope, receive, send)
        except SessionLimitReached as exc:  # raised by _admit_session, before any response
            headers = [(b"retry-after", b"1")] if exc.status == 503 else []
            await refuse(send, exc.status, exc.code, exc.message, headers)

    def _admit_session(self, requestor: AuthorizationContext | None) -> StreamableHTTPServerTransport | None:
        # No requestor: no auth.tokens, every client is `anonymous` and one per-principal cap would only
        # be a smaller process cap; server.max_sessions alone applies then.
        principal = requestor["client_id"] if requestor is not None else ANONYMOUS
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
        if self.forwarding is not None:  # the id names this process, so other replicas forward to it
            rekey_session(self, transport, self.forwarding.new_session_id())
        assert transport.mcp_session_id is not None
        self._principal_of[transport.mcp_session_id] = principal
        self._open_by_principal[principal] += 1
        if self._event_buffer > 0:
            set_event_store(transport, FrontEventStore(self._event_buffer, max_bytes=self._event_buffer_bytes,
                                                       budget=self._budget))
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
        await super()._discard_session(session_id, transport)

