"""The agent host calls a tool that needs a task as a task, records the task id durably, and
after its own SIGKILL resumes polling the same task instead of calling the tool again."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from tests.agent_host.host_support import dex_agent
from tests.support.gateway import http_upstream, start_gateway, write_config
from tests.support.servers import read_executions, start_http_server, wait_for_executions
from tests.tasks.tasks_support import HANDSHAKE, post, result_of

SCRIPT = "scripted:tests.tasks.agent_scripts:research"


def _host_task(store: Path, timeout: float = 20) -> tuple[str, str, str]:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with sqlite3.connect(store) as conn:
                rows = conn.execute("SELECT key, task_id, status FROM host_tasks").fetchall()
        except sqlite3.OperationalError:
            rows = []
        if rows or time.monotonic() > deadline:
            assert rows, "the host recorded no task"
            return rows[0]
        time.sleep(0.05)


def test_host_resumes_polling_its_task_after_a_restart(tmp_path: Path) -> None:
    with start_http_server("tasks_server", state_dir=tmp_path / "up") as upstream:
        # The handshake era: the upstream lists execution.taskSupport (research: required).
        config = write_config(tmp_path, {"upstreams": [http_upstream("t", upstream.url, protocol="handshake")]})
        with start_gateway(config) as gateway:
            store = tmp_path / "host.db"
            first = dex_agent("--store", str(store), "run", "--gateway", gateway.url, "--session", "s-task",
                              "--model", SCRIPT, "research otters")
            try:
                key, task_id, _ = _host_task(store)
                assert key == "s-task/turn-1/call_1_0"
                wait_for_executions(upstream.state_dir, 1, tool="research")  # the task runs upstream
            finally:
                first.sigkill()
            second = dex_agent("--store", str(store), "resume", "--gateway", gateway.url, "--session", "s-task",
                               "--model", SCRIPT)
            try:
                assert second.finish(timeout=60) == 0, second.output
            finally:
                second.stop()
            assert "Research report on otters" in second.output
            assert _host_task(store) == (key, task_id, "completed")
            # One upstream task, one gateway task: the restart polled, it did not call again.
            assert len(read_executions(upstream.state_dir, tool="research")) == 1
            tasks = result_of(post(gateway.url, "tasks/list", {}, era=HANDSHAKE))["tasks"]
            assert [t["taskId"] for t in tasks] == [task_id]


def test_a_cancelled_poll_cancels_its_task_and_cancel_tasks_cancels_open_ones(tmp_path: Path) -> None:
    """Cancelling the host's wait (a cancelled turn) cancels the task on the gateway and upstream;
    `cancel_tasks` cancels the open tasks of given calls."""
    import anyio

    from agent_host.gateway_client.connection import GatewayConnection
    from agent_host.gateway_client.tasks import HostTasks, TaskCaller
    from agent_host.store.session_store import SessionStore

    with start_http_server("tasks_server", state_dir=tmp_path / "up") as upstream:
        config = write_config(tmp_path, {"upstreams": [http_upstream("t", upstream.url, protocol="handshake")]})
        with start_gateway(config) as gateway:
            post(gateway.url, "tools/list", {}, era=HANDSHAKE)  # ready
            async def scenario() -> tuple[str, str]:
                async with SessionStore(tmp_path / "host.db") as store:
                    return await cancelled_tasks(TaskCaller(GatewayConnection(gateway.url, None), HostTasks(store)))

            async def cancelled_tasks(caller: TaskCaller) -> tuple[str, str]:
                tasks = caller.tasks
                with anyio.move_on_after(2):
                    await caller.call("t__research", {"topic": "slow", "seconds": 60}, "s/t/1")
                first = await tasks.task_of("s/t/1")
                # A second call whose poll is left behind (a host that stops waiting), then cancelled by key.
                async with anyio.create_task_group() as tg:
                    tg.start_soon(caller.call, "t__research", {"topic": "slower", "seconds": 60}, "s/t/2")
                    while await tasks.task_of("s/t/2") is None:
                        await anyio.sleep(0.05)
                    assert await caller.cancel_tasks(["s/t/2", "s/t/unknown"]) == 1
                    tg.cancel_scope.cancel()
                second = await tasks.task_of("s/t/2")
                assert first is not None and second is not None
                return first[0], second[0]

            first, second = anyio.run(scenario)
            for task_id in (first, second):
                task = result_of(post(gateway.url, "tasks/get", {"taskId": task_id}, era=HANDSHAKE))
                assert task["status"] == "cancelled", task
            deadline = time.monotonic() + 10
            while any(t["status"] == "working" for t in result_of(post(upstream.url, "tasks/list", {}, era=HANDSHAKE))["tasks"]):
                assert time.monotonic() < deadline, "an upstream task was not cancelled"
                time.sleep(0.2)
