"""One MCP session with an upstream, over a channel that only moves messages.

`UpstreamSession` is the protocol half (the MCP SDK's `ClientSession` to a transport's streams);
its `Channel` (gateway/upstreams/channels/: a stdio process, or Streamable HTTP) only sends one
message at a time and hands back what comes back. The session does, once for both:

* negotiation: `2026-07-28` asks `server/discover`; `handshake` sends `initialize` (2025-11-25)
  and `notifications/initialized`; `auto` (HTTP) tries discovery and falls back to the handshake.
  Concurrent first calls wait for that one negotiation, and the probe carries its version
  explicitly, so no call goes out in a version that was not negotiated. A session the upstream
  forgot (`SessionLost`, HTTP 404) is negotiated again and the request sent once more.
* every request: its id, its `_meta` envelope (the relay's progress token; on 2026-07-28 what
  the calling client can answer and the log level it wants), its timeout, and cancellation when
  its caller goes away.
* what the upstream says during a call: its notifications wait in the call's bounded queue
  (gateway/upstreams/notices.py) for a task of the call that hands them to its client; its
  requests are answered in tasks of the call (`InboundRequests`: at most `max_inbound_requests`
  at once, past that refused at once), relayed to the calling client or answered by the gateway.
* outside any call: list changes and resource updates go to `events` (the Upstream); the event
  streams (gateway/upstreams/event_streams.py) and resource subscriptions.

Errors raised by `request` (gateway/errors.py), as the outcome rules read them:

* `UpstreamNotSent` -- the request provably never reached the upstream: the channel sent no
  byte of it, the negotiation failed or timed out before it, the session is closed, or the
  upstream twice answered 404 for a fresh session, or it refused the credentials (HTTP 401:
  `UpstreamUnauthorized`), or no token could be had for it (gateway/upstreams/credentials.py).
* `UpstreamInterrupted` -- it may have reached the upstream and no usable answer came (the
  channel broke after sending, the call timed out, an unreadable or oversized answer).
* `UpstreamRpcError` -- the upstream answered with a JSON-RPC error.

Every result passes `result_or_raise` (gateway/upstreams/rpc.py), which strips the gateway's own
`_meta` keys from it.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Coroutine, Iterable, Mapping
from typing import Any

import anyio
from anyio.abc import TaskGroup

from ..errors import SessionLost, UpstreamError, UpstreamInterrupted, UpstreamNotSent, UpstreamRpcError
from .channels.base import Answer, Channel, Listener, Message, Negotiated
from .credentials import Bearer
from .event_streams import EventStreams
from .events import NO_EVENTS, ResourceSubscriptions, UpstreamEvents, route_event
from ..protocol import CLIENT_INFO
from .notices import DEFAULT_MAX_QUEUED, CallNotices, OnDrop, ignore_drops
from .relay import CallRelay
from .rpc import (
    CLIENT_CAPABILITIES,
    DEFAULT_MAX_INBOUND,
    HANDSHAKE_VERSION,
    MODERN_VERSION,
    InboundRequests,
    answer_server_request,
    request_meta,
    result_or_raise,
)

__all__ = ["UpstreamSession"]

logger = logging.getLogger(__name__)

_CANCEL_SECONDS = 2.0
_STANDALONE_WAIT_SECONDS = 2.0
_INITIALIZE = Negotiated(None)
_PROBE = Negotiated(MODERN_VERSION)


async def _ended(*tasks: asyncio.Task[None] | None) -> None:
    """Wait for a call's helper tasks to end; what they raised is logged, never raised here."""
    for task in tasks:
        if task is None:
            continue
        try:
            await task
        except asyncio.CancelledError:
            if not task.cancelled():
                raise  # the waiting task itself is cancelled (only outside a shield)
        except Exception:  # noqa: BLE001 - a helper's failure must not replace the call's answer
            logger.warning("a call's helper task failed", exc_info=True)


# Starts a task that answers one of the upstream's requests.
_Starter = Callable[[Callable[[], Coroutine[Any, Any, None]]], object]


