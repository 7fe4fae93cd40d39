"""An upstream request the caller gives up on is cancelled at the upstream; re-sends back off.

`UpstreamSession` over the in-memory `MockTransport`: on the handshake era a cancelled (or timed
out) request is followed by `notifications/cancelled` with its id, on the session; on 2026-07-28
closing the response stream is the cancellation and nothing more is sent. `resend_delay` is the
jittered wait before an interrupted attempt is sent again.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from gateway.config.model import StdioUpstreamConfig
from gateway.errors import UpstreamInterrupted
from gateway.upstreams.session import UpstreamSession
from tests.upstreams.sessions import http_session
from gateway.upstreams.mock_transport import MockResponse, MockTransport
from gateway.upstreams.transport import HttpRequest
from gateway.upstreams.upstream import resend_delay

pytestmark = pytest.mark.anyio
URL = "http://upstream.test/mcp"


def _server(era: str) -> tuple[Any, list[dict[str, Any]]]:
    seen: list[dict[str, Any]] = []

    async def handler(request: HttpRequest) -> MockResponse:
        message = json.loads(request.body or b"{}")
        seen.append({**message, "session": request.headers.get("mcp-session-id")})
        method = message.get("method")
        if method == "server/discover":
            if era == "handshake":
                return MockResponse.json({"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32601, "message": "no"}})
            return MockResponse.json({"jsonrpc": "2.0", "id": message["id"], "result": {"supportedVersions": [era]}})
        if method == "initialize":
            return MockResponse.json({"jsonrpc": "2.0", "id": message["id"], "result": {"protocolVersion": "2025-11-25"}},
                                     headers={"mcp-session-id": "s-1"})
        if method == "tools/call":
            await anyio.sleep_forever()
        return MockResponse(202)

    return handler, seen


@pytest.mark.parametrize("era", ["handshake", "2026-07-28"])
async def test_a_cancelled_request_is_cancelled_upstream(era: str) -> None:
    handler, seen = _server(era)
    conn = http_session("up", URL, headers={}, protocol="auto", connect_timeout=5, transport=MockTransport(handler))
    with anyio.move_on_after(0.3):
        await conn.request("tools/call", {"name": "slow", "arguments": {}}, timeout=30)
    with anyio.fail_after(5):
        while era == "handshake" and not any(m.get("method") == "notifications/cancelled" for m in seen):
            await anyio.sleep(0.01)
    (call,) = [m for m in seen if m.get("method") == "tools/call"]
    cancels = [m for m in seen if m.get("method") == "notifications/cancelled"]
    if era == "handshake":
        assert [c["params"]["requestId"] for c in cancels] == [call["id"]]
        assert cancels[0]["session"] == "s-1"
    else:
        assert cancels == []  # 2026-07-28: the closed response stream is the cancellation
    await conn.aclose()


async def test_a_timed_out_request_is_interrupted_and_left_to_finish_upstream() -> None:
    """Our own timeout is not the caller going away: a write is sent again with the same key next,
    and the upstream should finish the first attempt (its own fence answers the resend)."""
    handler, seen = _server("handshake")
    conn = http_session("up", URL, headers={}, protocol="handshake", connect_timeout=5, transport=MockTransport(handler))
    with pytest.raises(UpstreamInterrupted, match="no answer within 0.2 s"):
        await conn.request("tools/call", {"name": "slow", "arguments": {}}, timeout=0.2)
    assert [m for m in seen if m.get("method") == "tools/call"]
    assert [m for m in seen if m.get("method") == "notifications/cancelled"] == []
    await conn.aclose()


def test_resend_delay_is_jittered_and_bounded() -> None:
    config = StdioUpstreamConfig(name="a", transport="stdio", command="x", resend_backoff_seconds=0.1)
    firsts = [resend_delay(config, 1) for _ in range(200)]
    assert all(0 <= d <= 0.1 for d in firsts) and len(set(firsts)) > 150
    assert all(0 <= resend_delay(config, 2) <= 0.2 for _ in range(200))
    assert max(resend_delay(config, 10) for _ in range(200)) <= 1.0  # at most 10 x the base
    none = StdioUpstreamConfig(name="a", transport="stdio", command="x", resend_backoff_seconds=0)
    assert resend_delay(none, 2) == 0
