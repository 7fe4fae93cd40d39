"""Graceful drain: what SIGTERM does (gateway/server/serve.py sends it here).

    drain = Drain()                       # one per process, made before the app
    app = create_app(config, drain=drain) # /readyz reads it; the front is wrapped in DrainGate
    drain.start()                         # on SIGTERM
    await drain.wait_idle(deadline)       # in-flight requests finished, or the deadline passed

From `start()` on: `/readyz` answers 503 (the orchestrator stops routing here), every new request
to `/mcp` is refused with 503 and a JSON-RPC error that says nothing was done (the client sends it
to another replica), and open GET streams are ended (their clients reconnect elsewhere). Requests
already in flight run to their end; a claimed write that outlives the deadline stays fenced in the
store, and its retry is answered by the fence rules (docs/fences.md).
"""

from __future__ import annotations

import logging
from typing import Protocol

import anyio
from starlette.types import ASGIApp, Receive, Scope, Send

from ..errors import DRAINING
from ..http.asgi import refuse

__all__ = ["Drain", "DrainGate"]

logger = logging.getLogger(__name__)

# An implementation-defined JSON-RPC server error: "not here, not now; nothing was done".


class Streams(Protocol):
    """Long-lived responses a drain ends (GET streams: http/streams.py; listen streams: front/events.py)."""

    def close_all(self) -> None: ...


class Drain:
    def __init__(self) -> None:
        self.draining = False
        self.in_flight = 0
        self._idle: anyio.Event | None = None
        self._streams: list[Streams] = []

    def watch_streams(self, streams: Streams) -> None:
        self._streams.append(streams)

    def start(self) -> None:
        """Refuse new requests from now on and end the open GET streams."""
        if self.draining:
            return
        self.draining = True
        logger.info("draining: %d request(s) in flight", self.in_flight)
        for streams in self._streams:
            streams.close_all()

    async def wait_idle(self, seconds: float) -> bool:
        """True once no request is in flight, False when `seconds` passed first."""
        with anyio.move_on_after(seconds):
            while self.in_flight:
                self._idle = anyio.Event()
                await self._idle.wait()
            return True
        return False

    def entered(self) -> None:
        self.in_flight += 1

    def left(self) -> None:
        self.in_flight -= 1
        if not self.in_flight and self._idle is not None:
            self._idle.set()


class DrainGate:
    """Counts the requests in flight; refuses new ones while draining."""

    def __init__(self, app: ASGIApp, drain: Drain) -> None:
        self._app = app
        self._drain = drain

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        drain = self._drain
        if drain.draining:
            await refuse(
                send, 503, DRAINING, "the gateway is shutting down; the request was not processed: send it again",
                extra_headers=[(b"connection", b"close"), (b"retry-after", b"1")],
            )
            return
        drain.entered()
        try:
            await self._app(scope, receive, send)
        finally:
            drain.left()
