"""Parity of the two entries for tools/call and tools/list (issue 12, "One tail").

Every case of the conventions fixtures' `outcomes` and `retries` sections, and every
malformed-upstream case below, goes as a raw HTTP POST to two real `dex-gateway serve`
processes -- one with the fast path (`server.fast_tool_calls: true`), one where the SDK's
Streamable HTTP transport answers everything (`false`) -- each fronting its own copy of a
scripted stdio upstream (tests/support/scripted_server.py) that answers each attempt of a
call with the case's events. Both protocol eras: 2025-11-25 (stateless, no initialize) and
2026-07-28 (routing headers and the `_meta` envelope). Every call carries an idempotency key
(fresh per case and era, the same on both gateways; a read needs none, but it is forwarded
too) and is then sent again with the same key (the retry: the fence replays or answers
unknown; a read, or a write whose first call was never sent, runs again).

Asserted per case and era: the final JSON-RPC message of both entries is byte for byte the
same (and the HTTP status), for the call and for its retry; and, so that both cannot pass by
being equally wrong, the answer is the one the fixture expects, a malformed upstream result is
a failed result naming the upstream and the defect (never a JSON-RPC error blaming the
client), the upstream saw exactly the attempts the script says, and a write was never sent
again on its retry.

How each fixture event is produced by the scripted upstream:

* replied / rpc_error: the answer dict verbatim / the JSON-RPC error (a hand-written stdio
  server, so nothing re-validates or re-shapes it);
* interrupted: the process exits after reading the call, without answering (the gateway sees
  "the upstream process exited before answering" and restarts it on the next attempt);
* not_sent after an interrupted attempt: the interrupted process leaves a flag, so the next
  process reads `initialize` and exits without answering (the handshake fails: never sent);
* not_sent on attempt 1: the test first calls a helper tool whose process sets the same flag
  and exits mid-call; the gateway has forgotten that connection when the helper's answer
  arrives, so the case's call starts a new process, whose handshake fails -- on both gateways
  the same way, with the same text.

The fixtures' reasons ("connection reset", "HTTP 502", ...) cannot be produced by a stdio
process: the texts are checked for the reasons the gateway really gives instead.
"""

from __future__ import annotations

import difflib
import json
import re
import sys
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.conventions.fixtures import cases as fixture_cases
from tests.support.gateway import RunningGateway, start_gateway, write_config
from tests.support.scripted_server import (
    SCRIPT_FILE,
    SCRIPT_PATH,
    STATE_ENV,
    extra_text,
    read_attempts,
)
from tests.support.servers import REPO_ROOT

EFFECT = "io.superdurable.dex/effect"
OUTCOME = "io.superdurable.dex/outcome"
KEY = "io.superdurable.dex/idempotencyKey"
REPLAYED = "dex-gateway/replayed"
SERVER_INFO = "io.modelcontextprotocol/serverInfo"
HANDSHAKE, MODERN = "2025-11-25", "2026-07-28"
ERAS = [HANDSHAKE, MODERN]
ENTRIES = ("fast", "sdk")
UPSTREAM = "scripted"  # max_attempts 3 (the default)
UPSTREAM_ONE = "scripted1"  # max_attempts 1
CONFIG_MAX_ATTEMPTS = 3  # the config allows 1..3
CRASH_TOOL = "crash_before_not_sent"
PLAIN_WRITE = "plain_write"  # no script: every attempt answers a plain success
# Multi-round-trip (2026-07-28): a round of questions first, then the answer (issue 13).
ROUNDS_TOOL = "asks_then_answers"
QUESTION = {"method": "elicitation/create",
            "params": {"mode": "form", "message": "Name?", "requestedSchema": {"type": "object", "properties": {}}}}
ROUND = {"resultType": "input_required", "inputRequests": {"name": QUESTION}, "requestState": "upstream-state-1"}
REFUSING_TOOL = "needs_sampling"  # refuses: the client declared no sampling capability (-32021)
MISSING_SAMPLING = {"code": -32021, "message": "Missing required client capability",
                    "data": {"requiredCapabilities": {"sampling": {}}}}
# What the gateway says when a scripted process exits mid-call, or fails its handshake.
EXITED = "the upstream process exited before answering"
HANDSHAKE_FAILED = "handshake failed: " + EXITED
SENT_AGAIN = {"content": [{"type": "text", "text": "answered by the attempt after send_again"}], "isError": False}

