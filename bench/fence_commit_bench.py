"""The fence store's claim + finish on PostgreSQL and SQLite, at c=1 and c=16, variants interleaved.

    .venv/bin/python bench/fence_commit_bench.py [--calls 2000] [--rounds 3] [--pg URL] [--no-sqlite]
        [--compare-pythonpath DIR]

What a fenced write costs the store, without the gateway around it: `Fences.begin` (the claim,
one durable commit) and `Fences.complete` (the finish, a second one) for a fresh key per call,
around a no-op upstream. Next to it, the floor: one loopback round trip (`SELECT 1`) and one
durable commit (an autocommit INSERT into a scratch table) on the same pool.

Variants (each a store of its own in its own scratch schema or file):

  pg                 the PostgreSQL store as configured by default;
  pg, no group       `group_commit=False`: every finish its own statement and commit;
  pg, pool only      `keep_connection=False`: every claim and finish through the pool (no kept
                     connection, storage/kept_connection.py);
  sqlite             the SQLite store (WAL, synchronous=NORMAL);

Each variant runs `--rounds` times in turn (a b c a b c ...) so drift from other processes on the
box spreads over all of them; the table shows the median over rounds of each round's p50 and of
its calls/s. c=16: 16 tasks in one event loop, each doing claim → no-op → finish in a loop.

`--compare-pythonpath DIR` (e.g. `git archive HEAD~1 gateway | tar -x -C DIR`): each round runs
in two fresh processes in turn, one on the gateway package in DIR ("before: ..." rows) and one on
the installed one ("after: ..."); the table is the median over rounds of both.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import asyncpg

from gateway.conventions.keys import Effect
from gateway.fences import Fences, Owner, Proceed
from gateway.fences.store import FenceStore
from gateway.fences.stores.postgres import PostgresFenceStore
from gateway.fences.stores.sqlite import SqliteFenceStore

ANSWER: dict[str, Any] = {"content": [{"type": "text", "text": "ok " * 40}], "isError": False}


def p50(samples: list[float]) -> float:
    return statistics.median(samples) if samples else float("nan")


async def run_calls(n: int, concurrency: int, call: Callable[[int], Awaitable[None]]) -> tuple[list[float], float]:
    """`n` calls over `concurrency` tasks: (latencies in ms, calls per second)."""
    latencies: list[float] = []
    counter = 0

    async def worker() -> None:
        nonlocal counter
        while counter < n:
            counter += 1
            i = counter
            t0 = time.perf_counter()
            await call(i)
            latencies.append((time.perf_counter() - t0) * 1000)

    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(concurrency):
            tg.start_soon(worker)
    return latencies, n / (time.perf_counter() - start)


def fenced_call(fences: Fences, run: str) -> Callable[[int], Awaitable[None]]:
    async def call(i: int) -> None:
        r = await fences.begin(principal="bench", key=f"{run}-{i}", tool="t", arguments={"i": i},
                               effect=Effect.NON_IDEMPOTENT_WRITE)
        assert isinstance(r, Proceed), r
        await anyio.lowlevel.checkpoint()  # the upstream call
        assert await fences.complete(r.ticket, ANSWER)

    return call


async def pg_floor(pool: asyncpg.Pool, table: str) -> dict[str, Callable[[int], Awaitable[None]]]:
    await pool.execute(f"CREATE TABLE {table} (k bigint PRIMARY KEY, v text)")

    async def rtt(i: int) -> None:
        await pool.fetchval("SELECT 1")

    async def commit(i: int) -> None:
        await pool.execute(f"INSERT INTO {table} VALUES ($1, $2)", i + int(time.time_ns() % 10**12) * 1000, "x")

    return {"SELECT 1 (round trip)": rtt, "INSERT (one commit)": commit}


def report(results: dict[tuple[str, int], list[tuple[float, float]]], names: list[str], args: argparse.Namespace) -> None:
    print(f"\nfence store: claim + finish per call, {args.calls} calls x {args.rounds} rounds, "
          "median over rounds of each round's p50 / calls per s")
    header = f"{'case':<28}" + "".join(f"{f'c={c} p50 ms':>14}{f'c={c} calls/s':>15}" for c in args.concurrency)
    print(header)
    print("-" * len(header))
    for name in names:
        line = f"{name:<28}"
        for c in args.concurrency:
            rs = results[(name, c)]
            line += f"{statistics.median(x[0] for x in rs):>14.3f}{statistics.median(x[1] for x in rs):>15.0f}"
        print(line)


LAUNCHER = (
    "import sys, runpy; d = sys.argv.pop(1); sys.path.insert(0, d); "
    "sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, '__module__', '').startswith('__editable__')]; "
    "import gateway; assert gateway.__file__.startswith(d), gateway.__file__; "
    "sys.argv[0] = sys.argv[1]; runpy.run_path(sys.argv.pop(1), run_name='__main__')"
)


def compare(args: argparse.Namespace) -> None:
    argv = [__file__, "--json", "--rounds", "1", "--calls", str(args.calls), "--pg", args.pg,
            "--concurrency", *map(str, args.concurrency)]
    argv += ["--pool-max", str(args.pool_max)] + ["--no-sqlite"] * args.no_sqlite + ["--no-floor"] * args.no_floor
    results: dict[tuple[str, int], list[tuple[float, float]]] = {}
    names: list[str] = []
    for _ in range(args.rounds):
        for label, cmd in (("before", [sys.executable, "-c", LAUNCHER, args.compare_pythonpath, *argv]),
                           ("after", [sys.executable, *argv])):
            out = subprocess.run(cmd, capture_output=True, text=True, check=True)
            for name, c, rs in json.loads(out.stdout.strip().splitlines()[-1]):
                key = name if label == "after" and name.startswith(("SELECT", "INSERT")) else f"{label}: {name}"
                if key not in names:
                    names.append(key)
                results.setdefault((key, c), []).extend(tuple(r) for r in rs)
    report(results, names, args)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls per variant per round and concurrency")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--no-sqlite", action="store_true")
    parser.add_argument("--pool-max", type=int, default=10, help="PostgreSQL pool size (the gateway's default: 10)")
    parser.add_argument("--no-floor", action="store_true")
    parser.add_argument("--compare-pythonpath", metavar="DIR", help="before/after in alternating processes")
    parser.add_argument("--json", action="store_true", help="print each round's p50 and calls/s as JSON")
    args = parser.parse_args()
    if args.compare_pythonpath:
        compare(args)
        return

    schema_base = f"fence_commit_bench_{uuid.uuid4().hex[:8]}"
    stores: dict[str, FenceStore] = {}
    with tempfile.TemporaryDirectory() as tmp:
        stores["pg"] = PostgresFenceStore.from_url(f"{args.pg}?schema={schema_base}_a&pool_max={args.pool_max}")
        if "group_commit" in PostgresFenceStore.__init__.__code__.co_varnames:
            store = PostgresFenceStore.from_url(f"{args.pg}?schema={schema_base}_b&pool_max={args.pool_max}")
            store.group_commit = False  # type: ignore[attr-defined]
            stores["pg, no group"] = store
        if "keep_connection" in PostgresFenceStore.__init__.__code__.co_varnames:
            store = PostgresFenceStore.from_url(f"{args.pg}?schema={schema_base}_c&pool_max={args.pool_max}")
            store.keep_connection = False  # type: ignore[attr-defined]
            stores["pg, pool only"] = store
        if not args.no_sqlite:
            stores["sqlite"] = SqliteFenceStore(Path(tmp) / "f.db")
        for s in stores.values():
            await s.open()
        try:
            floor: dict[str, Callable[[int], Awaitable[None]]] = {}
            first = stores["pg"]
            assert isinstance(first, PostgresFenceStore)
            if not args.no_floor:
                floor = await pg_floor(first.pool, f'"{schema_base}_a".floor')
            cases: dict[str, Callable[[int], Awaitable[None]]] = dict(floor)
            run = uuid.uuid4().hex[:8]
            for name, s in stores.items():
                cases[name] = fenced_call(Fences(s, Owner.fresh("bench")), f"{run}-{name}")
            results: dict[tuple[str, int], list[tuple[float, float]]] = {}
            for r in range(args.rounds):
                for c in args.concurrency:
                    for name, call in cases.items():
                        base = (r * 10 + c) * 1_000_000
                        await run_calls(min(200, args.calls), c, lambda i, call=call: call(base + 900_000 + i))
                        lat, rate = await run_calls(args.calls, c, lambda i, call=call: call(base + i))
                        results.setdefault((name, c), []).append((p50(lat), rate))
            if args.json:
                print(json.dumps([[name, c, rs] for (name, c), rs in results.items()]))
            else:
                report(results, list(cases), args)
        finally:
            for s in stores.values():
                await s.close()
            conn = await asyncpg.connect(args.pg)
            for suffix in ("a", "b", "c"):
                await conn.execute(f'DROP SCHEMA IF EXISTS "{schema_base}_{suffix}" CASCADE')
            await conn.close()


if __name__ == "__main__":
    anyio.run(main)
