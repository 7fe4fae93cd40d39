"""What one fence statement costs, by what the process did just before it; and schema variants.

    .venv/bin/python bench/fence_statement_bench.py [--calls 2000] [--gap-ms 1.0] [--pg URL] [--no-pg]

Part 1, the SQLite fence store itself (`SqliteFenceStore`: its claim and its finish, one
autocommit statement each, on the event loop): each statement's time and the thread's CPU time,

  back to back     the statements one after another, nothing in between;
  after a sleep    `--gap-ms` of `anyio.sleep` before each (the process idles, as a gateway at c=1
                   does while its call is with the upstream);
  after a spin     `--gap-ms` of busy Python before each (the core stays busy, as at c=16).

Part 2, the store's two writes on raw `sqlite3` (after a sleep of `--gap-ms`, as at c=1): the
claim's `INSERT ... ON CONFLICT DO NOTHING` and the finish's compare-and-set `UPDATE`, written out
here because the variants need a schema the store would not create. The store's own schema, and
two variants: no secondary index, and the index on `created_at` (which a finish does not change)
instead of `(state, updated_at)`.

Part 3, PostgreSQL (`--pg`, default the local server; `--no-pg` skips it): the same two writes in
their plain form (the store's claim also reads the row there in the same statement, and its
finishes may share a commit: not measured here) at c=1 and c=16, with the store's schema and with
the index on `created_at` and `fillfactor = 70`, where a finish changes no indexed column and can
be a heap-only (HOT) update; PostgreSQL's own CPU per call read from /proc (its processes on this
box).

Each table is 3 rounds, variants in turn; the median of the rounds' medians.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import asyncpg

from gateway.conventions.keys import Effect
from gateway.fences import FenceRecord, FenceState, Owner
from gateway.fences.records import COLUMNS
from gateway.fences.stores.sqlite import _SCHEMA_V1, SqliteFenceStore
from gateway_overhead import postgres_cpu_seconds

ANSWER: dict[str, Any] = {"content": [{"type": "text", "text": "ok " * 40}], "isError": False}
ANSWER_TEXT = json.dumps(ANSWER)
OWNER = Owner("bench-replica", "bench-boot")
ROUNDS = 3
_INSERT = f"INSERT INTO fences ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))}) ON CONFLICT DO NOTHING"
_FINISH = ("UPDATE fences SET state = ?, answer = ?, lease_until = NULL, updated_at = ? WHERE fence_id = ?"
           " AND state = 'pending' AND owner_replica = ? AND owner_boot = ? AND attempts = ?")


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def pending(fence_id: str, now: float) -> FenceRecord:
    return FenceRecord(fence_id=fence_id, principal="bench", fingerprint="f" * 64, tool="write",
                       effect=Effect.NON_IDEMPOTENT_WRITE,
                       state=FenceState.PENDING, owner=OWNER, lease_until=now + 30, answer=None, created_at=now,
                       updated_at=now, attempts=1)


# -- part 1: the store, by what came before ------------------------------------------------


async def store_round(store: SqliteFenceStore, calls: int, before: Callable[[], Any]) -> dict[str, float]:
    wall: list[float] = []
    cpu: list[float] = []
    for _ in range(calls):
        fence_id = uuid.uuid4().hex * 2
        for step in ("claim", "finish"):
            await before()
            t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
            if step == "claim":
                await store.insert_if_absent(pending(fence_id, time.time()))
            else:
                await store.finish(fence_id, expected=OWNER, attempts=1, state=FenceState.DONE, answer=ANSWER,
                                   now=time.time())
            wall.append((time.perf_counter_ns() - t0) / 1000)
            cpu.append((time.thread_time_ns() - c0) / 1000)
    return {"wall": median(wall), "cpu": median(cpu)}


async def part_store(calls: int, gap: float, workdir: Path) -> None:
    async def nothing() -> None:
        pass

    async def sleep() -> None:
        await anyio.sleep(gap)

    async def busy() -> None:
        spin(gap)

    ms = f"{gap * 1000:g} ms"
    cases = {"back to back": nothing, f"after a {ms} sleep": sleep, f"after a {ms} spin": busy}
    results: dict[str, list[dict[str, float]]] = {name: [] for name in cases}
    async with SqliteFenceStore(workdir / "store.db") as store:
        async with anyio.create_task_group() as tg:
            tg.start_soon(store.run_checkpointer)  # as the gateway runs it
            await store_round(store, 200, nothing)  # warm-up
            for _ in range(ROUNDS):
                for name, before in cases.items():
                    results[name].append(await store_round(store, calls, before))
            tg.cancel_scope.cancel()
    print(f"SQLite fence store, one statement (claim or finish), {calls} calls x {ROUNDS} rounds, p50 in µs")
    print(f"{'case':<24} {'wall':>8} {'CPU':>8}")
    for name, rounds in results.items():
        print(f"{name:<24} {median([r['wall'] for r in rounds]):>8.1f} {median([r['cpu'] for r in rounds]):>8.1f}")


# -- part 2: SQLite schema variants --------------------------------------------------------


def sqlite_variant(path: Path, schema: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA wal_autocheckpoint = 0")  # checkpoints off the statements, as the gateway's
    for statement in filter(None, (s.strip() for s in schema.split(";"))):
        conn.execute(statement)
    conn.execute("BEGIN")
    now = time.time()
    for _ in range(20_000):  # a table that is not empty: pages to find
        conn.execute(_INSERT, (uuid.uuid4().hex * 2, "bench", "f" * 64, "write", "non_idempotent_write", "done",
                               None, None, None, ANSWER_TEXT, now, now, 1))
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return conn


def sqlite_round(conn: sqlite3.Connection, calls: int, gap: float) -> tuple[float, float]:
    claims: list[float] = []
    finishes: list[float] = []
    for i in range(calls):
        fence_id, now = uuid.uuid4().hex * 2, time.time()
        time.sleep(gap)
        t0 = time.perf_counter_ns()
        conn.execute(_INSERT, (fence_id, "bench", "f" * 64, "write", "non_idempotent_write", "pending", "r", "b",
                               now + 30, None, now, now, 1))
        claims.append((time.perf_counter_ns() - t0) / 1000)
        time.sleep(gap)
        t0 = time.perf_counter_ns()
        conn.execute(_FINISH, ("done", ANSWER_TEXT, time.time(), fence_id, "r", "b", 1))
        finishes.append((time.perf_counter_ns() - t0) / 1000)
        if i % 300 == 299:
            conn.execute("PRAGMA wal_checkpoint(RESTART)")
    return median(claims), median(finishes)


def part_sqlite_schemas(calls: int, gap: float, workdir: Path) -> None:
    index = "CREATE INDEX IF NOT EXISTS fences_state_updated ON fences (state, updated_at)"
    if index not in _SCHEMA_V1:
        raise SystemExit("the store's schema changed: update this benchmark's variants")
    variants = {
        "the store's schema": _SCHEMA_V1,
        "no secondary index": _SCHEMA_V1.replace(index, ""),
        "index on created_at": _SCHEMA_V1.replace(index, "CREATE INDEX fences_created ON fences (created_at)"),
    }
    conns = {name: sqlite_variant(workdir / f"variant{i}.db", schema)
             for i, (name, schema) in enumerate(variants.items())}
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    for _ in range(ROUNDS):
        for name, conn in conns.items():
            results[name].append(sqlite_round(conn, calls, gap))
    print(f"\nSQLite statements alone after a {gap * 1000:g} ms sleep, 20,000 rows, {calls} calls x {ROUNDS} rounds,"
          " p50 in µs")
    print(f"{'schema':<24} {'claim':>8} {'finish':>8}")
    for name, rounds in results.items():
        print(f"{name:<24} {median([r[0] for r in rounds]):>8.1f} {median([r[1] for r in rounds]):>8.1f}")
    for conn in conns.values():
        conn.close()


# -- part 3: PostgreSQL, HOT finishes ------------------------------------------------------


async def pg_round(pool: asyncpg.Pool, table: str, calls: int, concurrency: int) -> tuple[float, float]:
    placeholders = ", ".join(f"${i}" for i in range(1, len(COLUMNS) + 1))
    claim = f"INSERT INTO {table} ({', '.join(COLUMNS)}) VALUES ({placeholders}) ON CONFLICT (fence_id) DO NOTHING"
    finish = (f"UPDATE {table} SET state = $1, answer = $2, lease_until = NULL, updated_at = $3 WHERE fence_id = $4"
              " AND state = 'pending' AND owner_replica = $5 AND owner_boot = $6 AND attempts = $7")

    async def worker(n: int) -> None:
        for _ in range(n):
            fence_id, now = uuid.uuid4().hex * 2, time.time()
            await pool.execute(claim, fence_id, "bench", "f" * 64, "write", "non_idempotent_write", "pending", "r", "b",
                               now + 30, None, now, now, 1)
            await pool.execute(finish, "done", ANSWER_TEXT, time.time(), fence_id, "r", "b", 1)

    cpu, started = postgres_cpu_seconds(), time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(concurrency):
            tg.start_soon(worker, calls // concurrency)
    elapsed = time.perf_counter() - started
    return calls / elapsed, (postgres_cpu_seconds() - cpu) / calls * 1e6


async def part_postgres(url: str, calls: int) -> None:
    columns = ("fence_id text PRIMARY KEY, principal text NOT NULL, fingerprint text NOT NULL, tool text NOT NULL,"
               " effect text NOT NULL, state text NOT NULL, owner_replica text, owner_boot text, lease_until float8,"
               " answer text, created_at float8 NOT NULL, updated_at float8 NOT NULL, attempts integer NOT NULL")
    variants = {
        "the store's schema": ("", "(state, updated_at)"),
        "created_at, fillfactor 70": (" WITH (fillfactor = 70)", "(created_at)"),
    }
    schema = f"dex_bench_{uuid.uuid4().hex[:8]}"
    pool = await asyncpg.create_pool(url, min_size=10, max_size=10)
    try:
        await pool.execute(f"CREATE SCHEMA {schema}")
        tables = {}
        for i, (name, (storage, index)) in enumerate(variants.items()):
            tables[name] = f"{schema}.fences{i}"
            await pool.execute(f"CREATE TABLE {tables[name]} ({columns}){storage}")
            await pool.execute(f"CREATE INDEX ON {tables[name]} {index}")
        results: dict[tuple[str, int], list[tuple[float, float]]] = {}
        for _ in range(ROUNDS):
            for name, table in tables.items():
                for concurrency in (1, 16):
                    n = calls // 2 if concurrency == 1 else calls
                    results.setdefault((name, concurrency), []).append(await pg_round(pool, table, n, concurrency))
        print(f"\nPostgreSQL claim + finish (two autocommit statements), pool of 10, {ROUNDS} rounds")
        print(f"{'schema':<28} {'c':>3} {'calls/s':>8} {'PG CPU µs/call':>15} {'HOT finishes':>13}")
        for (name, concurrency), rounds in results.items():
            hot = await pool.fetchval("SELECT n_tup_hot_upd::float8 / greatest(n_tup_upd, 1) FROM pg_stat_user_tables"
                                      " WHERE schemaname = $1 AND relname = $2", schema, tables[name].split(".")[1])
            print(f"{name:<28} {concurrency:>3} {median([r[0] for r in rounds]):>8.0f}"
                  f" {median([r[1] for r in rounds]):>15.0f} {hot or 0:>12.0%}")
    finally:
        await pool.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        await pool.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--gap-ms", type=float, default=1.0)
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--no-pg", action="store_true")
    args = parser.parse_args()
    gap = args.gap_ms / 1000
    with tempfile.TemporaryDirectory(prefix="dex-fence-statements-") as tmp:
        anyio.run(part_store, args.calls, gap, Path(tmp), backend_options={"use_uvloop": True})  # as the gateway
        part_sqlite_schemas(args.calls, gap, Path(tmp))
    if not args.no_pg:
        anyio.run(part_postgres, args.pg, args.calls * 2)


if __name__ == "__main__":
    main()
