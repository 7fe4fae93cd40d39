"""Back-pressure from an upstream, against a real `dex-gateway serve` and real upstream processes:

* a client that never reads its streamed answer to a chatty call (many progress and log
  notifications) costs the other principals nothing: their calls to the same upstream are
  answered at once, a stdio process (notifications wait in the call's own bounded queue, never in
  the reader) or an HTTP upstream's one session (the call's stream is read whatever its client does);
* an upstream that floods the gateway with `ping` requests during a call cannot grow the gateway's
  memory: past `max_inbound_requests` it is answered with an error at once, and the call completes.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.gateway.test_gateway_http import sha
from tests.support.gateway import RunningGateway, run_gateway_cli, start_gateway, write_config
from tests.support.processes import spawn_listening, terminate
from tests.support.servers import REPO_ROOT

pytestmark = [pytest.mark.timeout(120)]

HANDSHAKE = "2025-11-25"
TOKENS = {"alice": "alice-backpressure-token", "bob": "bob-backpressure-token"}
METRICS_TOKEN = "metrics-backpressure-token"
SUPPORT = REPO_ROOT / "tests" / "support"


def _headers(principal: str) -> dict[str, str]:
    return {"accept": "application/json, text/event-stream", "content-type": "application/json",
            "mcp-protocol-version": HANDSHAKE, "authorization": f"Bearer {TOKENS[principal]}"}


def _call(tool: str, arguments: dict[str, Any], *, request_id: int = 1, progress: bool = False) -> dict[str, Any]:
    params: dict[str, Any] = {"name": tool, "arguments": arguments}
    if progress:
        params["_meta"] = {"progressToken": f"p-{request_id}"}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


def _answer(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC answer of a POST (a JSON body, or the last data event of an SSE stream)."""
    assert response.status_code == 200, response.text
    if response.headers["content-type"].startswith("application/json"):
        return dict(response.json())
    events = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
    return dict(json.loads(events[-1]))


def _text(answer: dict[str, Any]) -> str:
    assert "result" in answer, answer
    return str(answer["result"]["content"][0]["text"])


def _upstream(name: str, script: str, **options: Any) -> dict[str, Any]:
    return {"name": name, "transport": "stdio", "command": sys.executable, "args": [str(SUPPORT / script)],
            "cwd": str(REPO_ROOT), "default_tool_effect": "read", **options}


@pytest.fixture
def gateway(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[RunningGateway]:
    upstream = request.param
    config = write_config(tmp_path, {
        "auth": {"tokens": [{"principal": p, "token_sha256": sha(t)} for p, t in TOKENS.items()]},
        "telemetry": {"metrics_token_sha256": sha(METRICS_TOKEN)},
        "upstreams": [upstream],
    })
    with start_gateway(config) as running:
        yield running


def _stalled_post(url: str, body: dict[str, Any], headers: dict[str, str]) -> socket.socket:
    """Send a POST from a socket with a tiny receive buffer, and never read its answer."""
    host, _, rest = url.removeprefix("http://").partition("/")
    address, _, port = host.rpartition(":")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)  # before connect: the window stays small
    sock.connect((address, int(port)))
    payload = json.dumps(body).encode()
    head = [f"POST /{rest} HTTP/1.1", f"host: {host}", f"content-length: {len(payload)}"]
    head += [f"{name}: {value}" for name, value in headers.items()]
    sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + payload)
    return sock


def _others_are_not_stalled(gateway: RunningGateway) -> None:
    """Alice calls chat__chatty and never reads its stream; bob's calls to the same upstream are
    answered at once all along; the notifications alice missed are counted."""
    with httpx.Client(timeout=30) as http:
        # The upstream process is started and listed.
        assert _text(_answer(http.post(gateway.url, headers=_headers("bob"), json=_call("chat__quick", {"text": "warm"})))) == "quick: warm"
        stalled = _stalled_post(gateway.url, _call("chat__chatty", {"count": 5_000, "size": 8_000}, progress=True),
                                _headers("alice"))
        try:
            time.sleep(2.0)  # alice's stream fills every buffer between her socket and the gateway
            for attempt in range(5):
                started = time.monotonic()
                try:
                    answer = _answer(http.post(gateway.url, headers=_headers("bob"), timeout=5.0,
                                               json=_call("chat__quick", {"text": f"b{attempt}"}, request_id=10 + attempt)))
                except httpx.ReadTimeout:
                    pytest.fail(f"bob's call {attempt} was not answered within 5 s while alice does not read")
                elapsed = time.monotonic() - started
                assert _text(answer) == f"quick: b{attempt}"
                assert elapsed < 2.0, f"bob's call {attempt} took {elapsed:.2f} s"
                time.sleep(0.3)
        finally:
            stalled.close()
    metrics = httpx.get(gateway.base + "/metrics", headers={"authorization": f"Bearer {METRICS_TOKEN}"}, timeout=10).text
    # The slow client's notifications were coalesced (progress) and dropped (logs), and counted.
    dropped = {kind: float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
               for kind in ("progress", "log")
               if line.startswith(f'dex_gateway_upstream_notifications_dropped_total{{kind="{kind}",upstream="chat"}}')}
    assert dropped.get("progress", 0) > 0 and dropped.get("log", 0) > 0, metrics


