"""What held under attack (the security issue's "What held (keep it so, with regression tests where
none exist)"), kept so: each item that had no regression test, against a real `dex-gateway serve`
and real upstream processes (the example servers, examples/servers/tasks_server.py, and the
misbehaving HTTP upstream tests/support/held_http_server.py), over real HTTP and raw sockets.

Items with regression tests elsewhere are not repeated here (scope of resources, templates,
prompts, completion and log level: test_gateway_security.py; tasks: tests/tasks/test_tasks_replicas.py;
idle GET streams: tests/operations/test_connections.py; agent-host 401/403: tests/agent_host/test_api_guard.py and
test_host_api.py; the host page: tests/agent_host/test_browser.py). This file holds the rest, one
group per item, each group's comment quoting the item. Seen failing with the protection taken out
(and passing again with it back): keeping the client's Authorization to itself, the TTL clamp, the repeated-cursor check, the
close after a 400, the coalescing of progress, the scope check of `resources/subscribe`.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp.shared.inbound import encode_header_value

from tests.gateway.test_gateway_http import MODERN, assert_clean, jsonrpc_message, request, sha
from tests.support.gateway import RunningGateway, http_upstream, start_gateway, stdio_upstream, write_config
from tests.support.processes import spawn_listening, terminate
from tests.support.servers import REPO_ROOT, start_http_server
from tests.tasks.tasks_support import HANDSHAKE, post as task_post, result_of, task_id_of

pytestmark = [pytest.mark.timeout(120)]

TOKENS = {"alice": "alice-held-token-5e1d", "bob": "bob-held-token-93ac"}
ADMIN, SCRAPER, WRONG = "admin-held-token-77b0", "scraper-held-token-c4e2", "wrong-held-token-0a9f"
HEADER_MISMATCH = -32020
MAX_TTL_SECONDS = 5
LISTED_CAP = 40
HELD_SERVER = REPO_ROOT / "tests" / "support" / "held_http_server.py"


@dataclass
class Upstream:
    """One tests/support/held_http_server.py process."""

    url: str
    process: Any
    lines: list[str] = field(default_factory=list)

    def get(self, what: str) -> Any:
        return httpx.get(f"{self.url.rsplit('/', 1)[0]}/{what}", timeout=10).json()


def spawn_held(listing: str) -> Upstream:
    lines: list[str] = []
    process, url = spawn_listening([sys.executable, str(HELD_SERVER), "--listing", listing], cwd=REPO_ROOT,
                                   env=dict(os.environ), name=f"held-{listing}", lines=lines, ready_timeout=20)
    if url is None:
        terminate(process)
        raise RuntimeError("the held upstream did not start:\n" + "\n".join(lines))
    return Upstream(url, process, lines)


@dataclass
class Setup:
    gateway: RunningGateway
    held: Upstream
    repeat: Upstream
    endless: Upstream


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("held")
    upstreams = [spawn_held("normal"), spawn_held("repeat"), spawn_held("endless")]
    held, repeat, endless = upstreams
    try:
        with start_http_server("tasks_server", state_dir=root / "t") as tasks:
            config = write_config(root, {
                "auth": {"tokens": [
                    {"principal": "alice", "token_sha256": sha(TOKENS["alice"])},
                    # bob: the notes tools only; everything else is out of his scope.
                    {"principal": "bob", "token_sha256": sha(TOKENS["bob"]), "tools": ["notes__*"]},
                ], "admin_token_sha256": sha(ADMIN)},
                "telemetry": {"metrics_token_sha256": sha(SCRAPER)},
                "tasks": {"max_ttl_seconds": MAX_TTL_SECONDS},
                "upstreams": [
                    stdio_upstream("pay", "dex_server", state_dir=root / "pay"),
                    stdio_upstream("notes", "plain_server", state_dir=root / "notes"),
                    http_upstream("t", tasks.url),
                    http_upstream("held", held.url, protocol="handshake", call_timeout_seconds=2, max_attempts=1),
                    http_upstream("repeat", repeat.url, protocol="handshake", max_listed_items=LISTED_CAP,
                                  call_timeout_seconds=10),
                    http_upstream("endless", endless.url, protocol="handshake", max_listed_items=LISTED_CAP,
                                  call_timeout_seconds=10),
                ],
            })
            with start_gateway(config) as gateway:
                yield Setup(gateway, held, repeat, endless)
    finally:
        for upstream in upstreams:
            terminate(upstream.process)


def modern_headers(message: dict[str, Any], token: str, **names: str) -> dict[str, str]:
    """The headers of a well-formed 2026-07-28 request (Mcp-Method, Mcp-Name) for `message`."""
    out = {"accept": "application/json, text/event-stream", "content-type": "application/json",
           "mcp-protocol-version": MODERN, "authorization": f"Bearer {token}", "mcp-method": message["method"]}
    params = message.get("params") or {}
    for key in ("name", "uri"):
        if isinstance(params.get(key), str):
            out["mcp-name"] = encode_header_value(params[key])
    out.update(names)
    return out


def send(url: str, message: dict[str, Any], hdrs: dict[str, str] | list[tuple[str, str]]) -> httpx.Response:
    return httpx.post(url, content=json.dumps(message).encode(), headers=hdrs, timeout=30)


# -- "Header/body mismatches (19 variants) → -32020 and scope always from the body" -----------------
#
# On 2026-07-28 `Mcp-Method` and `Mcp-Name` (and `MCP-Protocol-Version`) mirror the body; a request
# whose headers disagree with its body is refused whole (HTTP 400, -32020), and what a principal may
# reach is decided by the body, never by a header naming something it may reach.
# (`MCP-Protocol-Version` picks the era: a request without it, or with 2025-11-25, is a handshake-era
# request, which has no routing headers to disagree with; so those are not mismatch variants.)

BALANCE = request("tools/call", {"name": "pay__get_balance", "arguments": {"account": "main"}}, MODERN)
PROMPT = request("prompts/get", {"name": "pay__dispute_letter", "arguments": {"payment_id": "p1"}}, MODERN)
READ = request("resources/read", {"uri": "payments://accounts/main"}, MODERN)
LISTING = request("tools/list", None, MODERN)


def _without(hdrs: dict[str, str], name: str) -> dict[str, str]:
    return {k: v for k, v in hdrs.items() if k != name}


def _twice(hdrs: dict[str, str], name: str, second: str) -> list[tuple[str, str]]:
    return [*hdrs.items(), (name, second)]


def _variants() -> list[Any]:
    call = modern_headers(BALANCE, TOKENS["alice"])
    prompt = modern_headers(PROMPT, TOKENS["alice"])
    read = modern_headers(READ, TOKENS["alice"])
    listing = modern_headers(LISTING, TOKENS["alice"])
    cases: list[tuple[str, dict[str, Any], dict[str, str] | list[tuple[str, str]]]] = [
        ("method-missing", BALANCE, _without(call, "mcp-method")),
        ("method-other", BALANCE, {**call, "mcp-method": "tools/list"}),
        ("method-case", BALANCE, {**call, "mcp-method": "Tools/Call"}),
        ("method-empty", BALANCE, {**call, "mcp-method": ""}),
        ("method-on-listing", LISTING, {**listing, "mcp-method": "tools/call"}),
        ("method-twice", BALANCE, _twice(call, "mcp-method", "tools/list")),
        ("name-missing", BALANCE, _without(call, "mcp-name")),
        ("name-other-tool", BALANCE, {**call, "mcp-name": "notes__list_notes"}),
        ("name-case", BALANCE, {**call, "mcp-name": "PAY__get_balance"}),
        ("name-base64-other", BALANCE, {**call, "mcp-name": "=?base64?bm90ZXNfX2xpc3Rfbm90ZXM=?="}),
        ("name-base64-malformed", BALANCE, {**call, "mcp-name": "=?base64?!!not-base64!!?="}),
        ("name-base64-noncanonical", BALANCE, {**call, "mcp-name": "=?base64?cGF5X19nZXRfYmFsYW5jZR==?="}),
        ("name-twice", BALANCE, _twice(call, "mcp-name", "notes__list_notes")),
        ("name-longer", BALANCE, {**call, "mcp-name": "pay__get_balance2"}),
        ("prompt-name-other", PROMPT, {**prompt, "mcp-name": "notes__anything"}),
        ("prompt-name-missing", PROMPT, _without(prompt, "mcp-name")),
        ("resource-uri-other", READ, {**read, "mcp-name": "payments://policy"}),
        ("resource-uri-missing", READ, _without(read, "mcp-name")),
        ("resource-uri-base64-other", READ, {**read, "mcp-name": "=?base64?cGF5bWVudHM6Ly9wb2xpY3k=?="}),
    ]
    return [pytest.param(message, hdrs, id=name) for name, message, hdrs in cases]


@pytest.mark.parametrize(("message", "hdrs"), _variants())
def test_a_header_that_disagrees_with_the_body_is_refused_whole(
        setup: Setup, message: dict[str, Any], hdrs: dict[str, str] | list[tuple[str, str]]) -> None:
    response = send(setup.gateway.url, message, hdrs)
    assert_clean(response)
    answer = jsonrpc_message(response)
    assert response.status_code == 400, (response.status_code, answer)
    assert answer.get("error", {}).get("code") == HEADER_MISMATCH, answer
    assert "result" not in answer and "EUR" not in response.text


def test_the_well_formed_requests_of_the_mismatch_variants_are_served(setup: Setup) -> None:
    """The control: the same requests with agreeing headers are answered (so the 400s above are
    the headers' doing, not the body's)."""
    for message in (BALANCE, PROMPT, READ, LISTING):
        response = send(setup.gateway.url, message, modern_headers(message, TOKENS["alice"]))
        assert response.status_code == 200, response.text
        assert "result" in jsonrpc_message(response), response.text
    # The name wrapped in the base64 sentinel is the same name.
    wrapped = {**modern_headers(BALANCE, TOKENS["alice"]), "mcp-name": "=?base64?cGF5X19nZXRfYmFsYW5jZQ==?="}
    assert "result" in jsonrpc_message(send(setup.gateway.url, BALANCE, wrapped))


def test_scope_comes_from_the_body_not_from_a_header_naming_an_allowed_tool(setup: Setup) -> None:
    url = setup.gateway.url
    bob = TOKENS["bob"]
    # bob's headers name his own tool, the body names a payments tool: refused, nothing runs.
    lying = send(url, BALANCE, modern_headers(BALANCE, bob, **{"mcp-name": "notes__list_notes"}))
    assert lying.status_code == 400 and jsonrpc_message(lying)["error"]["code"] == HEADER_MISMATCH
    assert "EUR" not in lying.text
    # Headers agreeing with the body: the body's tool is out of his scope.
    honest = jsonrpc_message(send(url, BALANCE, modern_headers(BALANCE, bob)))
    assert honest["error"]["code"] == -32602 and "unknown tool" in honest["error"]["message"], honest
    for message in (PROMPT, READ):
        refused = jsonrpc_message(send(url, message, modern_headers(message, bob)))
        assert "error" in refused and "EUR" not in json.dumps(refused), refused
    # The other way round: a header naming a payments tool does not widen nor narrow his own call.
    notes = request("tools/call", {"name": "notes__list_notes", "arguments": {}}, MODERN)
    other = send(url, notes, modern_headers(notes, bob, **{"mcp-name": "pay__get_balance"}))
    assert other.status_code == 400 and jsonrpc_message(other)["error"]["code"] == HEADER_MISMATCH
    own = jsonrpc_message(send(url, notes, modern_headers(notes, bob)))
    assert "result" in own, own


def test_a_subscription_is_scoped_like_a_read(setup: Setup) -> None:
    """`resources/subscribe` (the handshake era's subscription) to a URI out of the principal's
    scope is refused as its read is; in scope it is accepted."""
    hdrs = {"accept": "application/json, text/event-stream", "content-type": "application/json",
            "mcp-protocol-version": HANDSHAKE}
    message = request("resources/subscribe", {"uri": "payments://accounts/main"}, HANDSHAKE)
    refused = send(setup.gateway.url, message, {**hdrs, "authorization": f"Bearer {TOKENS['bob']}"})
    assert_clean(refused)
    error = jsonrpc_message(refused)["error"]
    assert error["code"] == -32602 and "no upstream serves" in error["message"], error
    accepted = send(setup.gateway.url, message, {**hdrs, "authorization": f"Bearer {TOKENS['alice']}"})
    assert "result" in jsonrpc_message(accepted), accepted.text


# -- "request smuggling variants → 400" ---------------------------------------------------------------
#
# Over a raw socket: each ambiguous framing is answered 400 and the connection closed, and the
# request hidden behind it is never answered (only one response on the connection).

SMUGGLED = b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n"
LIST_BODY = b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}'


def _head(*lines: bytes, eol: bytes = b"\r\n") -> bytes:
    base = [b"POST /mcp HTTP/1.1", b"host: 127.0.0.1", b"content-type: application/json",
            b"accept: application/json, text/event-stream", b"mcp-protocol-version: " + HANDSHAKE.encode(),
            b"authorization: Bearer " + TOKENS["alice"].encode()]
    return eol.join([*base, *lines]) + eol + eol


def _chunked(body: bytes) -> bytes:
    return b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n"


SMUGGLING = {
    # Content-Length and Transfer-Encoding together: front end and back end may split differently.
    "cl-and-te": _head(b"content-length: %d" % len(LIST_BODY), b"transfer-encoding: chunked")
    + _chunked(LIST_BODY) + SMUGGLED,
    "te-and-cl": _head(b"transfer-encoding: chunked", b"content-length: 4") + _chunked(LIST_BODY) + SMUGGLED,
    "two-content-lengths": _head(b"content-length: %d" % len(LIST_BODY), b"content-length: %d" % (len(LIST_BODY) + len(SMUGGLED)))
    + LIST_BODY + SMUGGLED,
    "content-length-list": _head(b"content-length: %d, %d" % (len(LIST_BODY), len(LIST_BODY) + 5)) + LIST_BODY + SMUGGLED,
    "content-length-sign": _head(b"content-length: +%d" % len(LIST_BODY)) + LIST_BODY + SMUGGLED,
    "content-length-hex": _head(b"content-length: 0x%x" % len(LIST_BODY)) + LIST_BODY + SMUGGLED,
    "te-xchunked": _head(b"transfer-encoding: xchunked") + _chunked(LIST_BODY) + SMUGGLED,
    "te-space-before-colon": _head(b"transfer-encoding : chunked") + _chunked(LIST_BODY) + SMUGGLED,
    "te-chunked-then-identity": _head(b"transfer-encoding: chunked", b"transfer-encoding: identity")
    + _chunked(LIST_BODY) + SMUGGLED,
    "te-obs-fold": _head(b"transfer-encoding:", b" chunked") + _chunked(LIST_BODY) + SMUGGLED,
    "te-vertical-tab": _head(b"transfer-encoding:\x0bchunked") + _chunked(LIST_BODY) + SMUGGLED,
    "chunk-size-overflow": _head(b"transfer-encoding: chunked")
    + b"1" + b"0" * 20 + b"\r\n" + LIST_BODY + b"\r\n0\r\n\r\n" + SMUGGLED,
    "chunk-size-not-hex": _head(b"transfer-encoding: chunked") + b"zz\r\n" + LIST_BODY + b"\r\n0\r\n\r\n" + SMUGGLED,
    "chunk-bare-lf": _head(b"transfer-encoding: chunked") + b"%x\n" % len(LIST_BODY) + LIST_BODY + b"\n0\n\n" + SMUGGLED,
    "nul-in-header": _head(b"x-note: a\x00b", b"content-length: %d" % len(LIST_BODY)) + LIST_BODY + SMUGGLED,
    "space-in-header-name": _head(b"content length: %d" % len(LIST_BODY)) + LIST_BODY + SMUGGLED,
}


def _exchange(url: str, raw: bytes, timeout: float = 5.0) -> tuple[bytes, bool]:
    """What the gateway answers to `raw` on one connection, and whether it closed the connection."""
    host, port = url.split("//", 1)[1].split("/", 1)[0].split(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(raw)
        sock.settimeout(timeout)
        got, closed = b"", False
        try:
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    closed = True
                    break
                got += chunk
        except (ConnectionResetError, BrokenPipeError):
            closed = True
        except (TimeoutError, socket.timeout):
            pass
    return got, closed


@pytest.mark.parametrize("name", sorted(SMUGGLING))
def test_an_ambiguous_framing_is_400_and_smuggles_nothing(setup: Setup, name: str) -> None:
    answer, closed = _exchange(setup.gateway.url, SMUGGLING[name])
    assert answer.startswith(b"HTTP/1.1 400"), answer[:300]
    assert closed, "the connection stayed open after a 400 for an ambiguous framing"
    assert answer.count(b"HTTP/1.1 ") == 1, answer  # the hidden request got no answer of its own
    assert b'"tools"' not in answer


def test_the_smuggling_control_two_pipelined_requests_get_two_answers(setup: Setup) -> None:
    """The control: the same bytes framed plainly are two requests and get two answers (so the
    single answers above are the refusal's doing)."""
    raw = _head(b"content-length: %d" % len(LIST_BODY)) + LIST_BODY + SMUGGLED
    answer, _ = _exchange(setup.gateway.url, raw, timeout=3)
    assert answer.count(b"HTTP/1.1 200") == 2, answer[:500]


# -- "task TTL clamped" ----------------------------------------------------------------------------------


@pytest.mark.parametrize("asked", [10**12, MAX_TTL_SECONDS * 1000 + 1])
def test_a_task_ttl_beyond_the_maximum_is_clamped_to_it(setup: Setup, asked: int) -> None:
    params = {"name": "t__slow_compute", "arguments": {"seconds": 0}, "task": {"ttl": asked}}
    created = result_of(task_post(setup.gateway.url, "tools/call", params, era=HANDSHAKE, token=TOKENS["alice"]))
    assert created["task"]["ttl"] == MAX_TTL_SECONDS * 1000, created
    task = result_of(task_post(setup.gateway.url, "tasks/get", {"taskId": task_id_of(created)}, era=HANDSHAKE,
                               token=TOKENS["alice"]))
    assert task["ttl"] == MAX_TTL_SECONDS * 1000, task


def test_a_task_ttl_under_the_maximum_is_kept(setup: Setup) -> None:
    params = {"name": "t__slow_compute", "arguments": {"seconds": 0}, "task": {"ttl": 1234}}
    created = result_of(task_post(setup.gateway.url, "tools/call", params, era=HANDSHAKE, token=TOKENS["alice"]))
    assert created["task"]["ttl"] == 1234, created


# -- "upstream pagination loops ... bounded" --------------------------------------------------------------


def _tools_list(setup: Setup) -> tuple[list[str], float]:
    message = request("tools/list", None, MODERN)
    started = time.monotonic()
    response = send(setup.gateway.url, message, modern_headers(message, TOKENS["alice"]))
    elapsed = time.monotonic() - started
    assert response.status_code == 200, response.text
    return [t["name"] for t in jsonrpc_message(response)["result"]["tools"]], elapsed


def test_an_upstream_whose_pagination_loops_is_bounded(setup: Setup) -> None:
    names, elapsed = _tools_list(setup)
    assert "notes__list_notes" in names and "held__echo" in names
    # The repeating cursor and the endless cursors: neither upstream's listing is taken.
    assert not any(n.startswith(("repeat__", "endless__")) for n in names), names
    assert elapsed < 15, elapsed
    # The gateway stopped asking: a repeated cursor on its second page, endless ones at the item cap.
    time.sleep(1.0)
    repeat_pages, endless_pages = setup.repeat.get("stats")["pages"], setup.endless.get("stats")["pages"]
    assert 2 <= repeat_pages <= 4, repeat_pages
    assert LISTED_CAP - 5 <= endless_pages <= 2 * (LISTED_CAP + 5), endless_pages
    time.sleep(1.5)
    assert setup.repeat.get("stats")["pages"] == repeat_pages
    assert setup.endless.get("stats")["pages"] == endless_pages
    assert "repeated cursor" in setup.gateway.log and "max_listed_items" in setup.gateway.log


# -- "endless pinging SSE and 100,000 progress notifications bounded" ---------------------------------------


def _call(setup: Setup, name: str, arguments: dict[str, Any], *, progress: str | None = None) -> httpx.Response:
    message = request("tools/call", {"name": name, "arguments": arguments}, HANDSHAKE)
    if progress is not None:
        message["params"]["_meta"] = {"progressToken": progress}
    hdrs = {"accept": "application/json, text/event-stream", "content-type": "application/json",
            "mcp-protocol-version": HANDSHAKE, "authorization": f"Bearer {TOKENS['alice']}"}
    return httpx.post(setup.gateway.url, content=json.dumps(message).encode(), headers=hdrs, timeout=60)


def test_an_endless_pinging_sse_answer_ends_at_the_call_timeout(setup: Setup) -> None:
    started = time.monotonic()
    response = _call(setup, "held__pinging", {})
    elapsed = time.monotonic() - started
    assert_clean(response)
    answer = jsonrpc_message(response)
    assert "error" in answer or answer.get("result", {}).get("isError"), answer
    assert elapsed < 10, elapsed  # call_timeout_seconds is 2
    # The gateway hung up on the stream: the upstream's writer ends.
    deadline = time.monotonic() + 10
    while setup.held.get("stats")["pinging_open"] and time.monotonic() < deadline:
        time.sleep(0.1)
    stats = setup.held.get("stats")
    assert stats["pinging_open"] == 0 and stats["pings"] > 10, stats


def _rss_kib(pid: int, field_name: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field_name} for process {pid}")


def _progress_flood(setup: Setup, count: int) -> None:
    assert setup.gateway.process is not None
    pid = setup.gateway.process.pid
    before = _rss_kib(pid, "VmRSS")
    response = _call(setup, "held__progress", {"count": count}, progress="flood")
    peak = _rss_kib(pid, "VmHWM")
    assert_clean(response)
    assert response.status_code == 200
    datas = [line[5:] for line in response.text.splitlines() if line.startswith("data:")]
    progress = [json.loads(d)["params"] for d in datas if '"notifications/progress"' in d]
    relayed = len(progress)
    answer = jsonrpc_message(response)
    assert answer["result"]["content"][0]["text"] == f"progress: sent {count}", answer
    # Progress waiting for the client is coalesced to the latest value (one per call, never a
    # queue of them): far fewer are relayed than sent, the last one relayed is the last one sent.
    assert 1 <= relayed <= count // 10, relayed
    assert progress[-1]["progress"] == count and progress[-1]["progressToken"] == "flood", progress[-1]
    grown_mib = (peak - before) / 1024
    print(f"{count} progress notifications: {relayed} relayed, gateway grew {grown_mib:.1f} MiB at its peak")
    assert grown_mib < 60, grown_mib


def test_a_flood_of_progress_notifications_is_bounded(setup: Setup) -> None:
    _progress_flood(setup, 10_000)


@pytest.mark.slow
def test_100000_progress_notifications_are_bounded(setup: Setup) -> None:
    _progress_flood(setup, 100_000)


# -- "client Authorization never forwarded" --------------------------------------------------------------------


@pytest.mark.parametrize("version", [HANDSHAKE, MODERN])
def test_the_clients_authorization_never_reaches_an_upstream(setup: Setup, version: str) -> None:
    before = len(setup.held.get("seen"))
    message = request("tools/call", {"name": "held__echo", "arguments": {}}, version)
    hdrs = modern_headers(message, TOKENS["alice"]) if version == MODERN else {
        "accept": "application/json, text/event-stream", "content-type": "application/json",
        "mcp-protocol-version": version, "authorization": f"Bearer {TOKENS['alice']}"}
    hdrs["proxy-authorization"] = f"Bearer {TOKENS['bob']}"
    response = send(setup.gateway.url, message, hdrs)
    assert response.status_code == 200 and "result" in jsonrpc_message(response), response.text
    seen = setup.held.get("seen")[before:]
    assert seen, "the call never reached the upstream"
    for request_headers in seen:
        assert "authorization" not in request_headers, request_headers
        assert "proxy-authorization" not in request_headers, request_headers
        for value in request_headers.values():
            assert TOKENS["alice"] not in value and TOKENS["bob"] not in value, request_headers


# -- "secrets in no log, error, `/readyz` or `/metrics`" (after every call above) ------------------------


def test_no_token_is_in_the_log_an_error_readyz_or_metrics(setup: Setup) -> None:
    gateway = setup.gateway
    secrets = [*TOKENS.values(), ADMIN, SCRAPER, WRONG]
    message = request("tools/list", None, HANDSHAKE)
    wrong = httpx.post(gateway.url, json=message, timeout=10, headers={
        "accept": "application/json, text/event-stream", "mcp-protocol-version": HANDSHAKE,
        "authorization": f"Bearer {WRONG}"})
    assert wrong.status_code == 401
    readyz = httpx.get(gateway.base + "/readyz", headers={"authorization": f"Bearer {ADMIN}"}, timeout=10)
    metrics = httpx.get(gateway.base + "/metrics", headers={"authorization": f"Bearer {SCRAPER}"}, timeout=10)
    assert readyz.status_code == 200 and "held" in readyz.text, readyz.text
    assert metrics.status_code == 200 and "dex_gateway" in metrics.text
    for where, text in [("the log", gateway.log), ("a 401", wrong.text + str(wrong.headers)),
                        ("/readyz", readyz.text), ("/metrics", metrics.text)]:
        for secret in secrets:
            assert secret not in text, f"{secret} in {where}"
            assert sha(secret) not in text, f"the hash of {secret} in {where}"
