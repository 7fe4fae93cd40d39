"""`dex-gateway serve --workers 2`: two processes on one port, sharing the SQLite fence store.

Asserted: both workers answer (each runs its own stdio upstream child, seen by its pid), each is
its own fence replica (`<host>:<port>/w0`, `/w1`), a scrape counts the calls of both workers, a
worker that dies is started again with the same replica id, and SIGTERM drains both and the
supervisor exits 0.
"""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.operations.support import events, new_key, ops_upstream, post, tool_call, wait_for
from tests.support.gateway import gateway_argv, write_config
from tests.support.processes import spawn_listening
from tests.support.servers import REPO_ROOT

CALLS = 30
WORKER_LINE = re.compile(r"listening on http://\S+ \(worker (\d+), pid (\d+)\)")


def _workers(lines: list[str]) -> dict[int, int]:
    """Worker index -> pid of its latest start."""
    out: dict[int, int] = {}
    for line in lines:
        if match := WORKER_LINE.search(line):
            out[int(match.group(1))] = int(match.group(2))
    return out


def test_two_workers_share_the_port_and_the_store(tmp_path: Path) -> None:
    log = tmp_path / "ops.jsonl"
    db = tmp_path / "fences.db"
    cfg = write_config(tmp_path, {"upstreams": [ops_upstream("ops", log)], "fences": {"store": f"sqlite:///{db}"}})
    lines: list[str] = []
    process, url = spawn_listening(gateway_argv("serve", "--config", str(cfg), "--port", "0", "--workers", "2"),
                                   cwd=REPO_ROOT, env=dict(os.environ), name="supervisor", lines=lines,
                                   ready_timeout=30)
    try:
        assert url is not None, "\n".join(lines)
        wait_for(lambda: len(_workers(lines)) == 2, timeout=30, what="both workers")
        base = url.rsplit("/", 1)[0]
        for n in range(CALLS):
            # A new connection per call: the kernel hands connections to both workers.
            with httpx.Client(timeout=30, headers={"connection": "close"}) as client:
                post(client, url, tool_call("ops__write", {"text": str(n)}, key=new_key()))
        upstream_pids = {e["pid"] for e in events(log, "start", "write")}
        assert len(upstream_pids) == 2, "both workers answered, each through its own stdio child"
        with sqlite3.connect(db) as conn:
            replicas = {r[0] for r in conn.execute("SELECT DISTINCT owner_replica FROM fences")}
        port = url.split(":")[2].split("/")[0]
        assert {r.rsplit("/", 1)[1] for r in replicas} == {"w0", "w1"}
        assert all(r.endswith((f":{port}/w0", f":{port}/w1")) for r in replicas), replicas

        with httpx.Client(timeout=10) as client:
            text = client.get(f"{base}/metrics").text
        total = sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
                    if s.name == "dex_gateway_tool_calls_total")
        assert total == CALLS  # whichever worker answered the scrape

        # A worker that dies is started again, same index (same replica id).
        before = _workers(lines)
        os.kill(before[1], signal.SIGKILL)
        wait_for(lambda: _workers(lines).get(1) not in (None, before[1]), timeout=30, what="worker 1 restarted")
        with httpx.Client(timeout=30) as client:
            post(client, url, tool_call("ops__write", {"text": "after"}, key=new_key()))

        workers = _workers(lines)
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
        assert time.monotonic() - started < 15
        for pid in workers.values():
            wait_for(lambda pid=pid: not _alive(pid), timeout=5, what=f"worker {pid} to exit")
        assert sum("drained: closing connections and stores" in line for line in lines) == 2
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie child of the supervisor's is gone for our purpose.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False
