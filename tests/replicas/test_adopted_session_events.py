"""What an adopted session is told (issue 26, the items left after adoption): its task status
notices go on after its holder died, and its GET stream resumes with what the dead holder had sent.

Three stateful `dex-gateway serve` on one PostgreSQL, with `DEX_REPLICA_SECRET`, behind Debian's
haproxy (round-robin, no stickiness), as in test_session_adoption.py. A raw 2025-11-25 session (the
SDK 2.3 client drops `notifications/tasks/status`) creates a task on a slow task tool (an upstream
task of a stateless upstream: a survivor takes it over once its process died); its GET stream
hears the task's status; the replica holding the session is SIGKILLed; the session's next request
adopts it elsewhere; the task ends and the client's new GET stream (held by the adopter) is told.

Resumption: a session subscribed to a resource hears one update on its GET stream and disconnects
it; a second update is sent while it is away (written to the shared log); its holder is SIGKILLed;
the session is adopted; its GET stream reconnecting with the last event id it saw (one of the dead
holder's) is replayed the missed update. An event id of another session replays nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import asyncpg
import httpx
import pytest

from tests.replicas.test_session_adoption import NOTE, SECRET, _resources_upstream, _row
from tests.support.postgres import PG_URL
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
                "upstreams": [http_upstream("t", upstream.url), _resources_upstream()],
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


def _sse_events(text: str) -> list[tuple[str | None, dict[str, Any] | None]]:
    """The (id, JSON-RPC message) of each SSE event in `text`."""
    found = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        event_id = data = None
        for line in block.split("\n"):
            if line.startswith("id:"):
                event_id = line[3:].strip()
            elif line.startswith("data:") and line[5:].strip():
                data = json.loads(line[5:])
        if event_id is not None or data is not None:
            found.append((event_id, data))
    return found


def _updates(listener: StreamListener) -> list[tuple[str | None, dict[str, Any] | None]]:
    return [(i, m) for i, m in _sse_events(listener.text) if m and m.get("method") == "notifications/resources/updated"]


async def _logged_updates(pg_url: str, session_id: str) -> int:
    schema = pg_url.rsplit("schema=", 1)[1]
    conn = await asyncpg.connect(PG_URL)
    try:
        return int(await conn.fetchval(f'SELECT count(*) FROM "{schema}".dex_front_events WHERE session_id = $1 '
                                       "AND data LIKE '%resources/updated%'", session_id))
    finally:
        await conn.close()


async def _until_logged(pg_url: str, session_id: str, count: int) -> None:
    with anyio.fail_after(10):
        while await _logged_updates(pg_url, session_id) < count:
            await anyio.sleep(0.05)


async def test_an_adopted_sessions_get_stream_resumes_with_what_the_dead_holder_sent(cluster: Cluster,
                                                                                      pg_url: str) -> None:
    with httpx.Client(timeout=30) as http:
        session = open_session(http, cluster.balancer)
        holder = await _row(pg_url, session["mcp-session-id"])
        assert holder is not None
        other = open_session(http, cluster.replicas[holder[1]].url)  # another session, on the same replica
        for i, headers in enumerate((session, other)):
            _result(http.post(cluster.balancer, headers=headers, json={
                "jsonrpc": "2.0", "id": 10 + i, "method": "resources/subscribe", "params": {"uri": NOTE}}), 10 + i)

        def touch(request_id: int) -> None:  # through the session: runs on its holder, whose upstream it subscribed
            done = _result(http.post(cluster.balancer, headers=session, json={
                "jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                "params": {"name": "res__touch", "arguments": {"uri": NOTE}}}), request_id)
            assert not done.get("isError"), done

        # One update heard on the GET stream, then the stream is gone.
        heard = StreamListener(cluster.balancer, session, until="resources/updated", seconds=10).start()
        theirs = StreamListener(cluster.balancer, other, until="resources/updated", seconds=10).start()
        touch(20)
        heard.join()
        theirs.join()
        assert _updates(heard) and _updates(theirs), (heard.text, theirs.text)
        last_seen, their_id = _updates(heard)[-1][0], _updates(theirs)[-1][0]
        assert last_seen and their_id
        # A second one while the client is away: its holder keeps it, and writes it to the shared log.
        touch(21)
        await _until_logged(pg_url, session["mcp-session-id"], 2)
        await _until_logged(pg_url, other["mcp-session-id"], 2)
        cluster.replicas[holder[1]].kill()

        assert _result(http.post(cluster.balancer, headers=session,
                                 json={"jsonrpc": "2.0", "id": 30, "method": "tools/list"}), 30)["tools"]
        adopter = await _row(pg_url, session["mcp-session-id"])
        assert adopter is not None and adopter[1] != holder[1], adopter
        # Another session's event id: nothing of that session is replayed; the stream goes on from now.
        foreign = StreamListener(cluster.balancer, {**session, "last-event-id": their_id}, until=None, seconds=2).start()
        foreign.join()
        assert not _updates(foreign), foreign.text
        # Its own last event id, of the dead holder: the update it missed is replayed by the adopter.
        resumed = StreamListener(cluster.balancer, {**session, "last-event-id": last_seen},
                                 until="resources/updated", seconds=10).start()
        resumed.join()
        replayed = _updates(resumed)
        assert len(replayed) == 1 and replayed[0][1]["params"]["uri"] == NOTE, resumed.text  # type: ignore[index]
        assert replayed[0][0] not in (last_seen, None), replayed
