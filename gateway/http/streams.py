"""GET streams at `/mcp`: ended after `server.stream_idle_seconds` without an event, or at drain.

A client's standalone GET stream (server-to-client notifications of a stateful session) can stay
open for hours; one that carries nothing for a long time is usually a client that is gone without
a FIN, or a proxy that will cut it anyway. Ending it cleanly (the last chunk is written, the
connection stays usable) lets a live client reconnect, and frees what a dead one held. A drain
ends every open stream at once (gateway/server/drain.py).
"""

from __future__ import annotations

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["IdleStreams"]


class IdleStreams:
    """The open GET streams of `/mcp` (http/edge.py serves each GET through `serve`)."""

    def __init__(self, idle_seconds: float) -> None:
        self._idle = idle_seconds
        self._open: set[anyio.CancelScope] = set()

    def close_all(self) -> None:
        for scope in list(self._open):
            scope.cancel()

    async def serve(self, app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
        """`app`'s answer to a GET, ended once it carries nothing for `idle_seconds` (or at drain)."""
        idle = self._idle
        started = completed = False

        with anyio.CancelScope(deadline=anyio.current_time() + idle) as stream:

            async def tracking(message: Message) -> None:
                nonlocal started, completed
                if message["type"] == "http.response.start":
                    started = True
                elif message["type"] == "http.response.body":
                    completed = not message.get("more_body", False)
                    stream.deadline = anyio.current_time() + idle
                await send(message)

            self._open.add(stream)
            try:
                await app(scope, receive, tracking)
            finally:
                self._open.discard(stream)
        if started and not completed:
            # Ended by us: finish the response so the connection closes cleanly.
            try:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            except OSError:
                pass  # the client is already gone
