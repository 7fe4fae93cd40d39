"""One bad upstream never hides or slows the others: a server that accepts TCP and never answers,
a closed port, a stdio command that never speaks MCP; an upstream that goes away after it was
listed is answered "did not run"; a slow upstream times out per the effect rules."""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from mcp.shared.exceptions import MCPError

from tests.gateway.helpers import KEY, OUTCOME, connect, meta_of, new_key, text_of
from tests.support.gateway import RunningGateway, http_upstream, start_gateway, stdio_upstream, write_config
from tests.support.servers import (
    RunningServer,
    count_executions,
    free_port,
    read_executions,
    release_gate,
    spawn_http_server,
)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

BAD = {"connect_timeout_seconds": 1}


class SilentServer:
    """Accepts TCP connections, reads nothing, answers nothing, closes nothing."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.conns: list[socket.socket] = []
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        self.sock.settimeout(0.1)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            self.conns.append(conn)

    def close(self) -> None:
        self._stop.set()
        for conn in self.conns:
            conn.close()
        self.sock.close()


@dataclass
class Setup:
    gateway: RunningGateway
    pay_state: Path
    flaky_state: Path
    slow_state: Path
    flaky: list[RunningServer]  # the current process (replaced when a test restarts it)
    first_list_seconds: float
    first_list_names: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("isolation")
    pay_state, flaky_state, slow_state = root / "pay", root / "flaky", root / "slow"
    for d in (pay_state, slow_state):
        d.mkdir()
    silent = SilentServer()
    closed_port = free_port()
    flaky = spawn_http_server("dex_server", state_dir=flaky_state)
    try:
        config = write_config(root, {"upstreams": [
            http_upstream("hung", f"http://127.0.0.1:{silent.port}/mcp", **BAD),
            http_upstream("closed", f"http://127.0.0.1:{closed_port}/mcp", **BAD),
            {"name": "mute", "transport": "stdio", "command": sys.executable,
             "args": ["-c", "import time; time.sleep(600)"], **BAD},
            stdio_upstream("pay", "dex_server", state_dir=pay_state),
            http_upstream("flaky", flaky.url),
            stdio_upstream("slow", "dex_server", state_dir=slow_state, call_timeout_seconds=1),
        ]})
        with start_gateway(config) as gateway:
            # The very first tools/list, while the bad upstreams' first listings are in flight.
            started = time.monotonic()
            response = httpx.post(gateway.url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                                  headers={"accept": "application/json, text/event-stream",
                                           "mcp-protocol-version": "2025-11-25"}, timeout=60)
            elapsed = time.monotonic() - started
            assert response.status_code == 200, response.text
            names = [t["name"] for t in _sse_result(response.text)["tools"]]
            holder = [flaky]
            yield Setup(gateway, pay_state, flaky_state, slow_state, holder, elapsed, names)
            flaky = holder[0]
    finally:
        flaky.stop()
        silent.close()


def _sse_result(body: str) -> dict:
    for line in body.splitlines():
        if line.startswith("data:"):
            message = json.loads(line[5:])
            return message["result"]
    return json.loads(body)["result"]


def test_first_listing_is_not_held_by_bad_upstreams(setup: Setup) -> None:
    # Bounded by the bad upstreams' 1 s connect timeout, not the 30 s default.
    assert setup.first_list_seconds < 8, setup.first_list_seconds
    names = set(setup.first_list_names)
    assert {"pay__get_balance", "flaky__get_balance", "slow__sleep"} <= names
    assert not [n for n in names if n.startswith(("hung__", "closed__", "mute__"))]


async def test_listing_and_calls_stay_fast_beside_bad_upstreams(setup: Setup, era: str) -> None:
    # Beside them: each bad upstream's listing failed, and was left out with a warning.
    for bad in ("hung", "closed", "mute"):
        setup.gateway.wait_for_log(rf"WARNING .*upstream {bad}: tools/list listing failed: ")
    started = time.monotonic()
    async with connect(setup.gateway.url, era) as client:
        tools = (await client.list_tools()).tools
        result = await client.call_tool("pay__get_balance", {"account": f"iso-{era}"})
    assert time.monotonic() - started < 5
    assert any(t.name == "pay__get_balance" for t in tools)
    assert not [t.name for t in tools if t.name.startswith(("hung__", "closed__", "mute__"))]
    assert result.is_error is False, text_of(result)
    assert result.structured_content == {"account": f"iso-{era}", "balance": 1000.0, "currency": "EUR"}


async def test_tool_of_a_never_listed_upstream_is_an_unknown_tool(setup: Setup, era: str) -> None:
    started = time.monotonic()
    async with connect(setup.gateway.url, era) as client:
        with pytest.raises(MCPError) as caught:
            await client.call_tool("closed__get_balance", {"account": "x"})
    assert time.monotonic() - started < 5
    assert caught.value.error.code == -32602
    assert "closed__get_balance" in caught.value.error.message


async def test_upstream_gone_after_listing_did_not_run(setup: Setup, era: str) -> None:
    """The listed upstream stops (port closed): the call is never sent, and says so."""
    flaky = setup.flaky[0]
    key = new_key(f"flaky-{era}")
    memo = {"payment_id": f"p-{era}", "memo": "m"}
    async with connect(setup.gateway.url, era) as client:
        warm = await client.call_tool("flaky__get_balance", {"account": "warm"})
        assert warm.is_error is False, text_of(warm)
        flaky.stop()
        read = await client.call_tool("flaky__get_balance", {"account": "gone"})
        write = await client.call_tool("flaky__set_memo", memo, meta={KEY: key})
        for result in (read, write):
            assert result.is_error is True
            assert OUTCOME not in meta_of(result), meta_of(result)
            text = text_of(result)
            assert "did not run" in text and "safe to call it again" in text, text
        assert count_executions(setup.flaky_state, tool="set_memo", key=key) == 0

        # Back on the same port: the never-sent write was released, so the same key runs now.
        setup.flaky[0] = spawn_http_server("dex_server", state_dir=setup.flaky_state, port=flaky.port)
        again = await client.call_tool("flaky__set_memo", memo, meta={KEY: key})
    assert again.is_error is False, text_of(again)
    assert count_executions(setup.flaky_state, tool="set_memo", key=key) == 1


# -- call timeouts (slow: call_timeout_seconds 1) ----------------------------------------------


@pytest.mark.timeout(30)
async def test_slow_read_fails_after_its_attempts(setup: Setup, era: str) -> None:
    seconds = 2.5 + (0.01 if era == "legacy" else 0.02)  # tells the two runs apart
    started = time.monotonic()
    async with connect(setup.gateway.url, era) as client:
        result = await client.call_tool("slow__sleep", {"seconds": seconds})
    elapsed = time.monotonic() - started
    assert result.is_error is True
    assert OUTCOME not in meta_of(result)
    text = text_of(result)
    assert "no answer within 1 s" in text and "all 3 attempts" in text, text
    assert 2.5 < elapsed < 15
    assert len([r for r in read_executions(setup.slow_state, tool="sleep")
                if r["arguments"]["seconds"] == seconds]) == 3


@pytest.mark.timeout(30)
async def test_slow_non_idempotent_write_is_unknown(setup: Setup, era: str) -> None:
    gate = f"slow-{uuid.uuid4().hex[:6]}"
    key = new_key(gate)
    try:
        async with connect(setup.gateway.url, era) as client:
            result = await client.call_tool("slow__hold_payment", {"gate": gate}, meta={KEY: key})
        assert result.is_error is True
        assert meta_of(result)[OUTCOME] == "unknown"
        assert "may have taken effect" in text_of(result)
        assert count_executions(setup.slow_state, tool="hold_payment", key=key) == 1
    finally:
        release_gate(setup.slow_state, gate)


@pytest.mark.timeout(30)
async def test_slow_idempotent_write_is_unknown_after_its_attempts(setup: Setup) -> None:
    gate = f"slowmemo-{uuid.uuid4().hex[:6]}"
    key = new_key(gate)
    try:
        async with connect(setup.gateway.url, "legacy") as client:
            result = await client.call_tool("slow__hold_memo", {"gate": gate}, meta={KEY: key})
        assert result.is_error is True
        assert meta_of(result)[OUTCOME] == "unknown"
        assert "all 3 attempts" in text_of(result), text_of(result)
        # The upstream's own fence held the resends (each sent with the client's key): the call
        # ran once, with that key.
        runs = [r for r in read_executions(setup.slow_state, tool="hold_memo") if r["arguments"]["gate"] == gate]
        assert [r["idempotency_key"] for r in runs] == [key], runs
    finally:
        release_gate(setup.slow_state, gate)


# -- an upstream that answers initialize and then never answers tools/list ---------------------

# A stdio "server" that completes the handshake and ignores everything else.
HALF_SERVER = r'''
import json, sys
for line in sys.stdin:
    message = json.loads(line)
    if message.get("method") == "initialize":
        print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": {
            "protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
            "serverInfo": {"name": "half", "version": "1"}}}), flush=True)
'''


@pytest.mark.timeout(60)
def test_hung_listing_does_not_slow_every_later_listing(tmp_path: Path) -> None:
    """The first listing is awaited (bounded by the connect timeout); later tools/list requests
    must not wait for the hung upstream again while its listing is still in flight.

    Today each tools/list waits up to connect_timeout_seconds again for as long as the first
    fetch runs (connect + call timeout: 30 s + 60 s by default), so every client's tools/list
    takes 30 s for a minute and a half."""
    state = tmp_path / "pay"
    state.mkdir()
    config = write_config(tmp_path, {"upstreams": [
        stdio_upstream("pay", "dex_server", state_dir=state),
        {"name": "half", "transport": "stdio", "command": sys.executable, "args": ["-c", HALF_SERVER],
         "connect_timeout_seconds": 1, "call_timeout_seconds": 30},
    ]})
    headers = {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2025-11-25"}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    with start_gateway(config) as gateway:
        first = httpx.post(gateway.url, json=body, headers=headers, timeout=60)
        assert first.status_code == 200
        assert "pay__get_balance" in first.text
        durations = []
        for _ in range(3):
            started = time.monotonic()
            response = httpx.post(gateway.url, json=body, headers=headers, timeout=60)
            durations.append(time.monotonic() - started)
            assert response.status_code == 200 and "pay__get_balance" in response.text
    assert max(durations) < 0.5, f"tools/list took {durations} s while 'half' was still being listed"
