"""A Streamable-HTTP upstream: every concurrent call to one server, both protocol eras.

One `HttpConnection` serves every call to one upstream over one `HttpTransport` (keep-alive
pool; gateway/upstreams/transport.py). Before the first call it negotiates the protocol once:
`protocol: auto` asks `server/discover` (2026-07-28) and falls back to the `initialize`
handshake; concurrent first calls wait for that one negotiation, and the probe carries its era
explicitly, so no call ever goes out in an era that was not negotiated. On the handshake era
the connection holds the `Mcp-Session-Id` and initializes again when the upstream forgot it
(404: restart); on 2026-07-28 every request is self-contained.

Errors raised by `request` (gateway/errors.py), as the outcome rules read them:

* `UpstreamNotSent` -- the request provably never reached the upstream: the transport sent
  no byte of it (`RequestNotSent`), the negotiation failed or timed out before it, the
  connection is closed, the upstream twice answered 404 for a fresh session, every connection of
  the pool (`max_connections`) stayed busy for `pool_timeout_seconds`, or the process is near its
  open-file limit (these last two say so in their reason).
* `UpstreamInterrupted` -- it may have reached the upstream and no usable answer came: the
  connection broke after the request left (`RequestMaybeSent`), the call timed out, an HTTP
  error status without a JSON-RPC error body, a body that is not JSON, a stream without an answer,
  or `UpstreamAnswerTooLarge`: an answer (or one SSE event) over the cap, read no further.
* `UpstreamRpcError` -- the upstream answered with a JSON-RPC error.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

import anyio
from anyio.abc import TaskGroup

from ..errors import (
    SessionLost,
    TransportError,
    UpstreamError,
    UpstreamInterrupted,
    UpstreamNotSent,
    UpstreamRpcError,
)
from .relay import CallRelay
from .events import NO_EVENTS, ResourceSubscriptions, UpstreamEvents
from .http_streams import EventStreams
from .http_wire import SESSION_HEADER, Era, HttpWire
from .notices import DEFAULT_MAX_QUEUED, OnDrop, ignore_drops
from .rpc import CLIENT_CAPABILITIES, CLIENT_INFO, DEFAULT_MAX_INBOUND, HANDSHAKE_VERSION, MODERN_VERSION, request_meta
from .transport import AiohttpTransport, HttpRequest, HttpTransport, ssl_context

__all__ = ["HttpConnection"]

logger = logging.getLogger(__name__)

_CANCEL_SECONDS = 2.0
_STANDALONE_WAIT_SECONDS = 2.0


_INITIALIZE_ERA = Era(None)
_PROBE_ERA = Era(MODERN_VERSION)


class HttpConnection(HttpWire):
    def __init__(
        self,
        name: str,
        url: str,
        *,
        headers: Mapping[str, str],
        protocol: str,
        connect_timeout: float,
        transport: HttpTransport | None = None,
        tls_ca_file: str | None = None,
        events: UpstreamEvents = NO_EVENTS,
        task_group: TaskGroup | None = None,
        roots: list[dict[str, Any]] | None = None,
        max_response_bytes: int | None = None,
        max_connections: int | None = None,
        pool_timeout: float = 30.0,
        max_inbound_requests: int = DEFAULT_MAX_INBOUND,
        max_queued_notifications: int = DEFAULT_MAX_QUEUED,
        on_drop: OnDrop = ignore_drops,
    ) -> None:
        self._protocol_choice = protocol
        self._connect_timeout = connect_timeout
        if transport is None:
            try:
                context = ssl_context(tls_ca_file) if tls_ca_file else None
            except OSError as exc:  # ssl.SSLError included: a missing or malformed PEM file
                raise UpstreamNotSent(name, "the upstream's TLS settings cannot be loaded",
                                      detail=f"tls_ca_file {tls_ca_file!r}: {exc}") from None
            transport = AiohttpTransport(connect_timeout=connect_timeout, ssl_context=context,
                                         max_response_bytes=max_response_bytes, max_connections=max_connections,
                                         pool_timeout=pool_timeout)
        super().__init__(name, url, headers, transport, events, roots, max_inbound_requests=max_inbound_requests,
                         max_queued_notifications=max_queued_notifications, on_drop=on_drop)
        self._era: Era | None = None  # set once, by the one negotiation
        self._negotiation_lock = anyio.Lock()
        self._negotiations = 0  # finished (or abandoned) negotiation attempts
        self._negotiation_error: UpstreamNotSent | None = None
        self.closed = False
        # What the upstream says outside calls (gateway/upstreams/http_streams.py), and for it:
        self.server_capabilities: dict[str, Any] = {}
        self.watched: frozenset[str] = frozenset()  # resource URIs the gateway's clients hold
        self._subscriptions = ResourceSubscriptions()
        self._calls: dict[int, CallRelay] = {}  # calls in flight that a client waits on
        self._streams = EventStreams(self, task_group) if task_group is not None else None

    @property
    def alive(self) -> bool:
        return not self.closed

    @property
    def protocol_version(self) -> str | None:
        return self._era.version if self._era is not None else None

    @property
    def stateless(self) -> bool:
        """Negotiated without a session: another gateway process can continue what this one began."""
        return self._era is not None and self._era.session_id is None

    async def aclose(self) -> None:
        self.closed = True
        if self._streams is not None:
            self._streams.stop()
        era = self._era
        if era is not None and era.session_id is not None:
            # Courtesy DELETE so a stateful upstream can free the session; failures do not matter.
            with anyio.move_on_after(2):
                try:
                    async with self.transport.stream(HttpRequest("DELETE", self.url, self.base_headers(era))):
                        pass
                except TransportError:
                    pass
        await self.transport.aclose()

    async def watch(self, uris: Iterable[str], new: str | None = None) -> None:
        """Have the upstream report updates of exactly these resources: `resources/subscribe` on the
        handshake era (an error for `new` is raised), the listen stream's filter on 2026-07-28."""
        self.watched = frozenset(uris)
        era = await self._ready()
        if era.version == MODERN_VERSION:
            if self._streams is not None:
                self._streams.refilter()
            return

        async def send(method: str, params: dict[str, Any]) -> dict[str, Any]:
            return await self.request(method, params, timeout=self._connect_timeout)

        await self._subscriptions.sync(era, self.watched, send, new=new)

    async def request(
        self,
        method: str,
        params: dict[str, Any] | None,
        *,
        timeout: float,
        relay: CallRelay | None = None,
    ) -> dict[str, Any]:
        if self.closed:
            raise UpstreamNotSent(self.name, "the connection is closed")
        era = await self._ready()
        try:
            return await self._call(era, method, params, relay, timeout)
        except SessionLost:
            pass
        # The upstream never processed the request (unknown session): handshake again, resend once.
        self._forget(era)
        era = await self._ready()
        try:
            return await self._call(era, method, params, relay, timeout)
        except SessionLost:
            self._forget(era)
            raise UpstreamNotSent(self.name, "the upstream rejected a fresh session (HTTP 404)") from None

    async def _call(
        self, era: Era, method: str, params: dict[str, Any] | None, relay: CallRelay | None, timeout: float
    ) -> dict[str, Any]:
        try:
            with anyio.fail_after(timeout):
                return await self._exchange(era, method, params, relay, anyio.current_time() + timeout)
        except TimeoutError:
            raise UpstreamInterrupted(self.name, f"no answer within {timeout:g} s") from None

    # -- protocol negotiation -------------------------------------------------------------

    async def _ready(self) -> Era:
        """The negotiated era; the first callers wait for the one negotiation in flight."""
        era = self._era
        if era is not None:
            return era
        seen = self._negotiations
        try:
            # A server that accepts the connection but never answers the handshake must not
            # hold the caller longer than the connect timeout; its request was never sent.
            with anyio.fail_after(self._connect_timeout):
                async with self._negotiation_lock:
                    if self._era is not None:
                        return self._era
                    failed = self._negotiation_error
                    if failed is not None and self._negotiations != seen:
                        # The negotiation this caller waited for failed: fail alike, no second try now.
                        raise UpstreamNotSent(self.name, failed.reason, detail=failed.detail)
                    self._negotiation_error = None
                    try:
                        era = await self._negotiate()
                    except UpstreamNotSent as exc:
                        self._negotiation_error = exc
                        raise
                    finally:
                        self._negotiations += 1
                    self._era = era
                    return era
        except TimeoutError:
            raise UpstreamNotSent(self.name, f"no handshake answer within {self._connect_timeout:g} s") from None

    def _forget(self, era: Era) -> None:
        """Drop a session the upstream lost, unless a concurrent call already replaced it."""
        if self._era is era:
            self._era = None
            if self._streams is not None:
                self._streams.stop()

    async def _negotiate(self) -> Era:
        if self._protocol_choice in ("auto", MODERN_VERSION):
            if await self._speaks_modern():
                era = Era(MODERN_VERSION)
                if self._streams is not None:
                    self._streams.start_listen(era)
                return era
            if self._protocol_choice == MODERN_VERSION:
                raise UpstreamNotSent(self.name, "the server does not speak protocol 2026-07-28")
        return await self._handshake()

    async def _speaks_modern(self) -> bool:
        try:
            result = await self._exchange(_PROBE_ERA, "server/discover", {}, None)
        except (UpstreamRpcError, UpstreamInterrupted):
            # A handshake-era server answers the unknown method with a JSON-RPC error or an
            # HTTP error status (often not JSON).
            return False
        versions = result.get("supportedVersions")
        if not (isinstance(versions, list) and MODERN_VERSION in versions):
            return False
        self.server_capabilities = _capabilities(result)
        return True

    async def _handshake(self) -> Era:
        params = {"protocolVersion": HANDSHAKE_VERSION, "capabilities": CLIENT_CAPABILITIES, "clientInfo": CLIENT_INFO}
        session_ids: list[str] = []

        def capture(headers: Mapping[str, str]) -> None:
            if sid := headers.get(SESSION_HEADER):
                session_ids.append(sid)

        try:
            result = await self._post(_INITIALIZE_ERA, self._message("initialize", params), None, capture)
        except UpstreamInterrupted as exc:
            # Nothing but the handshake was sent: the caller's own request never left.
            raise UpstreamNotSent(self.name, f"initialize failed: {exc.reason}", detail=exc.detail) from None
        except UpstreamRpcError as exc:
            raise UpstreamNotSent(self.name, f"initialize refused: {exc.reason}", detail=exc.detail) from None
        era = Era(str(result.get("protocolVersion") or HANDSHAKE_VERSION), session_ids[-1] if session_ids else None)
        self.server_capabilities = _capabilities(result)
        if era.session_id is not None and self._streams is not None:
            # Open before `initialized`: a request the upstream sends as the session starts finds it.
            await self._streams.open_standalone(era, _STANDALONE_WAIT_SECONDS)
        await self._notify(era, "notifications/initialized")
        if self.watched:
            self._resubscribe()
        return era

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

    # -- one exchange ---------------------------------------------------------------------

    async def _exchange(
        self,
        era: Era,
        method: str,
        params: dict[str, Any] | None,
        relay: CallRelay | None,
        deadline: float = float("inf"),
    ) -> dict[str, Any]:
        message = self._message(method, dict(params) if params is not None else None)
        modern = era.version == MODERN_VERSION
        if relay is not None or modern:
            params_out = message.setdefault("params", {})
            params_out["_meta"] = request_meta(params_out.get("_meta") or {}, relay, modern=modern, token=message["id"])
        if relay is not None:
            self._calls[message["id"]] = relay
        try:
            return await self._post(era, message, relay)
        except anyio.get_cancelled_exc_class():
            # The caller went away (its client disconnected): on 2026-07-28 closing the response
            # stream is the cancellation; the handshake era needs a message. Not when our own call
            # timeout ran out: a write is then sent again with the same key, and the upstream
            # should finish the first one (its own fence answers the resend) rather than drop it.
            if era.version != MODERN_VERSION and method != "initialize" and anyio.current_time() < deadline:
                with anyio.CancelScope(shield=True), anyio.move_on_after(_CANCEL_SECONDS):
                    await self._send_cancelled(era, message["id"])
            raise
        finally:
            self._calls.pop(message["id"], None)

    async def listen(self, era: Era, notifications: dict[str, Any]) -> None:
        """One `subscriptions/listen` stream (2026-07-28): its events go to `self.events` until it ends."""
        message = self._message("subscriptions/listen", {"notifications": notifications})
        message["params"]["_meta"] = request_meta({}, None, modern=True, token=None)
        await self._post(era, message, None)

    def only_call_relay(self) -> CallRelay | None:
        """The relay of the only call in flight: a request outside any call can only be that call's."""
        return next(iter(self._calls.values())) if len(self._calls) == 1 else None


def _capabilities(result: Mapping[str, Any]) -> dict[str, Any]:
    capabilities = result.get("capabilities")
    return dict(capabilities) if isinstance(capabilities, Mapping) else {}
