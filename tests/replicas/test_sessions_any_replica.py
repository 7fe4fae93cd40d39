"""Stateful (handshake-era) sessions from any replica (issue 26, item 1): three stateful
`dex-gateway serve` sharing PostgreSQL and a `DEX_REPLICA_SECRET`, behind Debian's haproxy
(round-robin, no stickiness). A session held by one replica is served through the balancer
whichever replica a request lands on (forwarded to its holder, gateway/front/forwarding.py); a
task of that session cancelled through another replica is told to it; when its holder is
SIGKILLed the session is adopted by the replica the next request reaches (its state is in
PostgreSQL: tests/replicas/test_session_adoption.py has the whole story), never a hang, and the
other sessions go on.
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from tests.interop.support import client, text_of
from tests.support.gateway import RunningGateway, http_upstream, start_gateway, write_config
from tests.support.haproxy import start_haproxy
from tests.support.raw_sessions import StreamListener, open_session, sse_messages
from tests.support.servers import start_http_server

pytestmark = pytest.mark.anyio

SECRET = {"DEX_REPLICA_SECRET": "replicas-test-secret"}


def _result(response: httpx.Response, request_id: int) -> dict[str, object]:
    assert response.status_code == 200, (response.status_code, response.text)
    message = next(m for m in sse_messages(response.text) if m.get("id") == request_id) \
        if response.headers.get("content-type", "").startswith("text/event-stream") else response.json()
    assert "result" in message, message
    return dict(message["result"])


async def test_handshake_sessions_from_any_replica(tmp_path: Path, pg_url: str) -> None:
    with ExitStack() as stack:
        upstream = stack.enter_context(start_http_server("tasks_server", state_dir=tmp_path / "upstream"))
        replicas: list[RunningGateway] = []
        for name in ("r0", "r1", "r2"):
            config = write_config(tmp_path / name, {
                "server": {"stateful": True}, "upstreams": [http_upstream("t", upstream.url)],
                "fences": {"store": pg_url, "replica_id": name},
            })
            gateway = stack.enter_context(start_gateway(config, env=SECRET))
            gateway.wait_for_log("listening for other replicas' events", timeout=30)
            replicas.append(gateway)
        balancer = stack.enter_context(start_haproxy(tmp_path / "haproxy", [g.port for g in replicas])) + "/mcp"
        http = stack.enter_context(httpx.Client(timeout=10))

        # The official SDK client, through the balancer: every request of its session succeeds.
        async with client(balancer, mode="legacy") as legacy:
            for i in range(6):
                result = await legacy.call_tool("t__greet", {"name": f"replica {i}"})
                assert not result.is_error and f"replica {i}" in text_of(result), text_of(result)

        held_by_r0 = open_session(http, replicas[0].url)
        held_by_r1 = open_session(http, replicas[1].url)
        for i in range(6):  # round-robin: r1 and r2 forward to r0
            assert _result(http.post(balancer, headers=held_by_r0,
                                     json={"jsonrpc": "2.0", "id": 10 + i, "method": "tools/list"}), 10 + i)["tools"]

        # A task of r0's session, cancelled through r1: r0's session is told (its stream read through the balancer).
        created = _result(http.post(balancer, headers=held_by_r0, json={
            "jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "t__slow_compute", "arguments": {"seconds": 30}, "task": {"ttl": 60_000}}}), 2)
        task_id = created["task"]["taskId"]  # type: ignore[index]
        listener = StreamListener(balancer, held_by_r0, until='"cancelled"', seconds=15).start()
        assert _result(http.post(replicas[1].url, headers=held_by_r1, json={
            "jsonrpc": "2.0", "id": 3, "method": "tasks/cancel", "params": {"taskId": task_id}}), 3)["status"] == "cancelled"
        listener.join()
        told = [t["status"] for t in listener.notifications("notifications/tasks/status") if t.get("taskId") == task_id]
        assert told[-1:] == ["cancelled"], listener.text

        # A forged forwarding mark is refused; it reaches no session.
        forged = http.post(replicas[1].url, headers={**held_by_r0, "x-dex-forwarded": "0" * 64},
                           json={"jsonrpc": "2.0", "id": 4, "method": "tools/list"})
        assert forged.status_code == 403 and "x-dex-forwarded" in forged.text

        # r0 dies: its session is adopted by another replica (no new initialize), at once;
        # r1's session goes on through the balancer.
        replicas[0].kill()
        for i in range(3):
            assert _result(http.post(balancer, headers=held_by_r0,
                                     json={"jsonrpc": "2.0", "id": 20 + i, "method": "tools/list"}), 20 + i)["tools"]
            assert _result(http.post(balancer, headers=held_by_r1,
                                     json={"jsonrpc": "2.0", "id": 30 + i, "method": "tools/list"}), 30 + i)["tools"]
        assert sum("adopted from a replica that stopped" in g.log for g in replicas[1:]) == 1
        # A session id nobody ever held is still unknown: 404, the client initializes again.
        unknown = {**held_by_r1, "mcp-session-id": "0" * 64}
        gone = http.post(balancer, headers=unknown, json={"jsonrpc": "2.0", "id": 39, "method": "tools/list"})
        assert gone.status_code == 404, (gone.status_code, gone.text)
        again = open_session(http, balancer)  # starting over works
        assert _result(http.post(balancer, headers=again, json={"jsonrpc": "2.0", "id": 40, "method": "tools/list"}), 40)
