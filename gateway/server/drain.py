"""Graceful drain: what SIGTERM does (gateway/server/serve.py sends it here).

    drain = Drain()                       # one per process, made before the app
    app = create_app(config, drain=drain) # /readyz reads it; /mcp's edge asks it (http/edge.py)
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

from ..errors import DRAINING
from ..http.asgi import Refusal

__all__ = ["Drain"]

logger = logging.getLogger(__name__)

# An implementation-defined JSON-RPC server error: "not here, not now; nothing was done".
_DRAINING = Refusal(
    503, DRAINING, "the gateway is shutting down; the request was not processed: send it again",
    ((b"connection", b"close"), (b"retry-after", b"1")),
)


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

    def admit(self) -> Refusal | None:
        """A request comes in (`/mcp`'s edge asks, http/edge.py): None, and it counts as in flight
        until `left()`; while draining, the 503 to answer instead (nothing was done)."""
        if self.draining:
            return _DRAINING
        self.in_flight += 1
        return None

    def left(self) -> None:
        self.in_flight -= 1
        if not self.in_flight and self._idle is not None:
            self._idle.set()
