"""Send one fuzz case to the gateway over real HTTP and judge the answer.

What every answer must be (`problems` lists what it is not):

* never a 5xx, never a hang (each request is bounded; see `send`), never a closed connection
  without an answer;
* 202 only with an empty body, and only for a well-formed notification or response (a JSON
  object, `jsonrpc: "2.0"`, a string `method` and no `id`; or no `method`, a `result` or an
  `error`, and a string or integer `id`): nothing malformed is answered with silence;
* otherwise a JSON-RPC body, as `application/json` (one message) or as `text/event-stream`
  (events whose data are messages): a response (`jsonrpc: "2.0"`, an `id`, and either a
  `result` object or an `error` with an integer `code` and a non-empty string `message`), and
  on a stream also server notifications; a response's `id` is the request's own id or null;
* a 4xx always carries a JSON-RPC error;
* no Python traceback text in any body (unless the request itself carried that text, echoed).

Two answers have no JSON-RPC body by HTTP's rules and are accepted as they are: HEAD (no body
can be sent) and a GET that opens the standalone SSE stream (200 `text/event-stream`; it is read
for `GET_LISTEN` seconds, and whatever arrives must be JSON-RPC messages, silence is fine).
"""

from __future__ import annotations

import json
import math
import re
import socket
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.fuzz.strategies import Case

# Per-request bounds: a POST must be answered within REQUEST_DEADLINE s in total (the fast path
# pings a silent call only after 15 s, so a healthy answer never comes near this).
REQUEST_DEADLINE = 20.0
GET_LISTEN = 0.5
TRACEBACK_MARKERS = ("Traceback", 'File "')
_LINE_TB = re.compile(r"Traceback \(most recent call last\)|^\s*File \"", re.MULTILINE)


class Unsendable(Exception):
    """httpx/h11 refused to put the generated request on the wire (a generator matter)."""


@dataclass
class Answer:
    status: int
    headers: httpx.Headers
    body: bytes
    timed_out: bool = False  # a GET stream still open after GET_LISTEN (fine), or a POST past its deadline
    elapsed: float = 0.0
    error: str = ""  # the transport error when no (complete) answer came

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";")[0].strip().lower()

    def __repr__(self) -> str:
        body = self.body if len(self.body) <= 800 else self.body[:800] + b"...<%d bytes>" % len(self.body)
        if self.error:
            return f"Answer(none after {self.elapsed:.3f} s: {self.error}; status {self.status}, {body!r})"
        return (f"Answer({self.status} {self.headers.get('content-type')!r} in {self.elapsed:.3f} s"
                f"{' (stream still open)' if self.timed_out else ''}: {body!r})")


def send(client: httpx.Client, url: str, case: Case) -> Answer:
    # A GET may open the standalone SSE stream, which stays open: its read timeout is short, and
    # the answer's headers (sent at once) must come within it too.
    timeout = httpx.Timeout(10.0, read=GET_LISTEN if case.method == "GET" else 10.0)
    try:
        request = client.build_request(case.method, url + case.query, headers=case.headers, content=case.body,
                                       timeout=timeout)
    except (httpx.LocalProtocolError, UnicodeError, ValueError) as exc:
        raise Unsendable(repr(exc)) from None
    # httpx adds `Accept: */*` and `Content-Length` on its own; the case says exactly what goes.
    if case.header(b"accept") is None:
        del request.headers["accept"]
    start = time.monotonic()
    try:
        response = client.send(request, stream=True)
    except httpx.LocalProtocolError as exc:
        raise Unsendable(repr(exc)) from None
    except httpx.TransportError as exc:  # no answer at all: closed, reset, or no headers in time
        return Answer(0, httpx.Headers(), b"", elapsed=time.monotonic() - start, error=repr(exc))
    chunks: list[bytes] = []
    timed_out = False
    try:
        try:
            for chunk in response.iter_raw():
                chunks.append(chunk)
                if time.monotonic() - start > REQUEST_DEADLINE:
                    timed_out = True
                    break
        except httpx.ReadTimeout:
            timed_out = True
        except httpx.TransportError as exc:  # cut in the middle of the body
            return Answer(response.status_code, response.headers, b"".join(chunks), elapsed=time.monotonic() - start,
                          error=repr(exc))
    finally:
        response.close()
    return Answer(response.status_code, response.headers, b"".join(chunks), timed_out, time.monotonic() - start)


