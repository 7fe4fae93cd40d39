"""Known findings of the front fuzz: product bugs reported to the lead, not fixed here.

Each has minimal reproducers, asserted as `xfail(strict=True)` in test_front_fuzz.py: once the
product is fixed they pass, strict xfail turns that into a failure, and the entry is to be
deleted from this list. Each also says which problems of a fuzz case it explains (`explains`),
so the fuzz counts such a case as "known" and keeps running instead of stopping at the same bug
every time. A case with any problem no finding explains fails as usual.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from tests.fuzz.oracle import Answer
from tests.fuzz.strategies import ACCEPT_BOTH, Case, Credentials

LOG_PROBLEM = "traceback in the gateway log: "


@dataclass(frozen=True)
class RawRequest:
    """A request as bytes on the wire (what httpx would refuse to write); `case` says what it
    was for the oracle (method and body)."""

    data: bytes
    case: Case


@dataclass(frozen=True)
class Finding:
    id: str
    summary: str
    reproducers: tuple[Callable[[Credentials], Case | RawRequest], ...]
    # Whether this finding explains one problem of a fuzz case (None: the fuzz never sends such
    # a request; the reproducers are all there is).
    explains: Callable[[Case, Answer, str], bool] | None = None
    # Seconds to wait at most for a traceback in the gateway's log after a reproducer (a
    # notification's handler runs after the 202).
    settle: float = 0.0


def _bearer(creds: Credentials) -> bytes:
    return f"Bearer {creds.full}".encode()


def _headers(creds: Credentials, *extra: tuple[bytes, bytes]) -> list[tuple[bytes, bytes]]:
    return [(b"content-type", b"application/json"), (b"accept", ACCEPT_BOTH), (b"authorization", _bearer(creds)), *extra]


def _json(body: bytes) -> object:
    try:
        return json.loads(body)
    except ValueError:
        return None


def _bare_405(case: Case, answer: Answer, problem: str) -> bool:
    return (case.method in ("GET", "DELETE") and answer.status == 405 and not answer.body
            and not answer.headers.get("content-type") and "not JSON-RPC" in problem)


def _silent_method_with_error(case: Case, answer: Answer, problem: str) -> bool:
    message = _json(case.body)
    return (answer.status == 202 and problem.startswith("202 (silence)") and isinstance(message, dict)
            and isinstance(message.get("method"), str) and "id" in message and "error" in message)


def _notification_handler_traceback(case: Case, answer: Answer, problem: str) -> bool:
    return problem.startswith(LOG_PROBLEM) and all(
        "notification handler for" in entry for entry in problem.removeprefix(LOG_PROBLEM).split(" || "))


_TOOLS_LIST = b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}'


def _raw(creds: Credentials, method: bytes, framing: bytes, body: bytes) -> RawRequest:
    head = (method + b" /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: " + ACCEPT_BOTH
            + b"\r\nContent-Type: application/json\r\nAuthorization: " + _bearer(creds)
            + b"\r\nConnection: close\r\n" + framing + b"\r\n")
    return RawRequest(head + body, Case("known", method.decode(), [], body))


# Findings the product fixed: their reproducers stay as regression tests (test_fixed_finding_stays_fixed);
# they no longer explain fuzz cases, so a recurrence fails the fuzz too.
FIXED: list[Finding] = [
    Finding(
        id="bare-405-get-delete-with-protocol-version",
        summary=("GET or DELETE /mcp with an `mcp-protocol-version` header other than a handshake-era version "
                 "(2026-07-28, or an unknown one such as 2099-01-01) is answered 405 with `allow: POST`, an "
                 "empty body and no content type: no JSON-RPC error (the request gate passes GET and DELETE "
                 "to the SDK, whose 2026 entry answers a bare 405)"),
        reproducers=(
            lambda creds: Case("known", "GET", [(b"accept", ACCEPT_BOTH), (b"mcp-protocol-version", b"2026-07-28"),
                                                (b"authorization", _bearer(creds))], b""),
            lambda creds: Case("known", "DELETE", [(b"mcp-protocol-version", b"2099-01-01"),
                                                   (b"authorization", _bearer(creds))], b""),
        ),
        explains=_bare_405,
    ),
    Finding(
        id="silent-202-for-a-request-with-an-error-member",
        summary=("on the handshake era a message with a `method` (other than tools/call and tools/list), an `id` "
                 "and an `error` object, e.g. {\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"error\":"
                 "{\"code\":1,\"message\":\"x\"}}, passes the request gate as a request and the SDK then reads it "
                 "as an error response: 202, no body, nothing runs and nothing is said"),
        reproducers=(
            lambda creds: Case("known", "POST", _headers(creds),
                               b'{"jsonrpc":"2.0","id":1,"method":"ping","error":{"code":1,"message":"x"}}'),
            lambda creds: Case("known", "POST", _headers(creds),
                               b'{"jsonrpc":"2.0","id":"a","method":"","error":{"code":-32601,"message":"no"}}'),
        ),
        explains=_silent_method_with_error,
    ),
    Finding(
        id="traceback-logged-for-a-request-method-sent-as-notification",
        summary=("a request method sent as a notification (no `id`) on the handshake era, e.g. "
                 "{\"jsonrpc\":\"2.0\",\"method\":\"tools/call\",\"params\":{}}, is run by the SDK's notification "
                 "path (202 to the client); when its handler fails, the gateway logs "
                 "`ERROR mcp.server.runner: notification handler for 'tools/call' raised` with a full traceback. "
                 "The same path runs a tools/call write (see test_known_tools_call_notification_runs_the_tool)"),
        reproducers=(
            lambda creds: Case("known", "POST", _headers(creds), b'{"jsonrpc":"2.0","method":"tools/call","params":{}}'),
        ),
        explains=_notification_handler_traceback,
        settle=3.0,
    ),
    Finding(
        id="plain-text-400-from-the-http-parser",
        summary=("a request uvicorn's HTTP parser refuses (a Content-Length that is not a plain number, two "
                 "different Content-Lengths, a bad chunk size, Transfer-Encoding other than chunked, a method "
                 "token it does not know such as FOO) gets uvicorn's own `400 text/plain` 'Invalid HTTP request "
                 "received.' before the app sees it: no JSON-RPC error (issue 14 item 7's bad Content-Length)"),
        reproducers=(
            lambda creds: _raw(creds, b"POST", b"Content-Length: abc\r\n", _TOOLS_LIST),
            lambda creds: _raw(creds, b"POST", b"Transfer-Encoding: chunked\r\n", b"zz\r\n" + _TOOLS_LIST + b"\r\n0\r\n\r\n"),
            lambda creds: _raw(creds, b"FOO", b"Content-Length: %d\r\n" % len(_TOOLS_LIST), _TOOLS_LIST),
        ),
    ),
]


# Findings still open (each explains fuzz cases and has strict-xfail reproducers). None today.
KNOWN: list[Finding] = []


def known_findings(case: Case, answer: Answer, found: list[str]) -> list[Finding] | None:
    """The known findings that explain every problem of this case, or None when one is unexplained."""
    explaining: list[Finding] = []
    for problem in found:
        finding = next((f for f in KNOWN if f.explains is not None and f.explains(case, answer, problem)), None)
        if finding is None:
            return None
        if finding not in explaining:
            explaining.append(finding)
    return explaining


def unexplained_log_tracebacks(entries: list[str]) -> list[str]:
    """The logged tracebacks (`log_tracebacks` entries) no known finding explains."""
    dummy_case = Case("log", "POST", [], b"")
    dummy_answer = Answer(0, httpx.Headers(), b"")
    return [entry for entry in entries
            if not any(f.explains is not None and f.explains(dummy_case, dummy_answer, LOG_PROBLEM + entry) for f in KNOWN)]
