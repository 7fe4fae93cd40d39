"""The stateless tools/call fast path (gateway/front/fastpath.py) on the wire: JSON when nothing needs
streaming, SSE once a progress notification comes, the same answers as the SDK path, and every
other request still handled by the SDK."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.gateway import start_gateway, stdio_upstream, write_config

HEADERS = {
    "accept": "application/json, text/event-stream",
    "content-type": "application/json",
    "mcp-protocol-version": "2025-11-25",
}


def call(name: str, arguments: dict[str, Any], meta: dict[str, Any] | None = None, rid: int = 1) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if meta:
        params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}


def sse_messages(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[5:].strip()) for line in text.splitlines() if line.startswith("data:") and line[5:].strip()]


def answer_of(response: httpx.Response) -> tuple[str, list[dict[str, Any]]]:
    kind = response.headers["content-type"].split(";")[0]
    messages = [response.json()] if kind == "application/json" else sse_messages(response.text)
    return kind, messages


@pytest.mark.parametrize("fast", [True, False], ids=["fast-path", "sdk-path"])
def test_same_answers_on_both_paths(tmp_path: Path, fast: bool) -> None:
    config = write_config(
        tmp_path,
        {
            "server": {"fast_tool_calls": fast},
            "upstreams": [stdio_upstream("pay", "dex_server", state_dir=tmp_path / "pay")],
        },
    )
    with start_gateway(config) as gateway, httpx.Client(timeout=30) as http:
        plain = http.post(gateway.url, headers=HEADERS, json=call("pay__get_balance", {"account": "acme"}))
        kind, messages = answer_of(plain)
        assert plain.status_code == 200
        # Nothing to stream: the fast path answers JSON; the SDK (SSE mode) answers SSE.
        assert kind == ("application/json" if fast else "text/event-stream")
        assert messages[-1]["result"]["content"] == [{"type": "text", "text": "balance of acme: 1000.00 EUR"}]
        assert messages[-1]["result"]["isError"] is False

        progress = http.post(
            gateway.url, headers=HEADERS,
            json=call("pay__long_report", {"steps": 3}, meta={"progressToken": "tok-7"}, rid=2),
        )
        kind, messages = answer_of(progress)
        assert kind == "text/event-stream"
        notes = [m for m in messages if m.get("method") == "notifications/progress"]
        assert [n["params"]["progress"] for n in notes] == [1, 2, 3]
        assert all(n["params"]["progressToken"] == "tok-7" for n in notes)
        assert messages[-1]["id"] == 2 and "result" in messages[-1]

        unknown = http.post(gateway.url, headers=HEADERS, json=call("pay__nope", {}, rid=3))
        _, messages = answer_of(unknown)
        assert messages[-1]["error"]["code"] == -32602 and "pay__nope" in messages[-1]["error"]["message"]

        keyless = http.post(gateway.url, headers=HEADERS, json=call("pay__send_payment", {"to": "x", "amount": 1}, rid=4))
        _, messages = answer_of(keyless)
        result = messages[-1]["result"]
        assert result["isError"] is True and result["_meta"]["io.superdurable.dex/outcome"] == "rejected"

        # Not a tools/call: the SDK answers it on either setting.
        listed = http.post(gateway.url, headers=HEADERS, json={"jsonrpc": "2.0", "id": 5, "method": "tools/list"})
        _, messages = answer_of(listed)
        assert any(t["name"] == "pay__refund" for t in messages[-1]["result"]["tools"])

        # Malformed params (no tool name): invalid params, for this request, on either entry.
        bad = http.post(gateway.url, headers=HEADERS, json=NAMELESS_CALL)
        _, messages = answer_of(bad)
        assert messages[-1]["id"] == 6 and messages[-1]["error"]["code"] == -32602, messages[-1]


NAMELESS_CALL = {"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"arguments": {}}}


@pytest.mark.parametrize("fast", [True, False], ids=["fast-path", "sdk-path"])
def test_malformed_params_error_names_the_problem(tmp_path: Path, fast: bool) -> None:
    config = write_config(
        tmp_path,
        {"server": {"fast_tool_calls": fast}, "upstreams": [stdio_upstream("pay", "dex_server", state_dir=tmp_path / "pay")]},
    )
    with start_gateway(config) as gateway, httpx.Client(timeout=30) as http:
        _, messages = answer_of(http.post(gateway.url, headers=HEADERS, json=NAMELESS_CALL))
    error = messages[-1]["error"]
    assert error["code"] == -32602
    assert error["message"] == "tools/call: params.name must be a non-empty string", error
