"""Soak: a gateway under a steady mixed load for minutes, with its errors, RSS and open fds over time.

    .venv/bin/python bench/soak.py [--duration 600] [--concurrency 32] [--sample-every 5] [--json]

Starts bench/echo_server.py (stateless Streamable HTTP, JSON answers) and a `dex-gateway serve`
fronting it (`prefix: ""`, SQLite fences and tasks), then runs `--concurrency` workers for
`--duration` seconds, each on its own keep-alive connection (raw HTTP/1.1, bench/loadgen.py),
picking for every request one of:

  * read    (40 %) - tools/call `echo` (effect read, no fence);
  * write   (20 %) - tools/call `write` (non_idempotent_write) with a fresh idempotency key;
  * replay  (15 %) - the same `write` again with an earlier key and arguments: answered from
                     the fence (`_meta["dex-gateway/replayed"]`), never sent upstream again;
  * list    (15 %) - tools/list;
  * task    (10 %) - tools/call `echo` with `task: {ttl}` (2025-11-25 core tasks), then
                     tasks/result for its id.

An error is any non-200, JSON-RPC error, `isError` result, replay not marked replayed, or
connection failure. Every `--sample-every` seconds the gateway's RSS (/proc/PID/status VmRSS)
and open fds (/proc/PID/fd) are sampled. Goal (reliability issue): 0 errors, flat RSS and fds
(`flat`: the last third's maximum within 10 % (RSS) / 16 fds of the first third's after warm-up).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from gateway_overhead import PYTHON, Proc, start  # noqa: E402
from loadgen import IDEMPOTENCY_KEY, RawConnection, era_headers, parse_answer  # noqa: E402

REPLAYED = "dex-gateway/replayed"
MIX = [("read", 40), ("write", 20), ("replay", 15), ("list", 15), ("task", 10)]


def gateway_config(upstream_url: str, db: Path) -> str:
    return (
        "server: {host: 127.0.0.1, port: 0}\n"
        "upstreams:\n"
        f'  - {{name: bench, transport: streamable_http, url: "{upstream_url}", prefix: ""}}\n'
        f'fences: {{store: "sqlite:///{db}"}}\n'
    )


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


class Soak:
    def __init__(self, url: str, seed: int) -> None:
        self.url = url
        self.rng = random.Random(seed)
        self.prefix = f"soak/{uuid.uuid4().hex[:8]}/"
        self.counts: dict[str, int] = {kind: 0 for kind, _ in MIX}
        self.errors: dict[str, int] = {kind: 0 for kind, _ in MIX}
        self.error_samples: list[str] = []
        self.written: list[tuple[str, str]] = []  # (key, text) of writes that succeeded
        self.next_id = 0

    def _id(self) -> int:
        self.next_id += 1
        return self.next_id

    async def _rpc(self, conn: RawConnection, method: str, params: dict[str, Any]) -> dict[str, Any]:
        request_id = self._id()
        body = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}).encode()
        status, content_type, data = await asyncio.wait_for(conn.post(body), 60.0)
        if status != 200:
            raise RuntimeError(f"{method}: HTTP {status}: {data[:200]!r}")
        message = parse_answer(content_type, data, request_id)
        if "error" in message:
            raise RuntimeError(f"{method}: {json.dumps(message['error'])[:200]}")
        result = message["result"]
        if result.get("isError"):
            raise RuntimeError(f"{method}: isError: {json.dumps(result)[:200]}")
        return result

    async def one(self, kind: str, conn: RawConnection) -> None:
        if kind == "read":
            await self._rpc(conn, "tools/call", {"name": "echo", "arguments": {"text": "hello"}})
        elif kind == "write" or (kind == "replay" and not self.written):
            key, text = f"{self.prefix}{self._id()}", f"w{self.rng.randrange(10**6)}"
            await self._rpc(conn, "tools/call", {"name": "write", "arguments": {"text": text}, "_meta": {IDEMPOTENCY_KEY: key}})
            self.written.append((key, text))
            if len(self.written) > 1000:
                del self.written[:500]
        elif kind == "replay":
            key, text = self.rng.choice(self.written)
            result = await self._rpc(conn, "tools/call", {"name": "write", "arguments": {"text": text}, "_meta": {IDEMPOTENCY_KEY: key}})
            if not (result.get("_meta") or {}).get(REPLAYED):
                raise RuntimeError(f"replay of {key} not answered from the fence: {json.dumps(result)[:200]}")
        elif kind == "list":
            result = await self._rpc(conn, "tools/list", {})
            if {t["name"] for t in result.get("tools", [])} < {"echo", "write"}:
                raise RuntimeError(f"tools/list lacks echo/write: {json.dumps(result)[:200]}")
        else:
            created = await self._rpc(conn, "tools/call", {"name": "echo", "arguments": {"text": "task"}, "task": {"ttl": 60000}})
            task_id = created["task"]["taskId"]
            result = await self._rpc(conn, "tasks/result", {"taskId": task_id})
            if "content" not in result:
                raise RuntimeError(f"tasks/result of {task_id}: {json.dumps(result)[:200]}")

    async def worker(self, deadline: float) -> None:
        conn = RawConnection(self.url, era_headers("handshake", ""))
        kinds, weights = [k for k, _ in MIX], [w for _, w in MIX]
        while time.monotonic() < deadline:
            kind = self.rng.choices(kinds, weights)[0]
            self.counts[kind] += 1
            try:
                await self.one(kind, conn)
            except Exception as exc:  # noqa: BLE001 - counted and reported, the soak goes on
                self.errors[kind] += 1
                if len(self.error_samples) < 5:
                    self.error_samples.append(f"{kind}: {type(exc).__name__}: {str(exc)[:200]}")
                if conn.writer is not None:
                    conn.writer.close()
                conn.writer = None


async def sample(pid: int, deadline: float, every: float, t0: float, out: list[dict[str, float]]) -> None:
    while True:
        out.append({"t": round(time.monotonic() - t0, 1), "rss_mb": round(rss_kb(pid) / 1024, 1), "fds": open_fds(pid)})
        if time.monotonic() >= deadline:
            return
        await asyncio.sleep(min(every, max(0.0, deadline - time.monotonic())))


async def run(url: str, pid: int, duration: float, concurrency: int, every: float) -> dict[str, Any]:
    soak = Soak(url, seed=7)
    t0 = time.monotonic()
    deadline = t0 + duration
    samples: list[dict[str, float]] = []
    sampler = asyncio.create_task(sample(pid, deadline, every, t0, samples))
    await asyncio.gather(*(soak.worker(deadline) for _ in range(concurrency)))
    await sampler
    return {"requests": soak.counts, "errors": soak.errors, "error_samples": soak.error_samples, "samples": samples,
            "wall_s": time.monotonic() - t0}


def flat(samples: list[dict[str, float]]) -> tuple[bool, str]:
    third = max(1, len(samples) // 3)
    first = samples[1:third + 1] or samples[:1]  # past the first sample (warm-up)
    last = samples[-third:]
    rss0, rss1 = max(s["rss_mb"] for s in first), max(s["rss_mb"] for s in last)
    fd0, fd1 = max(s["fds"] for s in first), max(s["fds"] for s in last)
    ok = rss1 <= rss0 * 1.10 and fd1 <= fd0 + 16
    return ok, f"RSS max {rss0:.1f} -> {rss1:.1f} MB, fds max {fd0:.0f} -> {fd1:.0f} (first third -> last third)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of load (default 600)")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--sample-every", type=float, default=5.0)
    parser.add_argument("--json", action="store_true", help="print the whole result as JSON too")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="dex-soak-"))
    procs: list[Proc] = []
    try:
        upstream = start("upstream", [PYTHON, str(HERE / "echo_server.py"), "--port", "0", "--json-response"], workdir)
        procs.append(upstream)
        cfg = workdir / "gateway.yaml"
        cfg.write_text(gateway_config(upstream.url, workdir / "soak.db"))
        exe = shutil.which("dex-gateway", path=str(Path(PYTHON).parent)) or "dex-gateway"
        gateway = start("gateway", [exe, "serve", "--config", str(cfg), "--port", "0"], workdir, env=dict(os.environ), timeout=60)
        procs.append(gateway)
        from gateway_overhead import wait_for_tools

        wait_for_tools(gateway.url, {"echo", "write"})
        result = asyncio.run(run(gateway.url, gateway.popen.pid, args.duration, args.concurrency, args.sample_every))
        result["gateway_cpu_s"] = gateway.cpu_seconds()
        if args.json:
            print(json.dumps(result, indent=2))
        total = sum(result["requests"].values())
        errors = sum(result["errors"].values())
        print(f"soak: {args.duration:g} s, c={args.concurrency}, {total} requests ({total / result['wall_s']:.0f}/s), "
              f"{errors} errors, gateway CPU {result['gateway_cpu_s']:.0f} s")
        for kind, _ in MIX:
            print(f"  {kind:<7} {result['requests'][kind]:>8} requests {result['errors'][kind]:>5} errors")
        for sample_ in result["error_samples"]:
            print(f"  error: {sample_}")
        print("  t s      RSS MB   fds")
        for s in result["samples"]:
            print(f"  {s['t']:>6.0f} {s['rss_mb']:>9.1f} {s['fds']:>5.0f}")
        is_flat, detail = flat(result["samples"])
        print(f"{detail}; goal 0 errors, flat RSS and fds: {'MET' if errors == 0 and is_flat else 'NOT MET'}")
        return 0
    finally:
        for p in reversed(procs):
            p.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
