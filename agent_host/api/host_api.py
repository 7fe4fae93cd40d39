"""The host's HTTP API on the session store, served on loopback (`--approvals-port` inside the
host, or `dex-agent approvals serve` on its own): the approvals API (`approvals_api`), sessions,
questions, steering, cancelling and the live event stream (`session_api`), and the web page
(`web_page`). Every data route takes an approver's bearer token; the agent's own is refused.
The guards (`guard`: Host and Origin, the token before the body, the body cap) are applied
once, as middleware.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio
from starlette.applications import Starlette

from .guard import ApiGuardSettings, guarded_app
from .approvals_api import Auth, approval_routes
from .chat_api import ChatDefaults, chat_routes
from .session_api import session_routes
from ..store.session_store import SessionStore
from .web_page import page_routes


def host_app(
    store: SessionStore,
    approver_tokens: list[str],
    agent_tokens: list[str],
    clock: Callable[[], float] = time.time,
    guard: ApiGuardSettings = ApiGuardSettings(),
    chat: ChatDefaults | None = None,
) -> Starlette:
    """Build it inside the event loop that serves it; `app.state.shutdown` ends the live streams.
    With `chat` (`dex-agent serve`), the chat routes too (`chat_api`)."""
    auth = Auth(approver_tokens, agent_tokens)
    shutdown = anyio.Event()
    data = (chat_routes(store, chat) if chat else []) + approval_routes(store, clock) + session_routes(store, shutdown, clock)
    app = guarded_app(data, page_routes(), auth.refuse, guard)
    app.state.shutdown = shutdown
    return app
