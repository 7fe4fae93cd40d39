"""The request gate: every POST to /mcp is one well-formed JSON-RPC message, or a clear error.

Checked once, before either entry sees the request, so the fast path and the SDK get only
messages they can answer, and a client always gets a JSON-RPC error body that says what is
wrong (never a 500, never a silent 202):

* HTTP method: POST, GET and DELETE (sessions) only; others 405 with `Allow`.
* `Content-Type: application/json` (parameters such as `charset=utf-8` allowed), else 415;
  `Accept` must take the answer (JSON, plus SSE unless the front answers JSON only), else 406.
* The body: strict JSON in UTF-8 (no other encoding, no lone surrogates, no `NaN`/`Infinity`,
  no number too large for a float, nesting at most ~200 levels), else -32700.
* The envelope: one object (a batch is -32600: batches are not part of this protocol version),
  `jsonrpc: "2.0"`; a request's `method` a string and its `id` a string or an integer (not
  null, a float, a boolean or an object), its `params` an object, and no `result` or `error`;
  a message without an `id` must be a notification (`notifications/...`): a `tools/call`
  without an id would run with nobody told the outcome. Else -32600 (-32602 for params).
  Responses a client sends back to the server (on a stateful session) pass.
* GET and DELETE belong to handshake-era sessions; with a protocol version of another era
  they get 405 with a JSON-RPC body (the SDK would answer a bare 405).

The parsed message is left in the ASGI scope (`PARSED_MESSAGE`) so the fast path does not
parse it again.
"""

from __future__ import annotations

import math
import re
from typing import Any

import pydantic_core
from mcp.server.streamable_http import check_accept_headers
from mcp_types import INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from ..http.asgi import header, read_body, refuse, replay_body

__all__ = ["PARSED_MESSAGE", "RequestGate"]

PARSED_MESSAGE = "dex.message"
_METHODS = frozenset({"POST", "GET", "DELETE"})
_ALLOW = b"GET, POST, DELETE"
# A number with a three-digit exponent may overflow a float to infinity (1e400): only then
# is the parsed message walked to look for one.
_BIG_EXPONENT = re.compile(rb"[0-9][eE][+-]?[0-9]{3}")


class RequestGate:
    def __init__(self, app: ASGIApp, *, max_body: int, json_only: bool) -> None:
        self._app = app
        self._max_body = max_body
        self._json_only = json_only

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        method = scope["method"]
        if method not in _METHODS:
            await refuse(send, 405, INVALID_REQUEST, f"Method Not Allowed: /mcp answers POST, GET and DELETE, not {method}",
                         [(b"allow", _ALLOW)])
            return
        if method != "POST":
            version = header(scope, b"mcp-protocol-version")
            if version is not None and version.decode("latin-1") not in HANDSHAKE_PROTOCOL_VERSIONS:
                await refuse(send, 405, INVALID_REQUEST,
                             f"Method Not Allowed: {method} serves handshake-era sessions only; "
                             f"protocol {version.decode('latin-1')!r} sends every request as a POST",
                             [(b"allow", b"POST")])
                return
            await self._app(scope, receive, send)
            return
        if not _is_json(header(scope, b"content-type")):
            await refuse(send, 415, INVALID_REQUEST, "Unsupported Media Type: Content-Type must be application/json")
            return
        has_json, has_sse = check_accept_headers(Request(scope))
        if not has_json or not (has_sse or self._json_only):
            wanted = "application/json" if self._json_only else "both application/json and text/event-stream"
            await refuse(send, 406, INVALID_REQUEST, f"Not Acceptable: the Accept header must include {wanted}")
            return
        body = await read_body(receive, self._max_body)
        if body is None:
            await refuse(send, 413, INVALID_REQUEST, f"Request body too large: the limit is {self._max_body} bytes")
            return
        try:
            message = _parse(body)
        except _Refused as exc:
            await refuse(send, 400, exc.code, exc.message)
            return
        scope[PARSED_MESSAGE] = message
        await self._app(scope, replay_body(body, receive), send)


class _Refused(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _is_json(content_type: bytes | None) -> bool:
    if content_type is None:
        return False
    media, _, params = content_type.decode("latin-1").partition(";")
    if media.strip().lower() != "application/json":
        return False
    charset = re.search(r"charset\s*=\s*\"?([^\";\s]+)", params, re.IGNORECASE)
    return charset is None or charset.group(1).lower() in ("utf-8", "utf8")


def _parse(body: bytes) -> dict[str, Any]:
    try:
        message = pydantic_core.from_json(body, allow_inf_nan=False)
    except ValueError as exc:
        raise _Refused(PARSE_ERROR, f"Parse error: the body is not strict JSON in UTF-8 ({_reason(exc)})") from None
    if _BIG_EXPONENT.search(body) and _has_infinity(message):
        raise _Refused(PARSE_ERROR, "Parse error: a number is too large (it would be Infinity)")
    if isinstance(message, list):
        raise _Refused(INVALID_REQUEST, "Invalid Request: batches are not supported in this protocol version; send one message per request")
    if not isinstance(message, dict):
        raise _Refused(INVALID_REQUEST, "Invalid Request: the body must be one JSON-RPC message (an object)")
    if message.get("jsonrpc") != "2.0":
        raise _Refused(INVALID_REQUEST, 'Invalid Request: "jsonrpc" must be "2.0"')
    is_response = "method" not in message and ("result" in message or "error" in message)
    if "id" in message or is_response:
        request_id = message.get("id")
        if not isinstance(request_id, (str, int)) or isinstance(request_id, bool):
            raise _Refused(INVALID_REQUEST, 'Invalid Request: "id" must be a string or an integer')
    if is_response:
        return message
    method = message.get("method")
    if not isinstance(method, str) or not method:
        raise _Refused(INVALID_REQUEST, 'Invalid Request: "method" must be a non-empty string')
    if "result" in message or "error" in message:
        raise _Refused(INVALID_REQUEST, 'Invalid Request: a request carries no "result" or "error"')
    if "params" in message and not isinstance(message["params"], dict):
        raise _Refused(INVALID_PARAMS, 'Invalid params: "params" must be an object')
    if "id" not in message and not method.startswith("notifications/"):
        raise _Refused(INVALID_REQUEST, f'Invalid Request: {method} needs an "id" (only notifications/... are sent without one)')
    return message


def _reason(exc: ValueError) -> str:
    text = str(exc)
    if "recursion limit" in text:
        return "nested too deeply"
    return text


def _has_infinity(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float):
            if math.isinf(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False
