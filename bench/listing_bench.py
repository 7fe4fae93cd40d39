"""Listing at scale: `tools/list` of 1,000 tools (20 stdio upstreams x 50 tools) from the cache.

    .venv/bin/python bench/listing_bench.py [--upstreams 20] [--tools 50] [--requests 300]
        [--baseline-pythonpath DIR]   # also run a gateway copy in DIR (e.g. the code before a change)

Starts `dex-gateway serve` fronting `--upstreams` copies of bench/many_tools_server.py over
stdio, waits until every tool is listed, then times `tools/list` requests (c=1, keep-alive,
raw HTTP/1.1: the time from sending the request to the last byte of the answer, no JSON
parsing on the client) in both protocol eras. With `--baseline-pythonpath`, a second gateway
running that copy is measured in the same run, requests alternating between the two.

Goal (issue 12): p50 <= 5 ms in both eras (the merged listing serialised once per catalog
version and principal scope, not per request).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from gateway_overhead import PYTHON, SCRATCH_LAUNCHER, Proc, percentile, start  # noqa: E402
from loadgen import MODERN, MODERN_ENVELOPE, RawConnection, era_headers  # noqa: E402

GOAL_P50_MS = 5.0


def config_text(upstreams: int, tools: int, db: Path) -> str:
    lines = ["server: {host: 127.0.0.1, port: 0}", "upstreams:"]
    for i in range(upstreams):
        args = json.dumps([str(HERE / "many_tools_server.py"), "--tools", str(tools), "--name", f"s{i:02d}"])
        lines.append(f"  - {{name: u{i:02d}, transport: stdio, command: {json.dumps(PYTHON)}, args: {args}}}")
    lines.append(f'fences: {{store: "sqlite:///{db}"}}')
    return "\n".join(lines) + "\n"


def list_body(era: str, request_id: int) -> bytes:
    params: dict = {"_meta": dict(MODERN_ENVELOPE)} if era == MODERN else {}
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/list", "params": params}).encode()


async def wait_listed(url: str, expected: int, timeout: float = 120.0) -> int:
    conn = RawConnection(url, era_headers("handshake", ""))
    deadline = time.monotonic() + timeout
    count = 0
    while time.monotonic() < deadline:
        _, content_type, data = await conn.post(list_body("handshake", 1))
        text = data.decode()
        if "data:" in text and not content_type.startswith("application/json"):
            text = [line[5:] for line in text.splitlines() if line.startswith("data:")][-1]
        count = len(json.loads(text).get("result", {}).get("tools", []))
        if count >= expected:
            return count
        await asyncio.sleep(0.5)
    raise SystemExit(f"only {count} of {expected} tools listed at {url} after {timeout:g} s")


async def measure(urls: dict[str, str], era: str, requests: int) -> dict[str, dict[str, float]]:
    headers = {**era_headers(era, ""), "mcp-method": "tools/list"} if era == MODERN else era_headers(era, "")
    headers.pop("mcp-name", None)
    conns = {name: RawConnection(url, headers) for name, url in urls.items()}
    times: dict[str, list[float]] = {name: [] for name in urls}
    sizes: dict[str, int] = {}
    for i in range(requests + 20):
        for name, conn in conns.items():
            body = list_body(era, i)
            t0 = time.perf_counter()
            status, _, data = await conn.post(body)
            elapsed = (time.perf_counter() - t0) * 1000
            if status != 200:
                raise SystemExit(f"{name} {era}: HTTP {status}: {data[:300]!r}")
            sizes[name] = len(data)
            if i >= 20:  # warm-up
                times[name].append(elapsed)
    return {name: {"p50_ms": percentile(t, 50), "p99_ms": percentile(t, 99), "bytes": sizes[name]} for name, t in times.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--upstreams", type=int, default=20)
    parser.add_argument("--tools", type=int, default=50)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--baseline-pythonpath", help="also measure the gateway package copy in this dir")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="dex-listing-"))
    procs: list[Proc] = []
    try:
        urls: dict[str, str] = {}
        variants = [("gateway", None)] + ([("baseline", args.baseline_pythonpath)] if args.baseline_pythonpath else [])
        for name, pythonpath in variants:
            cfg = workdir / f"{name}.yaml"
            cfg.write_text(config_text(args.upstreams, args.tools, workdir / f"{name}.db"))
            if pythonpath:
                cmd = [PYTHON, "-c", SCRATCH_LAUNCHER, pythonpath, "serve", "--config", str(cfg), "--port", "0"]
            else:
                exe = shutil.which("dex-gateway", path=str(Path(PYTHON).parent)) or "dex-gateway"
                cmd = [exe, "serve", "--config", str(cfg), "--port", "0"]
            proc = start(name, cmd, workdir, env=dict(os.environ), timeout=120)
            procs.append(proc)
            urls[name] = proc.url
        expected = args.upstreams * args.tools
        for name, url in urls.items():
            asyncio.run(wait_listed(url, expected))
        print(f"tools/list of {expected} tools ({args.upstreams} stdio upstreams x {args.tools}), c=1, {args.requests} requests")
        print(f"{'era':<12} {'variant':<10} {'p50 ms':>8} {'p99 ms':>8} {'bytes':>9}")
        ok = True
        for era in ("handshake", MODERN):
            results = asyncio.run(measure(urls, era, args.requests))
            for name, r in results.items():
                print(f"{era:<12} {name:<10} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} {r['bytes']:>9}")
                if name == "gateway":
                    ok = ok and r["p50_ms"] <= GOAL_P50_MS
        print(f"goal: p50 <= {GOAL_P50_MS:g} ms in both eras: {'MET' if ok else 'NOT MET'}")
        return 0
    finally:
        for p in reversed(procs):
            p.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
