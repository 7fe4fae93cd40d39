"""A direct path for the hottest request: a stateless, handshake-era `tools/call` POST.

The SDK server spends about 1 ms of CPU per request around the handler (dispatcher, runner,
middleware, an SSE response with its own task group) — as much as a whole upstream call. This
ASGI layer answers plain `tools/call` requests itself, through the same `Front.answer_tool_call`
the SDK handler uses, and hands every other request (other methods, sessions, the 2026-07-28
era, anything unusual) to the SDK unchanged.

The answer is JSON (the Streamable HTTP spec lets a server answer a POST with either JSON or an
SSE stream); the response turns into an SSE stream as soon as the upstream sends a
notification for the call (progress, log), exactly as the SDK's modern path does.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import anyio
from mcp.shared.exceptions import MCPError
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .asgi import read_body, replay_body
from .principals import ANONYMOUS, PRINCIPAL_SCOPE_KEY
from .server import Front
from .upstreams.rpc import RelayRefused

logger = logging.getLogger(__name__)

_JSON_HEADERS = [(b"content-type", b"application/json")]
_SSE_HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache, no-transform"),
    (b"x-accel-buffering", b"no"),
]


class ToolCallFastPath:
    def __init__(self, app: ASGIApp, front: Front, max_body: int) -> None:
        self._app = app
        self._front = front
        self._max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self._may_take(scope):
            await self._app(scope, receive, send)
            return
        body = await read_body(receive, self._max_body)
        request = _tool_call(body) if body is not None else None
        if request is None:
            # Not ours: the SDK sees the request exactly as it came (and answers any error).
            if body is None:
                await self._app(scope, receive, send)
            else:
                await self._app(scope, replay_body(body, receive), send)
            return
        await self._answer(scope, request, send)

    def _may_take(self, scope: Scope) -> bool:
        if scope["type"] != "http" or scope["method"] != "POST":
            return False
        accept = content_type = version = b""
        for name, value in scope["headers"]:
            if name == b"accept":
                accept = value
            elif name == b"content-type":
                content_type = value
            elif name == b"mcp-protocol-version":
                version = value
            elif name == b"mcp-session-id":
                return False
        return (
            b"application/json" in accept
            and b"text/event-stream" in accept
            and content_type.startswith(b"application/json")
            and (not version or version.decode("latin-1") in HANDSHAKE_PROTOCOL_VERSIONS)
        )

    async def _answer(self, scope: Scope, request: dict[str, Any], send: Send) -> None:
        params = request["params"]
        meta = params.get("_meta") or {}
        responder = _Responder(send)
        relay = _StreamRelay(responder, meta.get("progressToken"))
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": request["id"]}
        try:
            answer = await self._front.answer_tool_call(
                str(scope.get(PRINCIPAL_SCOPE_KEY, ANONYMOUS)),
                params["name"],
                dict(params.get("arguments") or {}),
                dict(meta),
                relay,
            )
            reply["result"] = answer.to_wire()
        except MCPError as exc:
            error: dict[str, Any] = {"code": exc.error.code, "message": exc.error.message}
            if exc.error.data is not None:
                error["data"] = exc.error.data
            reply["error"] = error
        await responder.finish(reply)


def _tool_call(body: bytes) -> dict[str, Any] | None:
    """The request when it is one well-formed tools/call; None leaves it to the SDK."""
    try:
        message = json.loads(body)
    except ValueError:
        return None
    if (
        not isinstance(message, dict)
        or message.get("jsonrpc") != "2.0"
        or message.get("method") != "tools/call"
        or not isinstance(message.get("id"), (str, int))
        or isinstance(message.get("id"), bool)
    ):
        return None
    params = message.get("params")
    if not isinstance(params, dict) or not isinstance(params.get("name"), str):
        return None
    if not isinstance(params.get("arguments", {}), (dict, type(None))):
        return None
    if not isinstance(params.get("_meta", {}), (dict, type(None))):
        return None
    return message


class _Responder:
    """JSON unless a notification must be streamed first; then SSE to the end."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self._streaming = False
        self._lock = anyio.Lock()

    async def event(self, message: dict[str, Any]) -> None:
        async with self._lock:
            if not self._streaming:
                self._streaming = True
                await self._emit({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
            await self._emit({"type": "http.response.body", "body": _sse(message), "more_body": True})

    async def finish(self, message: dict[str, Any]) -> None:
        async with self._lock:
            if self._streaming:
                await self._emit({"type": "http.response.body", "body": _sse(message), "more_body": False})
                return
            body = _dump(message)
            headers = [*_JSON_HEADERS, (b"content-length", str(len(body)).encode())]
            await self._emit({"type": "http.response.start", "status": 200, "headers": headers})
            await self._emit({"type": "http.response.body", "body": body, "more_body": False})

    async def _emit(self, message: Message) -> None:
        try:
            await self._send(message)
        except OSError:
            # The client went away; the call itself still ends and is recorded by its fence.
            logger.debug("client disconnected before the answer was sent")


class _StreamRelay:
    """What an upstream says during the call, as notifications on this request's stream."""

    def __init__(self, responder: _Responder, progress_token: Any) -> None:
        self._responder = responder
        self._token = progress_token

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        if self._token is None:
            return
        params: dict[str, Any] = {"progressToken": self._token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        await self._responder.event({"jsonrpc": "2.0", "method": "notifications/progress", "params": params})

    async def log(self, params: dict[str, Any]) -> None:
        await self._responder.event({"jsonrpc": "2.0", "method": "notifications/message", "params": params})

    async def request(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        raise RelayRefused.no_session(method)


def _dump(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode()


def _sse(message: dict[str, Any]) -> bytes:
    return b"event: message\r\ndata: " + _dump(message) + b"\r\n\r\n"