# Cases whose two answers are known to differ (a product bug reported to the lead): id -> reason.
KNOWN_MISMATCHES: dict[str, str] = {}


# -- the cases -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Expect:
    """What the answer must be: an exact wire dict, or isError/outcome/text facts."""

    wire: dict[str, Any] | None = None
    is_error: bool | None = None
    outcome: str | None = None
    text_contains: tuple[str, ...] = ()
    text_excludes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Case:
    id: str
    effect: str
    events: list[dict[str, Any]]  # the scripted server's events, one per attempt that reaches it
    expect: Expect
    upstream: str = UPSTREAM
    not_sent_first: bool = False  # attempt 1 is never sent (the helper tool sets it up)
    skip: str | None = None

    @property
    def tool(self) -> str:
        return re.sub(r"[^A-Za-z0-9_-]", "_", self.id)

    @property
    def exposed(self) -> str:
        return f"{self.upstream}__{self.tool}"

    @property
    def is_write(self) -> bool:
        return self.effect != "read"


def _server_events(events: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], bool]:
    """Fixture events as the scripted server's events (not_sent ones never reach it)."""
    out: list[dict[str, Any]] = []
    not_sent_first = False
    for index, event in enumerate(events):
        kind = event["kind"]
        if kind == "not_sent":
            if index == 0:
                not_sent_first = True
            elif out and out[-1]["kind"] == "interrupted":
                out[-1]["fail_next_start"] = True  # the next process start fails its handshake
            else:
                raise ValueError(f"not_sent after {out[-1]['kind'] if out else 'nothing'}: not scripted")
            if index != len(events) - 1:
                raise ValueError("a not_sent event ends a call; events after it are never used")
        elif kind == "interrupted":
            out.append({"kind": "interrupted"})
        elif kind == "rpc_error":
            out.append({k: event[k] for k in ("kind", "code", "message", "data") if k in event})
        elif kind == "replied":
            out.append({"kind": "replied", "answer": event["answer"]})
        else:
            raise ValueError(f"unknown event kind {kind!r}")
    return out, not_sent_first


def _expect_from_fixture(expect: dict[str, Any], events: list[dict[str, Any]], exposed: str) -> Expect:
    if expect.get("send_again"):
        return Expect(wire=SENT_AGAIN)
    answer = expect["answer"]
    if "wire" in answer:
        return Expect(wire=answer["wire"])
    # The fixture's reasons are not reproducible over stdio: drop them, check the real one.
    reasons = [e["reason"] for e in events if e["kind"] in ("interrupted", "not_sent")]
    contains = [t.replace("srv__tool", exposed) for t in answer.get("text_contains", [])
                if not any(t in r or r in t for r in reasons)]
    last = events[-1]["kind"]
    if last == "interrupted":
        contains.append(EXITED)
    elif last == "not_sent":
        contains.append(HANDSHAKE_FAILED)
    return Expect(is_error=answer["is_error"], outcome=answer["outcome"], text_contains=tuple(contains),
                  text_excludes=tuple(answer.get("text_excludes", [])))


def _fixture_case(fixture: dict[str, Any], section: str) -> Case:
    given, expect = fixture["input"], fixture["expect"]
    if section == "outcomes":
        # Attempt k: k-1 interrupted attempts first; after a send_again, one more attempt answers.
        events = [{"kind": "interrupted", "reason": "earlier attempt"}] * (given["attempt"] - 1) + [given["event"]]
    else:
        events = list(given["events"])
    max_attempts = given.get("max_attempts", 3)
    server_events, not_sent_first = _server_events(events)
    if expect.get("send_again"):
        server_events.append({"kind": "replied", "answer": SENT_AGAIN})
    upstream = UPSTREAM_ONE if max_attempts == 1 else UPSTREAM
    skip = None
    if max_attempts > CONFIG_MAX_ATTEMPTS:
        skip = (f"needs max_attempts {max_attempts}; an upstream's max_attempts is 1..{CONFIG_MAX_ATTEMPTS} "
                "in the gateway config, so the gateway cannot be set up to make this many attempts")
    elif max_attempts not in (1, CONFIG_MAX_ATTEMPTS):
        raise ValueError(f"{fixture['id']}: add an upstream entry with max_attempts {max_attempts}")
    exposed = f"{upstream}__{re.sub(r'[^A-Za-z0-9_-]', '_', fixture['id'])}"
    return Case(
        id=fixture["id"], effect=given["effect"], events=server_events,
        expect=_expect_from_fixture(expect, events, exposed), upstream=upstream,
        not_sent_first=not_sent_first, skip=skip,
    )