@pytest.mark.parametrize("gateway", [_upstream("chat", "chatty_server.py")], indirect=True)
def test_a_client_that_never_reads_a_chatty_call_does_not_stall_other_principals(gateway: RunningGateway) -> None:
    _others_are_not_stalled(gateway)


@pytest.fixture
def chatty_http(tmp_path: Path) -> Iterator[str]:
    """The chatty server over Streamable HTTP with sessions: the gateway holds one for every principal."""
    argv = [sys.executable, str(SUPPORT / "chatty_server.py"), "--transport", "http", "--stateful"]
    lines: list[str] = []
    process, url = spawn_listening(argv, cwd=REPO_ROOT, env=dict(os.environ), name="chatty", lines=lines,
                                   ready_timeout=20)
    try:
        assert url is not None, "\n".join(lines)
        yield url
    finally:
        terminate(process)


def test_a_client_that_never_reads_a_chatty_call_does_not_stall_an_http_upstream_session(
    tmp_path: Path, chatty_http: str
) -> None:
    config = write_config(tmp_path, {
        "auth": {"tokens": [{"principal": p, "token_sha256": sha(t)} for p, t in TOKENS.items()]},
        "telemetry": {"metrics_token_sha256": sha(METRICS_TOKEN)},
        "upstreams": [{"name": "chat", "transport": "streamable_http", "url": chatty_http, "protocol": "handshake",
                       "default_tool_effect": "read"}],
    })
    with start_gateway(config) as gateway:
        _others_are_not_stalled(gateway)


def _memory_kib(pid: int, field: str) -> int:
    """A memory figure of a process from /proc (VmRSS: now, VmHWM: its peak), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for process {pid}")


PINGS = 20_000  # the finding had 100,000 (+524 MiB before the fix; +1.3 MiB after)


@pytest.mark.parametrize("gateway", [_upstream("flood", "ping_flood_server.py", max_inbound_requests=8)], indirect=True)
def test_an_upstream_flooding_pings_during_a_call_cannot_grow_the_gateways_memory(gateway: RunningGateway) -> None:
    assert gateway.process is not None
    pid = gateway.process.pid
    with httpx.Client(timeout=60) as http:
        stats = json.loads(_text(_answer(http.post(gateway.url, headers=_headers("bob"), json=_call("flood__stats", {})))))
        assert stats["answered"] == 0
        before = _memory_kib(pid, "VmRSS")
        answer = _answer(http.post(gateway.url, headers=_headers("bob"), json=_call("flood__flood", {"count": PINGS})))
        assert _text(answer) == f"flood: sent {PINGS} pings"
        peak = _memory_kib(pid, "VmHWM")
        # Every ping got an answer (pings the gateway had room for) or an error at once (the rest).
        deadline = time.monotonic() + 30
        while True:
            stats = json.loads(_text(_answer(http.post(gateway.url, headers=_headers("bob"), json=_call("flood__stats", {})))))
            if stats["answered"] + stats["refused"] == PINGS or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    grown_mib = (peak - before) / 1024
    print(f"gateway memory grew {grown_mib:.1f} MiB at its peak; pings {stats}")
    assert grown_mib < 40, f"the gateway grew by {grown_mib:.0f} MiB answering {PINGS} pings"
    assert stats["answered"] + stats["refused"] == PINGS, stats
    assert stats["refused"] > 0, stats
    assert "too many requests from upstream flood" in stats["refusal"], stats
    assert "already answering 8 of them (upstreams.flood.max_inbound_requests)" in stats["refusal"], stats


def test_the_back_pressure_limits_are_checked_with_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text("upstreams:\n  - name: chat\n    transport: stdio\n    command: python\n"
                    "    max_inbound_requests: 0\n    max_queued_notifications: lots\n")
    done = run_gateway_cli("serve", "--config", str(path), "--port", "0", timeout=30)
    assert done.returncode != 0
    assert f"{path}:5: upstreams.0.max_inbound_requests: Input should be greater than or equal to 1" in done.stderr
    assert f"{path}:6: upstreams.0.max_queued_notifications: Input should be a valid integer" in done.stderr
