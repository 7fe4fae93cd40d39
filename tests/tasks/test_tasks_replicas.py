"""Tasks across replicas and crashes (issue 17, "Must show"), with real processes:

* two gateways sharing PostgreSQL: a task created on one is polled to its end on the other, and
  principal B never sees principal A's task;
* a gateway SIGKILLed while a task runs: after the restart the task still answers (taken over
  and completed for an upstream task of a stateless upstream; failed per the lost-task rule for a
  task whose upstream session died with the process), and the same key never starts a second
  upstream task.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.gateway import http_upstream, start_gateway, stdio_upstream, write_config
from tests.support.servers import RunningServer, read_executions, start_http_server, wait_for_executions
from tests.tasks.tasks_support import (
    HANDSHAKE, MODERN, OUTCOME, post, result_of, task_id_of, wait_task, wait_upstream_task_stored,
)

TOKENS = {"alice": "alice-task-token", "bob": "bob-task-token"}


def _sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _auth() -> dict[str, Any]:
    return {"tokens": [{"principal": p, "token_sha256": _sha(t)} for p, t in TOKENS.items()]}


@pytest.fixture
def upstream(tmp_path: Path) -> Iterator[RunningServer]:
    with start_http_server("tasks_server", state_dir=tmp_path / "upstream") as server:
        yield server


@pytest.mark.parametrize("era", [HANDSHAKE, MODERN])
def test_two_gateways_sharing_postgres_serve_the_same_task(tmp_path: Path, upstream: RunningServer, pg_url: str,
                                                           era: str) -> None:
    configs = [
        write_config(tmp_path / name, {"auth": _auth(), "upstreams": [http_upstream("t", upstream.url)],
                                       "fences": {"store": pg_url, "replica_id": name}})
        for name in ("a", "b")
    ]
    with start_gateway(configs[0]) as a, start_gateway(configs[1]) as b:
        key = f"replicas/{uuid.uuid4().hex[:8]}/1"
        params: dict[str, Any] = {"name": "t__slow_write", "arguments": {"seconds": 2, "label": key}}
        if era == HANDSHAKE:
            params["task"] = {"ttl": 60_000}
        task_id = task_id_of(result_of(post(a.url, "tools/call", params, era=era, key=key, token=TOKENS["alice"])))
        # The other replica knows it at once, and polls it to its end.
        assert result_of(post(b.url, "tasks/get", {"taskId": task_id}, era=era, token=TOKENS["alice"]))["taskId"] == task_id
        done = wait_task(b.url, task_id, era=era, token=TOKENS["alice"])
        assert done["status"] == "completed"
        if era == MODERN:
            assert done["result"]["content"][0]["text"] == f"computed {key} in 2 s"
        else:
            result = result_of(post(b.url, "tasks/result", {"taskId": task_id}, era=era, token=TOKENS["alice"]))
            assert result["content"][0]["text"] == f"computed {key} in 2 s"
        # The same key on the other replica: the same task, no second upstream task.
        again = task_id_of(result_of(post(b.url, "tools/call", params, era=era, key=key, token=TOKENS["alice"])))
        assert again == task_id and len(read_executions(upstream.state_dir, key=f"{_sha('alice')[:16]}/{key}")) == 1
        # Another principal: not found, on either replica, for every task method.
        for gateway in (a, b):
            for method in ("tasks/get", "tasks/cancel") + (("tasks/result",) if era == HANDSHAKE else ()):
                status, message = post(gateway.url, method, {"taskId": task_id}, era=era, token=TOKENS["bob"])
                assert message["error"]["code"] == -32602, (method, message)
        if era == HANDSHAKE:
            listed = result_of(post(b.url, "tasks/list", {}, era=era, token=TOKENS["bob"]))["tasks"]
            assert task_id not in [t["taskId"] for t in listed]


def test_sigkill_mid_task_stateless_upstream_task_is_taken_over(tmp_path: Path, upstream: RunningServer) -> None:
    """The gateway dies while its upstream (2026-07-28, stateless) task runs: after the restart the
    task is polled on from the stored upstream task id and completes; the key starts nothing new."""
    config = write_config(tmp_path, {"upstreams": [http_upstream("t", upstream.url)]})
    key = f"crash/{uuid.uuid4().hex[:8]}/1"
    params = {"name": "t__slow_write", "arguments": {"seconds": 4, "label": key}}
    with start_gateway(config) as gateway:
        task_id = task_id_of(result_of(post(gateway.url, "tools/call", params, key=key)))
        wait_for_executions(upstream.state_dir, 1, key=key)
        wait_upstream_task_stored(tmp_path / "fences.db", task_id)
        gateway.kill()
        gateway.start()
        done = wait_task(gateway.url, task_id, timeout=30)
        assert done["status"] == "completed", done
        assert done["result"]["content"][0]["text"] == f"computed {key} in 4 s"
        assert task_id_of(result_of(post(gateway.url, "tools/call", params, key=key))) == task_id
    assert len(read_executions(upstream.state_dir, key=key)) == 1


@pytest.mark.parametrize("effect", ["read", "non_idempotent_write"])
def test_sigkill_mid_task_session_bound_task_is_lost_per_the_rule(tmp_path: Path, effect: str) -> None:
    """A stdio upstream's task dies with the gateway (its session): after the restart the task is
    failed, with outcome unknown unless the tool is a read; the key never starts a second task."""
    state = tmp_path / "stdio"
    policies = {} if effect == "read" else {"s__slow_compute": {"effect": effect}}
    config = write_config(tmp_path, {"upstreams": [stdio_upstream("s", "tasks_server", state_dir=state,
                                                                  tool_policies=policies)]})
    key = f"crash/{uuid.uuid4().hex[:8]}/1"
    params = {"name": "s__slow_compute", "arguments": {"seconds": 30, "label": key}, "task": {"ttl": 120_000}}
    with start_gateway(config) as gateway:
        task_id = task_id_of(result_of(post(gateway.url, "tools/call", params, era=HANDSHAKE, key=key)))
        wait_for_executions(state, 1, key=key)
        gateway.kill()
        gateway.start()
        task = wait_task(gateway.url, task_id, era=HANDSHAKE, timeout=10)
        assert task["status"] == "failed", task
        status, message = post(gateway.url, "tasks/result", {"taskId": task_id}, era=HANDSHAKE)
        error = message["error"]
        if effect == "read":
            assert "data" not in error and "safe to call it again" in error["message"]
        else:
            assert error["data"]["_meta"][OUTCOME] == "unknown" and "unknown" in error["message"]
        # The retry with the key gets the same (failed) task: the upstream is not called again.
        assert task_id_of(result_of(post(gateway.url, "tools/call", params, era=HANDSHAKE, key=key))) == task_id
        time.sleep(0.5)
    assert len(read_executions(state, key=key)) == 1
