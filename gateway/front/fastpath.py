"""The direct entry for the hottest requests: stateless `tools/call` and `tools/list` POSTs.

The SDK server spends about 1 ms of CPU per request around a handler (dispatcher, runner,
middleware, an SSE response with its own task group) -- as much as a whole upstream call.
This ASGI layer answers plain `tools/call` and `tools/list` requests of both protocol eras
itself (handshake era without a session, and 2026-07-28), through the same `ToolCalls` and
`ToolListing` the SDK handlers use (calls answered with a task included: gateway/tasks/), and
hands every other request to the SDK unchanged:
other methods, sessions, unknown protocol versions, 2026 requests whose
envelope or routing headers the SDK must refuse, and anything it does not fully understand.

The answer is JSON (Streamable HTTP lets a server answer a POST with JSON or an SSE stream);
the response turns into an SSE stream as soon as the upstream sends a notification for the
call (progress, log), or after 15 s of silence (then pinged every 15 s, so an idle-read
timeout in a proxy does not cut a long call), as the SDK's 2026 entry does. A client that
disconnects cancels its call (a fenced write still runs to its recorded end).
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import AbstractContextManager as ContextManager
from contextlib import nullcontext
from typing import Any

import anyio
from opentelemetry.trace import Tracer
from mcp.shared.inbound import (
    ERROR_CODE_HTTP_STATUS,
    InboundLadderRejection,
    classify_inbound_request,
    find_duplicated_routing_header,
)
from starlette.types import ASGIApp, Receive, Scope, Send

from ..pipeline.catalog import Catalog
from ..errors import RequestError
from ..protocol import HANDSHAKE_VERSIONS, MODERN_VERSIONS, Era
from ..telemetry.tracing import NO_FRONT_SPAN, FrontSpan, front_span, trace_headers
from ..auth.principals import identity_of
from .relays import StreamRelay
from ..http.requests import PARSED_MESSAGE
from ..http.uvicorn_protocol import DISCONNECT, Disconnect
from .tools import ToolCalls, ToolListing, parse_tool_call
from .wire import encode_message, error_object

__all__ = ["FastPath"]

logger = logging.getLogger(__name__)

PING_INTERVAL = 15.0
_FAST_METHODS = frozenset({"tools/call", "tools/list"})
_HANDSHAKE = frozenset(v.encode() for v in HANDSHAKE_VERSIONS)
_MODERN = frozenset(v.encode() for v in MODERN_VERSIONS)
_JSON_HEADERS = [(b"content-type", b"application/json")]
_SSE_HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache, no-transform"),
    (b"x-accel-buffering", b"no"),
]


class FastPath:
    def __init__(
        self,
        app: ASGIApp,
        tool_calls: ToolCalls,
        listing: ToolListing,
        catalog: Catalog,
        *,
        handshake_era: bool = True,
        tracer: Tracer | None = None,
    ) -> None:
        self._app = app
        self._tracer = tracer  # None: telemetry off, no span (gateway/telemetry/tracing.py)
        # False on a stateful front: handshake-era requests belong to their SDK session there.
        self._handshake_era = handshake_era
        self._tool_calls = tool_calls
        self._listing = listing
        self._catalog = catalog

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        eligible = _eligible(scope)
        if eligible is None:
            await self._app(scope, receive, send)
            return
        version, mcp_headers = eligible
        era = Era.of(version)
        if era is Era.HANDSHAKE and not self._handshake_era:
            await self._app(scope, receive, send)
            return
        message = _fast_request(scope.get(PARSED_MESSAGE))  # the edge read and parsed the body
        if message is None or (era is Era.MODERN and not _envelope_ok(mcp_headers, message)):
            # Not ours: the SDK sees the request exactly as it came (and answers any error).
            await self._app(scope, receive, send)
            return
        request_id = message["id"]
        if message["method"] == "tools/list":
            with self._traced(scope, message, version, None):
                result = await self._listing.encoded(identity_of(scope), era=era)
                head = b'{"jsonrpc":"2.0","id":' + encode_message(request_id, era=era) + b',"result":'
                await _Exchange(send, era).finish(head + result + b"}", 200)
            return
        try:
            call = parse_tool_call(message.get("params"))
        except RequestError as exc:
            with self._traced(scope, message, version, None) as span:
                span.error(exc.code, exc.message)
                await _Exchange(send, era).finish(*_error(request_id, exc, era))
            return
        if era is Era.MODERN and self._needs_header_check(mcp_headers, call.name):
            await self._app(scope, receive, send)
            return
        exchange = _Exchange(send, era)
        relay = StreamRelay(exchange, call.meta, version)

        outcome: tuple[bytes, int] | None = None
        with self._traced(scope, message, version, call.name) as span:
            # While the call runs, pings are sent during silence (a timer, `_Pings`) and a client
            # that disconnects cancels it. The gateway's own HTTP protocol says when its client went
            # away (http/uvicorn_protocol.py `Disconnect`: a callback, no task); under another
            # server a watcher task reads `receive()`. (A plain asyncio task, never a task group per request: measured
            # here, ~100 us of CPU for a group vs ~8 us for a bare task.) The call runs in an anyio
            # CancelScope, so a disconnect cancels it the anyio way and the fence's shielded scopes
            # hold (a claimed write still runs to its recorded end).
            with anyio.CancelScope() as cancel:
                pings = _Pings(exchange)
                disconnect = scope.get(DISCONNECT)
                watcher: asyncio.Task[None] | None = None
                if isinstance(disconnect, Disconnect):
                    disconnect.on_lost(cancel.cancel)
                else:
                    watcher = asyncio.get_running_loop().create_task(_watch(receive, cancel))
                try:
                    answered = await self._tool_calls.result(identity_of(scope), call, relay, era=era)
                    span.result(answered)
                    outcome = encode_message({"jsonrpc": "2.0", "id": request_id, "result": answered}, era=era), 200
                except RequestError as exc:
                    span.error(exc.code, exc.message)
                    outcome = _error(request_id, exc, era)
                finally:
                    pings.cancel()
                    if watcher is not None:
                        watcher.cancel()
                    if isinstance(disconnect, Disconnect):
                        disconnect.on_lost(None)
            if outcome is not None:
                await exchange.finish(*outcome)

    def _traced(self, scope: Scope, message: dict[str, Any], version: str, target: str | None) -> ContextManager[FrontSpan]:
        """The request's SERVER span (the SDK path's FrontSpans makes the same one)."""
        if self._tracer is None:
            return _UNTRACED
        params = message.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        return front_span(
            self._tracer, message["method"], target=target, request_id=message["id"], protocol_version=version,
            meta=meta if isinstance(meta, dict) else None, headers=trace_headers(scope["headers"]),
        )

    def _needs_header_check(self, mcp_headers: list[tuple[bytes, bytes]], name: str) -> bool:
        """Mcp-Param-* headers to check against the tool's schema: the SDK does that."""
        route = self._catalog.peek_tool(name)
        if route is not None and route.declares_header_params:
            return True
        return any(key.startswith(b"mcp-param-") for key, _ in mcp_headers)


