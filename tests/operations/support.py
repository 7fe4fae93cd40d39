"""Helpers of the operations tests: the ops upstream, raw JSON-RPC over HTTP, its event log."""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx

from tests.support.servers import REPO_ROOT

OPS_SERVER = Path(__file__).resolve().parent / "ops_server.py"
LOG_ENV = "OPS_SERVER_LOG"
KEY = "io.superdurable.dex/idempotencyKey"
HANDSHAKE = "2025-11-25"
ACCEPT = "application/json, text/event-stream"


def ops_upstream(name: str, log: Path, **options: Any) -> dict[str, Any]:
    """A `transport: stdio` upstream running tests/operations/ops_server.py."""
    return {"name": name, "transport": "stdio", "command": sys.executable, "args": [str(OPS_SERVER)],
            "env": {LOG_ENV: str(log)}, "cwd": str(REPO_ROOT), **options}


def tool_call(tool: str, arguments: Mapping[str, Any] | None = None, *, key: str | None = None,
              request_id: int = 1, meta: Mapping[str, Any] | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"name": tool, "arguments": dict(arguments or {})}
    m = dict(meta or {})
    if key is not None:
        m[KEY] = key
    if m:
        params["_meta"] = m
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


def new_key() -> str:
    return f"ops/{uuid.uuid4().hex[:12]}/1"


def headers(token: str | None = None, **extra: str) -> dict[str, str]:
    out = {"content-type": "application/json", "accept": ACCEPT, "mcp-protocol-version": HANDSHAKE, **extra}
    if token:
        out["authorization"] = f"Bearer {token}"
    return out


def last_message(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC message of a JSON or SSE answer (the last `data:` line of a stream)."""
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
        return json.loads(data[-1])
    return response.json()


def post(client: httpx.Client, url: str, message: Mapping[str, Any], **header_extra: str) -> dict[str, Any]:
    response = client.post(url, json=message, headers=headers(**header_extra))
    assert response.status_code in (200, 202), (response.status_code, response.text[:500])
    return last_message(response)


def events(log: Path, event: str | None = None, tool: str | None = None) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return [r for r in rows if (event is None or r["event"] == event) and (tool is None or r.get("tool") == tool)]


def wait_for(predicate: Any, timeout: float = 15.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)
