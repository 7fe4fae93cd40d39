"""The request rules: every POST to /mcp is one well-formed JSON-RPC message, or a clear error.

Checked once at the edge (http/edge.py), before either entry sees the request, so the fast path and the SDK get only
messages they can answer, and a client always gets a JSON-RPC error body that says what is
wrong (never a 500, never a silent 202):

* Size: a declared `Content-Length` over `server.max_request_bytes` (or not a number) is 413 at
  once; a chunked body, which declares no size, is read up to the limit, then 413.
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

The parsed message is left in the ASGI scope (`PARSED_MESSAGE`) so the fast path does not parse
it again; the body is read once, here, and replayed to the SDK when the SDK answers.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any, cast

import pydantic_core
from mcp.server.streamable_http import check_accept_headers
from mcp_types import INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.requests import Request
from starlette.types import Receive, Scope

from .asgi import Refusal, header, read_body

__all__ = ["PARSED_MESSAGE", "RequestRules"]

PARSED_MESSAGE = "dex.message"
_METHODS = frozenset({"POST", "GET", "DELETE"})
_ALLOW = b"GET, POST, DELETE"
# A number with a three-digit exponent may overflow a float to infinity (1e400): only then
# is the parsed message walked to look for one.
_BIG_EXPONENT = re.compile(rb"[0-9][eE][+-]?[0-9]{3}")


class RequestRules:
    """The rules above, checked by `/mcp`'s edge (http/edge.py) once it knows who calls."""

    def __init__(self, *, max_body: int, json_only: bool) -> None:
        self._max_body = max_body
        self._json_only = json_only
        self._too_large = Refusal(413, INVALID_REQUEST, f"Request body too large: the limit is {max_body} bytes")
        # What an Accept / Content-Type value allows, worked out once per distinct value: a client
        # sends the same few values on every request.
        self._accepts: dict[bytes | None, bool] = {}
        self._json_types: dict[bytes | None, bool] = {}

    async def admit(self, scope: Scope, receive: Receive) -> Refusal | bytes | None:
        """A POST's body (its message parsed into `scope[PARSED_MESSAGE]`); None for a GET or a
        DELETE that may go on (it has no body to read); or the refusal to answer instead."""
        length = header(scope, b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self._max_body):
            return self._too_large
        method = scope["method"]
        if method not in _METHODS:
            return Refusal(405, INVALID_REQUEST, f"Method Not Allowed: /mcp answers POST, GET and DELETE, not {method}",
                           ((b"allow", _ALLOW),))
        if method != "POST":
            version = header(scope, b"mcp-protocol-version")
            if version is not None and version.decode("latin-1") not in HANDSHAKE_PROTOCOL_VERSIONS:
                return Refusal(405, INVALID_REQUEST,
                               f"Method Not Allowed: {method} serves handshake-era sessions only; "
                               f"protocol {version.decode('latin-1')!r} sends every request as a POST",
                               ((b"allow", b"POST"),))
            return None
        if not _remembered(self._json_types, header(scope, b"content-type"), _is_json):
            return _UNSUPPORTED_TYPE
        if not _remembered(self._accepts, header(scope, b"accept"), self._takes_answer):
            wanted = "application/json" if self._json_only else "both application/json and text/event-stream"
            return Refusal(406, INVALID_REQUEST, f"Not Acceptable: the Accept header must include {wanted}")
        body = await read_body(receive, self._max_body)
        if body is None:
            return self._too_large
        try:
            scope[PARSED_MESSAGE] = _parse(body)
        except _Refused as exc:
            return Refusal(400, exc.code, exc.message)
        return body


    def _takes_answer(self, accept: bytes | None) -> bool:
        """Whether an Accept value takes the answer, by the SDK's own rule (wildcards included)."""
        value = "" if accept is None else accept.decode("latin-1")
        has_json, has_sse = check_accept_headers(cast(Request, _AcceptOnly(value)))
        return has_json and (has_sse or self._json_only)


class _AcceptOnly:
    """What `check_accept_headers` reads of a request: its Accept header."""

    __slots__ = ("headers",)

    def __init__(self, accept: str) -> None:
        self.headers = {"accept": accept}


_MAX_REMEMBERED = 256


def _remembered(known: dict[bytes | None, bool], value: bytes | None, rule: Callable[[bytes | None], bool]) -> bool:
    found = known.get(value)
    if found is None:
        if len(known) >= _MAX_REMEMBERED:
            known.clear()  # many distinct values: a client probing; the rule still answers each
        found = known[value] = rule(value)
    return found


_UNSUPPORTED_TYPE = Refusal(415, INVALID_REQUEST, "Unsupported Media Type: Content-Type must be application/json")


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
