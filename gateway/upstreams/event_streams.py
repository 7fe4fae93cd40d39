"""The background streams of an upstream session: what the upstream says outside any call of ours.

* Handshake era, with a session (HTTP): the channel's standalone stream (a GET). The upstream
  sends there its list changes, resource updates, and requests that belong to no request of ours
  (server-everything's `roots/list`); the session answers those. It is opened before
  `notifications/initialized`, so a request the upstream sends as the session starts finds it.
  (Over stdio everything outside a call already arrives on stdout: there is nothing to open.)
* 2026-07-28: a `subscriptions/listen` request asking for every list change the upstream can
  report and the resource URIs the gateway's clients hold; opened again (with the new URIs)
  when those change, and after a broken stream.

Both are reopened after a failure (backing off to 30 s) and end with the session's negotiation.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

import anyio
from anyio.abc import TaskGroup

from ..errors import UpstreamError, UpstreamRpcError
from .channels.base import Channel, Negotiated
from .events import listen_filter
from .sse import StreamCursor

__all__ = ["EventStreams"]

logger = logging.getLogger(__name__)

_MAX_BACKOFF = 30.0


class StreamOwner(Protocol):
    """What the streams use of their session."""

    name: str
    closed: bool
    server_capabilities: dict[str, Any]
    watched: frozenset[str]

    async def listen(self, negotiated: Negotiated, notifications: dict[str, Any]) -> None: ...


class EventStreams:
    def __init__(self, session: StreamOwner, channel: Channel, task_group: TaskGroup) -> None:
        self._session = session
        self._channel = channel
        self._tg = task_group
        self._scope: anyio.CancelScope | None = None
        self._stream: anyio.CancelScope | None = None  # the current listen stream (reopened on a new filter)
        self._changed = anyio.Event()

    def spawn(self, job: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self._tg.start_soon(job)

    def stop(self) -> None:
        if self._scope is not None:
            self._scope.cancel()
            self._scope = None

    def refilter(self) -> None:
        """The URIs to listen for changed: reopen the listen stream with them."""
        self._changed.set()
        if self._stream is not None:
            self._stream.cancel()

    async def open_standalone(self, negotiated: Negotiated, wait_seconds: float) -> None:
        """Start the standalone stream of a new handshake-era session; return once it is open (or refused)."""
        self.stop()
        ready = anyio.Event()
        self._scope = scope = anyio.CancelScope()
        self._tg.start_soon(self._standalone, negotiated, ready, scope)
        with anyio.move_on_after(wait_seconds):
            await ready.wait()

    def start_listen(self, negotiated: Negotiated) -> None:
        self.stop()
        self._scope = scope = anyio.CancelScope()
        self._tg.start_soon(self._listen, negotiated, scope)

    async def _standalone(self, negotiated: Negotiated, ready: anyio.Event, scope: anyio.CancelScope) -> None:
        cursor = StreamCursor()
        backoff = 1.0
        with scope:
            try:
                while not self._session.closed:
                    opened = await self._channel.events(negotiated, cursor, ready)
                    ready.set()
                    if opened is None:
                        return  # the upstream offers no standalone stream (or the session ended)
                    backoff = cursor.retry_seconds if opened else min(backoff * 2, _MAX_BACKOFF)
                    await anyio.sleep(min(backoff, _MAX_BACKOFF))
            finally:
                ready.set()

    async def _listen(self, negotiated: Negotiated, scope: anyio.CancelScope) -> None:
        session = self._session
        backoff = 1.0
        with scope:
            while not session.closed:
                changed = self._changed = anyio.Event()
                notifications = listen_filter(session.server_capabilities, session.watched)
                if not notifications:
                    await changed.wait()  # nothing to listen for (yet)
                    continue
                self._stream = stream = anyio.CancelScope()
                with stream:
                    try:
                        await session.listen(negotiated, notifications)
                        backoff = 1.0  # ended on purpose by the upstream: listen again
                    except UpstreamRpcError as exc:
                        logger.info("upstream %s: subscriptions/listen refused: %s", session.name, exc.reason)
                        return
                    except UpstreamError as exc:
                        logger.info("upstream %s: listen stream broke: %s", session.name, exc.reason)
                        backoff = min(backoff * 2, _MAX_BACKOFF)
                if stream.cancel_called:
                    continue  # a new filter: listen again at once
                await anyio.sleep(backoff)
