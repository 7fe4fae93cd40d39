"""SSE resumption of the stateful front (issue 13, SEP-1699): a 2025-11-25 session's POST stream starts
with a priming event (an id, no data, `retry:`); when the upstream ends its own stream mid-call (SSE
polling: the reference server's `test_reconnection`), the gateway ends its client's stream too, and
the client's GET with `Last-Event-ID` gets the answer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.interop.support import gateway_for, reference_http
from tests.support.gateway import http_upstream
from tests.support.sse import sse_events as events

pytestmark = pytest.mark.timeout(60)

HANDSHAKE = "2025-11-25"


def test_a_paused_upstream_stream_is_resumed_by_the_client(tmp_path: Path) -> None:
    with reference_http(handshake_only=True, state_dir=tmp_path / "reference") as url, \
            gateway_for(tmp_path, http_upstream("ref", url, prefix="", keyless_writes="pass")) as gateway, \
            httpx.Client(timeout=30) as http:
        headers = {"accept": "application/json, text/event-stream", "content-type": "application/json",
                   "mcp-protocol-version": HANDSHAKE}
        opened = http.post(gateway.url, headers=headers, json={
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": HANDSHAKE, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
        headers["mcp-session-id"] = opened.headers["mcp-session-id"]
        http.post(gateway.url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})

        call = http.post(gateway.url, headers=headers, json={
            "jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "test_reconnection", "arguments": {}}})
        first = events(call.text)
        assert first[0].get("id") and first[0].get("data", "") == "" and first[0].get("retry") == "1000", first
        answered: list[dict[str, Any]] = [json.loads(e["data"]) for e in first if e.get("data")]
        assert not any(m.get("id") == 2 for m in answered), "the stream should have ended before the answer"

        last_id = [e["id"] for e in first if "id" in e][-1]
        with http.stream("GET", gateway.url, headers={**headers, "accept": "text/event-stream",
                                                       "last-event-id": last_id}) as resumed:
            assert resumed.status_code == 200
            text = ""
            for chunk in resumed.iter_text():
                text += chunk
                if '"id":2' in text.replace(" ", ""):
                    break
        replies = [json.loads(e["data"]) for e in events(text) if e.get("data")]
        answer = next(m for m in replies if m.get("id") == 2)
        assert answer["result"]["content"][0]["text"] == "Reconnection test completed successfully."