def send_raw(host: str, port: int, data: bytes, timeout: float = 5.0) -> Answer:
    """Bytes the HTTP client would never write (bad framing), on a fresh connection; the answer
    read until the server closes (the request asks it to) or `timeout`."""
    start = time.monotonic()
    received = b""
    timed_out = False
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(data)
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except TimeoutError:
            timed_out = True
    elapsed = time.monotonic() - start
    head, _, body = received.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    if not lines[0].startswith("HTTP/"):
        return Answer(0, httpx.Headers(), received, timed_out, elapsed, error="no HTTP answer")
    headers = httpx.Headers([tuple(part.strip() for part in line.split(":", 1)) for line in lines[1:] if ":" in line])
    return Answer(int(lines[0].split()[1]), headers, body, timed_out, elapsed)


# -- what the request was ------------------------------------------------------------------


def _no_constants(text: str) -> Any:
    raise ValueError(text)


def strict_parse(body: bytes) -> Any:
    """The body as strict JSON in UTF-8 (no BOM, no NaN/Infinity, no lone surrogates, no overflow
    to infinity), or `_INVALID`. The fuzz's own reading, independent of the gateway's parser."""
    try:
        text = body.decode("utf-8")
        value = json.loads(text, parse_constant=_no_constants)
    except (ValueError, RecursionError):
        return _INVALID
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and math.isinf(item):
            return _INVALID
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return _INVALID
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return value


_INVALID = object()


def _valid_id(value: Any) -> bool:
    return isinstance(value, (str, int)) and not isinstance(value, bool)


def may_be_silent(case: Case) -> bool:
    """Whether a 202 (accepted, no body) is a possible answer: a well-formed notification or response."""
    if case.method != "POST":
        return False
    message = strict_parse(case.body)
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return False
    if "method" in message:
        return isinstance(message["method"], str) and "id" not in message
    return ("result" in message or "error" in message) and _valid_id(message.get("id"))


def request_id(case: Case) -> tuple[bool, Any]:
    """(True, id) when the body is a request with a valid id; else (False, None)."""
    message = strict_parse(case.body)
    if isinstance(message, dict) and isinstance(message.get("method"), str) and _valid_id(message.get("id")):
        return True, message["id"]
    return False, None


# -- what the answer must be ---------------------------------------------------------------


def _sse_messages(body: bytes) -> tuple[list[Any], list[str]]:
    messages: list[Any] = []
    problems: list[str] = []
    text = body.decode("utf-8", errors="replace")
    for block in re.split(r"\r\n\r\n|\n\n|\r\r", text):
        data = [line[5:].removeprefix(" ") for line in re.split(r"\r\n|\n|\r", block) if line.startswith("data:")]
        if not data:
            continue  # comments (pings), event/id/retry lines only
        try:
            messages.append(json.loads("\n".join(data)))
        except ValueError:
            problems.append(f"an SSE event whose data is not JSON: {block[:200]!r}")
    return messages, problems


def _message_problems(message: Any) -> list[str]:
    if not isinstance(message, dict):
        return [f"not a JSON-RPC message (not an object): {str(message)[:200]}"]
    if message.get("jsonrpc") != "2.0":
        return [f'a message without "jsonrpc": "2.0": {str(message)[:200]}']
    if "method" in message:
        return [] if isinstance(message["method"], str) else [f"a server message with a non-string method: {message!r:.200}"]
    if "id" not in message:
        return [f"a response without an id: {str(message)[:200]}"]
    if ("result" in message) == ("error" in message):
        return [f"a response with both or neither of result and error: {str(message)[:200]}"]
    if "result" in message:
        return [] if isinstance(message["result"], dict) else [f"a result that is not an object: {str(message)[:200]}"]
    error = message["error"]
    if not isinstance(error, dict):
        return [f"an error that is not an object: {str(message)[:200]}"]
    problems = []
    if not isinstance(error.get("code"), int) or isinstance(error.get("code"), bool):
        problems.append(f"an error without an integer code: {str(message)[:200]}")
    if not isinstance(error.get("message"), str) or not error["message"].strip():
        problems.append(f"an error without a message: {str(message)[:200]}")
    return problems


