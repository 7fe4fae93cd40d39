"""Fence overhead per tools/call: begin + holding + complete vs a no-op upstream call.

    .venv/bin/python bench/fence_store_bench.py [--calls N] [--pg URL]

Goal (SPEC 4 issue): under 0.5 ms added at p50 on SQLite. PostgreSQL is measured when
reachable (a scratch schema is created and dropped). Calls are sequential, so the figures
are per-call latency, not throughput.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import asyncpg

from gateway.conventions.keys import Effect
from gateway.fences import Fences, Owner, Proceed, Replay, open_fence_store

ANSWER: dict[str, Any] = {"content": [{"type": "text", "text": "ok " * 40}], "isError": False}


async def noop_upstream() -> dict[str, Any]:
    await anyio.lowlevel.checkpoint()
    return ANSWER


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def timed(n: int, warmup: int, call: Callable[[int], Awaitable[None]]) -> list[float]:
    for i in range(warmup):
        await call(-1 - i)
    out: list[float] = []
    for i in range(n):
        t0 = time.perf_counter()
        await call(i)
        out.append((time.perf_counter() - t0) * 1000)
    return out


async def measure(url: str, n: int, warmup: int) -> dict[str, list[float]]:
    async with open_fence_store(url) as store:
        fences = Fences(store, Owner.fresh("bench"))
        run = uuid.uuid4().hex[:8]

        async def baseline(i: int) -> None:
            await noop_upstream()

        async def fenced(i: int) -> None:
            r = await fences.begin(principal="bench", key=f"{run}-{i}", tool="t", arguments={"i": i},
                                   effect=Effect.NON_IDEMPOTENT_WRITE)
            assert isinstance(r, Proceed)
            async with fences.holding(r.ticket):
                answer = await noop_upstream()
            await fences.complete(r.ticket, answer)

        async def replay(i: int) -> None:
            r = await fences.begin(principal="bench", key=f"{run}-{max(i, 0)}", tool="t", arguments={"i": max(i, 0)},
                                   effect=Effect.NON_IDEMPOTENT_WRITE)
            assert isinstance(r, Replay)

        return {
            "baseline": await timed(n, warmup, baseline),
            "fenced": await timed(n, warmup, fenced),
            "replay": await timed(n, warmup, replay),
        }


async def pg_scratch(base: str) -> str | None:
    try:
        conn = await asyncpg.connect(base, timeout=3)
    except Exception as exc:  # reported, then skipped: the bench still runs SQLite
        print(f"PostgreSQL skipped: unreachable at {base} ({exc!r})")
        return None
    await conn.close()
    sep = "&" if "?" in base else "?"
    return f"{base}{sep}schema=fence_bench_{uuid.uuid4().hex[:10]}"


async def pg_drop(url: str) -> None:
    base, _, schema = url.rpartition("schema=")
    conn = await asyncpg.connect(base.rstrip("?&"))
    await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    await conn.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/test")
    args = parser.parse_args()

    rows: list[tuple[str, dict[str, list[float]]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        rows.append(("memory", await measure("memory://", args.calls, args.warmup)))
        rows.append(("sqlite (WAL, sync=NORMAL)", await measure(f"sqlite:///{Path(tmp) / 'f.db'}", args.calls, args.warmup)))
        rows.append(("sqlite (WAL, sync=FULL)", await measure(f"sqlite:///{Path(tmp) / 'g.db'}?synchronous=FULL", args.calls, args.warmup)))
    pg = await pg_scratch(args.pg)
    if pg:
        try:
            rows.append(("postgresql", await measure(pg, args.calls, args.warmup)))
        finally:
            await pg_drop(pg)

    print(f"\nfence overhead per call, {args.calls} sequential calls (ms)\n")
    header = f"{'store':<27}{'base p50':>9}{'base p99':>9}{'fenced p50':>11}{'fenced p99':>11}{'added p50':>10}{'added p99':>10}{'replay p50':>11}"
    print(header)
    print("-" * len(header))
    for name, s in rows:
        b50, b99 = percentile(s["baseline"], 0.5), percentile(s["baseline"], 0.99)
        f50, f99 = percentile(s["fenced"], 0.5), percentile(s["fenced"], 0.99)
        print(
            f"{name:<27}{b50:>9.3f}{b99:>9.3f}{f50:>11.3f}{f99:>11.3f}{f50 - b50:>10.3f}{f99 - b99:>10.3f}"
            f"{statistics.median(s['replay']):>11.3f}"
        )
    sqlite_added = percentile(rows[1][1]["fenced"], 0.5) - percentile(rows[1][1]["baseline"], 0.5)
    verdict = "met" if sqlite_added < 0.5 else "NOT met"
    print(f"\ngoal: < 0.5 ms added at p50 on SQLite (default sync=NORMAL): {sqlite_added:.3f} ms, {verdict}")


if __name__ == "__main__":
    anyio.run(main)
