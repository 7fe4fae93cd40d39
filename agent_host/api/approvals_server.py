"""Serving the approvals API on loopback, inside the host or on its own.

The port is bound before anything else starts, so a busy port is a one-line error before a
turn begins (uvicorn would log, `sys.exit` inside the event loop and leave the turn running).
The embedded server leaves signals to the host: Ctrl-C means the same with or without it.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from urllib.parse import quote

import uvicorn
from starlette.applications import Starlette

from gateway.http.lingering import LingeringHttpProtocol

LOOPBACK = "127.0.0.1"
GRACE_SECONDS = 2


class BindError(ValueError):
    """The approvals API's port could not be bound."""


def bind_loopback(port: int) -> socket.socket:
    """A listening TCP socket on 127.0.0.1:port; BindError with a one-line reason."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT only; a listener still refuses
        sock.bind((LOOPBACK, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise BindError(f"cannot serve the approvals API on {LOOPBACK}:{port}: {exc.strerror or exc}") from None
    return sock


class _EmbeddedServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # The host handles SIGINT/SIGTERM itself (Ctrl-C stops the host at once).
        yield


class ApprovalsServer:
    """The host API (approvals, sessions, the web page) on an already bound socket."""

    def __init__(self, app: Starlette, sock: socket.socket) -> None:
        self._sock = sock
        self._app = app
        # Open event streams are ended by the app's shutdown event; the grace period bounds the rest.
        # A refused request (its body unread) is closed in stages, so the client reads the refusal.
        config = uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=GRACE_SECONDS,
                                http=LingeringHttpProtocol)
        self._server = _EmbeddedServer(config)

    @property
    def base_url(self) -> str:
        host, port = self._sock.getsockname()[:2]
        return f"http://{host}:{port}"

    @property
    def url(self) -> str:
        return f"{self.base_url}/approvals"

    def page_url(self, session_id: str) -> str:
        return f"{self.base_url}/ui/sessions/{quote(session_id, safe='')}"

    async def serve(self) -> None:
        try:
            await self._server.serve(sockets=[self._sock])
        finally:
            self._sock.close()

    def stop(self) -> None:
        shutdown = getattr(self._app.state, "shutdown", None)
        if shutdown is not None:
            shutdown.set()
        self._server.should_exit = True