def problems(case: Case, answer: Answer) -> list[str]:
    found: list[str] = []
    if answer.error:
        return [f"no complete answer: {answer.error}"]
    text = answer.body.decode("utf-8", errors="replace")
    for marker in TRACEBACK_MARKERS:
        if marker in text and marker.encode() not in case.body:
            found.append(f"traceback text ({marker!r}) in the body")
    if answer.status >= 500:
        found.append(f"HTTP {answer.status}")
    if case.method == "HEAD":
        return found
    if answer.status == 202:
        if answer.body:
            found.append("202 with a body")
        if not may_be_silent(case):
            found.append("202 (silence) for a request that is not a well-formed notification or response")
        return found
    if case.method == "GET" and answer.status == 200 and answer.content_type == "text/event-stream":
        # The standalone stream: open (timed out) or closed, only JSON-RPC messages on it.
        messages, bad = _sse_messages(answer.body)
        return found + bad + [p for m in messages for p in _message_problems(m)]
    if answer.timed_out:
        return found + [f"no complete answer within {REQUEST_DEADLINE if case.method != 'GET' else GET_LISTEN} s (hang)"]
    if answer.content_type == "application/json":
        try:
            messages = [json.loads(answer.body)]
        except ValueError:
            return found + ["a JSON content type with a body that is not JSON"]
    elif answer.content_type == "text/event-stream":
        messages, bad = _sse_messages(answer.body)
        found += bad
    else:
        return found + [f"HTTP {answer.status} with content type {answer.headers.get('content-type')!r}, not JSON-RPC"]
    for message in messages:
        found += _message_problems(message)
    responses = [m for m in messages if isinstance(m, dict) and "method" not in m and "id" in m]
    if not responses:
        found.append("no JSON-RPC response in the answer")
    if 400 <= answer.status < 500 and not any("error" in m for m in responses):
        found.append(f"HTTP {answer.status} without a JSON-RPC error")
    has_id, expected = request_id(case)
    for response in responses:
        got = response.get("id")
        if got is None and "error" in response:
            continue
        if not has_id or got != expected or type(got) is not type(expected):
            found.append(f"a response whose id {got!r:.80} is not the request's ({expected!r:.80})")
    return found


def log_tracebacks(lines: list[str], start: int = 0) -> list[str]:
    """Each traceback in `lines[start:]`, told in one line: the log line before it (what was
    being done), then its exception line."""
    found = []
    for i in range(max(start, 0), len(lines)):
        if "Traceback (most recent call last)" not in lines[i]:
            continue
        header = lines[i - 1].strip() if i > 0 else ""
        exception = next((line.strip() for line in lines[i + 1:] if line and not line[0].isspace()), "?")
        found.append(f"{header} | {exception}")
    # A bare 'File "' line without its Traceback header still counts.
    if not found and any(_LINE_TB.search(line) for line in lines[max(start, 0):]):
        found.append("a traceback fragment")
    return found


# -- figures -------------------------------------------------------------------------------


@dataclass
class Figures:
    """What a run did, per family: printed at the end of the pytest run (conftest.py)."""

    cases: Counter[str] = field(default_factory=Counter)
    failing: Counter[str] = field(default_factory=Counter)
    known: Counter[str] = field(default_factory=Counter)  # cases a known finding explains (findings.py)
    unsendable: Counter[str] = field(default_factory=Counter)
    statuses: dict[str, Counter[int]] = field(default_factory=dict)
    seconds: Counter[str] = field(default_factory=Counter)
    slowest: dict[str, float] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)  # the first failing requests, in full
    notes: list[str] = field(default_factory=list)

    def record(self, case: Case, answer: Answer | None, found: list[str], known: list[str] | None = None) -> None:
        family = case.family
        if answer is None:
            self.unsendable[family] += 1
            return
        self.cases[family] += 1
        self.statuses.setdefault(family, Counter())[answer.status] += 1
        self.seconds[family] += answer.elapsed
        if case.method != "GET":
            self.slowest[family] = max(self.slowest.get(family, 0.0), answer.elapsed)
        if known:
            for finding in known:
                self.known[finding] += 1
        elif found:
            self.failing[family] += 1
            if len(self.examples) < 5:
                self.examples.append(f"{case!r}\n  -> {answer!r}\n  problems: {found}")

    def lines(self) -> list[str]:
        if not self.cases and not self.unsendable:
            return []
        total = sum(self.cases.values())
        out = [f"front fuzz: {total} requests sent, {sum(self.failing.values())} failing "
               f"(failing requests include hypothesis's shrink replays), "
               f"{sum(self.unsendable.values())} generated requests the HTTP client would not send"]
        for family in sorted(set(self.cases) | set(self.unsendable)):
            statuses = ", ".join(f"{s}: {n}" for s, n in sorted(self.statuses.get(family, Counter()).items()))
            out.append(f"  {family:8} {self.cases[family]:6} requests, {self.failing[family]} failing, "
                       f"{self.seconds[family]:.1f} s in requests (slowest POST {self.slowest.get(family, 0.0):.2f} s); "
                       f"statuses {statuses}")
        for finding, n in sorted(self.known.items()):
            out.append(f"  known finding {finding}: {n} cases")
        out += [f"  {note}" for note in self.notes]
        out += self.examples
        return out


FIGURES = Figures()
