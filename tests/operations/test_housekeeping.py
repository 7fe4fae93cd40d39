"""Housekeeping never takes the gateway down or holds requests up (the reliability issue, items
1-4), against a real `dex-gateway serve` process and its real SQLite file:

* the SQLite write lock held (by this test, `BEGIN IMMEDIATE`) past the busy timeout while tasks
  end: the process keeps serving and every task ends, never `/healthz` 200 with `/mcp` dead;
* a fenced write that waits past the busy timeout is answered "the store was busy; not sent";
* 50,000 fences past retention swept while `/healthz` and `/readyz` are probed every 50 ms: no
  probe waits 100 ms (bench/housekeeping_bench.py measures 10^6).
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from gateway.conventions.keys import Effect
from gateway.fences.records import FenceRecord, FenceState, Owner
from gateway.fences.stores.sqlite import SqliteFenceStore
from tests.support.gateway import start_gateway, stdio_upstream, write_config
from tests.support.servers import read_executions
from tests.tasks.tasks_support import HANDSHAKE, OUTCOME, post, result_of, task_id_of, wait_task

BUSY_MS = 1500


@contextlib.contextmanager
def write_lock(db: Path) -> Iterator[None]:
    """Hold the SQLite write lock of `db`, as a purge or another process's long write does."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        yield
        conn.execute("ROLLBACK")
    finally:
        conn.close()


def _probe(base: str, url: str) -> tuple[int, int, str]:
    health = httpx.get(base + "/healthz", timeout=10)
    status, message = post(url, "tools/list", {}, era=HANDSHAKE)
    return health.status_code, status, str(message.get("error", {}).get("message", ""))


def test_write_lock_held_past_the_busy_timeout_while_tasks_end(tmp_path: Path) -> None:
    db = tmp_path / "gateway.db"
    state = tmp_path / "stdio"
    config = write_config(tmp_path, {
        "upstreams": [stdio_upstream("s", "tasks_server", state_dir=state)],
        "fences": {"store": f"sqlite:///{db}?busy_timeout_ms={BUSY_MS}"},
    })
    with start_gateway(config) as gateway:
        tasks = []
        for n in range(4):
            key = f"lock/{uuid.uuid4().hex[:8]}/{n}"
            params = {"name": "s__slow_compute", "arguments": {"seconds": 1, "label": key}, "task": {"ttl": 120_000}}
            tasks.append(task_id_of(result_of(post(gateway.url, "tools/call", params, era=HANDSHAKE, key=key))))
        samples = []
        with write_lock(db):  # the tasks end (after 1 s) while the store is locked for 3 busy timeouts
            deadline = time.monotonic() + 3 * BUSY_MS / 1000
            while time.monotonic() < deadline:
                samples.append(_probe(gateway.base, gateway.url))
                time.sleep(0.1)
        samples.extend(_probe(gateway.base, gateway.url) for _ in range(3))
        dead = [s for s in samples if s[0] == 200 and s[1] == 503]
        assert not dead, f"/healthz 200 while /mcp answered 503: {dead}"
        # The process kept serving, and every task ended once the store was free again.
        assert all(s == (200, 200, "") for s in samples), samples
        for task_id in tasks:
            assert wait_task(gateway.url, task_id, era=HANDSHAKE, timeout=30)["status"] == "completed"
        metrics = httpx.get(gateway.base + "/metrics", timeout=10).text
        assert 'dex_gateway_background_failures_total{work="task end"}' in metrics


def test_a_fenced_write_that_waited_for_a_busy_store_is_answered_not_sent(tmp_path: Path) -> None:
    db = tmp_path / "gateway.db"
    state = tmp_path / "stdio"
    config = write_config(tmp_path, {
        "upstreams": [stdio_upstream("s", "tasks_server", state_dir=state,
                                     tool_policies={"s__slow_write": {"effect": "non_idempotent_write"}})],
        "fences": {"store": f"sqlite:///{db}?busy_timeout_ms={BUSY_MS}"},
        "tasks": {"enabled": False},
    })
    key = f"busy/{uuid.uuid4().hex[:8]}"
    params = {"name": "s__slow_write", "arguments": {"seconds": 0, "label": key}}
    with start_gateway(config) as gateway:
        assert post(gateway.url, "tools/list", {}, era=HANDSHAKE)[0] == 200
        with write_lock(db):
            status, message = post(gateway.url, "tools/call", params, era=HANDSHAKE, key=key)
        assert status == 200 and "result" in message, message
        result = message["result"]
        assert result["isError"] is True
        assert result["_meta"][OUTCOME] == "rejected"
        assert "store was busy; the call was not sent" in result["content"][0]["text"]
        assert read_executions(state, key=key) == []
        # Nothing was claimed: the same key, sent again, runs the call.
        again = result_of(post(gateway.url, "tools/call", params, era=HANDSHAKE, key=key))
        assert not again.get("isError"), again
    assert len(read_executions(state, key=key)) == 1


def fill_fences(db: Path, count: int, *, age_seconds: float) -> None:
    """`count` finished fences last updated `age_seconds` ago, written by the store's own code."""

    async def fill() -> None:
        owner = Owner("filler", uuid.uuid4().hex)
        then = time.time() - age_seconds
        answer = {"content": [{"type": "text", "text": "x" * 200}], "isError": False}
        async with SqliteFenceStore(db) as store:
            for n in range(count):
                await store.insert_if_absent(FenceRecord(
                    fence_id=f"old-{n:08d}", principal="anonymous", fingerprint="f" * 64, tool="s__slow_write",
                    effect=Effect.NON_IDEMPOTENT_WRITE, state=FenceState.DONE, owner=owner, lease_until=None,
                    answer=answer, created_at=then, updated_at=then, attempts=1,
                ))

    anyio.run(fill)


