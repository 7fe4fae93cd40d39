"""Start at scale: how long until every tool is listed, and how slow is `tools/list` meanwhile.

    .venv/bin/python bench/start_bench.py [--shapes 100x100,10x1000] [--baseline-pythonpath DIR] [--json]

For each shape UxT it starts bench/many_tools_server.py (`--http --empty-lists`: U servers of
T tools in one process, each also answering the prompt and resource lists with nothing) and a
`dex-gateway serve` with U Streamable HTTP upstreams, one per server. From the moment the
gateway logs `listening on`, two clients send `tools/list` back to back (keep-alive, raw
HTTP/1.1) until one answer holds all U*T tools, and `--after` seconds more (while the gateway
lists every upstream's prompts and resources). Reported per shape and variant:

  * listed s    - seconds from `listening on` to the first answer with every tool;
  * first s     - the slowest answer to a request sent before every tool was listed (such a
                  request awaits the upstreams' first listings, SPEC 2: the upstreams' time);
  * p50 / max list s - answers to requests sent once every tool was listed (goal: max <= 1 s);
  * lists, errors - answers received, and requests that failed (reset, non-200);
  * rebuilds    - `dex_gateway_catalog_rebuilds_total` from /metrics (the baseline has none);
  * cpu s       - the gateway process's CPU seconds, start-up included.

Goal (reliability issue, item 5): listed s of 100x100 <= 2 x listed s of 10x1000, and
max list s <= 1 s. `--baseline-pythonpath DIR` also runs the gateway package copy in DIR
(e.g. `git archive d946b15 gateway | tar -x -C DIR`), after the current one, for each shape.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from gateway_overhead import PYTHON, SCRATCH_LAUNCHER, Proc, start  # noqa: E402
from loadgen import RawConnection, era_headers  # noqa: E402

GOAL_MAX_LIST_S = 1.0
GOAL_RATIO = 2.0
LIST_BODY = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}).encode()


def config_text(base: str, upstreams: int, db: Path) -> str:
    lines = ["server: {host: 127.0.0.1, port: 0}", "upstreams:"]
    for i in range(upstreams):
        lines.append(f'  - {{name: u{i:02d}, transport: streamable_http, url: "{base}/s{i:02d}/mcp"}}')
    lines.append(f'fences: {{store: "sqlite:///{db}"}}')
    return "\n".join(lines) + "\n"


def tool_count(content_type: str, data: bytes) -> int:
    text = data.decode()
    if not content_type.startswith("application/json"):
        events = [line[5:] for line in text.splitlines() if line.startswith("data:")]
        if not events:
            return 0
        text = events[-1]
    return len(json.loads(text).get("result", {}).get("tools", []))


async def poll_until_listed(url: str, expected: int, timeout: float, after: float) -> dict[str, Any]:
    """Two clients list tools back to back until all are listed and `after` seconds more."""
    t0 = time.monotonic()
    stats: dict[str, Any] = {"listed_s": None, "first_wait_s": 0.0, "max_list_s": 0.0, "lists": 0, "errors": 0,
                             "error_samples": []}
    after_listed: list[float] = []

    def finished() -> bool:
        listed = stats["listed_s"]
        return (listed is not None and time.monotonic() - t0 > listed + after) or time.monotonic() - t0 > timeout

    async def client() -> None:
        conn = RawConnection(url, era_headers("handshake", ""))
        while not finished():
            started = time.monotonic()
            was_listed = stats["listed_s"] is not None
            try:
                status, content_type, data = await conn.post(LIST_BODY)
            except (OSError, asyncio.IncompleteReadError) as exc:
                stats["errors"] += 1
                stats["error_samples"].append(repr(exc)[:120])
                conn.writer = None
                await asyncio.sleep(0.05)
                continue
            elapsed = time.monotonic() - started
            if status == 503:  # the lifespan has not built the runtime yet: "gateway is starting"
                await asyncio.sleep(0.02)
                continue
            stats["lists"] += 1
            # Asked before every tool was listed: it awaits the upstreams' first listings (SPEC 2).
            key = "max_list_s" if was_listed else "first_wait_s"
            stats[key] = max(stats[key], elapsed)
            if was_listed:
                after_listed.append(elapsed)
            if status != 200:
                stats["errors"] += 1
                stats["error_samples"].append(f"HTTP {status}: {data[:120]!r}")
                continue
            # (Parsed only until listed: 4 MB of JSON would stall the other client's timing.)
            if stats["listed_s"] is None and tool_count(content_type, data) >= expected:
                stats["listed_s"] = time.monotonic() - t0

    await asyncio.gather(client(), client())
    stats["error_samples"] = stats["error_samples"][:3]
    stats["p50_list_s"] = sorted(after_listed)[len(after_listed) // 2] if after_listed else float("nan")
    return stats


def rebuilds(url: str) -> float | None:
    import httpx

    base = url.rsplit("/", 1)[0]
    try:
        text = httpx.get(f"{base}/metrics", timeout=60).text
    except httpx.HTTPError:
        return None
    match = re.search(r"^dex_gateway_catalog_rebuilds_total (\S+)$", text, re.M)
    return float(match.group(1)) if match else None


def run_shape(upstreams: int, tools: int, variant: str, pythonpath: str | None, workdir: Path, timeout: float,
              after: float) -> dict[str, Any]:
    procs: list[Proc] = []
    try:
        server = start(f"servers-{upstreams}x{tools}-{variant}", [
            PYTHON, str(HERE / "many_tools_server.py"), "--http", "--servers", str(upstreams), "--tools", str(tools),
            "--empty-lists",
        ], workdir, timeout=120)
        procs.append(server)
        cfg = workdir / f"{variant}-{upstreams}x{tools}.yaml"
        cfg.write_text(config_text(server.url, upstreams, workdir / f"{variant}-{upstreams}x{tools}.db"))
        if pythonpath:
            cmd = [PYTHON, "-c", SCRATCH_LAUNCHER, pythonpath, "serve", "--config", str(cfg), "--port", "0"]
        else:
            exe = shutil.which("dex-gateway", path=str(Path(PYTHON).parent)) or "dex-gateway"
            cmd = [exe, "serve", "--config", str(cfg), "--port", "0"]
        gateway = start(f"gateway-{upstreams}x{tools}-{variant}", cmd, workdir, env=dict(os.environ), timeout=120)
        procs.append(gateway)
        stats = asyncio.run(poll_until_listed(gateway.url, upstreams * tools, timeout, after))
        stats["rebuilds"] = rebuilds(gateway.url)
        print(f"{upstreams}x{tools} {variant}: {stats}", file=sys.stderr, flush=True)
        stats["gateway_cpu_s"] = gateway.cpu_seconds()
        return {"shape": f"{upstreams}x{tools}", "variant": variant, **stats}
    finally:
        for p in reversed(procs):
            p.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", default="100x100,10x1000", help="comma-separated UPSTREAMSxTOOLS")
    parser.add_argument("--baseline-pythonpath", help="also measure the gateway package copy in this dir")
    parser.add_argument("--timeout", type=float, default=300.0, help="give up on a shape after this many seconds")
    parser.add_argument("--after", type=float, default=10.0,
                        help="keep listing this long after all tools are listed (prompts and resources arrive)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    shapes = [tuple(int(n) for n in s.split("x")) for s in args.shapes.split(",")]
    variants: list[tuple[str, str | None]] = [("gateway", None)]
    if args.baseline_pythonpath:
        variants.append(("baseline", args.baseline_pythonpath))
    workdir = Path(tempfile.mkdtemp(prefix="dex-start-"))
    rows = []
    try:
        for upstreams, tools in shapes:
            for variant, pythonpath in variants:
                rows.append(run_shape(upstreams, tools, variant, pythonpath, workdir, args.timeout, args.after))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        print(json.dumps(rows, indent=2))
    print(f"{'shape':<9} {'variant':<9} {'listed s':>9} {'first s':>8} {'p50 list s':>11} {'max list s':>11} {'lists':>6} "
          f"{'errors':>6} "
          f"{'rebuilds':>9} {'cpu s':>7}")
    for r in rows:
        listed = f"{r['listed_s']:.2f}" if r["listed_s"] is not None else "never"
        rb = f"{r['rebuilds']:.0f}" if r["rebuilds"] is not None else "-"
        print(f"{r['shape']:<9} {r['variant']:<9} {listed:>9} {r['first_wait_s']:>8.2f} {r['p50_list_s']:>11.2f} {r['max_list_s']:>11.2f} {r['lists']:>6} {r['errors']:>6} {rb:>9} {r['gateway_cpu_s']:>7.2f}")
        for sample in r["error_samples"]:
            print(f"    error: {sample}")
    for variant, _ in variants:
        mine = {r["shape"]: r for r in rows if r["variant"] == variant}
        wide, deep = mine.get("100x100"), mine.get("10x1000")
        if wide and deep and wide["listed_s"] and deep["listed_s"]:
            ok = wide["listed_s"] <= GOAL_RATIO * deep["listed_s"] and all(
                r["max_list_s"] <= GOAL_MAX_LIST_S for r in mine.values())
            print(f"{variant}: 100x100 / 10x1000 listed = {wide['listed_s'] / deep['listed_s']:.2f} (goal <= {GOAL_RATIO:g}), "
                  f"max tools/list {max(r['max_list_s'] for r in mine.values()):.2f} s (goal <= {GOAL_MAX_LIST_S:g}): "
                  f"{'MET' if ok else 'NOT MET'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
