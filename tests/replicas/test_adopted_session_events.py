"""What an adopted session is told (issue 26, the items left after adoption): its task status
notices go on after its holder died.

Three stateful `dex-gateway serve` on one PostgreSQL, with `DEX_REPLICA_SECRET`, behind Debian's
haproxy (round-robin, no stickiness), as in test_session_adoption.py. A raw 2025-11-25 session (the
SDK 2.3 client drops `notifications/tasks/status`) creates a task on a slow task tool (an upstream
task of a stateless upstream: a survivor takes it over once its process died); its GET stream
hears the task's status; the replica holding the session is SIGKILLed; the session's next request
adopts it elsewhere; the task ends and the client's new GET stream (held by the adopter) is told.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.replicas.test_session_adoption import SECRET, _row
from tests.support.gateway import RunningGateway, http_upstream, start_gateway, write_config
from tests.support.haproxy import start_haproxy
from tests.support.raw_sessions import StreamListener, open_session, sse_messages
from tests.support.servers import start_http_server

# Three gateways behind haproxy and a SIGKILL: about 15 s, so with the long tests (make test-all).
pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@dataclass
class Cluster:
    replicas: dict[str, RunningGateway]
    balancer: str  # the MCP URL through haproxy


@pytest.fixture
def cluster(tmp_path: Path, pg_url: str) -> Iterator[Cluster]:
    with ExitStack() as stack:
        upstream = stack.enter_context(start_http_server("tasks_server", state_dir=tmp_path / "upstream"))
        replicas: dict[str, RunningGateway] = {}
        for name in ("r0", "r1", "r2"):
            config = write_config(tmp_path / name, {
                "server": {"stateful": True},
                "upstreams": [http_upstream("t", upstream.url)],
                "fences": {"store": pg_url, "replica_id": name, "lease_seconds": 3},
                "tasks": {"sweep_interval_seconds": 0.5},  # a dead process's task is taken over soon
            })
            gateway = stack.enter_context(start_gateway(config, env=SECRET))
            gateway.wait_for_log("listening for other replicas' events", timeout=30)
            replicas[name] = gateway
        balancer = stack.enter_context(start_haproxy(tmp_path / "haproxy", [g.port for g in replicas.values()]))
        yield Cluster(replicas, balancer + "/mcp")


def _result(response: httpx.Response, request_id: int) -> dict[str, Any]:
    assert response.status_code == 200, (response.status_code, response.text)
    return next(m for m in sse_messages(response.text) if m.get("id") == request_id)["result"]


def _told(listener: StreamListener, task_id: str) -> list[str]:
    return [t["status"] for t in listener.notifications("notifications/tasks/status") if t.get("taskId") == task_id]


async def test_task_status_notices_reach_the_session_after_its_adoption(cluster: Cluster, pg_url: str) -> None:
    with httpx.Client(timeout=30) as http:
        session = open_session(http, cluster.balancer)
        created = _result(http.post(cluster.balancer, headers=session, json={
            "jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "t__slow_compute", "arguments": {"seconds": 8}, "task": {"ttl": 60_000}}}), 2)
        task_id = created["task"]["taskId"]
        # Its GET stream hears the task's progress from the holder (the upstream task is polled).
        before = StreamListener(cluster.balancer, session, until="computing", seconds=10).start()
        before.join()
        assert _told(before, task_id), before.text
        holder = await _row(pg_url, session["mcp-session-id"])
        assert holder is not None
        cluster.replicas[holder[1]].kill()

        # The next request adopts the session elsewhere; its new GET stream hears the task end.
        assert _result(http.post(cluster.balancer, headers=session,
                                 json={"jsonrpc": "2.0", "id": 3, "method": "tools/list"}), 3)["tools"]
        adopter = await _row(pg_url, session["mcp-session-id"])
        assert adopter is not None and adopter[1] != holder[1], adopter
        after = StreamListener(cluster.balancer, session, until='"completed"', seconds=30).start()
        after.join()
        assert _told(after, task_id)[-1:] == ["completed"], after.text
