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
  connection is closed, or the upstream twice answered 404 for a fresh session.
* `UpstreamInterrupted` -- it may have reached the upstream and no usable answer came: the
  connection broke after the request left (`RequestMaybeSent`), the call timed out, an HTTP
  error status without a JSON-RPC error body, a body that is not JSON, a stream without an answer.
* `UpstreamRpcError` -- the upstream answered with a JSON-RPC error.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

import anyio
from mcp.shared.inbound import NAME_BEARING_METHODS, encode_header_value

from ..errors import RequestMaybeSent, RequestNotSent, TransportError, UpstreamInterrupted, UpstreamNotSent, UpstreamRpcError
from ..relay import CallRelay
from .rpc import (
    CLIENT_CAPABILITIES,
    CLIENT_INFO,
    HANDSHAKE_VERSION,
    MODERN_VERSION,
    answer_server_request,
    deliver_notification,
    result_or_raise,
)
from .sse import StreamCursor, read_events
from .transport import AiohttpTransport, HttpRequest, HttpResponse, HttpTransport, ssl_context

__all__ = ["HttpConnection"]

_BROKE = "the connection to the upstream broke after the request was sent"
logger = logging.getLogger(__name__)

_SESSION_HEADER = "mcp-session-id"
_ACCEPT = "application/json, text/event-stream"
_MAX_RESUMPTIONS = 5
_DRAIN_SECONDS = 0.25
_MAX_RETRY_SECONDS = 10.0
_CANCEL_SECONDS = 2.0
# Task methods name their task in Mcp-Name (the tasks extension, SEP-2663).
_TASK_METHODS = frozenset({"tasks/get", "tasks/update", "tasks/cancel"})


@dataclass(frozen=True, slots=True)
class _Era:
    """What every request of one negotiated connection carries. Never mutated: a probe or a
    handshake uses its own `_Era`, so concurrent calls cannot pick up a provisional one."""

    version: str | None  # None only for the `initialize` request itself
    session_id: str | None = None


_INITIALIZE_ERA = _Era(None)
_PROBE_ERA = _Era(MODERN_VERSION)


class _SessionLost(Exception):
    """The upstream answered 404 for our session id: it restarted or expired the session."""


