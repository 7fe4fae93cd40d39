"""`dex-agent serve` and long-running upstream tasks, with real processes: the service, a real
gateway and the tasks example server (`examples/servers/tasks_server.py`, whose `research` needs a
task). A turn that started a task is parked (its lease released) while the task runs; the
service polls the task and, when it ends, the turn finishes by itself, with no further input;
after a SIGKILL of the service during the task, the restarted service finishes it once, and the
task ran once upstream."""

from __future__ import annotations

import sqlite3
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agent_host.host_support import Stack
from tests.agent_host.serve_support import Api, calls_per_turn, start_serve
from tests.support.gateway import http_upstream, start_gateway, write_config
from tests.support.servers import read_executions, start_http_server
from tests.tasks.tasks_support import HANDSHAKE, post, result_of


@pytest.fixture(scope="module")
def tasks_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    base = tmp_path_factory.mktemp("tasks-stack")
    with start_http_server("tasks_server", state_dir=base / "up") as upstream:
        # The handshake era: the upstream lists execution.taskSupport (research: required).
        config = write_config(base, {"upstreams": [http_upstream("t", upstream.url, protocol="handshake")]})
        with start_gateway(config) as gateway:
            yield Stack(upstream, gateway.url, upstream.state_dir)


def _row(store: Path, sql: str, params: tuple[object, ...] = ()) -> tuple[object, ...] | None:
    try:
        with sqlite3.connect(store) as db:
            row = db.execute(sql, params).fetchone()
            return tuple(row) if row is not None else None
    except sqlite3.OperationalError:
        return None


def _until(what: str, check: object, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _researched(stack: Stack, topic: str) -> list[dict[str, object]]:
    return [e for e in read_executions(stack.state_dir, tool="research") if e["arguments"].get("topic") == topic]


def test_a_turn_parked_on_a_task_finishes_by_itself_when_the_task_ends(tasks_stack: Stack, tmp_path: Path) -> None:
    store, log = tmp_path / "s.db", tmp_path / "calls.jsonl"
    proc, url = start_serve(tasks_stack, store, log)
    try:
        api = Api(url)
        session = api.new_session()
        api.send(session, "research otters 4")
        # The task runs upstream; the turn is parked: its lease is released while the task works.
        _until("the task was not recorded", lambda: _row(store, "SELECT status FROM host_tasks WHERE session_id = ?",
                                                         (session,)) == ("working",))
        _until("the parked turn kept its lease", lambda: _row(store, "SELECT 1 FROM leases WHERE session_id = ?",
                                                               (session,)) is None)
        assert api.turns(session)[0]["status"] == "running", proc.output
        turns = api.wait_turns(session, 1, timeout=30)
        assert turns[0]["status"] == "completed", turns
        assert "Research report on otters" in turns[0]["final_text"]
        assert _row(store, "SELECT status FROM host_tasks WHERE session_id = ?", (session,)) == ("completed",)
        assert len(_researched(tasks_stack, "otters")) == 1
        assert calls_per_turn(log) == {("research otters 4", 1): 1, ("research otters 4", 2): 1}
    finally:
        proc.stop()


def test_a_killed_service_finishes_the_task_turn_once_after_a_restart(tasks_stack: Stack, tmp_path: Path,
                                                                      any_store: str) -> None:
    """On SQLite and on PostgreSQL (the task id is in the shared store, not in a local file)."""
    store, log = any_store, tmp_path / "calls.jsonl"
    topic = f"beavers{uuid.uuid4().hex[:6]}"
    proc, url = start_serve(tasks_stack, store, log)
    api = Api(url)
    session = api.new_session()
    api.send(session, f"research {topic} 5")
    _until("the task did not start upstream", lambda: _researched(tasks_stack, topic))
    time.sleep(1.0)  # the turn records the task and parks
    proc.sigkill()
    (tmp_path / "local.db").unlink(missing_ok=True)  # nothing kept beside the store is needed
    proc, url = start_serve(tasks_stack, store, log)
    try:
        api = Api(url)
        turns = api.wait_turns(session, 1, timeout=40)
        assert [t["status"] for t in turns] == ["completed"], turns
        assert f"Research report on {topic}" in turns[0]["final_text"]
        # The task ran once upstream: the restart polled it, it did not call the tool again.
        assert len(_researched(tasks_stack, topic)) == 1
        assert calls_per_turn(log) == {(f"research {topic} 5", 1): 1, (f"research {topic} 5", 2): 1}
        messages = api.messages(session)["messages"]
        assert len([m for m in messages if m["role"] == "user"]) == 1, messages
        assert len([m for m in messages if m["role"] == "assistant"]) == turns[0]["model_calls"] == 2, messages
    finally:
        proc.stop()


def test_a_turn_parked_on_a_task_is_cancelled_at_once_and_a_steer_waits_for_the_task(
        tasks_stack: Stack, tmp_path: Path) -> None:
    """A cancel makes the parked turn due: it ends `cancelled` at once and its task is cancelled
    upstream. A steer does not wake it (a started call runs to its end): it applies once the task ended."""
    store, log = tmp_path / "s.db", tmp_path / "calls.jsonl"
    proc, url = start_serve(tasks_stack, store, log)
    try:
        api = Api(url)
        cancelled, steered = api.new_session(), api.new_session()
        api.send(cancelled, "research ferrets 30")
        api.send(steered, "research minks 3")
        for session in (cancelled, steered):
            _until("the turn did not park", lambda: _row(store, "SELECT status FROM host_tasks WHERE session_id = ?",
                                                         (session,)) == ("working",)
                   and _row(store, "SELECT 1 FROM leases WHERE session_id = ?", (session,)) is None)
        assert api.client.post(f"/sessions/{cancelled}/cancel", json={"reason": "enough"}).status_code == 202
        assert api.client.post(f"/sessions/{steered}/steer", json={"text": "also otters"}).status_code == 202
        assert [t["status"] for t in api.wait_turns(cancelled, 1, timeout=10)] == ["cancelled"]
        task_id = _row(store, "SELECT task_id FROM host_tasks WHERE session_id = ?", (cancelled,))
        assert task_id is not None
        _until("the task was not cancelled", lambda: result_of(post(tasks_stack.gateway_url, "tasks/get",
                                                                   {"taskId": task_id[0]}, era=HANDSHAKE))["status"] == "cancelled")
        turns = api.wait_turns(steered, 1, timeout=30)
        assert turns[0]["status"] == "completed", turns
        assert len(_researched(tasks_stack, "minks")) == 1 and len(_researched(tasks_stack, "ferrets")) == 1
        # The steer came after the task's result, before the next model call.
        assert ("also otters", 2) in calls_per_turn(log), calls_per_turn(log)
    finally:
        proc.stop()
