"""Tasks against the security issue's findings, through a real `dex-gateway serve` and the real
examples/servers/tasks_server.py over stateless Streamable HTTP (`t`):

* a task is a call: it passes the rate limit when it is created (-32029 there, no task), keyed
  or not; a keyless write the policy refuses is answered as a plain call's refusal, no task;
* a principal's stored task results are bounded (`tasks.max_result_bytes_per_principal`);
* `tasks/update` errors name the upstream, never its address or an exception class;
* on 2026-07-28 every task method that names a task carries `Mcp-Name` (else -32020);
* a task's advertised ttl is the promise: past it the task is gone.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gateway.test_gateway_http import sha
from tests.support.gateway import RunningGateway, http_upstream, start_gateway, write_config
from tests.support.servers import read_executions, spawn_http_server, start_http_server
from tests.tasks.tasks_support import HANDSHAKE, MODERN, post, result_of, task_id_of, wait_task

RATE_LIMITED, HEADER_MISMATCH = -32029, -32020
TOKENS = {"limited": "tasks-limited-token", "budget": "tasks-budget-token", "free": "tasks-free-token",
          "burst": "tasks-burst-token"}
BUDGET = 150_000


class Setup:
    def __init__(self, gateway: RunningGateway, state: Path) -> None:
        self.gateway = gateway
        self.url = gateway.url
        self.state = state


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("tasksec")
    with start_http_server("tasks_server", state_dir=root / "t") as upstream:
        config = write_config(root, {
            "auth": {"tokens": [
                {"principal": "limited", "token_sha256": sha(TOKENS["limited"]),
                 "rate_limit": {"per_second": 1, "burst": 1}},
                {"principal": "budget", "token_sha256": sha(TOKENS["budget"])},
                {"principal": "free", "token_sha256": sha(TOKENS["free"])},
                {"principal": "burst", "token_sha256": sha(TOKENS["burst"])},
            ]},
            "tasks": {"max_result_bytes_per_principal": BUDGET},
            "upstreams": [http_upstream("t", upstream.url)],
        })
        with start_gateway(config) as gateway:
            yield Setup(gateway, root / "t")


def _error(reply: tuple[int, dict]) -> dict:
    status, message = reply
    assert "error" in message, f"HTTP {status}: {message}"
    return message["error"]


def _task_ids(setup: Setup, principal: str) -> list[str]:
    listed = result_of(post(setup.url, "tasks/list", {}, era=HANDSHAKE, token=TOKENS[principal]))
    return [t["taskId"] for t in listed["tasks"]]


def test_keyed_task_calls_pass_the_rate_limit_when_created(setup: Setup) -> None:
    """20 keyed task calls of a principal limited to 1/s: the bucket's burst and rate, the rest -32029."""
    run = uuid.uuid4().hex[:8]
    started = time.monotonic()
    replies = [post(setup.url, "tools/call", {"name": "t__slow_write", "arguments": {"seconds": 0, "label": f"{run}/{n}"}},
                    key=f"{run}/{n}", token=TOKENS["limited"]) for n in range(20)]
    elapsed = time.monotonic() - started
    admitted = [m for _, m in replies if "result" in m]
    refused = [m["error"] for _, m in replies if "error" in m]
    assert len(admitted) + len(refused) == 20
    assert 1 <= len(admitted) <= 1 + int(elapsed) + 1, (len(admitted), elapsed)
    assert all(e["code"] == RATE_LIMITED and e["data"]["limit"] == "principal" and e["data"]["sent"] is False
               for e in refused), refused
    assert "1 tools/call per second" in refused[0]["message"]
    for message in admitted:
        assert wait_task(setup.url, task_id_of(message["result"]), token=TOKENS["limited"])["status"] == "completed"
    time.sleep(0.5)
    sent = [r for r in read_executions(setup.state, tool="slow_write") if str(r.get("idempotency_key")).count(run)]
    assert len(sent) == len(admitted), sent  # the refused ones reached nothing