class HttpConnection:
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
    ) -> None:
        self._name = name
        self._url = url
        self._protocol_choice = protocol
        self._connect_timeout = connect_timeout
        if transport is None:
            try:
                context = ssl_context(tls_ca_file) if tls_ca_file else None
            except OSError as exc:  # ssl.SSLError included: a missing or malformed PEM file
                raise UpstreamNotSent(name, "the upstream's TLS settings cannot be loaded",
                                      detail=f"tls_ca_file {tls_ca_file!r}: {exc}") from None
            transport = AiohttpTransport(connect_timeout=connect_timeout, ssl_context=context)
        self._transport: HttpTransport = transport
        self._headers = {name.lower(): value for name, value in headers.items()}
        self._ids = itertools.count(1)
        self._era: _Era | None = None  # set once, by the one negotiation
        self._negotiation_lock = anyio.Lock()
        self._negotiations = 0  # finished (or abandoned) negotiation attempts
        self._negotiation_error: UpstreamNotSent | None = None
        self._closed = False

    @property
    def alive(self) -> bool:
        return not self._closed

    @property
    def protocol_version(self) -> str | None:
        return self._era.version if self._era is not None else None

    @property
    def stateless(self) -> bool:
        """Negotiated without a session: another gateway process can continue what this one began."""
        return self._era is not None and self._era.session_id is None

    async def aclose(self) -> None:
        self._closed = True
        era = self._era
        if era is not None and era.session_id is not None:
            # Courtesy DELETE so a stateful upstream can free the session; failures do not matter.
            with anyio.move_on_after(2):
                try:
                    async with self._transport.stream(HttpRequest("DELETE", self._url, self._base_headers(era))):
                        pass
                except TransportError:
                    pass
        await self._transport.aclose()

    async def request(
        self,
        method: str,
        params: dict[str, Any] | None,
        *,
        timeout: float,
        relay: CallRelay | None = None,
    ) -> dict[str, Any]:
        if self._closed:
            raise UpstreamNotSent(self._name, "the connection is closed")
        era = await self._ready()
        try:
            return await self._call(era, method, params, relay, timeout)
        except _SessionLost:
            pass
        # The upstream never processed the request (unknown session): handshake again, resend once.
        self._forget(era)
        era = await self._ready()
        try:
            return await self._call(era, method, params, relay, timeout)
        except _SessionLost:
            self._forget(era)
            raise UpstreamNotSent(self._name, "the upstream rejected a fresh session (HTTP 404)") from None

    async def _call(
        self, era: _Era, method: str, params: dict[str, Any] | None, relay: CallRelay | None, timeout: float
    ) -> dict[str, Any]:
        try:
            with anyio.fail_after(timeout):
                return await self._exchange(era, method, params, relay)
        except TimeoutError:
            raise UpstreamInterrupted(self._name, f"no answer within {timeout:g} s") from None

    # -- protocol negotiation -------------------------------------------------------------

    async def _ready(self) -> _Era:
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
                        raise UpstreamNotSent(self._name, failed.reason, detail=failed.detail)
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
            raise UpstreamNotSent(self._name, f"no handshake answer within {self._connect_timeout:g} s") from None

    def _forget(self, era: _Era) -> None:
        """Drop a session the upstream lost, unless a concurrent call already replaced it."""
        if self._era is era:
            self._era = None

    async def _negotiate(self) -> _Era:
        if self._protocol_choice in ("auto", MODERN_VERSION):
            if await self._speaks_modern():
                return _Era(MODERN_VERSION)
            if self._protocol_choice == MODERN_VERSION:
                raise UpstreamNotSent(self._name, "the server does not speak protocol 2026-07-28")
        return await self._handshake()

    async def _speaks_modern(self) -> bool:
        try:
            result = await self._exchange(_PROBE_ERA, "server/discover", {}, None)
        except (UpstreamRpcError, UpstreamInterrupted):
            # A handshake-era server answers the unknown method with a JSON-RPC error or an
            # HTTP error status (often not JSON).
            return False
        versions = result.get("supportedVersions")
        return isinstance(versions, list) and MODERN_VERSION in versions

    async def _handshake(self) -> _Era:
        params = {"protocolVersion": HANDSHAKE_VERSION, "capabilities": CLIENT_CAPABILITIES, "clientInfo": CLIENT_INFO}
        session_ids: list[str] = []

        def capture(headers: Mapping[str, str]) -> None:
            if sid := headers.get(_SESSION_HEADER):
                session_ids.append(sid)

        try:
            result = await self._post(_INITIALIZE_ERA, self._message("initialize", params), None, capture)
        except UpstreamInterrupted as exc:
            # Nothing but the handshake was sent: the caller's own request never left.
            raise UpstreamNotSent(self._name, f"initialize failed: {exc.reason}", detail=exc.detail) from None
        except UpstreamRpcError as exc:
            raise UpstreamNotSent(self._name, f"initialize refused: {exc.reason}", detail=exc.detail) from None
        era = _Era(str(result.get("protocolVersion") or HANDSHAKE_VERSION), session_ids[-1] if session_ids else None)
        await self._notify(era, "notifications/initialized")
        return era

    async def _notify(self, era: _Era, method: str, params: dict[str, Any] | None = None) -> None:
        notification: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            notification["params"] = params
        body = json.dumps(notification).encode()
        try:
            async with self._transport.stream(HttpRequest("POST", self._url, self._json_headers(era), body)) as response:
                await response.aread()
        except TransportError as exc:
            raise UpstreamNotSent(self._name, f"{method} failed", detail=str(exc)) from None

    # -- one exchange ---------------------------------------------------------------------

    def _message(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": next(self._ids), "method": method}
        if params is not None:
            message["params"] = params
        return message

    def _base_headers(self, era: _Era) -> dict[str, str]:
        headers = {**self._headers, "accept": _ACCEPT}
        if era.version is not None:
            headers["mcp-protocol-version"] = era.version
        if era.session_id is not None:
            headers[_SESSION_HEADER] = era.session_id
        return headers

    def _json_headers(self, era: _Era) -> dict[str, str]:
        headers = self._base_headers(era)
        headers["content-type"] = "application/json"
        return headers

    async def _exchange(
        self, era: _Era, method: str, params: dict[str, Any] | None, relay: CallRelay | None
    ) -> dict[str, Any]:
        message = self._message(method, dict(params) if params is not None else None)
        if relay is not None or era.version == MODERN_VERSION:
            params_out = message.setdefault("params", {})
            meta = dict(params_out.get("_meta") or {})
            if relay is not None:
                meta["progressToken"] = message["id"]
            if era.version == MODERN_VERSION:
                meta["io.modelcontextprotocol/protocolVersion"] = MODERN_VERSION
                meta["io.modelcontextprotocol/clientInfo"] = CLIENT_INFO
                meta.setdefault("io.modelcontextprotocol/clientCapabilities", {})  # a task call declares tasks
            params_out["_meta"] = meta
        try:
            return await self._post(era, message, relay)
        except anyio.get_cancelled_exc_class():
            # The caller gave up (its client went away, or the call timed out). On 2026-07-28
            # closing the response stream is the cancellation; the handshake era needs a message.
            if era.version != MODERN_VERSION and method != "initialize":
                with anyio.CancelScope(shield=True), anyio.move_on_after(_CANCEL_SECONDS):
                    await self._send_cancelled(era, message["id"])
            raise

    async def _send_cancelled(self, era: _Era, request_id: int) -> None:
        try:
            await self._notify(era, "notifications/cancelled", {"requestId": request_id, "reason": "the caller went away"})
        except UpstreamNotSent as exc:
            logger.debug("upstream %s: notifications/cancelled not sent: %s", self._name, exc.detail)

    async def _post(
        self,
        era: _Era,
        message: dict[str, Any],
        relay: CallRelay | None,
        on_headers: Callable[[Mapping[str, str]], None] | None = None,
    ) -> dict[str, Any]:
        headers = self._json_headers(era)
        if era.version == MODERN_VERSION:
            method = message["method"]
            headers["mcp-method"] = method
            name_key = NAME_BEARING_METHODS.get(method) or ("taskId" if method in _TASK_METHODS else None)
            name = (message.get("params") or {}).get(name_key) if name_key else None
            if isinstance(name, str):
                headers["mcp-name"] = encode_header_value(name)
        body = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()
        entered = False
        try:
            async with self._transport.stream(HttpRequest("POST", self._url, headers, body)) as response:
                entered = True
                if on_headers is not None:
                    on_headers(response.headers)
                return await self._read_response(era, response, message["id"], relay)
        except RequestNotSent as exc:
            if entered:  # only a nested exchange can raise it here; ours was sent
                raise UpstreamInterrupted(self._name, _BROKE, detail=str(exc)) from None
            raise UpstreamNotSent(self._name, "could not connect to the upstream", detail=str(exc)) from None
        except RequestMaybeSent as exc:
            raise UpstreamInterrupted(self._name, _BROKE, detail=str(exc)) from None

    async def _read_response(
        self, era: _Era, response: HttpResponse, request_id: int, relay: CallRelay | None
    ) -> dict[str, Any]:
        status = response.status
        content_type = (response.headers.get("content-type") or "").lower()
        if status == 404 and era.session_id is not None:
            raise _SessionLost()
        if status >= 400 or status == 202:
            if content_type.startswith("application/json"):
                parsed = _loads(await response.aread())
                if isinstance(parsed, dict) and "error" in parsed:
                    return result_or_raise(self._name, parsed)
            else:
                await response.drain(_DRAIN_SECONDS)  # keep the connection when the body is short
            raise UpstreamInterrupted(self._name, f"HTTP status {status}")
        if content_type.startswith("application/json"):
            parsed = _loads(await response.aread())
            if parsed is None:
                raise UpstreamInterrupted(self._name, "unreadable response body (not JSON)")
            return result_or_raise(self._name, parsed)
        if content_type.startswith("text/event-stream"):
            return await self._read_event_stream(era, response, request_id, relay)
        raise UpstreamInterrupted(self._name, f"unexpected content type {content_type or '(none)'!r} (HTTP {status})")

    async def _read_event_stream(
        self, era: _Era, response: HttpResponse, request_id: int, relay: CallRelay | None
    ) -> dict[str, Any]:
        """Read SSE events until our answer; resume with Last-Event-ID when the server closes early."""
        cursor = StreamCursor()
        current = response
        async with AsyncExitStack() as resumed_streams:
            for resumption in range(_MAX_RESUMPTIONS + 1):
                answer = await read_events(
                    self._name, current, request_id, cursor,
                    on_request=lambda message: self._answer(era, message, relay),
                    on_notification=lambda message: deliver_notification(message, relay),
                )  # fmt: skip
                if answer is not None:
                    # The server ends the stream after the answer: read to the end so the
                    # keep-alive connection is reused instead of reopened for every call.
                    await current.drain(_DRAIN_SECONDS)
                    return result_or_raise(self._name, answer)
                if cursor.last_event_id is None or resumption == _MAX_RESUMPTIONS:
                    break
                # The server ended the stream on purpose (SSE polling): reconnect after its retry delay.
                await anyio.sleep(min(cursor.retry_seconds, _MAX_RETRY_SECONDS))
                await resumed_streams.aclose()  # the previous resumed stream, if any
                resumed = await self._resume(resumed_streams, era, cursor.last_event_id)
                if resumed is None:
                    break
                current = resumed
        raise UpstreamInterrupted(self._name, "the response stream ended without an answer")

    async def _answer(self, era: _Era, message: dict[str, Any], relay: CallRelay | None) -> None:
        """Answer a request the upstream made during our call (elicitation, sampling, ping...)."""
        reply = await answer_server_request(message, relay)
        body = json.dumps(reply, separators=(",", ":"), ensure_ascii=False).encode()
        try:
            async with self._transport.stream(HttpRequest("POST", self._url, self._json_headers(era), body)) as response:
                await response.aread()
        except TransportError as exc:
            logger.warning("upstream %s: could not answer its %s request: %s", self._name, message.get("method"), exc)

    async def _resume(self, stack: AsyncExitStack, era: _Era, last_event_id: str) -> HttpResponse | None:
        headers = {**self._base_headers(era), "accept": "text/event-stream", "last-event-id": last_event_id}
        try:
            response = await stack.enter_async_context(self._transport.stream(HttpRequest("GET", self._url, headers)))
        except TransportError as exc:
            logger.info("upstream %s: resuming the event stream failed: %s", self._name, exc)
            return None
        content_type = (response.headers.get("content-type") or "").lower()
        if response.status != 200 or not content_type.startswith("text/event-stream"):
            return None
        return response


def _loads(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None
