"""The SDK's Streamable HTTP session manager, with one SSE event store per stateful session.

The SDK hands the one `event_store` it is given to every session's transport. The gateway's
store must be per session (`event_store.py` says why), and the SDK has no public hook for that,
so this subclass gives each transport its own store right after the SDK admits the session.
It touches two SDK internals, `_admit_session` and the transport's `_event_store`;
`tests/unit/test_sdk_internals.py` fails loudly when an SDK upgrade moves them.
"""

from __future__ import annotations

from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthorizationContext
from mcp.server.streamable_http import StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from ..internals import admit_session, set_event_store
from .event_store import FrontEventStore

__all__ = ["GatewaySessionManager"]


class GatewaySessionManager(StreamableHTTPSessionManager):
    """`event_buffer`: events kept per session for `Last-Event-ID` resumption (0: none, and no
    priming events). Everything else is the SDK's manager unchanged."""

    def __init__(self, *args: Any, event_buffer: int = 0, **kwargs: Any) -> None:
        kwargs.pop("event_store", None)  # one store per session, below; never a shared one
        super().__init__(*args, **kwargs)
        self._event_buffer = event_buffer if not self.stateless else 0

    def _admit_session(self, requestor: AuthorizationContext | None) -> StreamableHTTPServerTransport | None:
        transport = admit_session(self, requestor)
        if transport is not None and self._event_buffer > 0:
            set_event_store(transport, FrontEventStore(self._event_buffer))
        return transport