class Prober:
    """Probes `/healthz` and `/readyz` every 50 ms from a thread; the slowest answer of each."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.slowest: dict[str, float] = {"/healthz": 0.0, "/readyz": 0.0}
        self.samples: list[tuple[float, str, float]] = []  # (monotonic start, path, seconds)
        self.failures: list[Any] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=10) as client:
            while not self._stop.is_set():
                for path in self.slowest:
                    started = time.monotonic()
                    response = client.get(self.base + path)
                    took = time.monotonic() - started
                    self.slowest[path] = max(self.slowest[path], took)
                    self.samples.append((started, path, took))
                    if response.status_code != 200:
                        self.failures.append((path, response.status_code))
                self._stop.wait(0.05)

    def slowest_between(self, start: float, end: float) -> dict[str, float]:
        out = {path: 0.0 for path in self.slowest}
        for at, path, took in self.samples:
            if start <= at <= end:
                out[path] = max(out[path], took)
        return out

    def __enter__(self) -> "Prober":
        with httpx.Client(timeout=10) as client:  # warm up: a fresh process's first answers are slow
            for _ in range(5):
                for path in self.slowest:
                    client.get(self.base + path)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


@pytest.mark.slow
def test_sweeping_50000_fences_never_holds_a_probe_100_ms(tmp_path: Path) -> None:
    db = tmp_path / "gateway.db"
    retention = 60.0
    started = time.time()
    # They pass retention 40 s from now: after the gateway started and the probing began.
    fill_fences(db, 50_000, age_seconds=retention - 40)
    assert time.time() - started < 30, "filling took too long for this test's timing"
    config = write_config(tmp_path, {
        "upstreams": [stdio_upstream("s", "tasks_server", state_dir=tmp_path / "stdio")],
        "fences": {"store": f"sqlite:///{db}", "retention_hours": retention / 3600, "sweep_interval_seconds": 1},
    })
    with start_gateway(config) as gateway, Prober(gateway.base) as prober:
        gateway.wait_for_log(r"fence sweep: 50000 fences past retention deleted", timeout=60)
        time.sleep(0.2)
    assert not prober.failures, prober.failures
    assert prober.slowest["/healthz"] < 0.1 and prober.slowest["/readyz"] < 0.1, prober.slowest
    with contextlib.closing(sqlite3.connect(db)) as conn:
        assert conn.execute("SELECT count(*) FROM fences").fetchone()[0] == 0


@pytest.mark.anyio
async def test_a_runtime_that_stops_under_a_live_server_fails_healthz(tmp_path: Path) -> None:
    """Belt and braces behind the supervision: a failure that still reaches the runtime's task
    group (here one started there on purpose) stops the runtime; the HTTP server lives on, and
    /healthz must then say so (503), so an orchestrator restarts the process."""
    import socket

    import uvicorn

    from gateway.server.app import create_app
    from gateway.config.model import GatewayConfig

    config = GatewayConfig.model_validate({"fences": {"store": f"sqlite:///{tmp_path / 'gateway.db'}"}, "upstreams": []})
    app = create_app(config)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))

    async def boom() -> None:
        raise RuntimeError("a failure outside supervision")

    async with anyio.create_task_group() as tg, httpx.AsyncClient(timeout=10) as client:
        tg.start_soon(lambda: server.serve(sockets=[sock]))
        with anyio.fail_after(20):
            while not server.started:
                await anyio.sleep(0.02)
        assert (await client.get(base + "/healthz")).status_code == 200
        app.state.runtime.task_group.start_soon(boom)
        await anyio.sleep(0.3)
        health = await client.get(base + "/healthz")
        mcp = await client.post(base + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                                headers={"accept": "application/json, text/event-stream"})
        server.should_exit = True
    assert health.status_code == 503 and health.json() == {"status": "failed"}
    assert mcp.status_code == 503 and "nothing was done" in mcp.json()["error"]["message"]


@pytest.mark.anyio
async def test_the_running_gateway_checkpoints_its_sqlite_file_off_the_event_loop(tmp_path: Path) -> None:
    """Both kept connections on the gateway's SQLite file (the fences', the audit log's) hand
    their WAL checkpoints to the checkpointer while the runtime runs (storage/loop_sqlite.py)."""
    from gateway.config.model import GatewayConfig
    from gateway.server.app import create_app

    config = GatewayConfig.model_validate({"fences": {"store": f"sqlite:///{tmp_path / 'gateway.db'}"}, "upstreams": []})
    app = create_app(config)

    def autocheckpoint(conn: sqlite3.Connection) -> int:
        return int(conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0])

    async with app.router.lifespan_context(app):
        runtime = app.state.runtime
        assert runtime.audit is not None
        # The stores' kept connections (private: nothing else should reach them).
        fences, audit = runtime.store._db, runtime.audit.store._writer
        with anyio.fail_after(10):
            while (await fences.run(autocheckpoint), await audit.run(autocheckpoint)) != (0, 0):
                await anyio.sleep(0.02)
