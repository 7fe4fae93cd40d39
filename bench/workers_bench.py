"""Throughput of `dex-gateway serve --workers 1` vs `--workers 2`, side by side.

    .venv/bin/python bench/workers_bench.py [--rounds 3] [--calls 6000] [--concurrency 32]

Two workloads per round, each through a fresh gateway with 1 and then 2 workers:

* `replay`: fenced calls that all carry one idempotency key, so every call after the first is
  answered from the gateway's SQLite fence and the upstream is not called: the gateway is the
  bottleneck (what a second core can help with);
* `read`: the `echo` read tool, each call sent to the upstream (bench/echo_server.py): the
  upstream and the gateway share the box's cores.

Driver: bench/loadgen.py (raw HTTP/1.1, its own process). Loopback only.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from gateway_overhead import PYTHON, ROOT, start, wait_for_tools  # noqa: E402


def drive(url: str, tool: str, args: argparse.Namespace, key: str | None) -> tuple[float, int]:
    cmd = [PYTHON, str(HERE / "loadgen.py"), "--url", url, "--tool", tool, "--concurrency", str(args.concurrency),
           "--calls", str(args.calls), "--warmup", "300", "--max-seconds", "60"]
    if key:
        cmd += ["--same-key", key]
    out = json.loads(subprocess.run(cmd, capture_output=True, check=True, cwd=ROOT).stdout)
    return len(out["latencies_ms"]) / out["wall_s"], out["errors"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=6000)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="dex-workers-bench-"))
    upstream = start("upstream", [PYTHON, str(HERE / "echo_server.py"), "--port", "0"], workdir)
    exe = shutil.which("dex-gateway", path=str(Path(PYTHON).parent)) or "dex-gateway"
    results: dict[tuple[str, int], list[float]] = {}
    try:
        for n in range(args.rounds):
            for workers in (1, 2):
                config = workdir / f"gateway-{n}-{workers}.yaml"
                config.write_text(
                    "server: {host: 127.0.0.1, port: 0}\n"
                    f"upstreams:\n  - {{name: e, transport: streamable_http, url: \"{upstream.url}\", prefix: \"\"}}\n"
                    f"fences: {{store: \"sqlite:///{workdir / f'fences-{n}-{workers}.db'}\"}}\n"
                )
                gateway = start(f"gateway-{n}-{workers}", [exe, "serve", "--config", str(config), "--port", "0",
                                                           "--workers", str(workers)], workdir)
                try:
                    wait_for_tools(gateway.url, {"echo", "write"})
                    for workload, tool, key in (("replay", "write", f"replay-{n}-{workers}"), ("read", "echo", None)):
                        rate, errors = drive(gateway.url, tool, args, key)
                        if errors:
                            raise SystemExit(f"{workload} with {workers} worker(s): {errors} errors")
                        results.setdefault((workload, workers), []).append(rate)
                finally:
                    gateway.stop()
    finally:
        upstream.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"calls/s through the gateway, c={args.concurrency}, {args.calls} calls per run, {args.rounds} rounds:")
    for workload in ("replay", "read"):
        one, two = results[(workload, 1)], results[(workload, 2)]
        ratios = [b / a for a, b in zip(one, two)]
        print(f"  {workload:<7} 1 worker {' '.join(f'{r:6.0f}' for r in one)} | 2 workers {' '.join(f'{r:6.0f}' for r in two)}"
              f" | 2/1: {' '.join(f'{r:.2f}' for r in ratios)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
