"""Listing the audit log: the newest 100 of a 10,000-row log in at most 50 ms (issue 25, item 3).

    .venv/bin/python bench/audit_list_bench.py [--rows 10000] [--postgres URL | --no-postgres]

For SQLite (a file in a temporary directory) and PostgreSQL (a fresh schema on
$DEX_TEST_POSTGRES_URL, loopback `test` by default, dropped afterwards):

1. fills ROWS rows through the store's own `append` (batches of 500, as the writer does): 20
   principals, 50 tools, every outcome, times one second apart;
2. times the store's queries behind `audit list` and GET /admin/audit, 200 runs each after 20
   warm-ups: the newest 100 (no filter), of one principal, of one tool, `since` the last hour,
   and the next page (`before`);
3. a real `dex-gateway serve` on that database: GET /admin/audit?limit=100 (admin token), 200
   times: the whole HTTP round trip, JSON included;
4. prints the query plan of the unfiltered query (the primary key scanned backwards, no sort).

Goal: p99 of every query and of the HTTP round trip ≤ 50 ms. Prints PASS/FAIL per row.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.audit import AuditEntry, AuditQuery, AuditStore, open_audit_store  # noqa: E402
from gateway.audit.records import OUTCOMES, arguments_digest, now_micros  # noqa: E402
from gateway.storage.database import opened  # noqa: E402
from tests.support.gateway import start_gateway, write_config  # noqa: E402

GOAL_MS = 50.0
ADMIN = "audit-bench-admin"


def rows(count: int, start: float) -> list[AuditEntry]:
    return [
        AuditEntry(
            time=now_micros(start + i), principal=f"agent-{i % 20}", tool=f"up__tool_{i % 50}", upstream="up",
            effect="non_idempotent_write", arguments_digest=arguments_digest({"n": i}), arguments=None,
            idempotency_key=f"session/{i}", approval=None, fence_state="claimed", outcome=OUTCOMES[i % len(OUTCOMES)],
            reason=None, latency_ms=1.25, trace_id=None, span_id=None,
        )
        for i in range(count)
    ]


def summary(samples: list[float]) -> tuple[float, float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[int(0.99 * (len(ordered) - 1))], ordered[-1]


def report(label: str, samples: list[float]) -> bool:
    p50, p99, worst = summary(samples)
    ok = p99 <= GOAL_MS
    print(f"  {label:<44} p50 {p50:7.2f} ms  p99 {p99:7.2f} ms  max {worst:7.2f} ms  {'PASS' if ok else 'FAIL'}")
    return ok


async def time_queries(store: AuditStore, count: int, start: float) -> bool:
    newest = await store.newest(AuditQuery(), limit=100)
    assert len(newest) == 100 and newest[0].time > newest[-1].time
    cases = {
        "newest 100": lambda: store.newest(AuditQuery(), limit=100),
        "newest 100 of one principal": lambda: store.newest(AuditQuery(principal="agent-7"), limit=100),
        "newest 100 of one tool": lambda: store.newest(AuditQuery(tool="up__tool_7"), limit=100),
        "newest 100 since the last hour": lambda: store.newest(AuditQuery(since=now_micros(start + count - 3600)),
                                                               limit=100),
        "the next page (before)": lambda: store.newest(AuditQuery(), before=newest[-1].id, limit=100),
        "newest 100 with outcome unknown": lambda: store.newest(AuditQuery(outcome="unknown"), limit=100),
    }
    ok = True
    for label, query in cases.items():
        for _ in range(20):
            await query()
        samples = []
        for _ in range(200):
            began = time.perf_counter()
            found = await query()
            samples.append((time.perf_counter() - began) * 1000)
        assert len(found) == 100, (label, len(found))
        ok &= report(label, samples)
    return ok


async def fill(url: str, count: int, start: float) -> None:
    async with opened(open_audit_store(url)) as store:
        batch = rows(count, start)
        began = time.perf_counter()
        for i in range(0, count, 500):
            await store.append(batch[i:i + 500])
        print(f"  filled {count} rows in {time.perf_counter() - began:.2f} s (batches of 500)")


async def bench_store(url: str, count: int, start: float) -> bool:
    await fill(url, count, start)
    async with opened(open_audit_store(url)) as store:
        return await time_queries(store, count, start)


def bench_http(root: Path, url: str) -> bool:
    config = write_config(root, {"auth": {"admin_token_sha256": hashlib.sha256(ADMIN.encode()).hexdigest()},
                                 "fences": {"store": url}})
    headers = {"authorization": f"Bearer {ADMIN}"}
    with start_gateway(config) as gateway, httpx.Client(headers=headers, timeout=10) as client:
        target = f"{gateway.base}/admin/audit?limit=100"
        for _ in range(20):
            assert len(client.get(target).json()["entries"]) == 100
        samples = []
        for _ in range(200):
            began = time.perf_counter()
            response = client.get(target)
            samples.append((time.perf_counter() - began) * 1000)
            assert response.status_code == 200
        return report("GET /admin/audit?limit=100 (HTTP, JSON)", samples)


def sqlite_plan(path: Path) -> None:
    conn = sqlite3.connect(path)
    plan = conn.execute("EXPLAIN QUERY PLAN SELECT * FROM audit_log ORDER BY id DESC LIMIT 100").fetchall()
    conn.close()
    print("  plan:", "; ".join(str(row[-1]) for row in plan))


async def postgres_plan(url: str) -> None:
    import asyncpg

    from gateway.storage.urls import parse_postgres_url

    pg = parse_postgres_url(url)
    conn = await asyncpg.connect(pg.dsn)
    try:
        plan = await conn.fetch(f'EXPLAIN SELECT * FROM "{pg.schema}".dex_audit_log ORDER BY id DESC LIMIT 100')
    finally:
        await conn.close()
    print("  plan:", " | ".join(r[0].strip() for r in plan))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--postgres", default=None, help="PostgreSQL URL (default: $DEX_TEST_POSTGRES_URL or loopback)")
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args()
    start = time.time() - args.rows
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        url = f"sqlite:///{root / 'gateway.db'}"
        print(f"SQLite, {args.rows} rows ({root / 'gateway.db'})")
        ok &= asyncio.run(bench_store(url, args.rows, start))
        sqlite_plan(root / "gateway.db")
        ok &= bench_http(root / "http", url)
        if not args.no_postgres:
            from tests.support import postgres

            base = args.postgres or postgres.PG_URL
            schema = f"audit_bench_{uuid.uuid4().hex[:8]}"
            pg_url = f"{base}{'&' if '?' in base else '?'}schema={schema}"
            print(f"PostgreSQL, {args.rows} rows (schema {schema})")
            try:
                ok &= asyncio.run(bench_store(pg_url, args.rows, start))
                asyncio.run(postgres_plan(pg_url))
                ok &= bench_http(root / "http-pg", pg_url)
            finally:
                asyncio.run(postgres.drop_schema(schema))
    print("goal: p99 <= 50 ms for every row:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