_UNTRACED = nullcontext(NO_FRONT_SPAN)


def _eligible(scope: Scope) -> tuple[str, list[tuple[bytes, bytes]]] | None:
    """The protocol version of a POST the fast path may take (no session, JSON + SSE accepted),
    and its `Mcp-*` headers (routing and parameter headers), found in one pass over the headers."""
    if scope["type"] != "http" or scope["method"] != "POST":
        return None
    accept = content_type = b""
    version: bytes | None = None
    mcp_headers: list[tuple[bytes, bytes]] = []
    for name, value in scope["headers"]:
        if name == b"accept":
            accept = value
        elif name == b"content-type":
            content_type = value
        elif name.startswith(b"mcp-"):
            if name == b"mcp-session-id":
                return None
            if name == b"mcp-protocol-version":
                version = value
            mcp_headers.append((name, value))
    if b"application/json" not in accept or b"text/event-stream" not in accept:
        return None
    if not content_type.startswith(b"application/json"):
        return None
    if version is None:
        return HANDSHAKE_VERSIONS[-1], mcp_headers
    if version in _HANDSHAKE or version in _MODERN:
        return version.decode(), mcp_headers
    return None


def _fast_request(message: Any) -> dict[str, Any] | None:
    """The message (checked by the request gate) when it is a tools/call or tools/list request."""
    if not isinstance(message, dict) or message.get("method") not in _FAST_METHODS or "id" not in message:
        return None
    return message