class UpstreamSession:
    def __init__(
        self,
        name: str,
        channel: Channel,
        *,
        protocol: str,
        connect_timeout: float,
        events: UpstreamEvents = NO_EVENTS,
        task_group: TaskGroup | None = None,
        roots: list[dict[str, Any]] | None = None,
        max_inbound_requests: int = DEFAULT_MAX_INBOUND,
        max_queued_notifications: int = DEFAULT_MAX_QUEUED,
        on_drop: OnDrop = ignore_drops,
    ) -> None:
        self.name = name
        self.channel = channel
        self._protocol_choice = protocol
        self._connect_timeout = connect_timeout
        self.events = events
        # Where the upstream's requests outside a client's call are answered (inline without a group).
        self._start_soon: _Starter | None = (
            task_group.start_soon if task_group is not None else None)
        self.roots = roots  # the configured answer to roots/list (None: ask the client)
        self.inbound = InboundRequests(name, max_inbound_requests)  # the upstream's requests being answered
        self._max_queued = max_queued_notifications
        self._on_drop = on_drop
        self._ids = itertools.count(1)
        self._negotiated: Negotiated | None = None  # set once, by the one negotiation
        self._negotiation_lock = anyio.Lock()
        self._negotiations = 0  # finished (or abandoned) negotiation attempts
        self._negotiation_error: UpstreamNotSent | None = None
        self.closed = False
        self.server_capabilities: dict[str, Any] = {}
        self.watched: frozenset[str] = frozenset()  # resource URIs the gateway's clients hold
        self._subscriptions = ResourceSubscriptions()
        self._calls: dict[int, CallRelay] = {}  # calls in flight that a client waits on
        self._streams = EventStreams(self, channel, task_group) if task_group is not None else None
        channel.outside = Listener(self._outside_request, self._outside_notification)

    @property
    def alive(self) -> bool:
        return not self.closed and self.channel.alive

    @property
    def protocol_version(self) -> str | None:
        return self._negotiated.version if self._negotiated is not None else None

    @property
    def stateless(self) -> bool:
        """Negotiated without a session over a channel other processes reach too (HTTP, not a child
        process): another gateway process can continue what this one began."""
        return self.channel.shared and self._negotiated is not None and self._negotiated.session_id is None

    async def start(self) -> None:
        """Negotiate now; on failure the session is closed (a process that cannot be spoken to is
        stopped) and UpstreamNotSent raised."""
        try:
            await self._ready()
        except UpstreamNotSent:
            await self.aclose()
            raise

    async def keeps_session(self) -> bool:
        """Whether the upstream keeps an MCP session (`Mcp-Session-Id`), negotiating first; raises
        UpstreamNotSent when it cannot be spoken to."""
        return (await self._ready()).session_id is not None

    async def aclose(self) -> None:
        self.closed = True
        if self._streams is not None:
            self._streams.stop()
        await self.channel.aclose(self._negotiated)

    # -- requests -------------------------------------------------------------------------

    async def request(
        self,
        method: str,
        params: dict[str, Any] | None,
        *,
        timeout: float,
        relay: CallRelay | None = None,
        bearer: Bearer | None = None,
    ) -> dict[str, Any]:
        """`bearer`: this request's own token (a caller's exchanged token; gateway/upstreams/credentials.py)."""
        if self.closed:
            raise UpstreamNotSent(self.name, "the connection is closed")
        for attempt in (1, 2):  # a second time only on a fresh session: the first was unknown upstream
            negotiated = await self._ready()
            if bearer is not None and negotiated.session_id is not None:
                # A caller's own token on a session someone else opened: an upstream that binds a
                # session to who opened it would run this caller's request as someone else. The
                # upstream started keeping sessions after the caller's request was routed (a caller
                # gets a session of its own: gateway/upstreams/caller_sessions.py); sent again, it will.
                raise UpstreamNotSent(
                    self.name, "this upstream started keeping an MCP session (Mcp-Session-Id) while the call was "
                    "on its way, and that session cannot carry the caller's own token; send the call again")
            notices = CallNotices(self._max_queued, self._on_drop) if relay is not None else None
            answer: Message = {}
            failure: Exception | None = None
            # The timer itself: a cancellation it caused is our timeout, never the caller going
            # away (the cancel-on-disconnect rule in `_exchange`). A bare scope with a deadline
            # (what `anyio.fail_after` wraps, without its generator on every call).
            limit = anyio.CancelScope(deadline=anyio.current_time() + timeout)
            timed_out = False
            try:
                with limit:
                    answer = await self._exchange(negotiated, method, params, relay, notices, limit, bearer)
                timed_out = limit.cancelled_caught
            except TimeoutError:
                timed_out = True
            except (UpstreamError, SessionLost) as exc:
                failure = exc
            if timed_out:
                failure = UpstreamInterrupted(self.name, f"no answer within {timeout:g} s")
            if notices is not None and relay is not None:
                # What the upstream said before answering reaches the client ahead of the answer
                # (outside the call timeout: a slow client must not turn a received answer into an
                # interruption).
                await notices.flush(relay)
            if isinstance(failure, SessionLost):
                # The upstream never processed the request (unknown session): negotiate again, resend once.
                self._forget(negotiated)
                if attempt == 2:
                    raise UpstreamNotSent(self.name, "the upstream rejected a fresh session (HTTP 404)") from None
                continue
            if failure is not None:
                raise failure
            return result_or_raise(self.name, answer)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _exchange(
        self,
        negotiated: Negotiated,
        method: str,
        params: dict[str, Any] | None,
        relay: CallRelay | None = None,
        notices: CallNotices | None = None,
        timer: anyio.CancelScope | None = None,
        bearer: Bearer | None = None,
    ) -> Message:
        """Send one request and return its answer (the raw JSON-RPC message)."""
        request_id = next(self._ids)
        message: Message = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = dict(params)
        modern = negotiated.version == MODERN_VERSION
        if relay is not None or modern:
            params_out = message.setdefault("params", {})
            params_out["_meta"] = request_meta(params_out.get("_meta") or {}, relay, modern=modern, token=request_id)
        if relay is not None:
            self._calls[request_id] = relay
        try:
            if relay is None or notices is None:
                answer = await self.channel.exchange(message, negotiated, self._own_listener(negotiated), bearer)
            else:
                answer = await self._exchange_for_client(negotiated, message, relay, notices, bearer)
        except anyio.get_cancelled_exc_class():
            # The caller went away (its client disconnected): tell the upstream, written once for
            # every channel (over HTTP on 2026-07-28, closing the response stream is the
            # cancellation). Not when our own call timeout ran out: a write is then sent again with
            # the same key, and the upstream should finish the first one (its own fence answers the
            # resend) rather than drop it.
            if (method != "initialize" and not self.channel.cancels_by_closing(negotiated) and self.channel.alive
                    and not (timer is not None and timer.cancel_called)):
                with anyio.CancelScope(shield=True), anyio.move_on_after(_CANCEL_SECONDS):
                    await self._send_cancelled(negotiated, request_id)
            raise
        finally:
            self._calls.pop(request_id, None)
        if answer is None:  # pragma: no cover - a channel answers every request
            raise UpstreamInterrupted(self.name, "no answer")
        return answer.message

    async def _exchange_for_client(
        self, negotiated: Negotiated, message: Message, relay: CallRelay, notices: CallNotices,
        bearer: Bearer | None = None,
    ) -> Answer | None:
        """Exchange while the call's helpers hand its notifications to the client and answer the
        upstream's questions; questions of a call that ended are moot (cancelled).

        The helpers are plain asyncio tasks started only when the upstream says or asks something,
        not an anyio task group: measured on this path, a task group per call costs ~100 us of CPU
        (most calls need no helper at all). They are ended and awaited here, whatever happens.
        """
        loop = asyncio.get_running_loop()
        delivery: asyncio.Task[None] | None = None
        asking: list[asyncio.Task[None]] = []

        def on_notification(note: Message) -> None:
            nonlocal delivery
            if not route_event(note, self.events):
                notices.put(note)  # never waits for the client: the channel keeps being read
                # The delivery task only for a call that has something to say, and never once the
                # answer is in (`flush` hands over what is left).
                if delivery is None and not notices.closed:
                    delivery = loop.create_task(notices.deliver_until_closed(relay))

        def start(ask: Callable[[], Coroutine[Any, Any, None]]) -> None:
            asking.append(loop.create_task(ask()))

        listener = Listener(lambda request: self._answer_later(negotiated, request, relay, start),
                            on_notification, client=True, on_pause=relay.pause_stream)
        try:
            return await self.channel.exchange(message, negotiated, listener, bearer)
        except BaseException:
            if delivery is not None:
                delivery.cancel()  # no answer to hand notifications ahead of (the client may be gone)
            raise
        finally:
            notices.close()
            for task in asking:
                task.cancel()
            if delivery is not None or asking:
                with anyio.CancelScope(shield=True):
                    await _ended(delivery, *asking)

    async def _notify(self, negotiated: Negotiated, method: str, params: dict[str, Any] | None = None) -> None:
        notification: Message = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            notification["params"] = params
        await self.channel.exchange(notification, negotiated, None)

    async def _send_cancelled(self, negotiated: Negotiated, request_id: int) -> None:
        try:
            await self._notify(negotiated, "notifications/cancelled",
                               {"requestId": request_id, "reason": "the caller went away"})
        except UpstreamNotSent as exc:
            logger.debug("upstream %s: notifications/cancelled not sent: %s", self.name, exc.detail)

    async def listen(self, negotiated: Negotiated, notifications: dict[str, Any]) -> None:
        """One `subscriptions/listen` stream (2026-07-28): its events go to `events` until it ends."""
        result_or_raise(self.name, await self._exchange(negotiated, "subscriptions/listen",
                                                        {"notifications": notifications}))

    # -- the upstream's own requests and notifications ----------------------------------------

    async def _answer_later(self, negotiated: Negotiated, message: Message, relay: CallRelay | None,
                            start: _Starter | None) -> None:
        """Answer a request of the upstream in a task `start` starts, so its channel keeps being read
        while a person answers; past `max_inbound_requests` at once, with an error (no task)."""
        refusal = self.inbound.refusal(message)
        if refusal is not None:
            await self._reply(negotiated, message, refusal)
            return

        async def ask() -> None:
            try:
                await self._reply(negotiated, message, await answer_server_request(message, relay, self.roots))
            finally:
                self.inbound.release()

        if start is None:
            await ask()
        else:
            start(ask)

    async def _reply(self, negotiated: Negotiated, message: Message, reply: Message) -> None:
        try:
            await self.channel.exchange(reply, negotiated, None)
        except UpstreamNotSent as exc:  # the upstream is gone, or unreachable: nobody reads the answer
            logger.warning("upstream %s: could not answer its %s request: %s", self.name, message.get("method"),
                           exc.detail or exc.reason)

    def _own_listener(self, negotiated: Negotiated) -> Listener:
        """For the gateway's own requests: the upstream's requests during one are answered with no client."""
        return Listener(lambda request: self._answer_later(negotiated, request, None, self._start_soon),
                        self._outside_notification)

    async def _outside_request(self, message: Message) -> None:
        """A request that belongs to no exchange: relayed to the calling client when exactly one
        call is in flight (it can only be that call's), otherwise answered by the gateway."""
        relay = next(iter(self._calls.values())) if len(self._calls) == 1 else None
        await self._answer_later(self._negotiated or _INITIALIZE, message, relay, self._start_soon)

    def _outside_notification(self, message: Message) -> None:
        if not route_event(message, self.events):
            logger.debug("upstream %s: %s outside any call, dropped", self.name, message.get("method"))

    # -- resource subscriptions -----------------------------------------------------------

    async def watch(self, uris: Iterable[str], new: str | None = None) -> None:
        """Have the upstream report updates of exactly these resources: `resources/subscribe` on the
        handshake era (an error for `new` is raised), the listen stream's filter on 2026-07-28."""
        self.watched = frozenset(uris)
        negotiated = await self._ready()
        if negotiated.version == MODERN_VERSION:
            if self._streams is not None:
                self._streams.refilter()
            return

        async def send(method: str, params: dict[str, Any]) -> dict[str, Any]:
            return await self.request(method, params, timeout=self._connect_timeout)

        await self._subscriptions.sync(negotiated, self.watched, send, new=new)

    # -- negotiation ----------------------------------------------------------------------

    async def _ready(self) -> Negotiated:
        """The negotiated version (and session); the first callers wait for the one negotiation."""
        negotiated = self._negotiated
        if negotiated is not None:
            return negotiated
        seen = self._negotiations
        first = "server/discover" if self._protocol_choice in ("auto", MODERN_VERSION) else "initialize"
        try:
            # An upstream that never answers the handshake must not hold the caller longer than the
            # connect timeout; its request was never sent.
            with anyio.fail_after(self._connect_timeout):
                async with self._negotiation_lock:
                    if self._negotiated is not None:
                        return self._negotiated
                    failed = self._negotiation_error
                    if failed is not None and self._negotiations != seen:
                        # The negotiation this caller waited for failed: fail alike, no second try now.
                        raise UpstreamNotSent(self.name, failed.reason, detail=failed.detail)
                    self._negotiation_error = None
                    try:
                        negotiated = await self._negotiate()
                    except UpstreamNotSent as exc:
                        self._negotiation_error = exc
                        raise
                    finally:
                        self._negotiations += 1
                    self._negotiated = negotiated
                    return negotiated
        except TimeoutError:
            raise UpstreamNotSent(
                self.name, f"handshake failed: no answer to {first} within {self._connect_timeout:g} s"
            ) from None

    def _forget(self, negotiated: Negotiated) -> None:
        """Drop a session the upstream lost, unless a concurrent call already replaced it."""
        if self._negotiated is negotiated:
            self._negotiated = None
            if self._streams is not None:
                self._streams.stop()

    async def _negotiate(self) -> Negotiated:
        if self._protocol_choice in ("auto", MODERN_VERSION):
            if await self._speaks_modern():
                negotiated = Negotiated(MODERN_VERSION)
                if self._streams is not None:
                    self._streams.start_listen(negotiated)
                return negotiated
            if self._protocol_choice == MODERN_VERSION:
                raise UpstreamNotSent(self.name, "handshake failed: the server does not speak protocol 2026-07-28")
        return await self._handshake()

    async def _speaks_modern(self) -> bool:
        try:
            result = result_or_raise(self.name, await self._exchange(_PROBE, "server/discover", {}))
        except (UpstreamRpcError, UpstreamInterrupted) as exc:
            if not self.channel.alive:  # the process exited: nothing to fall back to
                raise UpstreamNotSent(self.name, f"handshake failed: {exc.reason}", detail=exc.detail) from None
            # A handshake-era server answers the unknown method with a JSON-RPC error or an
            # HTTP error status (often not JSON).
            return False
        except UpstreamNotSent as exc:
            raise UpstreamNotSent(self.name, f"handshake failed: {exc.reason}", detail=exc.detail) from None
        versions = result.get("supportedVersions")
        if not (isinstance(versions, list) and MODERN_VERSION in versions):
            return False
        self.server_capabilities = _capabilities(result)
        return True

    async def _handshake(self) -> Negotiated:
        params = {"protocolVersion": HANDSHAKE_VERSION, "capabilities": CLIENT_CAPABILITIES, "clientInfo": CLIENT_INFO}
        message: Message = {"jsonrpc": "2.0", "id": next(self._ids), "method": "initialize", "params": params}
        try:
            answer = await self.channel.exchange(message, _INITIALIZE, self._own_listener(_INITIALIZE))
            if answer is None:  # pragma: no cover - a channel answers every request
                raise UpstreamInterrupted(self.name, "no answer")
            result = result_or_raise(self.name, answer.message)
        except UpstreamInterrupted as exc:
            # Nothing but the handshake was sent: the caller's own request never left.
            raise UpstreamNotSent(self.name, f"handshake failed: {exc.reason}", detail=exc.detail) from None
        except UpstreamRpcError as exc:
            raise UpstreamNotSent(self.name, f"handshake failed: initialize refused: {exc.reason}",
                                  detail=exc.detail) from None
        except UpstreamNotSent as exc:
            raise UpstreamNotSent(self.name, f"handshake failed: {exc.reason}", detail=exc.detail) from None
        negotiated = Negotiated(str(result.get("protocolVersion") or HANDSHAKE_VERSION), answer.session_id)
        self.server_capabilities = _capabilities(result)
        if negotiated.session_id is not None and self._streams is not None:
            # Open before `initialized`: a request the upstream sends as the session starts finds it.
            await self._streams.open_standalone(negotiated, _STANDALONE_WAIT_SECONDS)
        await self._notify(negotiated, "notifications/initialized")
        if self.watched:
            self._resubscribe()
        return negotiated

    def _resubscribe(self) -> None:
        """A new session holds no subscriptions: make them again (in the background)."""
        if self._streams is None:
            return

        async def again() -> None:
            try:
                await self.watch(self.watched)
            except UpstreamError as exc:
                logger.info("upstream %s: resubscribing failed: %s", self.name, exc.reason)

        self._streams.spawn(again)


def _capabilities(result: Mapping[str, Any]) -> dict[str, Any]:
    capabilities = result.get("capabilities")
    return dict(capabilities) if isinstance(capabilities, Mapping) else {}