def test_a_keyless_task_call_over_the_limit_is_refused_not_a_task(setup: Setup) -> None:
    """Before: the task was created, its call refused inside it, the task `completed` with an
    internal error, and a traceback logged."""
    time.sleep(1.1)  # a full bucket
    mark = setup.gateway.log_mark()
    params = {"name": "t__slow_compute", "arguments": {"seconds": 0}, "task": {"ttl": 60_000}}
    first = result_of(post(setup.url, "tools/call", params, era=HANDSHAKE, token=TOKENS["limited"]))
    assert wait_task(setup.url, task_id_of(first), era=HANDSHAKE, token=TOKENS["limited"])["status"] == "completed"
    before = _task_ids(setup, "limited")
    error = _error(post(setup.url, "tools/call", params, era=HANDSHAKE, token=TOKENS["limited"]))
    assert error["code"] == RATE_LIMITED and "The call was not sent" in error["message"], error
    assert _task_ids(setup, "limited") == before  # no task was made
    log = "\n".join(setup.gateway.log.splitlines()[mark:])
    assert "Traceback" not in log and "failed inside the gateway" not in log, log


def test_a_keyless_write_refused_by_policy_is_answered_not_made_a_task(setup: Setup) -> None:
    """A write without a key is refused by the policy (keyless_writes: refuse), as a plain call is."""
    params = {"name": "t__slow_write", "arguments": {"seconds": 0, "label": "no-key"}, "task": {"ttl": 60_000}}
    result = result_of(post(setup.url, "tools/call", params, era=HANDSHAKE, token=TOKENS["free"]))
    assert "task" not in result, result
    assert result["isError"] is True and result["_meta"]["io.superdurable.dex/outcome"] == "rejected", result
    assert "idempotency key" in result["content"][0]["text"]
    before = _task_ids(setup, "free")
    result = result_of(post(setup.url, "tools/call", params, era=HANDSHAKE, token=TOKENS["free"]))
    assert "task" not in result and result["isError"] is True, result
    assert _task_ids(setup, "free") == before  # no task was made


def test_a_principal_over_its_result_budget_gets_no_new_task(setup: Setup) -> None:
    label = "x" * 100_000  # the tool's answer repeats it: a result of about 100 KB
    params = {"name": "t__slow_compute", "arguments": {"seconds": 0, "label": label}, "task": {"ttl": 60_000}}
    for _ in range(2):  # 0 then ~100 KB held: both under the 150 KB budget
        task_id = task_id_of(result_of(post(setup.url, "tools/call", params, era=HANDSHAKE, token=TOKENS["budget"])))
        assert wait_task(setup.url, task_id, era=HANDSHAKE, token=TOKENS["budget"])["status"] == "completed"
    error = _error(post(setup.url, "tools/call", params, era=HANDSHAKE, token=TOKENS["budget"]))
    assert error["code"] == RATE_LIMITED, error
    assert "tasks.max_result_bytes_per_principal" in error["message"] and str(BUDGET) in error["message"], error
    assert error["data"]["maxBytes"] == BUDGET and error["data"]["heldBytes"] >= 200_000, error
    # Another principal is not charged for it.
    free = result_of(post(setup.url, "tools/call", params, era=HANDSHAKE, token=TOKENS["free"]))
    assert wait_task(setup.url, task_id_of(free), era=HANDSHAKE, token=TOKENS["free"])["status"] == "completed"


def test_tasks_created_before_the_budget_filled_keep_no_result_past_it(setup: Setup) -> None:
    """Four ~100 KB tasks created at once (nothing held yet), ending one after another: the results
    are kept until the 150 KB budget is full (the one that crosses it included), the later ones fail
    saying why."""
    label = "y" * 100_000
    ids = [task_id_of(result_of(post(setup.url, "tools/call", {"name": "t__slow_compute", "arguments": {
        "seconds": 1 + n, "label": label}, "task": {"ttl": 60_000}}, era=HANDSHAKE, token=TOKENS["burst"])))
        for n in range(4)]
    ends = [wait_task(setup.url, task_id, era=HANDSHAKE, token=TOKENS["burst"]) for task_id in ids]
    assert [t["status"] for t in ends] == ["completed", "completed", "failed", "failed"], ends
    for task in ends[2:]:
        assert "its result" in task["statusMessage"] and "was not kept" in task["statusMessage"], task
        assert f"tasks.max_result_bytes_per_principal allows {BUDGET} bytes" in task["statusMessage"], task
    error = _error(post(setup.url, "tasks/result", {"taskId": ids[3]}, era=HANDSHAKE, token=TOKENS["burst"]))
    assert error["code"] == RATE_LIMITED and error["data"]["resultBytes"] > 100_000, error


