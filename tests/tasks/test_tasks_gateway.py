"""Tasks through a real `dex-gateway serve` (issue 17), with real upstreams:

* `t`: examples/servers/tasks_server.py over stateless Streamable HTTP, negotiated on 2026-07-28
  (the tasks extension: the upstream decides per call);
* `s`: the same server over stdio, on the handshake era (2025-11-25 core tasks, taskSupport listed);
* `ev`: @modelcontextprotocol/server-everything over stdio (`simulate-research-query`: taskSupport
  required).

Clients: the official SDK client (its dispatcher and era stamp; the SDK has no task helpers) and
raw JSON-RPC POSTs.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.support.gateway import RunningGateway, http_upstream, start_gateway, stdio_upstream, write_config
from tests.support.raw_sessions import StreamListener, open_session, sse_messages
from tests.support.servers import read_executions, start_http_server
from tests.support.everything import require_everything
from tests.tasks.tasks_support import (
    HANDSHAKE, MODERN, everything_http, everything_stdio, post, result_of, sdk_raw, task_id_of, wait_task,
)

pytestmark = pytest.mark.anyio


class Setup:
    def __init__(self, gateway: RunningGateway, state: Path, upstream_url: str) -> None:
        self.gateway = gateway
        self.url = gateway.url
        self.state = state  # the HTTP tasks_server's state dir (its executions log)
        self.upstream_url = upstream_url


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    require_everything()
    root = tmp_path_factory.mktemp("tasks")
    with start_http_server("tasks_server", state_dir=root / "t") as upstream:
        config = write_config(root, {"upstreams": [
            http_upstream("t", upstream.url),
            stdio_upstream("s", "tasks_server", state_dir=root / "s"),
            everything_stdio("ev", keyless_writes="pass"),
        ]})
        with start_gateway(config) as gateway:
            yield Setup(gateway, root / "t", upstream.url)


def _client(url: str, mode: str) -> Client:
    http = httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=120))
    return Client(streamable_http_client(url, http_client=http), mode=mode, cache=None, read_timeout_seconds=60)


# -- the official SDK client -------------------------------------------------------------------


@pytest.mark.parametrize("tool", ["t__slow_compute", "s__slow_compute"])
async def test_2025_task_param_then_get_and_result_with_the_sdk_client(setup: Setup, tool: str) -> None:
    async with _client(setup.url, "legacy") as client:
        assert client.server_capabilities.tasks is not None
        raw = await sdk_raw(client, "tools/call", {"name": tool, "arguments": {"seconds": 1, "label": "sdk"},
                                                   "task": {"ttl": 60_000}})
        created = types.CreateTaskResult.model_validate(raw, by_name=False)
        assert created.task.status == "working" and created.task.ttl == 60_000
        got = types.GetTaskResult.model_validate(await sdk_raw(client, "tasks/get", {"taskId": created.task.task_id}),
                                                 by_name=False)
        assert got.task_id == created.task.task_id
        result = types.CallToolResult.model_validate(
            await sdk_raw(client, "tasks/result", {"taskId": created.task.task_id}), by_name=False)
        assert result.content[0].text == "computed sdk in 1 s"  # type: ignore[union-attr]
        assert (result.meta or {})["io.modelcontextprotocol/related-task"] == {"taskId": created.task.task_id}
        listed = types.ListTasksResult.model_validate(await sdk_raw(client, "tasks/list", {}), by_name=False)
        assert created.task.task_id in [t.task_id for t in listed.tasks]


async def test_2026_extension_task_polled_to_completion_with_the_sdk_client(setup: Setup) -> None:
    async with _client(setup.url, MODERN) as client:
        assert client.protocol_version == MODERN
        created = await sdk_raw(client, "tools/call", {"name": "t__slow_compute", "arguments": {"seconds": 1}})
        assert created["resultType"] == "task" and isinstance(created["ttlMs"], int), created
        deadline = time.monotonic() + 20
        while True:
            task = await sdk_raw(client, "tasks/get", {"taskId": created["taskId"]})
            if task["status"] == "completed" or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert task["status"] == "completed" and task["resultType"] == "complete"
        assert task["result"]["content"][0]["text"] == "computed  in 1 s"
        assert "io.modelcontextprotocol/related-task" not in (task["result"].get("_meta") or {})
        # Without the extension: a plain answer (the upstream decides, and is not asked for a task).
        plain = await sdk_raw(client, "tools/call", {"name": "t__slow_compute", "arguments": {"seconds": 0}},
                              extension=False)
        assert plain["resultType"] == "complete" and plain["content"][0]["text"].startswith("computed")


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_server_everything_simulate_research_query_completes_as_a_task(
    setup: Setup, tmp_path: Path, transport: str
) -> None:
    """`simulate-research-query` (taskSupport: required, ~4 s) behind the gateway, called with a
    task by the official SDK client (tasks/get while it runs, tasks/result for the end)."""
    if transport == "stdio":
        url, stack = setup.url, None
        tool = "ev__simulate-research-query"
    else:
        stack = everything_http()
        upstream_url = stack.__enter__()
        config = write_config(tmp_path, {"upstreams": [http_upstream("evh", upstream_url, keyless_writes="pass")]})
        gateway_cm = start_gateway(config)
        url = gateway_cm.__enter__().url
        tool = "evh__simulate-research-query"
    try:
        async with _client(url, "legacy") as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert tools[tool].execution is not None and tools[tool].execution.task_support == "required"
            started = time.monotonic()
            raw = await sdk_raw(client, "tools/call", {"name": tool, "arguments": {"topic": "tides"},
                                                       "task": {"ttl": 120_000}})
            task_id = types.CreateTaskResult.model_validate(raw, by_name=False).task.task_id
            statuses = set()
            while time.monotonic() - started < 30:
                got = types.GetTaskResult.model_validate(await sdk_raw(client, "tasks/get", {"taskId": task_id}),
                                                         by_name=False)
                statuses.add(got.status)
                if got.status in ("completed", "failed", "cancelled"):
                    break
                time.sleep(0.3)
            assert "working" in statuses and got.status == "completed", (statuses, got)
            result = types.CallToolResult.model_validate(await sdk_raw(client, "tasks/result", {"taskId": task_id}),
                                                         by_name=False)
            assert not result.is_error and "tides" in result.content[0].text  # type: ignore[union-attr]
            # A plain client (no task) gets the final result too, progress relayed while it runs.
            seen: list[str] = []

            async def progress(value: float, total: float | None, message: str | None) -> None:
                seen.append(message or "")

            plain = await client.call_tool(tool, {"topic": "waves"}, progress_callback=progress)
            assert not plain.is_error and "waves" in plain.content[0].text  # type: ignore[union-attr]
            assert seen, "no progress reached the plain client"
    finally:
        if stack is not None:
            gateway_cm.__exit__(None, None, None)
            stack.__exit__(None, None, None)


# -- plain clients, cancel, TTL, the fence -----------------------------------------------------


@pytest.mark.parametrize("era", [HANDSHAKE, MODERN])
@pytest.mark.parametrize("upstream", ["t", "s"])
async def test_plain_call_of_a_task_required_tool_gets_its_result_with_progress(
    setup: Setup, era: str, upstream: str
) -> None:
    async with _client(setup.url, "legacy" if era == HANDSHAKE else MODERN) as client:
        seen: list[str] = []

        async def progress(value: float, total: float | None, message: str | None) -> None:
            seen.append(message or "")

        result = await client.call_tool(f"{upstream}__research", {"topic": "moss", "seconds": 1},
                                        progress_callback=progress)
        assert not result.is_error and "Research report on moss" in result.content[0].text  # type: ignore[union-attr]
        assert any("moss" in m for m in seen), seen


@pytest.mark.parametrize("era", [HANDSHAKE, MODERN])
def test_cancel_reaches_the_upstream_task_and_is_idempotent(setup: Setup, era: str) -> None:
    label = f"cancel-{uuid.uuid4().hex[:6]}"
    params: dict[str, Any] = {"name": "t__slow_compute", "arguments": {"seconds": 60, "label": label}}
    if era == HANDSHAKE:
        params["task"] = {"ttl": 120_000}
    task_id = task_id_of(result_of(post(setup.url, "tools/call", params, era=era)))
    wait_task(setup.url, task_id, era=era, until=("working",))
    deadline = time.monotonic() + 10  # until the upstream's own task is running
    while not any(t["status"] == "working" for t in result_of(post(setup.upstream_url, "tasks/list", {}, era=HANDSHAKE))["tasks"]):
        assert time.monotonic() < deadline, "the upstream never started its task"
        time.sleep(0.05)
    first = result_of(post(setup.url, "tasks/cancel", {"taskId": task_id}, era=era))
    again = result_of(post(setup.url, "tasks/cancel", {"taskId": task_id}, era=era))
    if era == HANDSHAKE:
        assert first["status"] == "cancelled" and again["status"] == "cancelled"
    else:
        assert first["resultType"] == "complete" and "taskId" not in first and again["resultType"] == "complete"
    assert wait_task(setup.url, task_id, era=era)["status"] == "cancelled"
    # The upstream's own task was cancelled too (asked directly, 2025 tasks/list).
    deadline = time.monotonic() + 10
    while True:
        upstream_tasks = result_of(post(setup.upstream_url, "tasks/list", {}, era=HANDSHAKE))["tasks"]
        if not any(t["status"] == "working" for t in upstream_tasks) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert not any(t["status"] == "working" for t in upstream_tasks), upstream_tasks


def test_ttl_expiry_ends_the_task_and_it_is_gone(setup: Setup) -> None:
    """The advertised ttl is the promise (docs/tasks.md): past it the task is stopped and unknown."""
    params = {"name": "s__slow_compute", "arguments": {"seconds": 30}, "task": {"ttl": 1500}}
    task_id = task_id_of(result_of(post(setup.url, "tools/call", params, era=HANDSHAKE)))
    time.sleep(2.0)
    for method in ("tasks/get", "tasks/result", "tasks/cancel"):
        status, message = post(setup.url, method, {"taskId": task_id}, era=HANDSHAKE)
        assert message["error"]["code"] == -32602 and "ttl (1500 ms) has passed" in message["error"]["message"], message


@pytest.mark.parametrize("era", [HANDSHAKE, MODERN])
def test_a_retry_with_the_same_key_gets_the_same_task_and_one_upstream_task(setup: Setup, era: str) -> None:
    key = f"tasks/{uuid.uuid4().hex[:8]}/1"
    params: dict[str, Any] = {"name": "t__slow_write", "arguments": {"seconds": 1, "label": key}}
    if era == HANDSHAKE:
        params["task"] = {"ttl": 60_000}
    first = task_id_of(result_of(post(setup.url, "tools/call", params, era=era, key=key)))
    second = task_id_of(result_of(post(setup.url, "tools/call", params, era=era, key=key)))
    assert first == second
    # A plain retry with the key (a client that lost the task id) waits for the same task's end.
    plain = {k: v for k, v in params.items() if k != "task"}
    result = result_of(post(setup.url, "tools/call", plain, era=era, key=key, extension=False))
    assert result["content"][0]["text"] == f"computed {key} in 1 s"
    assert wait_task(setup.url, first, era=era)["status"] == "completed"
    # The same key with other arguments is refused (the fence's rule), and nothing runs.
    other = {**plain, "arguments": {"seconds": 2, "label": key}}
    refused = result_of(post(setup.url, "tools/call", other, era=era, key=key, extension=False))
    assert refused["isError"] is True and refused["_meta"]["io.superdurable.dex/outcome"] == "rejected"
    assert len(read_executions(setup.state, key=key)) == 1


def test_2026_input_required_is_carried_and_answered_with_tasks_update(setup: Setup) -> None:
    key = f"tasks/{uuid.uuid4().hex[:8]}/1"
    task_id = task_id_of(result_of(post(setup.url, "tools/call", {"name": "t__confirm_delete",
                                                                   "arguments": {"filename": "a.txt"}}, key=key)))
    task = wait_task(setup.url, task_id, until=("input_required",))
    [(request_key, request)] = task["inputRequests"].items()
    assert request["method"] == "elicitation/create"
    ack = result_of(post(setup.url, "tasks/update", {"taskId": task_id, "inputResponses": {
        request_key: {"action": "accept", "content": {"confirm": True}}}}))
    assert ack["resultType"] == "complete" and "status" not in ack
    done = wait_task(setup.url, task_id)
    assert done["status"] == "completed" and done["result"]["content"][0]["text"] == "deleted a.txt"


def test_2026_task_methods_follow_the_extension_rules(setup: Setup) -> None:
    task_id = task_id_of(result_of(post(setup.url, "tools/call", {"name": "t__slow_compute",
                                                                   "arguments": {"seconds": 5}})))
    status, message = post(setup.url, "tasks/get", {"taskId": task_id}, extension=False)
    assert message["error"]["code"] == -32021
    assert message["error"]["data"]["requiredCapabilities"]["extensions"] == {"io.modelcontextprotocol/tasks": {}}
    status, message = post(setup.url, "tasks/get", {"taskId": task_id}, headers={"mcp-name": "another-task"})
    assert message["error"]["code"] == -32020 and status == 400
    for method in ("tasks/result", "tasks/list"):
        assert post(setup.url, method, {"taskId": task_id})[1]["error"]["code"] == -32601
    assert post(setup.url, "tasks/get", {"taskId": "no-such-task"})[1]["error"]["code"] == -32602
    post(setup.url, "tasks/cancel", {"taskId": task_id})
    # A sync-only tool stays sync, even with the legacy `task` param.
    greet = result_of(post(setup.url, "tools/call", {"name": "t__greet", "arguments": {"name": "x"},
                                                      "task": {"ttl": 1000}}))
    assert greet["resultType"] == "complete" and greet["content"][0]["text"] == "Hello, x!"


def test_discover_and_initialize_advertise_tasks(setup: Setup) -> None:
    discovered = result_of(post(setup.url, "server/discover", {}))
    assert discovered["capabilities"]["extensions"] == {"io.modelcontextprotocol/tasks": {}}
    assert "tasks" not in discovered["capabilities"]
    init = result_of(post(setup.url, "initialize", {"protocolVersion": HANDSHAKE, "capabilities": {},
                                                    "clientInfo": {"name": "t", "version": "0"}}, era=HANDSHAKE))
    assert set(init["capabilities"]["tasks"]) >= {"list", "cancel", "requests"}
    # Every tool can run as a task on the handshake era; a required one says so.
    tools = {t["name"]: t for t in result_of(post(setup.url, "tools/list", {}, era=HANDSHAKE))["tools"]}
    assert tools["s__research"]["execution"] == {"taskSupport": "required"}
    assert tools["t__greet"]["execution"] == {"taskSupport": "optional"}
    modern = result_of(post(setup.url, "tools/list", {}))["tools"]
    assert all("execution" not in t for t in modern)


async def test_sdk_client_cannot_see_another_era_error(setup: Setup) -> None:
    """A 2025 task of an unknown id: -32602 through the SDK client."""
    async with _client(setup.url, "legacy") as client:
        with pytest.raises(MCPError) as caught:
            await sdk_raw(client, "tasks/get", {"taskId": "missing"})
        assert caught.value.error.code == -32602


def test_a_stateful_session_is_told_of_its_tasks_status(setup: Setup, tmp_path: Path) -> None:
    """2025-11-25 on a stateful gateway: the session that created a task gets
    `notifications/tasks/status` on its standalone stream as the task changes and when it ends;
    another session is told nothing. Raw HTTP: the SDK 2.3 client drops this notification (its
    2025-11-25 method table lacks it), so it cannot be the witness here."""
    config = write_config(tmp_path, {"server": {"stateful": True}, "upstreams": [http_upstream("t", setup.upstream_url)]})
    with start_gateway(config) as gateway, httpx.Client(timeout=30) as http:
        creator, other = open_session(http, gateway.url), open_session(http, gateway.url)
        created = http.post(gateway.url, headers=creator, json={
            "jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "t__slow_compute", "arguments": {"seconds": 1}, "task": {"ttl": 60_000}}})
        task = next(m for m in sse_messages(created.text) if m.get("id") == 2)["result"]["task"]
        assert task["status"] == "working"
        listener = StreamListener(gateway.url, creator, until='"completed"', seconds=15).start()
        untold = StreamListener(gateway.url, other, until=None, seconds=1).start().join()
        listener.join()
        told = listener.notifications("notifications/tasks/status")
    assert told and all(p["taskId"] == task["taskId"] for p in told), told
    assert [p["status"] for p in told][-1] == "completed" and [p["status"] for p in told].count("completed") == 1, told
    for params in told:  # each one a valid 2025-11-25 Task
        types.TaskStatusNotificationParams.model_validate(params, by_name=False)
    assert told[-1]["ttl"] == 60_000 and told[-1]["createdAt"] == task["createdAt"]
    assert "notifications/tasks/status" not in untold


def test_a_session_that_asked_tasks_get_is_told_of_the_tasks_status(setup: Setup, tmp_path: Path) -> None:
    """A 2025-11-25 session that asked `tasks/get` of a task it did not create (its principal's:
    no other is answered) is told of the task's changes from then on, its end included."""
    config = write_config(tmp_path, {"server": {"stateful": True}, "upstreams": [http_upstream("t", setup.upstream_url)]})
    with start_gateway(config) as gateway, httpx.Client(timeout=30) as http:
        creator, asker = open_session(http, gateway.url), open_session(http, gateway.url)
        created = http.post(gateway.url, headers=creator, json={
            "jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "t__slow_compute", "arguments": {"seconds": 2}, "task": {"ttl": 60_000}}})
        task_id = next(m for m in sse_messages(created.text) if m.get("id") == 2)["result"]["task"]["taskId"]
        asked = http.post(gateway.url, headers=asker, json={
            "jsonrpc": "2.0", "id": 3, "method": "tasks/get", "params": {"taskId": task_id}})
        assert next(m for m in sse_messages(asked.text) if m.get("id") == 3)["result"]["status"] == "working"
        listener = StreamListener(gateway.url, asker, until='"completed"', seconds=15).start()
        listener.join()
    told = [p["status"] for p in listener.notifications("notifications/tasks/status") if p["taskId"] == task_id]
    assert told[-1:] == ["completed"], listener.text
