"""One upstream session per caller, for an upstream that keeps MCP sessions and takes each caller's
own identity (auth.mode token_exchange to a handshake-era server answering with `Mcp-Session-Id`).

A session is opened with the token of whoever opens it, and an upstream may bind the session to
that user: a session the gateway opened with its own token cannot carry a caller's request (the
upstream would run it as someone else, or refuse it). So each principal gets its own session,
negotiated with that principal's exchanged token and used only for that principal's requests;
the gateway's own requests (listings, subscriptions) keep the upstream's shared session.

The sessions are kept in a bounded LRU (`auth.max_caller_sessions`); a session idle for
`auth.caller_session_idle_seconds` is closed (a courtesy DELETE), and so is the least recently
used one past the bound, unless a request is still on it. All of them share one HTTP connection
pool, owned here.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio
from anyio.abc import TaskGroup

from ..auth.principals import Identity
from .channels.http import HttpChannel
from .session import UpstreamSession

__all__ = ["CallerSessions"]

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class _Held:
    session: UpstreamSession
    channel: HttpChannel
    used_at: float
    busy: int = 0


class CallerSessions:
    """The per-principal sessions of one upstream; `open_session(identity)` makes a new (not yet
    negotiated) session over its own channel, and returns both."""

    def __init__(
        self,
        name: str,
        open_session: Callable[[Identity], tuple[UpstreamSession, HttpChannel]],
        task_group: TaskGroup,
        *,
        size: int,
        idle_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self._open = open_session
        self._task_group = task_group
        self._size = size
        self._idle = idle_seconds
        self._clock = clock
        self._held: OrderedDict[str, _Held] = OrderedDict()
        self._closed = False

    def __len__(self) -> int:
        return len(self._held)

    @asynccontextmanager
    async def using(self, caller: Identity) -> AsyncIterator[UpstreamSession]:
        """The caller's session for one request (made when it has none, or its last one died)."""
        held = self._take(caller)
        held.busy += 1
        try:
            yield held.session
        finally:
            held.busy -= 1
            held.used_at = self._clock()
            if not held.session.alive:
                self._drop(caller.principal, held)

    def _take(self, caller: Identity) -> _Held:
        now = self._clock()
        held = self._held.get(caller.principal)
        if held is not None and held.session.alive:
            self._held.move_to_end(caller.principal)
            held.channel.caller = caller  # its latest token is the one exchanged from now on
            return held
        if held is not None:
            self._drop(caller.principal, held)
        self._sweep(now)
        session, channel = self._open(caller)
        held = _Held(session, channel, now)
        self._held[caller.principal] = held
        logger.info("upstream %s: opening a session of its own for principal %r", self.name, caller.principal)
        return held

    def _sweep(self, now: float) -> None:
        """Close the idle sessions, then the least recently used past the bound (never a busy one)."""
        for principal, held in list(self._held.items()):
            if held.busy == 0 and now - held.used_at >= self._idle:
                self._drop(principal, held)
        excess = len(self._held) + 1 - self._size
        for principal, held in list(self._held.items()):
            if excess <= 0:
                break
            if held.busy == 0:
                self._drop(principal, held)
                excess -= 1

    def _drop(self, principal: str, held: _Held) -> None:
        if self._held.get(principal) is held:
            del self._held[principal]
        if not self._closed:
            self._task_group.start_soon(self._close, held.session)

    @staticmethod
    async def _close(session: UpstreamSession) -> None:
        with anyio.CancelScope(shield=True):
            await session.aclose()

    async def aclose(self) -> None:
        self._closed = True
        held, self._held = list(self._held.values()), OrderedDict()
        for entry in held:
            await self._close(entry.session)
