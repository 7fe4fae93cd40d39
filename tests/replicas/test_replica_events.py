"""Events across replicas (issue 26, item 1) with real processes: two `dex-gateway serve` sharing
PostgreSQL, each told by the other through LISTEN/NOTIFY (gateway/storage/events.py).

* a task created by a session on B and cancelled through A: B's session is told `cancelled`
  (B's own job never writes again: only A's change, heard through PostgreSQL, can tell it);
* a resource update its upstream sends to A (server-everything over stdio: a child per replica)
  reaches a session subscribed on B, whose own child sends nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import anyio
import httpx
import pytest

from tests.interop.support import Recorder, client, require_everything
from tests.support.everything import everything_stdio
from tests.support.gateway import RunningGateway, http_upstream, start_gateway, write_config
from tests.support.raw_sessions import StreamListener, open_session, sse_messages
from tests.support.servers import RunningServer, start_http_server

pytestmark = pytest.mark.anyio




def start_replicas(stack: ExitStack, root: Path, pg_url: str, upstreams: list[dict[str, object]],
                   names: tuple[str, ...] = ("a", "b")) -> list[RunningGateway]:
    """Stateful gateways sharing `pg_url`, each with its own replica id, ready to serve."""
    gateways = []
    for name in names:
        config = write_config(root / name, {"server": {"stateful": True}, "upstreams": upstreams,
                                            "fences": {"store": pg_url, "replica_id": name}})
        gateway = stack.enter_context(start_gateway(config))
        gateway.wait_for_log("listening for other replicas' events", timeout=30)
        gateways.append(gateway)
    return gateways


@pytest.fixture
def tasks_upstream(tmp_path: Path) -> Iterator[RunningServer]:
    with start_http_server("tasks_server", state_dir=tmp_path / "upstream") as server:
        yield server


def test_a_task_changed_on_one_replica_is_told_to_its_session_on_another(
        tmp_path: Path, pg_url: str, tasks_upstream: RunningServer) -> None:
    with ExitStack() as stack, httpx.Client(timeout=30) as http:
        a, b = start_replicas(stack, tmp_path, pg_url, [http_upstream("t", tasks_upstream.url)])
        session = open_session(http, b.url)
        created = http.post(b.url, headers=session, json={
            "jsonrpc": "2.0", "id": 2, "method": "tools/call",
            "params": {"name": "t__slow_compute", "arguments": {"seconds": 30}, "task": {"ttl": 60_000}}})
        task = next(m for m in sse_messages(created.text) if m.get("id") == 2)["result"]["task"]
        listener = StreamListener(b.url, session, until='"cancelled"', seconds=15).start()
        cancelled = http.post(a.url, headers=open_session(http, a.url), json={
            "jsonrpc": "2.0", "id": 3, "method": "tasks/cancel", "params": {"taskId": task["taskId"]}})
        assert next(m for m in sse_messages(cancelled.text) if m.get("id") == 3)["result"]["status"] == "cancelled"
        listener.join()
    told = listener.notifications("notifications/tasks/status")
    assert [t["status"] for t in told if t["taskId"] == task["taskId"]][-1:] == ["cancelled"], listener.text


async def test_a_resource_update_heard_by_one_replica_reaches_a_subscriber_on_another(
        tmp_path: Path, pg_url: str) -> None:
    node = require_everything()
    with ExitStack() as stack:
        a, b = start_replicas(stack, tmp_path, pg_url,
                              [everything_stdio("ev", node=node, prefix="", keyless_writes="pass")])
        on_a, on_b = Recorder(), Recorder()
        async with client(a.url, mode="legacy", recorder=on_a) as first, \
                client(b.url, mode="legacy", recorder=on_b) as second:
            uri = (await first.list_resources()).resources[0].uri
            await first.session.subscribe_resource(uri)
            await second.session.subscribe_resource(uri)
            await first.call_tool("toggle-subscriber-updates", {})  # A's child sends updates now; B's does not
            try:
                with anyio.fail_after(15):
                    while not on_b.updated(str(uri)):
                        await anyio.sleep(0.05)
            finally:
                await first.call_tool("toggle-subscriber-updates", {})
