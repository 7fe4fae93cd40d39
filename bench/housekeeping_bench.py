"""Housekeeping at 10^6 fences (the reliability issue, items 2-4), against a real `dex-gateway serve`:

    .venv/bin/python bench/housekeeping_bench.py [--rows 1000000]

1. fills ROWS finished fences into an SQLite file through the store's own code (insert_if_absent);
2. sweep: a gateway whose retention those fences pass while `/healthz` and `/readyz` are probed
   every 50 ms: the slowest probe of each (goal: under 100 ms);
3. purge: `dex-gateway fences purge --older-than 24h` of ROWS fences while 4 clients send fenced
   writes: failed calls (goal: 0) and the fenced-write p99 before and during the purge (goal:
   during ≤ 10x before).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sqlite3
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.operations.test_housekeeping import Prober, fill_fences  # noqa: E402
from tests.support.gateway import (  # noqa: E402
    http_upstream, run_gateway_cli, start_gateway, stdio_upstream, write_config,
)
from tests.support.processes import spawn_listening  # noqa: E402
from tests.support.servers import REPO_ROOT  # noqa: E402
from tests.tasks.tasks_support import HANDSHAKE, post  # noqa: E402


def p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] if ordered else float("nan")


class Load:
    """Clients sending fenced writes (a new key each) in a loop; latencies by phase, failures."""

    def __init__(self, url: str, clients: int = 4) -> None:
        self.url = url
        self.phase = "warmup"
        self.samples: dict[str, list[float]] = {"warmup": [], "before": [], "during": [], "after": []}
        self.failures: list[object] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(clients)]

    def _run(self) -> None:
        while not self._stop.is_set():
            key = f"load/{uuid.uuid4().hex}"
            params = {"name": "e__write", "arguments": {"text": key}}
            phase = self.phase
            started = time.perf_counter()
            status, message = post(self.url, "tools/call", params, era=HANDSHAKE, key=key)
            took = time.perf_counter() - started
            if phase != "warmup" and (status != 200 or "result" not in message or message["result"].get("isError")):
                self.failures.append(message)
            self.samples[phase].append(took)

    def __enter__(self) -> "Load":
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--template", type=Path, help="a file filled by an earlier run (its fences' age is taken "
                        "from it): skips the fill, which takes minutes at 10^6")
    parser.add_argument("--part", choices=("sweep", "purge", "both"), default="both")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        template = root / "template.db"
        t0 = time.monotonic()
        if args.template is not None:
            shutil.copy(args.template, template)
            with sqlite3.connect(template) as conn:
                newest = conn.execute("SELECT max(updated_at) FROM fences").fetchone()[0]
            t0 -= time.time() - newest  # as if filled just now
            print(f"reusing {args.template} ({template.stat().st_size / 2**20:.0f} MiB)")
        else:
            fill_fences(template, args.rows, age_seconds=0)  # updated_at: when the fill began
            fill_seconds = time.monotonic() - t0
            print(f"filled {args.rows} fences through insert_if_absent in {fill_seconds:.0f} s "
                  f"({template.stat().st_size / 2**20:.0f} MiB)")

        if args.part in ("sweep", "both"):
            sweep(root, template, t0)
        if args.part in ("purge", "both"):
            purge(root, template)


def sweep(root: Path, template: Path, t0: float) -> None:
    # -- the sweep ---------------------------------------------------------------------
    sweep_dir = root / "sweep"
    sweep_dir.mkdir()
    db = sweep_dir / "gateway.db"
    shutil.copy(template, db)
    # The fences pass retention 30 s from now: after the gateway started and the probing began.
    retention = time.monotonic() - t0 + 30
    config = write_config(sweep_dir, {
        "upstreams": [stdio_upstream("s", "tasks_server", state_dir=sweep_dir / "stdio")],
        "fences": {"store": f"sqlite:///{db}", "retention_hours": retention / 3600, "sweep_interval_seconds": 1},
    })
    with start_gateway(config) as gateway, Prober(gateway.base) as prober:
        quiet_from = time.monotonic()
        pass_at = t0 + retention - 1
        print(f"sweep: waiting {max(0, pass_at - time.monotonic()):.0f} s for the fences to pass retention")
        match = gateway.wait_for_log(r"fence sweep: (\d+) fences past retention deleted",
                                     timeout=retention + 900)
        swept_at = time.monotonic()
    quiet = prober.slowest_between(quiet_from, pass_at)
    during = prober.slowest_between(pass_at, swept_at)
    print(f"sweep: {match.group(1)} fences deleted within {swept_at - pass_at:.0f} s of passing retention; "
          f"probes every 50 ms: slowest during the sweep /healthz {during['/healthz'] * 1000:.1f} ms, /readyz "
          f"{during['/readyz'] * 1000:.1f} ms; before it (idle, {pass_at - quiet_from:.0f} s) /healthz "
          f"{quiet['/healthz'] * 1000:.1f} ms, /readyz {quiet['/readyz'] * 1000:.1f} ms; "
          f"{sum(1 for at, _, took in prober.samples if pass_at <= at <= swept_at and took > 0.1)} of "
          f"{sum(1 for at, _, _ in prober.samples if pass_at <= at <= swept_at)} probes over 100 ms during it; "
          f"failures {len(prober.failures)}; file {db.stat().st_size / 2**20:.0f} MiB after")



def purge(root: Path, template: Path) -> None:
    # -- the purge ---------------------------------------------------------------------
    purge_dir = root / "purge"
    purge_dir.mkdir()
    db = purge_dir / "gateway.db"
    shutil.copy(template, db)
    # The upstream: bench/echo_server.py (`write`: a non-idempotent write answered at once), so
    # the latency measured is the gateway's and its fence's.
    lines: list[str] = []
    echo, echo_url = spawn_listening([sys.executable, str(Path(__file__).with_name("echo_server.py")), "--port", "0"],
                                     cwd=REPO_ROOT, env=dict(os.environ), name="echo", lines=lines, ready_timeout=30)
    assert echo_url is not None, lines
    config = write_config(purge_dir, {
        "upstreams": [http_upstream("e", echo_url)],
        "fences": {"store": f"sqlite:///{db}"},
        "tasks": {"enabled": False},
    })
    with contextlib.ExitStack() as stack:
        stack.callback(echo.wait, 10)
        stack.callback(echo.terminate)
        gateway = stack.enter_context(start_gateway(config))
        assert post(gateway.url, "tools/list", {}, era=HANDSHAKE)[0] == 200
        with Load(gateway.url) as load:
            time.sleep(5)
            load.phase = "before"
            time.sleep(15)
            load.phase = "during"
            started = time.monotonic()
            done = run_gateway_cli("fences", "purge", "--config", str(config), "--older-than", "1s", timeout=900)
            purge_seconds = time.monotonic() - started
            load.phase = "after"
            time.sleep(3)
        size = db.stat().st_size / 2**20
    print(f"purge: {done.stdout.strip()} in {purge_seconds:.1f} s (exit {done.returncode}) {done.stderr.strip()[-300:]}")
    before, during = p99(load.samples["before"]), p99(load.samples["during"])
    print(f"purge: fenced writes before {len(load.samples['before'])} p99 {before * 1000:.1f} ms; during "
          f"{len(load.samples['during'])} p99 {during * 1000:.1f} ms ({during / before:.1f}x); failed calls "
          f"{len(load.failures)} {load.failures[:2]}; file {size:.0f} MiB after")


if __name__ == "__main__":
    main()
