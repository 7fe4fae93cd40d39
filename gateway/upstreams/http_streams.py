"""The background stream of an HTTP upstream: what it says outside any call of ours.

* Handshake era, with a session: the standalone GET stream. The upstream sends there its list
  changes, resource updates, and requests that belong to no request of ours (server-everything's
  `roots/list`). Requests are answered at once in the background: relayed to the calling client
  when exactly one call is in flight (it can only be that call's), otherwise answered by the
  gateway (`roots/list`: no roots; `ping`; anything else an error) -- never left unanswered.
  The stream is opened before `notifications/initialized`, so a request the upstream sends as
  soon as the session starts finds it.
* 2026-07-28: a `subscriptions/listen` request asking for every list change the upstream can
  report and the resource URIs the gateway's clients hold; opened again (with the new URIs)
  when those change, and after a broken stream.

Both are reopened after a failure (backing off to 30 s) and end with the connection's era.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol

import anyio
from anyio.abc import TaskGroup

from ..errors import TransportError, UpstreamError, UpstreamRpcError
from .events import UpstreamEvents, listen_filter, route_event
from .sse import StreamCursor, read_events
from .transport import HttpRequest

if TYPE_CHECKING:
    from .http_wire import Era
    from .relay import CallRelay
    from .transport import HttpTransport

__all__ = ["EventStreams"]

logger = logging.getLogger(__name__)

_MAX_BACKOFF = 30.0
_NO_ANSWER_ID = -1  # the standalone stream answers none of our requests


class StreamOwner(Protocol):
    """What the event streams use of their connection (`HttpConnection`): its wire and its state."""

    name: str
    url: str
    transport: "HttpTransport"
    events: UpstreamEvents
    closed: bool
    server_capabilities: dict[str, Any]
    watched: frozenset[str]

    def base_headers(self, era: "Era") -> dict[str, str]: ...

    def only_call_relay(self) -> "CallRelay | None": ...

    async def answer_later(self, era: "Era", message: dict[str, Any], relay: "CallRelay | None",
                           tasks: TaskGroup) -> None: ...

    async def listen(self, era: "Era", notifications: dict[str, Any]) -> None: ...


class EventStreams:
    def __init__(self, connection: StreamOwner, task_group: TaskGroup) -> None:
        self._conn = connection
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

    async def open_standalone(self, era: "Era", wait_seconds: float) -> None:
        """Start the GET stream of a new handshake-era session; return once it is open (or refused)."""
        self.stop()
        ready = anyio.Event()
        self._scope = scope = anyio.CancelScope()
        self._tg.start_soon(self._standalone, era, ready, scope)
        with anyio.move_on_after(wait_seconds):
            await ready.wait()

    def start_listen(self, era: "Era") -> None:
        self.stop()
        self._scope = scope = anyio.CancelScope()
        self._tg.start_soon(self._listen, era, scope)

    # -- the handshake era's standalone GET stream ---------------------------------------------

    async def _standalone(self, era: "Era", ready: anyio.Event, scope: anyio.CancelScope) -> None:
        conn = self._conn
        cursor = StreamCursor()
        backoff = 1.0
        with scope:
            try:
                while not conn.closed:
                    opened = await self._read_standalone(era, cursor, ready)
                    ready.set()
                    if opened is None:
                        return  # the upstream offers no standalone stream (or the session ended)
                    backoff = cursor.retry_seconds if opened else min(backoff * 2, _MAX_BACKOFF)
                    await anyio.sleep(min(backoff, _MAX_BACKOFF))
            finally:
                ready.set()

    async def _read_standalone(self, era: "Era", cursor: StreamCursor, ready: anyio.Event) -> bool | None:
        """One GET: True when it was open and ended, False when it failed, None when refused."""
        conn = self._conn
        headers = {**conn.base_headers(era), "accept": "text/event-stream"}
        if cursor.last_event_id is not None:
            headers["last-event-id"] = cursor.last_event_id
        try:
            async with conn.transport.stream(HttpRequest("GET", conn.url, headers)) as response:
                content_type = (response.headers.get("content-type") or "").lower()
                if response.status >= 500:
                    return False  # try again later
                # 405: none offered; 404: the session is gone (a new session opens its own); 400/409:
                # refused, or another stream is already open; an answer that is not a stream.
                if response.status >= 400 or not content_type.startswith("text/event-stream"):
                    logger.debug("upstream %s: no standalone stream (HTTP %d)", conn.name, response.status)
                    return None
                ready.set()
                await read_events(
                    conn.name, response, _NO_ANSWER_ID, cursor,
                    on_request=lambda message: self._answer_later(era, message),
                    on_notification=self._event,
                )  # fmt: skip
                return True
        except (TransportError, UpstreamError) as exc:
            logger.info("upstream %s: standalone stream broke: %s", conn.name, exc)
            return False

    async def _answer_later(self, era: "Era", message: dict[str, Any]) -> None:
        # In the background: the stream keeps being read while a person answers (capped).
        await self._conn.answer_later(era, message, self._conn.only_call_relay(), self._tg)

    async def _event(self, message: dict[str, Any]) -> None:
        if not route_event(message, self._conn.events):
            logger.debug("upstream %s: %s outside any call, dropped", self._conn.name, message.get("method"))

    # -- 2026-07-28: subscriptions/listen -------------------------------------------------------

    async def _listen(self, era: "Era", scope: anyio.CancelScope) -> None:
        conn = self._conn
        backoff = 1.0
        with scope:
            while not conn.closed:
                changed = self._changed = anyio.Event()
                notifications = listen_filter(conn.server_capabilities, conn.watched)
                if not notifications:
                    await changed.wait()  # nothing to listen for (yet)
                    continue
                self._stream = stream = anyio.CancelScope()
                with stream:
                    try:
                        await conn.listen(era, notifications)
                        backoff = 1.0  # ended on purpose by the upstream: listen again
                    except UpstreamRpcError as exc:
                        logger.info("upstream %s: subscriptions/listen refused: %s", conn.name, exc.reason)
                        return
                    except UpstreamError as exc:
                        logger.info("upstream %s: listen stream broke: %s", conn.name, exc.reason)
                        backoff = min(backoff * 2, _MAX_BACKOFF)
                if stream.cancel_called:
                    continue  # a new filter: listen again at once
                await anyio.sleep(backoff)

