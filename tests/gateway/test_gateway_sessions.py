"""Stateful sessions against a real `dex-gateway serve` (issue 20, stateful exhaustion): sessions are
capped per principal and per process with a clear refusal, an idle session ends (404 after), and a
session's buffered SSE events stay within a byte budget, the oldest going first."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.gateway.test_gateway_attacks import HANDSHAKE, Session
from tests.gateway.test_gateway_http import sha
from tests.support.gateway import RunningGateway, start_gateway, stdio_upstream, write_config

pytestmark = [pytest.mark.timeout(90)]

TOKENS = {"alice": "alice-session-token", "bob": "bob-session-token", "carol": "carol-session-token"}


def _config(root: Path, **server: object) -> Path:
    return write_config(root, {
        "server": {"stateful": True, **server},
        "auth": {"tokens": [{"principal": name, "token_sha256": sha(token)} for name, token in TOKENS.items()]},
        "upstreams": [stdio_upstream("notes", "plain_server", state_dir=root / "notes", keyless_writes="pass")],
    })


def _initialize(http: httpx.Client, url: str, token: str) -> httpx.Response:
    return http.post(url, headers={
        "accept": "application/json, text/event-stream", "content-type": "application/json",
        "mcp-protocol-version": HANDSHAKE, "authorization": f"Bearer {token}"}, json={
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": HANDSHAKE, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    root = tmp_path_factory.mktemp("session-caps")
    with start_gateway(_config(root, max_sessions=5, max_sessions_per_principal=3)) as gateway:
        yield gateway


def test_one_principal_past_its_cap_is_refused_and_the_others_are_not(capped: RunningGateway) -> None:
    url = capped.url
    with httpx.Client(timeout=15) as http:
        alice = [Session(http, url, TOKENS["alice"]) for _ in range(3)]
        refused = _initialize(http, url, TOKENS["alice"])
        assert refused.status_code == 429, refused.text
        error = refused.json()["error"]
        assert error["code"] == -32000
        assert "server.max_sessions_per_principal" in error["message"] and "3" in error["message"]
        assert "mcp-session-id" not in refused.headers

        # bob is not held to alice's sessions: he opens one and calls a tool on it.
        bob = Session(http, url, TOKENS["bob"])
        called = bob.post({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                           "params": {"name": "notes__put_note", "arguments": {"name": "b", "text": "bob's"}}})
        assert any('"isError":false' in e.get("data", "") for e in called), called
        Session(http, url, TOKENS["bob"])

        # Five sessions in the process (server.max_sessions): carol's first one waits for room.
        full = _initialize(http, url, TOKENS["carol"])
        assert full.status_code == 503, full.text
        assert "server.max_sessions" in full.json()["error"]["message"]

        # alice ends one of hers: her count goes down, and she may open one again.
        assert http.delete(url, headers=alice[0].headers).status_code == 200
        assert _initialize(http, url, TOKENS["alice"]).status_code == 200
    assert "Traceback" not in capped.log


@pytest.fixture(scope="module")
def short(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    root = tmp_path_factory.mktemp("session-idle")
    with start_gateway(_config(root, session_idle_timeout_seconds=2, session_event_buffer_bytes=64 * 1024)) as gateway:
        yield gateway


def test_an_idle_session_ends_and_its_id_answers_404(short: RunningGateway) -> None:
    url = short.url
    with httpx.Client(timeout=15) as http:
        session = Session(http, url, TOKENS["alice"])
        assert session.post({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        time.sleep(4)
        after = http.post(url, headers=session.headers, json={"jsonrpc": "2.0", "id": 3, "method": "tools/list"})
        assert after.status_code == 404, after.text
        # A new session opens as usual.
        assert Session(http, url, TOKENS["alice"]).post({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})


def test_buffered_events_past_the_byte_budget_keep_only_the_newest(short: RunningGateway) -> None:
    url = short.url
    text = "n" * 20_000  # each read_note answer: about 20 kB of JSON; the budget holds three
    with httpx.Client(timeout=15) as http:
        session = Session(http, url, TOKENS["bob"])
        session.post({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                      "params": {"name": "notes__put_note", "arguments": {"name": "big", "text": text}}})
        primings = []
        for request_id in range(10, 16):
            events = session.post({"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                                   "params": {"name": "notes__read_note", "arguments": {"name": "big"}}})
            assert text in events[-1]["data"]
            primings.append(events[0]["id"])
        # The newest answer is still there to replay ...
        newest = session.replay(primings[-1])
        assert text in newest and '"id":15' in newest.replace(" ", "")
        # ... the oldest ones are gone: their ids name nothing, and nothing is replayed.
        for event_id in primings[:2]:
            assert text not in session.replay(event_id)
