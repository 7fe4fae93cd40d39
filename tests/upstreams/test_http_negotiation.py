"""UpstreamSession's protocol negotiation: one per connection, concurrent first calls wait for it,
and no request ever goes out in an era that was not negotiated (the issue-12 race)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from gateway.errors import UpstreamInterrupted, UpstreamNotSent
from gateway.upstreams.session import UpstreamSession
from tests.upstreams.sessions import http_session
from gateway.upstreams.mock_transport import MockResponse, MockTransport, RequestNotSent
from gateway.upstreams.transport import HttpRequest
from tests.upstreams.fake_mcp import MODERN, URL, FakeMcp, rpc_error

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


def connect(handler: Any, protocol: str = "auto", connect_timeout: float = 5) -> tuple[UpstreamSession, MockTransport]:
    transport = MockTransport(handler)
    conn = http_session("up", URL, headers={}, protocol=protocol, connect_timeout=connect_timeout, transport=transport)
    return conn, transport


def plain_400(request_id: Any) -> MockResponse:
    return MockResponse(400, {"content-type": "text/plain"}, b"Bad Request: Unsupported protocol version")


@pytest.mark.parametrize(
    "wrong_era_answer",
    [lambda rid: rpc_error(rid, -32600, "Unsupported protocol version", 400), plain_400],
    ids=["json-32600", "non-json-400"],
)
async def test_race_a_call_during_the_discover_probe_waits_for_the_negotiation(wrong_era_answer: Any) -> None:
    """Issue 12: a handshake-only upstream answers `server/discover` slowly; a second first call
    arriving meanwhile went out stamped 2026-07-28 and came back -32600 (or, with a non-JSON 400,
    became a false "interrupted", i.e. outcome unknown for a write)."""
    server = FakeMcp(eras={"handshake"}, wrong_era_answer=wrong_era_answer)
    server.discover_gate = anyio.Event()
    conn, _ = connect(server)
    results: dict[int, Any] = {}

    async def call(i: int) -> None:
        try:
            results[i] = await conn.request("tools/call", {"name": "echo", "arguments": {"i": i}}, timeout=5)
        except Exception as exc:  # noqa: BLE001 - the assertion below names what went wrong
            results[i] = exc

    async with anyio.create_task_group() as task_group:
        task_group.start_soon(call, 1)
        await server.discover_seen.wait()  # the probe is in flight
        task_group.start_soon(call, 2)
        await anyio.wait_all_tasks_blocked()  # call 2 has gone as far as it can
        server.discover_gate.set()

    assert results == {
        1: {"content": [{"type": "text", "text": '{"i": 1}'}], "isError": False},
        2: {"content": [{"type": "text", "text": '{"i": 2}'}], "isError": False},
    }
    assert server.methods() == ["server/discover", "initialize", "notifications/initialized", "tools/call", "tools/call"]
    for request, message in server.received:
        if message and message.get("method") == "tools/call":
            assert request.headers["mcp-protocol-version"] == "2025-11-25"
            assert request.headers["mcp-session-id"] == "s1"
            assert "io.modelcontextprotocol/protocolVersion" not in message["params"].get("_meta", {})
    assert conn.protocol_version == "2025-11-25"


async def test_concurrent_first_calls_on_a_modern_server_share_one_probe() -> None:
    server = FakeMcp(eras={"modern"})
    server.discover_gate = anyio.Event()
    conn, _ = connect(server)
    results: list[dict[str, Any]] = []

    async def call(i: int) -> None:
        results.append(await conn.request("tools/call", {"name": "echo", "arguments": {"i": i}}, timeout=5))

    async with anyio.create_task_group() as task_group:
        for i in range(5):
            task_group.start_soon(call, i)
        await server.discover_seen.wait()
        await anyio.wait_all_tasks_blocked()
        server.discover_gate.set()
    assert len(results) == 5
    assert server.methods() == ["server/discover"] + ["tools/call"] * 5
    assert conn.protocol_version == MODERN


async def test_auto_speaks_2026_to_a_modern_server() -> None:
    server = FakeMcp(eras={"handshake", "modern"})
    conn, _ = connect(server)
    await conn.request("tools/call", {"name": "echo", "arguments": {}, "_meta": {"k": "v"}}, timeout=5)
    assert server.methods() == ["server/discover", "tools/call"]
    request, message = server.received[-1]
    assert request.headers["mcp-protocol-version"] == MODERN
    assert request.headers["mcp-method"] == "tools/call"
    assert request.headers["mcp-name"] == "echo"
    assert "mcp-session-id" not in request.headers
    meta = message["params"]["_meta"]
    assert meta["k"] == "v"
    assert meta["io.modelcontextprotocol/protocolVersion"] == MODERN
    assert meta["io.modelcontextprotocol/clientInfo"]["name"] == "dex-mcp-gateway"


@pytest.mark.parametrize("discover_answer", ["rpc-error", "non-json-400"])
async def test_auto_falls_back_to_the_handshake(discover_answer: str) -> None:
    server = FakeMcp(eras={"handshake"})

    async def handler(request: HttpRequest) -> MockResponse:
        if discover_answer == "non-json-400" and b'"server/discover"' in request.body:
            return plain_400(None)
        return await server(request)

    conn, _ = connect(handler)
    await conn.request("tools/call", {"name": "echo", "arguments": {}}, timeout=5)
    assert server.methods()[-3:] == ["initialize", "notifications/initialized", "tools/call"]
    assert conn.protocol_version == "2025-11-25"


async def test_handshake_choice_never_probes_and_modern_choice_never_falls_back() -> None:
    server = FakeMcp(eras={"handshake", "modern"})
    conn, _ = connect(server, protocol="handshake")
    await conn.request("tools/call", {"name": "echo", "arguments": {}}, timeout=5)
    assert server.methods() == ["initialize", "notifications/initialized", "tools/call"]

    old = FakeMcp(eras={"handshake"})
    conn, _ = connect(old, protocol=MODERN)
    with pytest.raises(UpstreamNotSent, match="2026-07-28"):
        await conn.request("tools/call", {"name": "echo", "arguments": {}}, timeout=5)
    assert old.methods() == ["server/discover"]


async def test_a_failed_negotiation_fails_its_waiters_alike_and_is_tried_again_later() -> None:
    server = FakeMcp(eras={"handshake"})
    refuse = True
    gate = anyio.Event()

    async def handler(request: HttpRequest) -> MockResponse:
        if b'"initialize"' in request.body and refuse:
            await gate.wait()
            return rpc_error(1, -32603, "not ready")
        return await server(request)

    conn, transport = connect(handler, protocol="handshake")
    errors: list[BaseException] = []

    async def call() -> None:
        try:
            await conn.request("tools/call", {"name": "echo", "arguments": {}}, timeout=5)
        except UpstreamNotSent as exc:
            errors.append(exc)

    async with anyio.create_task_group() as task_group:
        for _ in range(3):
            task_group.start_soon(call)
        await anyio.wait_all_tasks_blocked()
        gate.set()
    assert len(errors) == 3 and all("initialize refused" in str(e) for e in errors)
    assert [r.body.count(b'"initialize"') for r in transport.requests] == [1]  # one attempt for all three

    refuse = False
    assert (await conn.request("tools/call", {"name": "echo", "arguments": {}}, timeout=5))["isError"] is False


async def test_a_hung_negotiation_is_not_sent_within_the_connect_timeout() -> None:
    async def handler(request: HttpRequest) -> MockResponse:
        await anyio.sleep_forever()
        raise AssertionError

    conn, _ = connect(handler, connect_timeout=0.2)
    with anyio.fail_after(3):
        with pytest.raises(UpstreamNotSent, match="handshake failed: no answer to server/discover within 0.2 s"):
            await conn.request("tools/call", {"name": "w", "arguments": {}}, timeout=30)


async def test_unreachable_upstream_is_not_sent() -> None:
    def handler(request: HttpRequest) -> MockResponse:
        raise RequestNotSent("cannot connect to upstream.test:80: connection refused")

    conn, _ = connect(handler)
    with pytest.raises(UpstreamNotSent, match="connection refused"):
        await conn.request("tools/call", {"name": "w", "arguments": {}}, timeout=5)


async def test_session_lost_reinitializes_once_for_concurrent_calls() -> None:
    server = FakeMcp(eras={"handshake"})
    conn, _ = connect(server, protocol="handshake")
    await conn.request("tools/call", {"name": "echo", "arguments": {}}, timeout=5)
    server.forget_sessions()  # the upstream restarted

    results: list[dict[str, Any]] = []

    async def call(i: int) -> None:
        results.append(await conn.request("tools/call", {"name": "echo", "arguments": {"i": i}}, timeout=5))

    async with anyio.create_task_group() as task_group:
        for i in range(4):
            task_group.start_soon(call, i)
    assert len(results) == 4
    assert server.methods().count("initialize") == 2  # the first one, and one re-initialize
    assert server.sessions == {"s2"}
    assert server.methods().count("tools/call") <= 1 + 4 + 4  # a lost call is resent at most once


async def test_session_lost_twice_is_not_sent() -> None:
    server = FakeMcp(eras={"handshake"})

    async def handler(request: HttpRequest) -> MockResponse:
        if b'"tools/call"' in request.body:
            server.received.append((request, None))
            return MockResponse(404)
        return await server(request)

    conn, _ = connect(handler, protocol="handshake")
    with pytest.raises(UpstreamNotSent, match="404"):
        await conn.request("tools/call", {"name": "echo", "arguments": {}}, timeout=5)
    assert server.methods().count("initialize") == 2


async def test_initialize_broken_after_sending_is_still_not_sent_for_the_call() -> None:
    from gateway.upstreams.mock_transport import RequestMaybeSent

    def handler(request: HttpRequest) -> MockResponse:
        raise RequestMaybeSent("connection reset")

    conn, _ = connect(handler, protocol="handshake")
    with pytest.raises(UpstreamNotSent, match="handshake failed"):
        await conn.request("tools/call", {"name": "echo", "arguments": {}}, timeout=5)
    with pytest.raises(UpstreamNotSent):
        await conn.request("tools/call", {"name": "echo", "arguments": {}}, timeout=5)
    assert not isinstance(UpstreamNotSent("x", "y"), UpstreamInterrupted)