def _text(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": False}


def _result_line(result: Any) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": 0, "result": result}).replace('"id": 0', '"id": %ID%')


def _error_line(error: Any) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": 0, "error": error}).replace('"id": 0', '"id": %ID%')


def _invalid(defect: str) -> Expect:
    """A result that breaks the MCP schema: a failed result naming the upstream and the defect."""
    return Expect(is_error=True, outcome=None, text_contains=(f"upstream server '{UPSTREAM}'", defect))


BIG_TEXT = "x" * (200 * 1024)

# Malformed upstream answers: (id, effect, scripted events, expectation).
MALFORMED: list[tuple[str, str, list[dict[str, Any]], Expect]] = [
    ("mal.content-not-list", "non_idempotent_write",
     [{"kind": "replied", "answer": {"content": "hello", "isError": False}}],
     _invalid("content: must be a list")),
    ("mal.content-missing", "read",
     [{"kind": "replied", "answer": {"isError": False}}],
     _invalid("content: missing")),
    ("mal.block-not-object", "idempotent_write",
     [{"kind": "replied", "answer": {"content": ["hello"]}}],
     _invalid("content[0]: must be an object")),
    ("mal.block-unknown-type", "non_idempotent_write",
     [{"kind": "replied", "answer": {"content": [{"type": "text", "text": "ok"}, {"type": "video", "data": "AA=="}]}}],
     _invalid("content[1].type: 'video' is not a content type")),
    ("mal.text-without-text", "idempotent_write",
     [{"kind": "replied", "answer": {"content": [{"type": "text"}], "isError": False}}],
     _invalid("content[0].text")),
    ("mal.text-not-string", "read",
     [{"kind": "replied", "answer": {"content": [{"type": "text", "text": 5}]}}],
     _invalid("content[0].text")),
    ("mal.image-without-mimetype", "non_idempotent_write",
     [{"kind": "replied", "answer": {"content": [{"type": "image", "data": "iVBORw0KGgo="}]}}],
     _invalid("content[0].mimeType")),
    ("mal.structured-not-object", "read",
     [{"kind": "replied", "answer": {"content": [], "structuredContent": [1, 2]}}],
     _invalid("structuredContent: must be an object")),
    ("mal.iserror-not-bool", "non_idempotent_write",
     [{"kind": "replied", "answer": {"content": [], "isError": "yes"}}],
     _invalid("isError: must be true or false")),
    ("mal.meta-not-object", "unclassified",
     [{"kind": "replied", "answer": {"content": [], "_meta": "trace-1"}}],
     _invalid("_meta: must be an object")),
    # Unreadable answers are interruptions (SPEC 3): unknown for a write, sent again for a read.
    ("mal.result-not-object", "non_idempotent_write",
     [{"kind": "lines", "lines": [_result_line([1, 2])]}],
     Expect(is_error=True, outcome="unknown", text_contains=("unreadable response: no result object", "may have taken effect"))),
    ("mal.result-not-object-read", "read",
     [{"kind": "lines", "lines": [_result_line("ok")]}, {"kind": "replied", "answer": _text("second attempt")}],
     Expect(wire=_text("second attempt"))),
    ("mal.non-json-line-then-answer", "non_idempotent_write",
     [{"kind": "lines", "lines": ["this line is not JSON {", _result_line(_text("after a non-JSON line"))]}],
     Expect(wire=_text("after a non-JSON line"))),
    ("mal.text-200kb", "non_idempotent_write",
     [{"kind": "replied", "answer": _text(BIG_TEXT)}],
     Expect(wire=_text(BIG_TEXT))),
    ("mal.lone-surrogate", "non_idempotent_write",
     # json.dumps writes the lone surrogate as the escape \ud800 (valid JSON, not valid Unicode).
     [{"kind": "lines", "lines": [_result_line(_text("bad \ud800 text"))]}],
     Expect(is_error=True, outcome=None, text_contains=("not valid Unicode", "lone surrogate"))),
    ("mal.error-without-code", "non_idempotent_write",
     [{"kind": "lines", "lines": [_error_line({"message": "boom"})]}],
     Expect(is_error=True, outcome="unknown", text_contains=("malformed JSON-RPC error", "may have taken effect"))),
    ("mal.error-code-not-int", "non_idempotent_write",
     [{"kind": "lines", "lines": [_error_line({"code": "E42", "message": "boom"})]}],
     Expect(is_error=True, outcome="unknown", text_contains=("malformed JSON-RPC error",))),
    ("mal.error-not-object", "unclassified",
     [{"kind": "lines", "lines": [_error_line("boom")]}],
     Expect(is_error=True, outcome="unknown", text_contains=("malformed JSON-RPC error",))),
    # The outcome key wins over the code and the effect: a read is not sent again either.
    ("mal.error-unknown-outcome-no-message", "read",
     [{"kind": "lines", "lines": [_error_line({"code": -32000, "data": {"_meta": {OUTCOME: "unknown"}}})]}],
     Expect(is_error=True, outcome="unknown", text_contains=("MCP error -32000",))),
    # Not malformed: text outside ASCII (each era's encoder escapes it its own way, on both entries).
    ("enc.non-ascii-text", "read",
     [{"kind": "replied", "answer": {"content": [{"type": "text", "text": "Grüße ✓ 😀 \u2028"}], "isError": False,
                                     "structuredContent": {"ключ": "値"}}}],
     Expect(wire={"content": [{"type": "text", "text": "Grüße ✓ 😀 \u2028"}], "isError": False,
                  "structuredContent": {"ключ": "値"}})),
    ("mal.error-unknown-outcome-internal", "non_idempotent_write",
     [{"kind": "rpc_error", "code": -32603, "message": "upstream lost track",
       "data": {"_meta": {OUTCOME: "unknown", "vendor/x": 1}}}],
     Expect(wire={"content": [{"type": "text", "text": "MCP error -32603: upstream lost track"}], "isError": True,
                  "_meta": {OUTCOME: "unknown", "vendor/x": 1}})),
]


def _all_cases() -> list[Case]:
    found = [_fixture_case(f, "outcomes") for f in fixture_cases("outcomes")]
    found += [_fixture_case(f, "retries") for f in fixture_cases("retries")]
    found += [Case(id=i, effect=e, events=ev, expect=x) for i, e, ev, x in MALFORMED]
    ids = [c.id for c in found]
    assert len(ids) == len(set(ids)), "case ids must be unique"
    for case in found:
        assert len(case.exposed) <= 64, case.exposed
    return found


CASES = _all_cases()
RUNNABLE = [c for c in CASES if c.skip is None]


def _params() -> list[Any]:
    params = []
    for case in CASES:
        for era in ERAS:
            marks: list[Any] = []
            if case.skip:
                marks.append(pytest.mark.skip(reason=case.skip))
            elif case.id in KNOWN_MISMATCHES:
                marks.append(pytest.mark.xfail(strict=True, reason=KNOWN_MISMATCHES[case.id]))
            params.append(pytest.param(case, era, id=f"{case.id}-{era}", marks=marks))
    return params


# -- the exchange --------------------------------------------------------------------------


@dataclass
class Reply:
    status: int
    message: bytes  # the final JSON-RPC message: the JSON body, or the data of its SSE event
    content_type: str

    @property
    def parsed(self) -> dict[str, Any]:
        return json.loads(self.message)


@dataclass
class Exchange:
    """One case in one era: both entries' answers to the call and to its retry."""

    key: str
    first: dict[str, Reply] = field(default_factory=dict)
    retry: dict[str, Reply] = field(default_factory=dict)
    attempts_after_first: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    attempts_after_retry: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


def final_message(response: httpx.Response, request_id: Any) -> bytes:
    """The JSON body, or the data of the last SSE event answering `request_id`."""
    kind = response.headers.get("content-type", "").split(";")[0].strip()
    if kind == "application/json":
        return response.content
    assert kind == "text/event-stream", f"unexpected content-type {kind!r}: {response.text[:300]}"
    answers = []
    for block in re.split(r"\r\n\r\n|\n\n|\r\r", response.content.decode("utf-8")):
        data = "\n".join(
            line[5:].removeprefix(" ") for line in re.split(r"\r\n|\n|\r", block) if line.startswith("data:")
        )
        if not data:
            continue
        message = json.loads(data)
        if isinstance(message, dict) and message.get("id") == request_id and ("result" in message or "error" in message):
            answers.append(data.encode("utf-8"))
    assert answers, f"no answer to request {request_id!r} in the SSE stream: {response.text[:500]}"
    return answers[-1]


def post(http: httpx.Client, url: str, era: str, method: str, params: dict[str, Any], request_id: Any) -> Reply:
    headers = {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "mcp-protocol-version": era,
    }
    params = dict(params)
    if era == MODERN:
        headers["mcp-method"] = method
        if method == "tools/call":
            headers["mcp-name"] = params["name"]
        params["_meta"] = {
            **params.get("_meta", {}),
            "io.modelcontextprotocol/protocolVersion": era,
            "io.modelcontextprotocol/clientCapabilities": {},
        }
    body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    response = http.post(url, headers=headers, content=json.dumps(body).encode())
    kind = response.headers.get("content-type", "").split(";")[0].strip()
    return Reply(response.status_code, final_message(response, request_id), kind)


@dataclass
class Pair:
    gateways: dict[str, RunningGateway]
    states: dict[tuple[str, str], Path]  # (entry, upstream) -> the scripted server's state dir
    clients: dict[str, httpx.Client]
    pool: ThreadPoolExecutor

    def both(self, era: str, method: str, params: dict[str, Any], request_id: Any) -> dict[str, Reply]:
        """The same request to both gateways at once (each has its own upstream copy)."""
        futures = {
            entry: self.pool.submit(post, self.clients[entry], self.gateways[entry].url, era, method, params, request_id)
            for entry in ENTRIES
        }
        return {entry: future.result() for entry, future in futures.items()}

    def attempts(self, entry: str, case: Case, run: str) -> list[dict[str, Any]]:
        state = self.states[(entry, case.upstream)]
        return [a for a in read_attempts(state) if a["tool"] == case.tool and a["run"] == run]


def _scripts(cases: list[Case]) -> dict[str, dict[str, Any]]:
    helper = {"name": CRASH_TOOL, "effect": "non_idempotent_write",
              "events": [{"kind": "interrupted", "fail_next_start": True}]}
    plain = {"name": PLAIN_WRITE, "effect": "non_idempotent_write", "events": []}
    rounds = {"name": ROUNDS_TOOL, "effect": "non_idempotent_write",
              "events": [{"kind": "replied", "answer": ROUND}, {"kind": "replied", "answer": _text("answered")}]}
    refusing = {"name": REFUSING_TOOL, "effect": "read", "events": [{"kind": "rpc_error", **MISSING_SAMPLING}]}
    scripts: dict[str, dict[str, Any]] = {UPSTREAM: {"tools": [helper, plain, rounds, refusing]},
                                          UPSTREAM_ONE: {"tools": [helper]}}
    for case in cases:
        scripts[case.upstream]["tools"].append(
            {"name": case.tool, "effect": None if case.effect == "unclassified" else case.effect, "events": case.events}
        )
    return scripts


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    root = tmp_path_factory.mktemp("parity")
    scripts = _scripts(RUNNABLE)
    configs: dict[str, Path] = {}
    states: dict[tuple[str, str], Path] = {}
    for entry in ENTRIES:
        upstreams = []
        for name, options in ((UPSTREAM, {}), (UPSTREAM_ONE, {"max_attempts": 1})):
            state = root / entry / f"state-{name}"
            state.mkdir(parents=True)
            (state / SCRIPT_FILE).write_text(json.dumps(scripts[name]))
            states[(entry, name)] = state
            upstreams.append({
                "name": name, "transport": "stdio", "command": sys.executable, "args": [str(SCRIPT_PATH)],
                "env": {STATE_ENV: str(state)}, "cwd": str(REPO_ROOT), **options,
            })
        configs[entry] = write_config(
            root / entry, {"server": {"fast_tool_calls": entry == "fast"}, "upstreams": upstreams}
        )
    with ExitStack() as stack, ThreadPoolExecutor(max_workers=2) as pool:
        started = {entry: pool.submit(stack.enter_context, start_gateway(configs[entry])) for entry in ENTRIES}
        gateways = {entry: future.result() for entry, future in started.items()}
        clients = {entry: stack.enter_context(httpx.Client(timeout=60)) for entry in ENTRIES}
        yield Pair(gateways, states, clients, pool)


@pytest.fixture(scope="module")
def exchanges(pair: Pair) -> dict[tuple[str, str], Exchange]:
    """Every runnable case in both eras, in one pass (the scripted upstreams keep state)."""
    done: dict[tuple[str, str], Exchange] = {}
    request_id = 0
    for era in ERAS:
        # The first listing also starts both upstreams before any case runs.
        pair.both(era, "tools/list", {}, 1)
    for case in RUNNABLE:
        for era in ERAS:
            run = f"{case.id}@{era}"
            key = f"parity/{case.id}/{era}/{uuid.uuid4().hex[:8]}"
            params = {"name": case.exposed, "arguments": {"run": run}, "_meta": {KEY: key}}
            if case.not_sent_first:
                crash = {"name": f"{case.upstream}__{CRASH_TOOL}", "arguments": {"run": run},
                         "_meta": {KEY: f"crash/{key}"}}
                request_id += 1
                for entry, reply in pair.both(era, "tools/call", crash, request_id).items():
                    assert reply.parsed["result"]["_meta"][OUTCOME] == "unknown", (entry, reply.message[:300])
            exchange = Exchange(key)
            request_id += 1
            exchange.first = pair.both(era, "tools/call", params, request_id)
            exchange.attempts_after_first = {e: pair.attempts(e, case, run) for e in ENTRIES}
            exchange.retry = pair.both(era, "tools/call", params, f"retry-{request_id}")
            exchange.attempts_after_retry = {e: pair.attempts(e, case, run) for e in ENTRIES}
            done[(case.id, era)] = exchange
    return done


# -- the assertions ------------------------------------------------------------------------


def _diff(fast: Reply, sdk: Reply) -> str:
    def lines(reply: Reply) -> list[str]:
        try:
            return [f"HTTP {reply.status}", *json.dumps(json.loads(reply.message), indent=1).splitlines()]
        except ValueError:
            return [f"HTTP {reply.status}", repr(reply.message[:2000])]

    at = next((i for i, (a, b) in enumerate(zip(fast.message, sdk.message)) if a != b),
              min(len(fast.message), len(sdk.message)))
    return (
        f"first differing byte at {at}:\n  fast: {fast.message[max(0, at - 60):at + 60]!r}\n"
        f"  sdk:  {sdk.message[max(0, at - 60):at + 60]!r}\n"
        + "\n".join(difflib.unified_diff(lines(fast), lines(sdk), "fast path", "sdk path", lineterm=""))
    )


def assert_same(replies: dict[str, Reply], what: str) -> None:
    fast, sdk = replies["fast"], replies["sdk"]
    assert (fast.status, fast.message) == (sdk.status, sdk.message), f"{what}: the entries differ\n" + _diff(fast, sdk)


def wire_of(reply: Reply, era: str) -> dict[str, Any]:
    """The tools/call result without what the era adds (2026: resultType, serverInfo in _meta)."""
    message = reply.parsed
    assert "error" not in message, f"a JSON-RPC error instead of a result: {message['error']}"
    result = dict(message["result"])
    if era == MODERN:
        assert result.pop("resultType") == "complete"
        meta = dict(result["_meta"])
        assert meta.pop(SERVER_INFO)["name"] == "dex-mcp-gateway"
        result.pop("_meta")
        if meta:
            result["_meta"] = meta
    else:
        assert "resultType" not in result and SERVER_INFO not in (result.get("_meta") or {})
    return result


def check_expect(wire: dict[str, Any], expect: Expect) -> None:
    if expect.wire is not None:
        assert wire == expect.wire
        return
    content = wire.get("content")
    assert isinstance(content, list) and all(isinstance(b, dict) for b in content), f"not a valid result: {wire}"
    text = "\n".join(str(b.get("text", "")) for b in content if b.get("type") == "text")
    assert wire["isError"] is expect.is_error, text
    assert (wire.get("_meta") or {}).get(OUTCOME) == expect.outcome, wire
    for fragment in expect.text_contains:
        assert fragment in text, f"{fragment!r} not in {text!r}"
    for fragment in expect.text_excludes:
        assert fragment not in text, f"{fragment!r} in {text!r}"


@pytest.mark.parametrize("era", ERAS)
def test_tools_list_is_the_same_on_both_entries(pair: Pair, era: str) -> None:
    replies = pair.both(era, "tools/list", {}, "list-1")
    assert_same(replies, f"tools/list ({era})")
    assert replies["fast"].status == 200
    tools = {t["name"]: t for t in replies["fast"].parsed["result"]["tools"]}
    for case in RUNNABLE:
        published = tools[case.exposed].get("_meta") or {}
        assert published.get(EFFECT) == (None if case.effect == "unclassified" else case.effect), case.exposed


@pytest.mark.parametrize(("case", "era"), _params())
def test_answers_are_byte_identical(exchanges: dict[tuple[str, str], Exchange], case: Case, era: str) -> None:
    exchange = exchanges[(case.id, era)]
    # Two different entries answered: on the handshake era the fast path answers JSON when
    # nothing streams, and the SDK's transport (SSE mode) an SSE stream. (On 2026-07-28 both
    # answer JSON, as the SDK's 2026 entry does: the configs alone tell the entries apart.)
    if era == HANDSHAKE:
        assert [exchange.first[e].content_type for e in ENTRIES] == ["application/json", "text/event-stream"]
    assert_same(exchange.first, f"{case.id} ({era}), the call")
    assert_same(exchange.retry, f"{case.id} ({era}), the retry with the same key")


@pytest.mark.parametrize(("case", "era"), _params())
def test_answers_follow_the_conventions(exchanges: dict[tuple[str, str], Exchange], case: Case, era: str) -> None:
    exchange = exchanges[(case.id, era)]
    for entry in ENTRIES:
        first, retry = exchange.first[entry], exchange.retry[entry]
        # An upstream's answer, however broken, is a tools/call result: never an error blaming the client.
        assert first.status == 200 and retry.status == 200, (entry, first.message[:300], retry.message[:300])
        wire = wire_of(first, era)
        check_expect(wire, case.expect)

        # The upstream saw exactly the attempts the script has, each with the client's key.
        seen = exchange.attempts_after_first[entry]
        assert [a["attempt"] for a in seen] == list(range(1, len(case.events) + 1)), (entry, seen)
        after_retry = exchange.attempts_after_retry[entry]
        assert all(a["key"] == exchange.key for a in after_retry), (entry, exchange.key, after_retry)
        retry_wire = wire_of(retry, era)
        if not case.is_write or case.not_sent_first:
            # A read runs again; a write that was never sent had its fence released: a new call.
            assert len(after_retry) == len(seen) + 1, (entry, after_retry)
            assert retry_wire == _text(extra_text(case.tool, len(seen) + 1))
        else:
            # The fence answers the retry: the upstream is not called again.
            assert after_retry == seen, (entry, after_retry)
            if wire.get("_meta", {}).get(OUTCOME) == "unknown":
                assert retry_wire == wire
            else:
                assert retry_wire == {**wire, "_meta": {**wire.get("_meta", {}), REPLAYED: True}}
        if case.effect in ("non_idempotent_write", "unclassified"):
            assert len(after_retry) <= 1, f"{entry}: a {case.effect} call reached the upstream {len(after_retry)} times"


def test_gateway_errors_and_refusals_are_the_same_on_both_entries(pair: Pair) -> None:
    """The gateway's own answers: JSON-RPC errors for a bad request, rejected results for writes."""
    write = f"{UPSTREAM}__{PLAIN_WRITE}"
    for era in ERAS:
        key = f"parity/own/{era}/{uuid.uuid4().hex[:8]}"
        requests: list[tuple[str, dict[str, Any], int | None, str | None]] = [
            ("unknown tool", {"name": f"{UPSTREAM}__no_such_tool", "arguments": {}}, -32602, None),
            ("arguments not an object", {"name": write, "arguments": [1]}, -32602, None),
            ("keyless write", {"name": write, "arguments": {"run": "own"}}, None, "rejected"),
            ("keyed write", {"name": write, "arguments": {"run": "own"}, "_meta": {KEY: key}}, None, None),
            ("key reused with other arguments", {"name": write, "arguments": {"run": "x"}, "_meta": {KEY: key}},
             None, "rejected"),
        ]
        for n, (what, params, code, outcome) in enumerate(requests):
            replies = pair.both(era, "tools/call", params, n)
            assert_same(replies, f"{what} ({era})")
            message = replies["fast"].parsed
            if code is not None:
                assert message["error"]["code"] == code, message
                # The 2026 entry maps -32602 to HTTP 400 (the SDK's table); the handshake era stays 200.
                assert replies["fast"].status == (400 if era == MODERN else 200)
            else:
                result = message["result"]
                assert result["isError"] is (outcome is not None), result
                assert (result.get("_meta") or {}).get(OUTCOME) == outcome, result


# -- calls answered with a task (issue 17): the same tail through both entries ------------------

_TASK_VALUES = re.compile(rb'"(taskId|createdAt|lastUpdatedAt)":"[^"]*"')


def _task_id(reply: Reply) -> str:
    result = reply.parsed["result"]
    return str(result.get("task", result)["taskId"])


def _without_task_values(reply: Reply) -> tuple[int, bytes]:
    """Task ids and times differ between two gateways by nature; everything else must not."""
    return reply.status, _TASK_VALUES.sub(rb'"\1":"*"', reply.message)


def test_task_answers_are_the_same_on_both_entries(pair: Pair) -> None:
    """2025-11-25: a `tools/call` with `task` is answered with a task by both entries (the gateway
    runs any tool as a task), byte for byte the same but for the task's id and times; a retry with
    the key gets the same task on each; the task's result is the plain call's answer. 2026-07-28:
    a tool of a handshake-era upstream that lists no task support is answered at once, whether the
    client declares the tasks extension or sends the legacy `task` param."""
    write = f"{UPSTREAM}__{PLAIN_WRITE}"
    key = f"parity/task/{uuid.uuid4().hex[:8]}"
    params = {"name": write, "arguments": {"run": "task"}, "_meta": {KEY: key}, "task": {"ttl": 60_000}}
    created = pair.both(HANDSHAKE, "tools/call", params, "task-1")
    assert _without_task_values(created["fast"]) == _without_task_values(created["sdk"])
    assert created["fast"].content_type == "application/json" and created["fast"].parsed["result"]["task"]["status"] == "working"
    retried = pair.both(HANDSHAKE, "tools/call", params, "task-2")
    assert {e: _task_id(r) for e, r in retried.items()} == {e: _task_id(r) for e, r in created.items()}
    results = {
        entry: post(pair.clients[entry], pair.gateways[entry].url, HANDSHAKE, "tasks/result",
                    {"taskId": _task_id(created[entry])}, "task-3")
        for entry in ENTRIES
    }
    assert _without_task_values(results["fast"]) == _without_task_values(results["sdk"])
    assert results["fast"].parsed["result"]["isError"] is False
    for extra in ({"_meta": {KEY: f"{key}/m", "io.modelcontextprotocol/clientCapabilities": {
                      "extensions": {"io.modelcontextprotocol/tasks": {}}}}},
                  {"_meta": {KEY: f"{key}/l"}, "task": {"ttl": 60_000}}):
        modern = pair.both(MODERN, "tools/call", {"name": write, "arguments": {"run": "task"}, **extra}, "task-4")
        assert_same(modern, "2026-07-28 call of a tool without task support")
        assert modern["fast"].parsed["result"]["resultType"] == "complete"


def test_rounds_and_request_refusals_are_the_same_on_both_entries(pair: Pair) -> None:
    """An upstream's input_required round (a 2026-07-28 client gets it as it is, and its next round
    reaches the upstream with the same key: the fence holds no answer for a round; a handshake-era
    client without a session is told it cannot answer), and an upstream's -32021 (passed on as that
    JSON-RPC error, the HTTP status of the era), are byte for byte the same on both entries."""
    for era in ERAS:
        key = f"parity/rounds/{era}/{uuid.uuid4().hex[:8]}"
        call = {"name": f"{UPSTREAM}__{ROUNDS_TOOL}", "arguments": {"run": f"rounds@{era}"}, "_meta": {KEY: key}}
        first = pair.both(era, "tools/call", call, f"round-1-{era}")
        assert_same(first, f"a round of questions ({era})")
        result = first["fast"].parsed["result"]
        if era == MODERN:
            assert {k: result[k] for k in ("resultType", "inputRequests", "requestState")} == ROUND
            answers = {"inputResponses": {"name": {"action": "accept", "content": {}}}, "requestState": "upstream-state-1"}
            second = pair.both(era, "tools/call", {**call, **answers}, f"round-2-{era}")
            assert_same(second, f"the next round ({era})")
            assert wire_of(second["fast"], era) == _text("answered")
        else:
            assert result["isError"] and "needs input from the client (elicitation/create)" in result["content"][0]["text"]
        refused = pair.both(era, "tools/call", {"name": f"{UPSTREAM}__{REFUSING_TOOL}", "arguments": {"run": era}},
                            f"refused-{era}")
        assert_same(refused, f"an upstream's -32021 ({era})")
        assert refused["fast"].parsed["error"] == MISSING_SAMPLING
        assert refused["fast"].status == (400 if era == MODERN else 200)
