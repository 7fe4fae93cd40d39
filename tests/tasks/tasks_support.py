"""Helpers of the task tests: raw JSON-RPC POSTs of both eras, the official SDK client sending task
requests (the SDK has no task helpers), polling, and the upstreams (our tasks_server, and
@modelcontextprotocol/server-everything over stdio or loopback HTTP: tests/support/everything.py)."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import httpx
from mcp import Client

# server-everything helpers, where the task tests have always imported them from.
from tests.support.everything import EVERYTHING, everything_http, everything_stdio  # noqa: F401

KEY = "io.superdurable.dex/idempotencyKey"
OUTCOME = "io.superdurable.dex/outcome"
EXT = "io.modelcontextprotocol/tasks"
CAPS = "io.modelcontextprotocol/clientCapabilities"
HANDSHAKE, MODERN = "2025-11-25", "2026-07-28"
TERMINAL = ("completed", "failed", "cancelled")


def post(url: str, method: str, params: dict[str, Any], *, era: str = MODERN, extension: bool = True,
         key: str | None = None, token: str | None = None, headers: dict[str, str] | None = None,
         request_id: Any = 1, timeout: float = 60, name_header: bool = True,
         capabilities: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
    """One raw JSON-RPC request; (HTTP status, the final message) from a JSON or SSE answer.
    `name_header=False`: a 2026-07-28 request without its Mcp-Name header. `capabilities`: the
    2026-07-28 client's capabilities besides the tasks extension (e.g. `{"elicitation": {}}`)."""
    out = {"accept": "application/json, text/event-stream", "content-type": "application/json",
           "mcp-protocol-version": era}
    if token:
        out["authorization"] = f"Bearer {token}"
    params = dict(params)
    meta = dict(params.get("_meta") or {})
    if key:
        meta[KEY] = key
    if era == MODERN:
        out["mcp-method"] = method
        if method == "tools/call":
            out["mcp-name"] = params["name"]
        elif method.startswith("tasks/") and "taskId" in params and name_header:
            out["mcp-name"] = params["taskId"]
        meta["io.modelcontextprotocol/protocolVersion"] = era
        meta[CAPS] = {**(capabilities or {}), **({"extensions": {EXT: {}}} if extension else {})}
    if meta:
        params["_meta"] = meta
    out.update(headers or {})
    body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    deadline = time.monotonic() + 20
    while True:
        response = httpx.post(url, headers=out, content=json.dumps(body).encode(), timeout=timeout)
        # A gateway answers 503 until its lifespan has built everything (just after it listens).
        if response.status_code != 503 or b"gateway is starting" not in response.content or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    text = response.text
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        datas = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
        answers = [json.loads(d) for d in datas if d and '"id"' in d]
        return response.status_code, answers[-1]
    return response.status_code, json.loads(text)


def result_of(reply: tuple[int, dict[str, Any]]) -> dict[str, Any]:
    status, message = reply
    assert "result" in message, f"HTTP {status}: {message}"
    return message["result"]


def task_id_of(result: dict[str, Any]) -> str:
    task = result.get("task", result)
    return str(task["taskId"])


def wait_task(url: str, task_id: str, *, era: str = MODERN, until: tuple[str, ...] = TERMINAL, timeout: float = 30,
              token: str | None = None) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        task = result_of(post(url, "tasks/get", {"taskId": task_id}, era=era, token=token))
        if task["status"] in until or time.monotonic() > deadline:
            assert task["status"] in until, f"task {task_id} still {task['status']} after {timeout} s: {task}"
            return task
        time.sleep(0.1)


async def sdk_raw(client: Client, method: str, params: dict[str, Any], *, extension: bool = True) -> dict[str, Any]:
    """A request through the official SDK client's own dispatcher and era stamp (its typed methods
    know no tasks): on 2026-07-28 the `_meta` envelope and routing headers as the SDK writes them,
    plus the tasks extension in the client capabilities."""
    session = client.session
    data: dict[str, Any] = {"method": method, "params": dict(params)}
    opts: dict[str, Any] = {}
    session._stamp(data, opts)  # noqa: SLF001 - the SDK's own era stamp
    meta = data["params"].get("_meta")
    if isinstance(meta, dict) and CAPS in meta:
        meta[CAPS] = {**meta[CAPS], **({"extensions": {EXT: {}}} if extension else {})}
        if method.startswith("tasks/"):
            opts.setdefault("headers", {})["mcp-name"] = params["taskId"]
    return await session._dispatcher.send_raw_request(method, data["params"], opts)  # noqa: SLF001


def wait_upstream_task_stored(db: Path, task_id: str, timeout: float = 10) -> str:
    """The upstream task id of a gateway task, once the gateway stored it (its SQLite file)."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.closing(sqlite3.connect(db)) as conn:
            row = conn.execute("SELECT upstream_task_id FROM dex_tasks WHERE task_id = ?", (task_id,)).fetchone()
        if row is not None and row[0]:
            return str(row[0])
        assert time.monotonic() < deadline, f"task {task_id}: no upstream task id stored in {timeout} s"
        time.sleep(0.02)