@pytest.mark.parametrize("method", ["tasks/get", "tasks/update", "tasks/cancel"])
def test_2026_task_methods_need_the_mcp_name_header(setup: Setup, method: str) -> None:
    task_id = task_id_of(result_of(post(setup.url, "tools/call", {"name": "t__slow_compute", "arguments": {"seconds": 3}},
                                        token=TOKENS["free"])))
    params = {"taskId": task_id, **({"inputResponses": {}} if method == "tasks/update" else {})}
    status, message = post(setup.url, method, params, token=TOKENS["free"], name_header=False)
    assert status == 400 and message["error"]["code"] == HEADER_MISMATCH, (status, message)
    assert "mcp-name" in message["error"]["message"] and "taskId" in message["error"]["message"]
    assert wait_task(setup.url, task_id, token=TOKENS["free"], until=("working",))["taskId"] == task_id
    post(setup.url, "tasks/cancel", {"taskId": task_id}, token=TOKENS["free"])


def test_a_task_is_gone_at_its_advertised_ttl(setup: Setup) -> None:
    """Before: a completed task stayed readable for its ttl + 1 h."""
    params = {"name": "t__slow_compute", "arguments": {"seconds": 0}, "task": {"ttl": 1500}}
    created = result_of(post(setup.url, "tools/call", params, era=HANDSHAKE, token=TOKENS["free"]))
    assert created["task"]["ttl"] == 1500
    task_id = task_id_of(created)
    assert wait_task(setup.url, task_id, era=HANDSHAKE, token=TOKENS["free"])["status"] == "completed"
    time.sleep(max(0.0, 1.6 - (time.time() - _created_seconds(created))))
    for method in ("tasks/get", "tasks/result"):
        error = _error(post(setup.url, method, {"taskId": task_id}, era=HANDSHAKE, token=TOKENS["free"]))
        assert error["code"] == -32602 and "ttl" in error["message"], error
    listed = result_of(post(setup.url, "tasks/list", {}, era=HANDSHAKE, token=TOKENS["free"]))
    assert task_id not in [t["taskId"] for t in listed["tasks"]]


def _created_seconds(created: dict) -> float:
    from datetime import datetime

    return datetime.fromisoformat(created["task"]["createdAt"].replace("Z", "+00:00")).timestamp()


def test_tasks_update_errors_name_the_upstream_not_its_address(tmp_path: Path) -> None:
    upstream = spawn_http_server("tasks_server", state_dir=tmp_path / "u")
    try:
        config = write_config(tmp_path, {"upstreams": [http_upstream("u", upstream.url)]})
        with start_gateway(config) as gateway:
            key = f"tasks/{uuid.uuid4().hex[:8]}/1"
            task_id = task_id_of(result_of(post(gateway.url, "tools/call", {"name": "u__confirm_delete",
                                                                              "arguments": {"filename": "a.txt"}}, key=key)))
            task = wait_task(gateway.url, task_id, until=("input_required",))
            [request_key] = task["inputRequests"]
            upstream.stop()
            mark = gateway.log_mark()
            error = _error(post(gateway.url, "tasks/update", {"taskId": task_id, "inputResponses": {
                request_key: {"action": "accept", "content": {"confirm": True}}}}))
            assert error["message"].startswith("tasks/update: the task's upstream 'u' could not be reached"), error
            port = upstream.url.split(":")[-1].split("/")[0]
            for leak in ("127.0.0.1", port, "Error:", "Exception", "localhost"):
                assert leak not in error["message"], error
            line = gateway.wait_for_log(r"tasks/update to upstream task .* failed", since=mark).group(0)
            assert "u" in line  # the details are the operator's, in the log
    finally:
        upstream.stop()
