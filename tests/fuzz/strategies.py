"""Hypothesis strategies for the front fuzz: whole HTTP requests to `/mcp` (method, headers, body).

Five families, each a strategy of `Case`:

    bytes     random bytes, and "token soup" (JSON fragments, escapes, BOMs and junk bytes glued)
    json      any JSON value of any shape and depth as the body, serialized oddly
    legacy    valid handshake-era messages (requests of every method, notifications, responses),
              mutated field by field, serialized and encoded in hostile ways
    modern    the same on 2026-07-28 (per-request `_meta` envelope, `mcp-method`/`mcp-name` routing
              headers that match or not)
    headers   near-valid messages with hostile headers (Content-Type, Accept, protocol version,
              routing headers, session ids, Authorization, Origin) and HTTP methods

Bodies are written by `dump` (not `json.dumps`) so they can hold what a strict parser must
refuse: duplicate keys (`Pairs`), raw literals such as `NaN`, `1e400` or a lone `"\\ud800"`
escape (`Raw`), nesting past any limit.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

LEGACY_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
MODERN = "2026-07-28"
KEY = "io.superdurable.dex/idempotencyKey"
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "fuzz", "version": "0"},
}
# Tools of the example payments upstream that answer at once. Not `sleep`, `hold_*` or
# `crash_*` (they wait or kill the upstream on purpose); `long_report` only with fixed small
# arguments (it streams progress notifications when the request carries a progressToken).
TOOLS = ("pay__get_balance", "pay__list_payments", "pay__set_memo", "pay__send_payment", "pay__refund",
         "pay__close_account", "pay__settle_uncertain")
SAFE_REPORT_ARGS = {"steps": 2, "step_seconds": 0.001}
RESOURCES = ("payments://policy", "payments://accounts/main", "payments://nope", "pay://x", "")
PROMPTS = ("pay__dispute_letter", "pay__nope")


# -- the case ---------------------------------------------------------------------------------


@dataclass
class Case:
    """One HTTP request: what is sent, byte for byte (headers in order, duplicates kept)."""

    family: str
    method: str
    headers: list[tuple[bytes, bytes]]
    body: bytes
    query: str = ""
    # What the body was built from (for the report only).
    note: str = field(default="", compare=False)

    def header(self, name: bytes) -> bytes | None:
        for key, value in self.headers:
            if key.lower() == name:
                return value
        return None

    def __repr__(self) -> str:
        lines = [f"Case({self.family}: {self.method} /mcp{self.query}"]
        lines += [f"  {k.decode('latin-1')}: {v!r}" for k, v in self.headers]
        body = self.body if len(self.body) <= 600 else self.body[:600] + b"...<%d bytes>" % len(self.body)
        lines.append(f"  body={body!r}" + (f"  ({self.note})" if self.note else "") + ")")
        return "\n".join(lines)


# -- writing JSON text that json.dumps would not --------------------------------------------


@dataclass(frozen=True)
class Raw:
    """JSON text written as is: `NaN`, `1e400`, `"\\ud800"`, `[[[...]]]`."""

    text: str


@dataclass(frozen=True)
class Pairs:
    """A JSON object written from pairs, so keys may repeat (`{"id":1,"id":null}`)."""

    items: tuple[tuple[str, Any], ...]


def dump(value: Any, *, ascii_only: bool = True, spaced: bool = False) -> str:
    comma, colon = (", ", ": ") if spaced else (",", ":")
    if isinstance(value, Raw):
        return value.text
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return repr(value)
    if isinstance(value, str):
        # With ascii_only, a lone surrogate becomes a "\ud800" escape; without, it stays a raw
        # code point and `encode` writes it as (invalid) UTF-8 bytes.
        return json.dumps(value, ensure_ascii=ascii_only)
    if isinstance(value, Pairs):
        return "{" + comma.join(dump(k, ascii_only=ascii_only) + colon + dump(v, ascii_only=ascii_only, spaced=spaced)
                                for k, v in value.items) + "}"
    if isinstance(value, dict):
        return "{" + comma.join(dump(str(k), ascii_only=ascii_only) + colon + dump(v, ascii_only=ascii_only, spaced=spaced)
                                for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + comma.join(dump(v, ascii_only=ascii_only, spaced=spaced) for v in value) + "]"
    raise TypeError(type(value))


def nested(depth: int, kind: str = "list", leaf: str = "1") -> Raw:
    if kind == "list":
        return Raw("[" * depth + leaf + "]" * depth)
    return Raw('{"a":' * depth + leaf + "}" * depth)


# -- values ---------------------------------------------------------------------------------

RAW_LITERALS = [
    "NaN", "-NaN", "Infinity", "-Infinity", "1e400", "-1e400", "1E+999", "1.5e-400", "-0", "0.0e0",
    "123456789012345678901234567890", "-99999999999999999999999999999999999999", "1" * 400,
    "01", "+1", ".5", "1.", "0x10", "1e", "nul", "True", "None", "undefined", "'single'",
    '"\\ud800"', '"\\udfff"', '"\\udc00\\ud800"', '"a\\ud800b"', '"\\uD834\\uDD1E"', '"\\u0000"', '"\\x41"',
    '"\\u12"', '"\\"', '"tab\there"', '"\x00"', '"\x1f"', "[]", "{}", "[,]", "{,}", '{"a"}', "[1,]",
]

INTERESTING_TEXT = [
    "", " ", "2.0", "2.0 ", "1.0", "tools/call", "tools/list", "TOOLS/CALL", "tools/call\x00", "initialize",
    "resources/read", "prompts/get", "notifications/initialized", "pay__get_balance", "pay__", "__",
    "pay__get_balance\x00", "\u2028", "\ufeff", "\x00", "é", "\U0001f4a5", "a" * 300, "../../etc/passwd",
    "payments://policy", "%s%s%n", "{}", "null", MODERN, "2025-11-25",
]

surrogates = st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1, max_size=3)
texts = st.one_of(
    st.text(max_size=24),
    st.sampled_from(INTERESTING_TEXT),
    st.builds(lambda a, s, b: a + s + b, st.text(max_size=4), surrogates, st.text(max_size=4)),
)
# Text a valid message may carry (no lone surrogates: mutations put those in).
clean_texts = st.one_of(st.text(st.characters(codec="utf-8"), max_size=16), st.sampled_from(["main", "x", "", "é", "\U0001f4a5"]))
huge_ints = st.one_of(st.integers(), st.integers(min_value=2**53 - 2, max_value=2**70),
                      st.integers(min_value=-(2**70), max_value=-(2**53 - 2)),
                      st.sampled_from([2**63, 2**64, -(2**63) - 1, 10**30]))
floats = st.one_of(st.floats(), st.sampled_from([0.0, -0.0, 1.5, 1e308, 5e-324, math.inf, -math.inf, math.nan]))
raw_literals = st.sampled_from(RAW_LITERALS).map(Raw)
deep = st.builds(nested, st.one_of(st.integers(1, 60), st.integers(150, 260), st.integers(900, 1300)),
                 st.sampled_from(["list", "dict"]), st.sampled_from(["1", "null", '"x"', "NaN", '"\\ud800"']))
huge_strings = st.builds(lambda n, c: c * n, st.one_of(st.integers(1000, 20000), st.integers(60000, 70000)),
                         st.sampled_from(["x", "é", "\\", '"', "\U0001f4a5"]))

scalars = st.one_of(st.none(), st.booleans(), huge_ints, floats, texts, raw_literals)


def _extend(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(texts, children, max_size=4),
        st.lists(st.tuples(st.sampled_from(["id", "method", "jsonrpc", "params", "a"]) | texts, children),
                 min_size=2, max_size=4).map(lambda items: Pairs(tuple(items))),
    )


json_values = st.recursive(scalars, _extend, max_leaves=20)
# The values a mutation puts in a field: anything, and the classic bad ones more often.
junk = st.one_of(json_values, deep, huge_strings, scalars, raw_literals)
# Ids a request may not carry (null, float, bool, object, array, 1e400, NaN, a lone surrogate),
# and a few it may that parsers get wrong (integers past 64 bits).
odd_ids = st.one_of(
    st.sampled_from([None, 1.5, 1.0, True, False, {}, {"a": 1}, [], [1], "", 2**64, -(2**63) - 1,
                     Raw("1e400"), Raw("-1e400"), Raw("NaN"), Raw('"\\ud800"'), Raw('"\\udc00"'), Raw("1E2")]),
    junk,
)
good_ids = st.one_of(st.integers(-(2**31), 2**31), st.text(st.characters(codec="utf-8"), max_size=12),
                     st.sampled_from([0, -1, 2**53, 2**64, -(2**63) - 1, 10**40, "0", "id-1", "\u2028", "x" * 5000]))


# -- valid messages, both eras ------------------------------------------------------------


REQUEST_METHODS = ("tools/call", "tools/list", "initialize", "resources/list", "resources/templates/list",
                   "resources/read", "prompts/list", "prompts/get", "completion/complete", "logging/setLevel",
                   "ping", "server/discover", "resources/subscribe", "tasks/list")
NOTIFICATIONS = ("notifications/initialized", "notifications/cancelled", "notifications/progress",
                 "notifications/roots/list_changed", "notifications/unknown")


@st.composite
def _params(draw: st.DrawFn, method: str, modern: bool) -> tuple[dict[str, Any] | None, str | None]:
    """Valid params of `method` and the value its `mcp-name` header should carry."""
    name: str | None = None
    meta: dict[str, Any] = dict(ENVELOPE) if modern else {}
    params: dict[str, Any] = {}
    if method == "tools/call":
        tool = draw(st.sampled_from((*TOOLS, "pay__long_report", "pay__nope", "nope")))
        name = tool
        if tool == "pay__long_report":
            arguments: Any = dict(SAFE_REPORT_ARGS)
        else:
            arguments = draw(st.fixed_dictionaries({}, optional={
                "account": st.sampled_from(["main", "savings", ""]) | clean_texts,
                "to": clean_texts, "amount": st.one_of(st.integers(-5, 900), st.floats(-10, 1e6), clean_texts),
                "order": clean_texts, "payment_id": clean_texts, "memo": clean_texts,
            }))
        params = {"name": tool, "arguments": arguments}
        if draw(st.booleans()):
            meta[KEY] = draw(st.one_of(st.uuids().map(lambda u: f"fuzz/{u.hex[:12]}/1"), clean_texts))
        if draw(st.booleans()):
            meta["progressToken"] = draw(st.one_of(st.integers(0, 1000), clean_texts))
    elif method == "initialize":
        params = {"protocolVersion": draw(st.sampled_from((*LEGACY_VERSIONS, MODERN))), "capabilities": {},
                  "clientInfo": {"name": "fuzz", "version": "0"}}
    elif method in ("resources/read", "resources/subscribe"):
        params = {"uri": draw(st.sampled_from(RESOURCES))}
        name = params["uri"]
    elif method == "prompts/get":
        params = {"name": draw(st.sampled_from(PROMPTS)), "arguments": {"payment_id": draw(clean_texts)}}
        name = params["name"]
    elif method == "completion/complete":
        params = {"ref": {"type": "ref/prompt", "name": "pay__dispute_letter"},
                  "argument": {"name": "payment_id", "value": draw(st.text(max_size=6))}}
    elif method == "logging/setLevel":
        params = {"level": draw(st.sampled_from(["debug", "info", "error", "loud"]))}
    elif method in ("tools/list", "resources/list", "prompts/list", "resources/templates/list", "tasks/list"):
        if draw(st.booleans()):
            params = {"cursor": draw(clean_texts)}
    elif method == "notifications/cancelled":
        params = {"requestId": draw(good_ids), "reason": "fuzz"}
    elif method == "notifications/progress":
        params = {"progressToken": draw(good_ids), "progress": 1}
    if meta:
        params["_meta"] = meta
    return (params or None), name


@dataclass
class Message:
    """A message being built: the JSON value, and the routing values headers should carry."""

    value: Any
    method: str | None
    name: str | None
    modern: bool
    protected: bool = False  # pay__long_report: keep its small arguments whatever happens


@st.composite
def valid_messages(draw: st.DrawFn, modern: bool) -> Message:
    kind = draw(st.sampled_from(["request"] * 6 + ["notification", "response"]))
    if kind == "response":
        value: dict[str, Any] = {"jsonrpc": "2.0", "id": draw(good_ids)}
        if draw(st.booleans()):
            value["result"] = draw(st.sampled_from([{}, {"roots": []}, {"action": "cancel"}]))
        else:
            value["error"] = {"code": draw(st.sampled_from([-32601, -32603, 0, 1])), "message": "no"}
        return Message(value, None, None, modern)
    # tools/call and tools/list (the fast path's own parsing) more often than the rest.
    method = draw(st.sampled_from(NOTIFICATIONS if kind == "notification"
                                  else ("tools/call",) * 4 + ("tools/list",) * 2 + REQUEST_METHODS))
    params, name = draw(_params(method, modern))
    value = {"jsonrpc": "2.0"}
    if kind == "request":
        value["id"] = draw(good_ids)
    value["method"] = method
    if params is not None:
        value["params"] = params
    protected = bool(params) and params.get("name") == "pay__long_report"
    return Message(value, method, name, modern, protected)


# -- mutations ------------------------------------------------------------------------------


def _containers(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = []
    if isinstance(value, dict):
        found.append(path)
        for k, v in value.items():
            found += _containers(v, (*path, k))
    elif isinstance(value, list):
        found.append(path)
        for i, v in enumerate(value):
            found += _containers(v, (*path, i))
    return found


def _at(value: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        value = value[step]
    return value


def _params_of(value: Any) -> dict[str, Any] | None:
    if isinstance(value, dict) and isinstance(value.get("params"), dict):
        return value["params"]
    return None


@st.composite
def _mutate_once(draw: st.DrawFn, msg: Message) -> None:
    if not isinstance(msg.value, dict):
        return
    # A private copy: sampled values ({} and [] among the bad ids) are shared between examples.
    value = msg.value = copy.deepcopy(msg.value)
    params = _params_of(value)
    what = draw(st.sampled_from([
        "jsonrpc", "id", "id", "drop-id", "method", "params", "meta", "meta-key", "arguments", "name",
        "any-key", "drop-any", "batch", "duplicate", "result",
    ]))
    if what == "jsonrpc":
        value["jsonrpc"] = draw(st.one_of(st.sampled_from(["1.0", "2", 2.0, 2, None, "2.0 ", "", Raw("NaN")]), junk))
    elif what == "id":
        value["id"] = draw(odd_ids)
    elif what == "drop-id":
        value.pop("id", None)
    elif what == "method":
        value["method"] = draw(st.one_of(texts, junk, st.sampled_from(REQUEST_METHODS + NOTIFICATIONS)))
    elif what == "params":
        value["params"] = draw(junk)
    elif what == "meta" and params is not None:
        params["_meta"] = draw(junk)
    elif what == "meta-key" and params is not None:
        meta = params.get("_meta")
        if not isinstance(meta, dict):
            meta = params["_meta"] = {}
        key = draw(st.sampled_from([*ENVELOPE, KEY, "progressToken", "io.modelcontextprotocol/related-task"]) | texts)
        if draw(st.booleans()) and key in meta:
            del meta[key]
        else:
            meta[key] = draw(junk)
    elif what == "arguments" and params is not None and not msg.protected:
        params["arguments"] = draw(st.one_of(junk, st.dictionaries(texts, junk, max_size=4),
                                             st.fixed_dictionaries({"account": junk})))
    elif what == "name" and params is not None:
        key = "uri" if "uri" in params else "name"
        params[key] = draw(st.one_of(texts, junk))
        msg.protected = False
    elif what == "any-key":
        paths = _containers(value)
        target = _at(value, draw(st.sampled_from(paths)))
        if isinstance(target, dict):
            target[draw(st.sampled_from(["id", "method", "params", "result", "error", "task", "cursor"]) | texts)] = draw(junk)
        else:
            target.insert(draw(st.integers(0, len(target))), draw(junk))
    elif what == "drop-any":
        paths = [p for p in _containers(value) if _at(value, p)]
        target = _at(value, draw(st.sampled_from(paths)))
        if isinstance(target, dict):
            del target[draw(st.sampled_from(sorted(target, key=str)))]
        else:
            del target[draw(st.integers(0, len(target) - 1))]
    elif what == "result":
        value[draw(st.sampled_from(["result", "error"]))] = draw(junk)
    elif what == "batch":
        others = draw(st.lists(st.one_of(valid_messages(msg.modern).map(lambda m: m.value), junk), max_size=2))
        msg.value = [value, *others] if draw(st.booleans()) else [*others, value]
    elif what == "duplicate":
        key = draw(st.sampled_from(["id", "method", "jsonrpc", "params"]))
        items = list(value.items())
        extra = (key, draw(st.one_of(odd_ids, junk)))
        items.insert(draw(st.integers(0, len(items))), extra)
        msg.value = Pairs(tuple(items))
    if msg.protected and params is not None and isinstance(params.get("arguments"), dict):
        params["arguments"] = dict(SAFE_REPORT_ARGS)


@st.composite
def mutated_messages(draw: st.DrawFn, modern: bool) -> Message:
    msg = draw(valid_messages(modern))
    for _ in range(draw(st.sampled_from([0, 0, 1, 1, 1, 2, 3]))):
        if isinstance(msg.value, dict):
            draw(_mutate_once(msg))
    return msg


# -- from a value to bytes ------------------------------------------------------------------


@st.composite
def encoded(draw: st.DrawFn, value: Any) -> tuple[bytes, str]:
    """The body bytes of `value`: mostly UTF-8, sometimes another encoding, truncated or padded."""
    text = dump(value, ascii_only=draw(st.booleans()), spaced=draw(st.booleans()))
    encoding = draw(st.sampled_from(["utf-8"] * 12 + ["utf-8-sig", "utf-16", "utf-16-le", "utf-32", "latin-1", "cp1252"]))
    body = text.encode(encoding, errors="surrogatepass" if encoding.startswith("utf") else "replace")
    notes = [encoding] if encoding != "utf-8" else []
    tweak = draw(st.sampled_from(["none"] * 10 + ["truncate", "trailing", "leading", "nul", "two-messages"]))
    if tweak == "truncate" and body:
        body = body[: draw(st.integers(0, len(body) - 1))]
    elif tweak == "trailing":
        body += draw(st.sampled_from([b" ", b"\n", b"\x00", b"}", b"garbage", b"\xff", b",{}"]))
    elif tweak == "leading":
        body = draw(st.sampled_from([b" \n\t", b"\xef\xbb\xbf", b"\x00", b"\xff\xfe"])) + body
    elif tweak == "nul" and body:
        at = draw(st.integers(0, len(body)))
        body = body[:at] + b"\x00" + body[at:]
    elif tweak == "two-messages":
        body = body + b"\n" + body
    if tweak != "none":
        notes.append(tweak)
    return body, " ".join(notes)


# -- headers --------------------------------------------------------------------------------

ACCEPT_BOTH = b"application/json, text/event-stream"


@dataclass(frozen=True)
class Credentials:
    """The bearer tokens the fuzzed gateway knows (one full principal, one narrow)."""

    full: str
    narrow: str


def base_headers(auth: bytes, msg: Message | None) -> list[tuple[bytes, bytes]]:
    headers = [(b"content-type", b"application/json"), (b"accept", ACCEPT_BOTH), (b"authorization", auth)]
    if msg is not None and msg.modern:
        headers.append((b"mcp-protocol-version", MODERN.encode()))
        if isinstance(msg.method, str):
            headers.append((b"mcp-method", msg.method.encode("utf-8", "surrogatepass")))
        if isinstance(msg.name, str):
            headers.append((b"mcp-name", msg.name.encode("utf-8", "surrogatepass")))
    return headers


# Header values h11 will send: visible ASCII, obs-text and inner spaces (no CR, LF, NUL; no
# space at either end).
header_values = st.one_of(
    st.binary(max_size=40).map(lambda b: bytes(c for c in b if c == 9 or 32 <= c < 127 or c >= 128).strip(b" \t")),
    st.sampled_from([b"x", b"\xff\xfe", "é".encode(), b"a" * 2000]),
)
CONTENT_TYPES = [None, b"application/json", b"application/json; charset=utf-8", b"application/json;charset=UTF8",
                 b'application/json; charset="utf-8"', b"APPLICATION/JSON", b"application/jsonx", b"application/json-rpc",
                 b"application/json; charset=utf-16", b"application/json; charset=latin-1", b"application/json;charset",
                 b"text/json", b"text/plain", b"application/*", b"*/*", b"", b"multipart/form-data; boundary=x",
                 b"application/x-www-form-urlencoded", b"application/json, text/plain", b";", b"application/json;;;"]
ACCEPTS = [None, ACCEPT_BOTH, b"*/*", b"application/json", b"text/event-stream", b"application/*, text/*",
           b"application/json;q=0, text/event-stream;q=0", b"text/html", b"", b"application/jsonx, text/event-streamx",
           b"text/event-stream, application/json", b"APPLICATION/JSON, TEXT/EVENT-STREAM"]
VERSIONS = [None, *(v.encode() for v in LEGACY_VERSIONS), MODERN.encode(), b"2099-01-01", b"", b"latest", b"2026-07-28 ",
            b"2026-07-28, 2025-11-25", b"\xff"]
SESSION_IDS = [b"x", b"0" * 32, b"../../etc", b"\xff\xfe", b"a" * 1000, b"00000000-0000-0000-0000-000000000000"]
ORIGINS = [b"http://evil.example", b"null", b"http://127.0.0.1:1", b"http://localhost:3000", b"http://[::1",
           b"http://127.0.0.1:99999", b"file://", b"x"]
HTTP_METHODS = ["POST"] * 8 + ["GET", "GET", "PUT", "PATCH", "DELETE", "DELETE", "OPTIONS", "HEAD", "PROPFIND"]


def authorizations(creds: Credentials) -> st.SearchStrategy[bytes | None]:
    good = st.sampled_from([f"Bearer {creds.full}".encode(), f"Bearer {creds.narrow}".encode()])
    bad = st.one_of(
        st.sampled_from([None, b"", b"Bearer", b"Bearer ", b"bearer " + creds.full.encode(), b"BEARER  " + creds.full.encode(),
                         b"Basic " + creds.full.encode(), creds.full.encode(), b"Bearer " + creds.full.encode() + b"x",
                         b"Bearer " + creds.full.encode().upper(), b"Bearer \xff\xfe", b"Bearer " + b"a" * 5000]),
        header_values.map(lambda v: b"Bearer " + v),
        header_values,
    )
    return st.one_of(good, good, bad)


def _set(headers: list[tuple[bytes, bytes]], name: bytes, value: bytes | None) -> list[tuple[bytes, bytes]]:
    out = [(k, v) for k, v in headers if k != name]
    if value is not None:
        out.append((name, value))
    return out


@st.composite
def hostile_headers(draw: st.DrawFn, headers: list[tuple[bytes, bytes]], creds: Credentials, msg: Message | None
                    ) -> list[tuple[bytes, bytes]]:
    for _ in range(draw(st.integers(1, 4))):
        what = draw(st.sampled_from(["content-type", "accept", "version", "routing", "session", "auth", "origin",
                                     "param", "duplicate", "random"]))
        if what == "content-type":
            headers = _set(headers, b"content-type", draw(st.one_of(st.sampled_from(CONTENT_TYPES), header_values)))
        elif what == "accept":
            headers = _set(headers, b"accept", draw(st.one_of(st.sampled_from(ACCEPTS), header_values)))
        elif what == "version":
            headers = _set(headers, b"mcp-protocol-version", draw(st.one_of(st.sampled_from(VERSIONS), header_values)))
        elif what == "routing":
            method = msg.method.encode("utf-8", "surrogatepass") if msg and isinstance(msg.method, str) else b"tools/call"
            headers = _set(headers, b"mcp-method", draw(st.sampled_from(
                [None, method, method.upper(), b"tools/list", b"resources/read", b""]) | header_values))
            headers = _set(headers, b"mcp-name", draw(st.sampled_from(
                [None, b"pay__get_balance", b"pay__nope", b"payments://policy", b""]) | header_values))
        elif what == "session":
            headers = _set(headers, b"mcp-session-id", draw(st.one_of(st.sampled_from(SESSION_IDS), header_values)))
        elif what == "auth":
            headers = _set(headers, b"authorization", draw(authorizations(creds)))
        elif what == "origin":
            headers = _set(headers, b"origin", draw(st.sampled_from(ORIGINS)))
        elif what == "param":
            headers.append((draw(st.sampled_from([b"mcp-param-account", b"mcp-param-", b"mcp-param-x"])),
                            draw(header_values)))
        elif what == "duplicate":
            name = draw(st.sampled_from([b"content-type", b"accept", b"mcp-method", b"mcp-name", b"mcp-protocol-version",
                                         b"authorization", b"mcp-session-id"]))
            headers.append((name, draw(st.one_of(st.sampled_from([b"application/json", b"tools/call", MODERN.encode()]),
                                                 header_values))))
        else:
            name = draw(st.sampled_from([b"x-fuzz", b"transfer-encoding-x", b"mcp-x", b"last-event-id", b"expect-x"]))
            headers.append((name, draw(header_values)))
    return headers


# -- the five families ----------------------------------------------------------------------

TOKEN_SOUP = [b"{", b"}", b"[", b"]", b",", b":", b'"jsonrpc"', b'"2.0"', b'"id"', b'"method"', b'"tools/call"',
              b'"tools/list"', b'"params"', b'"name"', b'"arguments"', b'"_meta"', b'"pay__get_balance"', b"1", b"-1",
              b"1e400", b"NaN", b"Infinity", b"null", b"true", b'"\\ud800"', b'"\\u', b"\xff", b"\xef\xbb\xbf", b" ",
              b"\n", b"\x00", b'"', b"\\", b"0.5", b"\xc3", b"\xed\xa0\x80"]


def bytes_cases(creds: Credentials) -> st.SearchStrategy[Case]:
    soup = st.lists(st.sampled_from(TOKEN_SOUP), max_size=60).map(b"".join)
    prefixed = soup.map(lambda s: b'{"jsonrpc":"2.0","id":1,' + s)
    body = st.one_of(st.binary(max_size=512), soup, prefixed)
    auth = st.sampled_from([f"Bearer {creds.full}".encode(), f"Bearer {creds.narrow}".encode()])
    return st.builds(lambda b, a: Case("bytes", "POST", base_headers(a, None), b), body, auth)


@st.composite
def json_cases(draw: st.DrawFn, creds: Credentials) -> Case:
    value = draw(st.one_of(json_values, deep, st.lists(json_values, max_size=3),
                           st.dictionaries(st.sampled_from(["jsonrpc", "id", "method", "params", "result", "error"]),
                                           json_values, max_size=5)))
    body, note = draw(encoded(value))
    auth = f"Bearer {draw(st.sampled_from([creds.full, creds.narrow]))}".encode()
    return Case("json", "POST", base_headers(auth, None), body, note=note)


@st.composite
def message_cases(draw: st.DrawFn, creds: Credentials, modern: bool) -> Case:
    msg = draw(mutated_messages(modern))
    if draw(st.integers(0, 3)) == 0:  # a hostile encoding one time in four
        body, note = draw(encoded(msg.value))
    else:
        body, note = dump(msg.value, ascii_only=draw(st.booleans())).encode("utf-8", "surrogatepass"), ""

    auth = f"Bearer {draw(st.sampled_from([creds.full, creds.narrow]))}".encode()
    headers = base_headers(auth, msg)
    if not modern and draw(st.booleans()):
        headers.append((b"mcp-protocol-version", draw(st.sampled_from(LEGACY_VERSIONS)).encode()))
    if draw(st.integers(0, 4)) == 0:  # now and then a header is off too
        headers = draw(hostile_headers(headers, creds, msg))
    return Case("modern" if modern else "legacy", "POST", headers, body, note=note)


@st.composite
def header_cases(draw: st.DrawFn, creds: Credentials) -> Case:
    modern = draw(st.booleans())
    msg = draw(st.one_of(valid_messages(modern), mutated_messages(modern)))
    body, note = draw(encoded(msg.value)) if draw(st.integers(0, 3)) == 0 else (dump(msg.value).encode("utf-8", "surrogatepass"), "")
    # Mostly a good token, so the hostile headers get past the auth layer to the request gate
    # (`hostile_headers` swaps in a bad Authorization now and then).
    auth = draw(authorizations(creds)) if draw(st.integers(0, 5)) == 0 else f"Bearer {creds.full}".encode()
    headers = _set(base_headers(b"", msg), b"authorization", auth)
    headers = draw(hostile_headers(headers, creds, msg))
    method = draw(st.sampled_from(HTTP_METHODS))
    if method in ("GET", "HEAD", "OPTIONS", "DELETE") and draw(st.booleans()):
        body = b""
    query = draw(st.sampled_from(["", "", "", "?", "?a=1", "?session=x&x=%ff"]))
    return Case("headers", method, headers, body, query=query, note=note)


FAMILIES = ("bytes", "json", "legacy", "modern", "headers")


def cases(family: str, creds: Credentials) -> st.SearchStrategy[Case]:
    if family == "bytes":
        return bytes_cases(creds)
    if family == "json":
        return json_cases(creds)
    if family == "legacy":
        return message_cases(creds, modern=False)
    if family == "modern":
        return message_cases(creds, modern=True)
    if family == "headers":
        return header_cases(creds)
    raise ValueError(family)
