"""A Streamable-HTTP upstream: pooled keep-alive connections, both protocol eras.

One `HttpConnection` serves every concurrent call to one upstream. On the handshake era it
holds the `Mcp-Session-Id` and re-initializes when the upstream forgot it (restart); on
2026-07-28 every request is self-contained.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
from mcp.shared.inbound import NAME_BEARING_METHODS, encode_header_value

from ..errors import UpstreamInterrupted, UpstreamNotSent, UpstreamRpcError
from .rpc import (
    CLIENT_CAPABILITIES,
    CLIENT_INFO,
    HANDSHAKE_VERSION,
    MODERN_VERSION,
    CallRelay,
    answer_server_request,
    deliver_notification,
    result_or_raise,
)
from .tls import HttpxPool
from .wire import ConnectFailed, ConnectionBroke, HttpPool, WireError


class Response(Protocol):
    """What both pools hand back."""

    status: int
    headers: Mapping[str, str]  # lower-cased names

    async def aread(self) -> bytes: ...

    def aiter_lines(self) -> AsyncIterator[str]: ...

    async def drain(self, timeout: float) -> None: ...

    async def aclose(self) -> None: ...


logger = logging.getLogger(__name__)

_SESSION_HEADER = "mcp-session-id"
# Requests that must never reach an upstream twice by a transport-level resend: whether a tool
# call is sent again is decided by the outcome rules (by effect), not by the connection pool.
_NO_TRANSPORT_RESEND = frozenset({"tools/call"})


class HttpConnection:
    def __init__(
        self,
        name: str,
        url: str,
        *,
        headers: dict[str, str],
        protocol: str,
        connect_timeout: float,
    ) -> None:
        self._name = name
        self._url = url
        self._protocol_choice = protocol
        # The lean pool for plain HTTP (the hot path); httpx where TLS is needed.
        self._pool: HttpPool | HttpxPool = (
            HttpxPool(connect_timeout=connect_timeout, default_headers=headers)
            if url.startswith("https://")
            else HttpPool(connect_timeout=connect_timeout, default_headers=headers)
        )
        self._connect_timeout = connect_timeout
        self._ids = itertools.count(1)
        self._version: str | None = None  # negotiated protocol version once ready
        self._session_id: str | None = None
        self._ready_lock = anyio.Lock()
        self._closed = False

    @property
    def alive(self) -> bool:
        return not self._closed

    @property
    def protocol_version(self) -> str | None:
        return self._version

    async def aclose(self) -> None:
        self._closed = True
        if self._session_id is not None:
            # Courtesy DELETE so a stateful upstream can free the session; failures do not matter.
            with anyio.move_on_after(2):
                try:
                    async with self._pool.stream("DELETE", self._url, headers=self._base_headers()):
                        pass
                except WireError:
                    pass
        await self._pool.aclose()

    async def request(
        self,
        method: str,
        params: dict[str, Any] | None,
        *,
        timeout: float,
        relay: CallRelay | None = None,
    ) -> dict[str, Any]:
        await self._ensure_ready()
        try:
            with anyio.fail_after(timeout):
                return await self._send_request(method, params, relay)
        except _SessionLost:
            # The upstream never processed the request (unknown session): handshake again, resend once.
            await self._reset_session()
            await self._ensure_ready()
            with anyio.fail_after(timeout):
                return await self._send_request(method, params, relay)
        except TimeoutError:
            raise UpstreamInterrupted(self._name, f"no answer within {timeout:g} s") from None

    # -- protocol negotiation -------------------------------------------------------------

    async def _ensure_ready(self) -> None:
        if self._version is not None:
            return
        try:
            # A server that accepts the connection but never answers the handshake must not
            # hold the caller longer than the connect timeout; its request was never sent.
            with anyio.fail_after(self._connect_timeout):
                await self._negotiate()
        except TimeoutError:
            raise UpstreamNotSent(self._name, f"no handshake answer within {self._connect_timeout:g} s") from None

    async def _negotiate(self) -> None:
        async with self._ready_lock:
            if self._version is not None:
                return
            if self._protocol_choice in ("auto", MODERN_VERSION) and await self._try_modern():
                self._version = MODERN_VERSION
                return
            if self._protocol_choice == MODERN_VERSION:
                raise UpstreamNotSent(self._name, "the server does not speak protocol 2026-07-28")
            await self._handshake()

    async def _try_modern(self) -> bool:
        self._version = MODERN_VERSION  # so the probe is stamped as a modern request
        try:
            result = await self._send_request("server/discover", {}, None)
        except UpstreamRpcError:
            return False
        except UpstreamInterrupted:
            # A handshake-era server may answer the unknown method with an HTTP error status.
            return False
        finally:
            self._version = None
        return MODERN_VERSION in (result.get("supportedVersions") or [])

    async def _handshake(self) -> None:
        params = {"protocolVersion": HANDSHAKE_VERSION, "capabilities": CLIENT_CAPABILITIES, "clientInfo": CLIENT_INFO}
        try:
            result = await self._post_and_read(self._message("initialize", params), None, capture_session=True)
        except UpstreamInterrupted as exc:
            # Nothing but the handshake was sent: the caller's own request never left.
            raise UpstreamNotSent(self._name, f"initialize failed: {exc.reason}") from None
        except UpstreamRpcError as exc:
            raise UpstreamNotSent(self._name, f"initialize refused: {exc.reason}") from None
        self._version = str(result.get("protocolVersion") or HANDSHAKE_VERSION)
        await self._notify("notifications/initialized")

    async def _reset_session(self) -> None:
        async with self._ready_lock:
            self._version = None
            self._session_id = None

    async def _notify(self, method: str) -> None:
        body = json.dumps({"jsonrpc": "2.0", "method": method}).encode()
        try:
            async with self._pool.stream("POST", self._url, headers=self._json_headers(), body=body) as response:
                await response.aread()
        except WireError as exc:
            raise UpstreamNotSent(self._name, f"{method} failed: {exc}") from None

    # -- one exchange ---------------------------------------------------------------------

    def _message(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": next(self._ids), "method": method}
        if params is not None:
            message["params"] = params
        return message

    def _json_headers(self) -> dict[str, str]:
        return {**self._base_headers(), "content-type": "application/json"}

    def _base_headers(self) -> dict[str, str]:
        headers = {"accept": "application/json, text/event-stream"}
        if self._version is not None:
            headers["mcp-protocol-version"] = self._version
        if self._session_id is not None:
            headers[_SESSION_HEADER] = self._session_id
        return headers

    async def _send_request(
        self, method: str, params: dict[str, Any] | None, relay: CallRelay | None
    ) -> dict[str, Any]:
        message = self._message(method, dict(params) if params is not None else None)
        if relay is not None:
            meta = dict((message.setdefault("params", {})).get("_meta") or {})
            meta["progressToken"] = message["id"]
            message["params"]["_meta"] = meta
        if self._version == MODERN_VERSION:
            meta = dict((message.setdefault("params", {})).get("_meta") or {})
            meta.update(
                {
                    "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
                    "io.modelcontextprotocol/clientInfo": CLIENT_INFO,
                    "io.modelcontextprotocol/clientCapabilities": {},
                }
            )
            message["params"]["_meta"] = meta
        return await self._post_and_read(message, relay)

    async def _post_and_read(
        self, message: dict[str, Any], relay: CallRelay | None, *, capture_session: bool = False
    ) -> dict[str, Any]:
        headers = self._base_headers()
        if self._version == MODERN_VERSION:
            method = message["method"]
            headers["mcp-method"] = method
            name_key = NAME_BEARING_METHODS.get(method)
            name = (message.get("params") or {}).get(name_key) if name_key else None
            if isinstance(name, str):
                headers["mcp-name"] = encode_header_value(name)
        body = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()
        headers["content-type"] = "application/json"
        retry_stale = message["method"] not in _NO_TRANSPORT_RESEND
        try:
            async with self._pool.stream("POST", self._url, headers=headers, body=body, retry_stale=retry_stale) as response:
                if capture_session and (sid := response.headers.get(_SESSION_HEADER)):
                    self._session_id = sid
                return await self._read_response(response, message["id"], relay)
        except ConnectFailed as exc:
            raise UpstreamNotSent(self._name, str(exc)) from None
        except ConnectionBroke as exc:
            raise UpstreamInterrupted(self._name, str(exc)) from None
        except WireError as exc:
            raise UpstreamNotSent(self._name, str(exc)) from None

    async def _read_response(self, response: Response, request_id: int, relay: CallRelay | None) -> dict[str, Any]:
        status = response.status
        content_type = response.headers.get("content-type", "").lower()
        if status == 404 and self._session_id is not None:
            raise _SessionLost()
        if status >= 400 or status == 202:
            if content_type.startswith("application/json"):
                body = await response.aread()
                try:
                    parsed = json.loads(body)
                except ValueError:
                    parsed = None
                if isinstance(parsed, dict) and "error" in parsed:
                    return result_or_raise(self._name, parsed)
            raise UpstreamInterrupted(self._name, f"HTTP status {status}")
        if content_type.startswith("application/json"):
            body = await response.aread()
            try:
                return result_or_raise(self._name, json.loads(body))
            except ValueError:
                raise UpstreamInterrupted(self._name, "unreadable response body (not JSON)") from None
        if content_type.startswith("text/event-stream"):
            return await self._read_event_stream(response, request_id, relay)
        raise UpstreamInterrupted(self._name, f"unexpected content type {content_type or '(none)'!r}")

    async def _read_event_stream(self, response: Response, request_id: int, relay: CallRelay | None) -> dict[str, Any]:
        """Read SSE events until our answer; resume with Last-Event-ID when the server closes early."""
        cursor = _StreamCursor()
        current = response  # the caller closes the first response; resumed ones are ours
        try:
            for resumption in range(_MAX_RESUMPTIONS + 1):
                answer = await self._read_events(current, request_id, relay, cursor)
                if answer is not None:
                    # The server ends the stream after the answer: read to the end so the
                    # keep-alive connection is reused instead of reopened for every call.
                    await current.drain(_DRAIN_SECONDS)
                    return answer
                if cursor.last_event_id is None or resumption == _MAX_RESUMPTIONS:
                    break
                # The server ended the stream on purpose (SSE polling): reconnect after its retry delay.
                await anyio.sleep(min(cursor.retry_seconds, _MAX_RETRY_SECONDS))
                if current is not response:
                    await current.aclose()
                resumed = await self._resume(cursor.last_event_id)
                if resumed is None:
                    break
                current = resumed
        finally:
            if current is not response:
                await current.aclose()
        raise UpstreamInterrupted(self._name, "the response stream ended without an answer")

    async def _read_events(
        self, response: Response, request_id: int, relay: CallRelay | None, cursor: "_StreamCursor"
    ) -> dict[str, Any] | None:
        data_lines: list[str] = []
        async for line in response.aiter_lines():
            if line:
                field, _, value = line.partition(":")
                value = value.removeprefix(" ")
                if field == "data":
                    data_lines.append(value)
                elif field == "id":
                    cursor.last_event_id = value
                elif field == "retry" and value.isdigit():
                    cursor.retry_seconds = int(value) / 1000
                continue
            if not data_lines:
                continue  # keep-alives and priming events carry no data
            payload, data_lines = "\n".join(data_lines), []
            if not payload.strip():
                continue
            try:
                message = json.loads(payload)
            except ValueError:
                raise UpstreamInterrupted(self._name, "unreadable SSE event (not JSON)") from None
            if not isinstance(message, dict):
                continue
            if message.get("id") == request_id and ("result" in message or "error" in message):
                return result_or_raise(self._name, message)
            if "method" in message and "id" in message:
                await self._answer(message, relay)
            elif "method" in message:
                await deliver_notification(message, relay)
        return None

    async def _answer(self, message: dict[str, Any], relay: CallRelay | None) -> None:
        """Answer a request the upstream made during our call (elicitation, sampling, ping...)."""
        reply = await answer_server_request(message, relay)
        body = json.dumps(reply, separators=(",", ":"), ensure_ascii=False).encode()
        try:
            async with self._pool.stream("POST", self._url, headers=self._json_headers(), body=body) as response:
                await response.aread()
        except WireError as exc:
            logger.warning("upstream %s: could not answer its %s request: %s", self._name, message.get("method"), exc)

    async def _resume(self, last_event_id: str) -> Response | None:
        headers = {**self._base_headers(), "accept": "text/event-stream", "last-event-id": last_event_id}
        exchange = self._pool.stream("GET", self._url, headers=headers)
        try:
            response = await exchange.__aenter__()
        except WireError as exc:
            logger.info("upstream %s: resuming the event stream failed: %s", self._name, exc)
            return None
        if response.status != 200 or not response.headers.get("content-type", "").startswith("text/event-stream"):
            await response.aclose()
            return None
        return response


@dataclass
class _StreamCursor:
    """Where an SSE stream got to, so it can be resumed."""

    last_event_id: str | None = None
    retry_seconds: float = 1.0


_MAX_RESUMPTIONS = 5
_DRAIN_SECONDS = 0.25
_MAX_RETRY_SECONDS = 10.0


class _SessionLost(Exception):
    """The upstream answered 404 for our session id: it restarted or expired the session."""
