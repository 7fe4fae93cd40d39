"""Thousands of slow tasks under a low open-file limit never leave a process that answers
`/healthz` 200 while `/mcp` is dead (the reliability issue: "a store error kills the core but not
the process"), against a real `dex-gateway serve` started under `prlimit --nofile=N:N` and a real
slow HTTP upstream (tests/support/slow_http_server.py, whose tool sleeps):

* the tasks are created (2025-11-25 `task` on `tools/call`) from a few client connections at once,
  while `/healthz` and a plain `tools/call` (another upstream entry, its own pool) are probed
  every 200 ms;
* never `/healthz` 200 while `/mcp` answers 503 for more than a moment; every `/mcp` answer is a
  result or a clear error (never a bare -32603, never a traceback); where `/healthz` went
  non-200, the gateway is restarted (as an orchestrator would) and the tasks end by the lost-task
  rule;
* every task ends (completed, or failed with a message) within the tool's sleep plus the pool
  wait plus a margin, read from the gateway's own SQLite file (nothing stuck `working`);
* the gateway's open files (/proc/<pid>/fd) stay under the limit.

The 2,000-task run under 1,024 open files is `slow`; `make test` runs 300 tasks under 256.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sqlite3
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.gateway import RunningGateway, http_upstream, start_gateway, write_config
from tests.support.processes import spawn_listening, terminate
from tests.support.servers import REPO_ROOT

SLOW_SERVER = REPO_ROOT / "tests" / "support" / "slow_http_server.py"
HANDSHAKE = "2025-11-25"
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json",
           "mcp-protocol-version": HANDSHAKE}
CLIENTS = 4
PROBE_EVERY = 0.2
# Longest a `/healthz` 200 with `/mcp` 503 may last (a probe pair is not atomic).
DEAD_GRACE = 1.0
POOL_TIMEOUT = 30.0  # upstreams[].pool_timeout_seconds (default): the longest a task waits for a slot
TERMINAL = ("completed", "failed", "cancelled")

pytestmark = pytest.mark.skipif(shutil.which("prlimit") is None, reason="needs util-linux prlimit")


@contextlib.contextmanager
def slow_upstream() -> Iterator[str]:
    lines: list[str] = []
    process, url = spawn_listening([sys.executable, str(SLOW_SERVER)], cwd=REPO_ROOT, env=dict(os.environ),
                                   name="slow", lines=lines, ready_timeout=20)
    try:
        if url is None:
            raise RuntimeError("the slow upstream did not start:\n" + "\n".join(lines))
        yield url
    finally:
        terminate(process)


def message_of(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC message of a JSON or SSE answer; {"raw": text} when there is none."""
    text = response.text
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        datas = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
        answers = [json.loads(d) for d in datas if d and '"id"' in d]
        return answers[-1] if answers else {"raw": text[:300]}
    try:
        message = json.loads(text)
    except ValueError:
        return {"raw": text[:300]}
    return message if isinstance(message, dict) else {"raw": text[:300]}


def unclear(status: int, message: dict[str, Any]) -> str | None:
    """Why an `/mcp` answer is not a result or a clear error, or None."""
    text = json.dumps(message)
    if "Traceback" in text:
        return "a traceback"
    if "raw" in message:
        return f"HTTP {status} without a JSON-RPC message: {message['raw']!r}"
    error = message.get("error")
    if isinstance(error, dict):
        words = str(error.get("message", "")).strip()
        # The gateway's catch-all (a failure it did not expect) names nothing the client can act on.
        generic = ("internal error", "internal server error", "internal gateway error; see the gateway log")
        if not words or words.lower().rstrip(".") in generic:
            return f"a bare error {error.get('code')}: {words!r}"
        return None
    result = message.get("result")
    if not isinstance(result, dict):
        return "neither result nor error"
    if result.get("isError") and not "".join(c.get("text", "") for c in result.get("content", [])).strip():
        return "an error result without text"
    return None


@dataclass
class Probe:
    at: float
    health: int  # 0: no answer (connection refused, timed out)
    mcp: int
    message: dict[str, Any]


@dataclass
class Watch:
    """Probes `/healthz` and a plain `tools/call` every 200 ms, and counts the gateway's open files."""

    gateway: RunningGateway
    probes: list[Probe] = field(default_factory=list)
    fd_peak: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def _probe(self) -> None:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "probe__sleep", "arguments": {"seconds": 0}}}
        with httpx.Client(timeout=60) as client:
            while not self._stop.is_set():
                at = time.monotonic()
                try:
                    health = client.get(self.gateway.base + "/healthz").status_code
                except httpx.HTTPError:
                    health = 0
                try:
                    response = client.post(self.gateway.url, headers=HEADERS, json=body)
                    mcp, message = response.status_code, message_of(response)
                except httpx.HTTPError as exc:
                    mcp, message = 0, {"raw": f"{type(exc).__name__}: {exc}"}
                self.probes.append(Probe(at, health, mcp, message))
                self._stop.wait(max(0.0, PROBE_EVERY - (time.monotonic() - at)))

    def _count_fds(self) -> None:
        while not self._stop.is_set():
            process = self.gateway.process
            if process is not None and process.poll() is None:
                with contextlib.suppress(OSError):
                    self.fd_peak = max(self.fd_peak, len(os.listdir(f"/proc/{process.pid}/fd")))
            self._stop.wait(0.05)

    def __enter__(self) -> "Watch":
        for target in (self._probe, self._count_fds):
            thread = threading.Thread(target=target, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=70)

    def unhealthy(self) -> bool:
        return any(p.health != 200 for p in self.probes)


