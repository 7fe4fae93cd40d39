"""The findings of the attack round (issue 20), each reproduced against a real `dex-gateway serve`
as the attacker did it, and each failing on the code before its fix:

* cross-session replay: a principal's GET with a walked-back or foreign `Last-Event-ID` on its own
  stateful session gets nothing of another principal's session;
* a stateful session is bound to the principal that opened it (another token: 404);
* an admin-only `auth` does not count as auth for `/mcp`: binding beyond loopback is refused;
* the request head: an endless header is refused (431) and costs the other callers nothing, a head
  trickled a byte at a time is cut at the head deadline (408), and connections past the cap get 503.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.gateway.test_gateway_http import sha
from tests.support.sse import sse_events
from tests.support.gateway import RunningGateway, run_gateway_cli, start_gateway, stdio_upstream, write_config

pytestmark = [pytest.mark.timeout(90)]

HANDSHAKE = "2025-11-25"
TOKENS = {"alice": "alice-attack-token", "bob": "bob-attack-token"}
SECRET = "alice-only-text-7f3a"


@dataclass
class Setup:
    gateway: RunningGateway


@pytest.fixture(scope="module")
def stateful(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("attacks")
    config = write_config(root, {
        "server": {"stateful": True},
        "auth": {"tokens": [
            {"principal": "alice", "token_sha256": sha(TOKENS["alice"])},
            # bob may list notes and nothing else.
            {"principal": "bob", "token_sha256": sha(TOKENS["bob"]), "tools": ["notes__list_notes"]},
        ]},
        "upstreams": [stdio_upstream("notes", "plain_server", state_dir=root / "notes", keyless_writes="pass")],
    })
    with start_gateway(config) as gateway:
        yield Setup(gateway)


class Session:
    """One principal's raw stateful session (initialize, then requests by hand)."""

    def __init__(self, http: httpx.Client, url: str, token: str) -> None:
        self.http, self.url = http, url
        self.headers = {"accept": "application/json, text/event-stream", "content-type": "application/json",
                        "mcp-protocol-version": HANDSHAKE, "authorization": f"Bearer {token}"}
        opened = http.post(url, headers=self.headers, json={
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": HANDSHAKE, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
        assert opened.status_code == 200, opened.text
        self.id = opened.headers["mcp-session-id"]
        self.headers["mcp-session-id"] = self.id
        http.post(url, headers=self.headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})

    def post(self, message: dict[str, Any]) -> list[dict[str, str]]:
        response = self.http.post(self.url, headers=self.headers, json=message)
        assert response.status_code == 200, response.text
        return sse_events(response.text)

    def replay(self, last_event_id: str) -> str:
        """What a GET with this Last-Event-ID gets within a second (the stream stays open)."""
        got = b""
        try:
            with self.http.stream("GET", self.url, timeout=httpx.Timeout(5, read=1.0), headers={
                    **self.headers, "accept": "text/event-stream", "last-event-id": last_event_id}) as stream:
                for chunk in stream.iter_raw():
                    got += chunk
        except httpx.ReadTimeout:
            pass
        return got.decode("utf-8", "replace")


def test_a_walked_back_or_foreign_event_id_replays_nothing_of_another_session(stateful: Setup) -> None:
    url = stateful.gateway.url
    with httpx.Client(timeout=15) as http:
        alice = Session(http, url, TOKENS["alice"])
        bob = Session(http, url, TOKENS["bob"])
        # bob's request 2 gives him an event id on stream "2" ...
        bob_events = bob.post({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        bob_priming = bob_events[0]["id"]
        # ... and alice's request 2 is on a stream of the same name.
        alice.post({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                    "params": {"name": "notes__put_note", "arguments": {"name": "s", "text": SECRET}}})
        alice_events = alice.post({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                                   "params": {"name": "notes__read_note", "arguments": {"name": "s"}}})
        assert any(SECRET in e.get("data", "") for e in alice_events), alice_events
        alice_ids = [e["id"] for e in alice_events if "id" in e]

        # bob's own id: his own answer comes back, never alice's.
        own = bob.replay(bob_priming)
        assert "notes__list_notes" in own, own
        assert SECRET not in own and "alice" not in own
        # Ids walked back and forward from his own, in the old "<prefix>-<n>" shape.
        prefix, _, number = bob_priming.rpartition("-")
        for n in range(max(1, int(number) - 20), int(number) + 40):
            assert SECRET not in bob.replay(f"{prefix}-{n}")
        # alice's real ids, presented on bob's session: unknown there, nothing replayed.
        for event_id in alice_ids:
            assert bob.replay(event_id).strip() in ("", ":"), "a foreign event id replayed something"
        # Different sessions never share an id prefix.
        assert alice_ids[0].rpartition("-")[0] != prefix


def test_a_session_answers_only_the_principal_that_opened_it(stateful: Setup) -> None:
    url = stateful.gateway.url
    with httpx.Client(timeout=15) as http:
        alice = Session(http, url, TOKENS["alice"])
        as_bob = {**alice.headers, "authorization": f"Bearer {TOKENS['bob']}"}
        posted = http.post(url, headers=as_bob, json={"jsonrpc": "2.0", "id": 9, "method": "tools/list"})
        assert posted.status_code == 404, posted.text
        streamed = http.get(url, headers={**as_bob, "accept": "text/event-stream"})
        assert streamed.status_code == 404
        deleted = http.delete(url, headers=as_bob)
        assert deleted.status_code == 404
        # The session is still alice's and alive.
        assert any("notes__read_note" in e.get("data", "")
                   for e in alice.post({"jsonrpc": "2.0", "id": 10, "method": "tools/list"}))


def test_an_admin_token_alone_does_not_open_the_gateway_to_the_network(tmp_path: Path) -> None:
    config = write_config(tmp_path, {
        "server": {"host": "0.0.0.0"},
        "auth": {"admin_token_sha256": sha("admin-only")},
        "upstreams": [stdio_upstream("notes", "plain_server", state_dir=tmp_path / "notes")],
    })
    result = run_gateway_cli("serve", "--config", str(config), "--port", "0", timeout=30)
    assert result.returncode == 2, result.stderr
    assert "server.host" in result.stderr and "auth.tokens" in result.stderr
    assert "Traceback" not in result.stderr
    # The same through --host on the command line.
    loopback = write_config(tmp_path / "lo", {
        "auth": {"admin_token_sha256": sha("admin-only")},
        "upstreams": [stdio_upstream("notes", "plain_server", state_dir=tmp_path / "notes")],
    })
    result = run_gateway_cli("serve", "--config", str(loopback), "--host", "0.0.0.0", "--port", "0", timeout=30)
    assert result.returncode == 2, result.stderr
    assert "auth.tokens" in result.stderr


# -- the request head -----------------------------------------------------------------------------


def _connect(url: str) -> socket.socket:
    host, port = url.split("//", 1)[1].split("/", 1)[0].split(":")
    return socket.create_connection((host, int(port)))


def _answer(sock: socket.socket, timeout: float) -> bytes:
    sock.settimeout(timeout)
    got = b""
    try:
        while chunk := sock.recv(65536):
            got += chunk
    except (ConnectionResetError, TimeoutError, socket.timeout):
        pass
    return got


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("heads")
    config = write_config(root, {
        "server": {"header_timeout_seconds": 2, "read_timeout_seconds": 1, "max_connections": 64},
        "upstreams": [stdio_upstream("notes", "plain_server", state_dir=root / "notes")],
    })
    with start_gateway(config) as gateway:
        yield Setup(gateway)


def _list_tools_ms(url: str) -> float:
    started = time.monotonic()
    response = httpx.post(url, timeout=30, headers={
        "accept": "application/json, text/event-stream", "content-type": "application/json",
        "mcp-protocol-version": HANDSHAKE}, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert response.status_code == 200
    return (time.monotonic() - started) * 1000


def test_an_endless_header_is_refused_and_slows_no_one(plain: Setup) -> None:
    url = plain.gateway.url
    _list_tools_ms(url)  # warm
    stop = threading.Event()
    refused: list[bytes] = []

    def stream_one_header() -> None:
        sock = _connect(url)
        sock.sendall(b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\nx-long: ")
        sent = 0
        try:
            while not stop.is_set() and sent < 64 * 1024 * 1024:
                sock.sendall(b"a" * 8192)
                sent += 8192
        except OSError:
            pass
        refused.append(_answer(sock, 5))
        sock.close()

    threads = [threading.Thread(target=stream_one_header) for _ in range(2)]
    for thread in threads:
        thread.start()
    try:
        times = [_list_tools_ms(url) for _ in range(10)]
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
    assert max(times) < 1000, times  # 14-23 s per call before the limit
    assert len(refused) == 2
    for answer in refused:
        assert answer.startswith(b"HTTP/1.1 431"), answer[:200]
        body = json.loads(answer.split(b"\r\n\r\n", 1)[1])
        assert "server.max_header_bytes" in body["error"]["message"]


def test_a_head_just_under_the_limit_is_served(plain: Setup) -> None:
    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}'
    sock = _connect(plain.gateway.url)
    sock.sendall(b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
                 b"accept: application/json, text/event-stream\r\nmcp-protocol-version: " + HANDSHAKE.encode()
                 + b"\r\nx-pad: " + b"p" * 60_000 + b"\r\ncontent-length: " + str(len(body)).encode()
                 + b"\r\nconnection: close\r\n\r\n" + body)
    answer = _answer(sock, 10)
    sock.close()
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]


def test_a_trickled_head_is_cut_at_the_head_deadline(plain: Setup) -> None:
    sock = _connect(plain.gateway.url)
    started = time.monotonic()
    head = b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\nx-slow: " + b"z" * 200
    closed_at = None
    for i in range(len(head)):
        try:
            sock.sendall(head[i:i + 1])
        except OSError:
            closed_at = time.monotonic() - started
            break
        time.sleep(0.5)  # under the 1 s read timeout: every byte restarts it
        if time.monotonic() - started > 8:
            break
    answer = _answer(sock, 5)
    sock.close()
    elapsed = closed_at if closed_at is not None else time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert b"server.header_timeout_seconds" in answer
    assert elapsed < 6, elapsed


def test_connections_past_the_cap_are_answered_503(plain: Setup) -> None:
    held = [_connect(plain.gateway.url) for _ in range(64)]
    try:
        time.sleep(0.3)
        extra = _connect(plain.gateway.url)
        extra.sendall(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
        answer = _answer(extra, 5)
        extra.close()
        assert answer.startswith(b"HTTP/1.1 503"), answer[:200]
        assert b"retry-after: 1" in answer.lower()
    finally:
        for sock in held:
            sock.close()
    time.sleep(0.3)
    assert httpx.get(plain.gateway.base + "/healthz", timeout=5).status_code == 200