def _envelope_ok(mcp_headers: list[tuple[bytes, bytes]], message: dict[str, Any]) -> bool:
    """A 2026-07-28 request whose envelope and routing headers the SDK's own ladder accepts
    (the ladder reads only `Mcp-*` headers: the others are not decoded for it)."""
    raw = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in mcp_headers]
    if find_duplicated_routing_header(raw) is not None:
        return False
    return not isinstance(classify_inbound_request(message, headers=dict(raw)), InboundLadderRejection)


def _error(request_id: Any, exc: RequestError, era: Era) -> tuple[bytes, int]:
    body = encode_message(
        {"jsonrpc": "2.0", "id": request_id, "error": error_object(exc.code, exc.message, exc.data)}, era=era
    )
    # The 2026 entry answers errors with the SDK's table-mapped HTTP status.
    return body, ERROR_CODE_HTTP_STATUS.get(exc.code, 200) if era is Era.MODERN else 200


async def _watch(receive: Receive, scope: anyio.CancelScope) -> None:
    """Under another ASGI server: cancel the call when `receive()` says the client disconnected."""
    while (await receive())["type"] != "http.disconnect":
        pass
    logger.debug("client disconnected: cancelling its call")
    scope.cancel()


class _Pings:
    """A ping every PING_INTERVAL seconds of silence while a call runs: a timer, and a task only
    when one is due."""

    __slots__ = ("_exchange", "_loop", "_timer", "_task")

    def __init__(self, exchange: "_Exchange") -> None:
        self._exchange = exchange
        self._loop = asyncio.get_running_loop()
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = self._loop.call_later(PING_INTERVAL, self._due)

    def _due(self) -> None:
        self._timer = None
        self._task = self._loop.create_task(self._ping())

    async def _ping(self) -> None:
        await self._exchange.ping()
        self._task = None
        self._timer = self._loop.call_later(PING_INTERVAL, self._due)

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._task is not None:
            self._task.cancel()


class _Exchange:
    """One response: JSON unless something must be streamed first; then SSE to the end."""

    def __init__(self, send: Send, era: Era) -> None:
        self._send = send
        self._era = era
        self._streaming = False
        # Only the call's notifications (other tasks) and its answer take turns here; an asyncio
        # lock, as uncontended as anyio's fast one but without its current-task checks on every call.
        self._lock = asyncio.Lock()

    async def event(self, message: dict[str, Any]) -> None:
        await self._stream(_sse(encode_message(message, era=self._era)))

    async def ping(self) -> None:
        await self._stream(b": ping\r\n\r\n")

    async def finish(self, body: bytes, status: int) -> None:
        async with self._lock:
            if self._streaming:
                await self._emit({"type": "http.response.body", "body": _sse(body), "more_body": False})
                return
            headers = [*_JSON_HEADERS, (b"content-length", str(len(body)).encode())]
            await self._emit({"type": "http.response.start", "status": status, "headers": headers})
            await self._emit({"type": "http.response.body", "body": body, "more_body": False})

    async def _stream(self, chunk: bytes) -> None:
        async with self._lock:
            if not self._streaming:
                self._streaming = True
                await self._emit({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
            await self._emit({"type": "http.response.body", "body": chunk, "more_body": True})

    async def _emit(self, message: dict[str, Any]) -> None:
        try:
            await self._send(message)
        except OSError:
            # The client went away; the call itself still ends and is recorded by its fence.
            logger.debug("client disconnected before the answer was sent")


def _sse(data: bytes) -> bytes:
    return b"event: message\r\ndata: " + data + b"\r\n\r\n"