def create_tasks(url: str, count: int, seconds: float) -> tuple[list[str], list[tuple[int, dict[str, Any]]]]:
    """`count` tasks of `slow__sleep`, from CLIENTS connections at once: their ids, and the answers
    that made no task."""
    ids: list[str] = []
    refused: list[tuple[int, dict[str, Any]]] = []
    lock = threading.Lock()

    def one_client(first: int) -> None:
        with httpx.Client(timeout=60) as client:
            for n in range(first, count, CLIENTS):
                body = {"jsonrpc": "2.0", "id": n, "method": "tools/call",
                        "params": {"name": "slow__sleep", "arguments": {"seconds": seconds}, "task": {"ttl": 3_600_000}}}
                try:
                    response = client.post(url, headers=HEADERS, json=body)
                    status, message = response.status_code, message_of(response)
                except httpx.HTTPError as exc:
                    status, message = 0, {"raw": f"{type(exc).__name__}: {exc}"}
                task = (message.get("result") or {}).get("task") if isinstance(message.get("result"), dict) else None
                with lock:
                    if isinstance(task, dict) and "taskId" in task:
                        ids.append(str(task["taskId"]))
                    else:
                        refused.append((status, message))

    threads = [threading.Thread(target=one_client, args=(n,), daemon=True) for n in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return ids, refused


def task_states(db: Path) -> tuple[Counter[str], Counter[str]]:
    """(tasks per status, tasks that did not succeed per message), read from the gateway's SQLite
    file. A failed task's message is its status message; a task completed with an error result
    (a tool error: the call was not sent, or the upstream said no) is counted by its text."""
    with contextlib.closing(sqlite3.connect(db, timeout=30)) as conn:
        rows = conn.execute("SELECT status, status_message, result FROM dex_tasks").fetchall()
    statuses: Counter[str] = Counter()
    failures: Counter[str] = Counter()
    for status, message, result in rows:
        statuses[status] += 1
        if status == "failed":
            failures[f"failed: {message}"] += 1
        elif status == "completed" and result:
            answer = json.loads(result)
            if answer.get("isError"):
                text = "".join(c.get("text", "") for c in answer.get("content", []) if isinstance(c, dict))
                failures[f"error result: {text}"] += 1
    return statuses, failures


def dead_spells(probes: list[Probe]) -> list[tuple[float, float]]:
    """Spells (start, length) of probes answering `/healthz` 200 and `/mcp` 503 in a row."""
    spells: list[tuple[float, float]] = []
    start: float | None = None
    last = 0.0
    for probe in probes:
        if probe.health == 200 and probe.mcp == 503:
            start = probe.at if start is None else start
            last = probe.at
        elif start is not None:
            spells.append((start, last - start))
            start = None
    if start is not None:
        spells.append((start, last - start))
    return spells


def wait_ready(url: str, timeout: float = 30) -> None:
    """Until `/mcp` answers (a gateway answers 503 "gateway is starting" just after it listens)."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    deadline = time.monotonic() + timeout
    while httpx.post(url, headers=HEADERS, json=body, timeout=30).status_code == 503:
        assert time.monotonic() < deadline, f"the gateway still starting after {timeout} s"
        time.sleep(0.05)


def run_under_limit(tmp_path: Path, *, tasks: int, nofile: int, seconds: float,
                    max_connections: int | None = None) -> dict[str, Any]:
    db = tmp_path / "gateway.db"
    pool = {} if max_connections is None else {"max_connections": max_connections}
    with slow_upstream() as upstream:
        config = write_config(tmp_path, {
            "upstreams": [http_upstream("slow", upstream, **pool), http_upstream("probe", upstream)],
            "fences": {"store": f"sqlite:///{db}"},
            "tasks": {"sweep_interval_seconds": 2},
        })
        with start_gateway(config, prefix=("prlimit", f"--nofile={nofile}:{nofile}")) as gateway:
            wait_ready(gateway.url)
            with Watch(gateway) as watch:
                report = _load(gateway, watch, db, tasks=tasks, seconds=seconds)
            report.update(probes=watch.probes, fd_peak=watch.fd_peak)
        report["upstream"] = httpx.get(upstream.rsplit("/", 1)[0] + "/stats", timeout=10).json()
    return report


def _load(gateway: RunningGateway, watch: Watch, db: Path, *, tasks: int, seconds: float) -> dict[str, Any]:
    """Create the tasks and wait for their ends (restarting a gateway that reports unhealthy)."""
    time.sleep(1.0)  # a few probes of the idle gateway first
    started = time.monotonic()
    ids, refused = create_tasks(gateway.url, tasks, seconds)
    created = time.monotonic()
    # A task waits at most the pool timeout for a connection, then runs `seconds`.
    deadline = created + POOL_TIMEOUT + seconds + 30
    restarted = False
    while True:
        statuses, failed = task_states(db)
        if sum(statuses.get(s, 0) for s in TERMINAL) >= len(ids):
            break
        if not restarted and (watch.unhealthy() or gateway.process is None or gateway.process.poll() is not None):
            # Reported unhealthy: an orchestrator restarts it; then the lost-task rule ends them.
            gateway.restart()
            restarted = True
            deadline = time.monotonic() + 15 + 2 + 30  # lease, sweep, margin
        if time.monotonic() > deadline:
            break
        time.sleep(0.5)
    ended = time.monotonic()
    time.sleep(1.0)  # a few probes after the end
    background: list[str] = []
    with contextlib.suppress(httpx.HTTPError):
        metrics = httpx.get(gateway.base + "/metrics", timeout=10).text
        background = [line for line in metrics.splitlines() if line.startswith("dex_gateway_background_failures")]
    return {"ids": ids, "refused": refused, "statuses": statuses, "failed": failed, "background_failures": background,
            "create_seconds": created - started, "end_seconds": ended - started, "restarted": restarted,
            "log": gateway.log}


def check(report: dict[str, Any], *, tasks: int, nofile: int) -> None:
    probes: list[Probe] = report["probes"]
    summary = {k: report[k] for k in ("statuses", "failed", "fd_peak", "create_seconds", "end_seconds", "restarted",
                                        "upstream", "background_failures")}
    failed: Counter[str] = Counter()  # the open files counted in a message, left out
    for message, n in report["failed"].items():
        failed[re.sub(r"\(\d+ of (\d+) open files\)", r"(N of \1 open files)", message)] += n
    summary["failed"] = failed
    summary["probes"] = Counter((p.health, p.mcp) for p in probes)
    summary["refused"] = Counter((s, str((m.get("error") or {}).get("message", m.get("raw", "")))[:200])
                                 for s, m in report["refused"])
    summary["mcp_answers"] = Counter((p.mcp, str((p.message.get("error") or {}).get("message", p.message.get("raw", "")))[:120])
                                     for p in probes if "result" not in p.message)
    print(f"\n{tasks} tasks under --nofile={nofile}: {summary}")
    # Never /healthz 200 with /mcp dead, beyond a moment.
    spells = [s for s in dead_spells(probes) if s[1] > DEAD_GRACE]
    assert not spells, f"/healthz 200 while /mcp answered 503 for {spells} s: {summary}\n{report['log'][-3000:]}"
    # /mcp kept answering with results or clear errors (or /healthz said it could not).
    bad = [(p.health, p.mcp, why) for p in probes if (why := unclear(p.mcp, p.message)) and p.health == 200]
    assert not bad, f"unclear /mcp answers: {bad[:5]}"
    bad_refusals = [(s, why) for s, m in report["refused"] if (why := unclear(s, m))]
    assert not bad_refusals, f"unclear answers to task creation: {bad_refusals[:5]}"
    assert len(report["ids"]) + len(report["refused"]) == tasks
    # Every task ended; a failed one says why.
    statuses: Counter[str] = report["statuses"]
    assert sum(statuses.get(s, 0) for s in TERMINAL) == len(report["ids"]), f"tasks not ended: {summary}"
    assert all(message.split(": ", 1)[1] not in ("", "None") and "Traceback" not in message
               for message in report["failed"]), summary
    assert report["fd_peak"] < nofile, summary


def test_300_slow_tasks_under_256_open_files(tmp_path: Path) -> None:
    report = run_under_limit(tmp_path, tasks=300, nofile=256, seconds=2)
    check(report, tasks=300, nofile=256)


def test_a_pool_larger_than_the_open_file_limit_is_held_back_by_the_limit(tmp_path: Path) -> None:
    """`max_connections` set past what the limit allows: the open files run short before the pool
    does, so new connections are refused near the limit and the store keeps its files."""
    report = run_under_limit(tmp_path, tasks=300, nofile=256, seconds=2, max_connections=1000)
    check(report, tasks=300, nofile=256)


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize(("max_connections", "seconds"), [(None, 30), (1500, 30)],
                         ids=["default-pool", "pool-past-the-limit"])
def test_2000_slow_tasks_under_1024_open_files(tmp_path: Path, max_connections: int | None, seconds: float) -> None:
    """A sleep long enough that, unbounded, more calls run at once than the limit has files (the
    code before the bounded pools ran out of files here). The default pool (100): most tasks wait
    for a connection, then end "not sent". A pool past the limit: the limit holds them back."""
    report = run_under_limit(tmp_path, tasks=2000, nofile=1024, seconds=seconds, max_connections=max_connections)
    check(report, tasks=2000, nofile=1024)
