"""End-to-end fence overhead per write call through the gateway.

    .venv/bin/python bench/fence_gateway_bench.py [--calls 1000] [--rounds 2] [--json]

One upstream (bench/echo_server.py, tool `write`: non_idempotent_write, answers its `text`)
behind two `dex-gateway serve` processes, and the same tool called three ways, sequentially
(concurrency 1, or `--concurrency N` calls in flight), `--calls` measured calls per case:

  (a) fenced, SQLite   gateway A, entry `fenced` (`fenced__write`), a fresh idempotency key
                       per call: claim pending + store the answer in SQLite (WAL, one file);
  (b) fenced, PG       gateway B (same config, `fences.store` = the machine's PostgreSQL in a
                       fresh schema, dropped afterwards), the same entry and keys;
  (c) unfenced         gateway A, entry `open` on the same upstream URL with
                       `keyless_writes: pass` (`open__write`), called without a key: the
                       gateway's whole path minus the fence;
  (d) direct           the upstream itself, for reference (not part of the ratios).

The calls of each case are split into `--rounds` slices run in turn (a b c d a b c d ...), so
a drift of the machine during the run (CPU frequency, another process) spreads over every
case instead of landing on one. Driver: bench/loadgen.py (raw asyncio HTTP/1.1 JSON-RPC, its
own process, no SDK client), `--warmup` unmeasured calls before each slice.

Output: p50/p99/mean per case, the answering gateway's CPU per call and PostgreSQL's (all its
processes on the box, read from /proc around each slice, warm-up calls included), and the fence's
added cost as (a)-(c) and (b)-(c) in ms and as ratios (a)/(c), (b)/(c) at p50 and p99. The load
generator, the gateways, the upstream and PostgreSQL share the machine's cores; at c=1 they mostly
take turns.

Goals (issue 27), printed MET / NOT MET below the table: at c=1 the SQLite fence adds <= 0.25 ms
p50 and the PostgreSQL fence <= 0.8 ms p50 over (c); at higher concurrency (c=16 in the issue) the
SQLite- and PostgreSQL-fenced throughputs are >= 0.8x (c)'s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from gateway_overhead import (  # noqa: E402
    GOAL_FENCE_ADDED_MS, GOAL_FENCED_THROUGHPUT, PYTHON, ROOT, SCRATCH_LAUNCHER, Proc, percentile,
    postgres_cpu_seconds, start, verdict, wait_for_tools,
)

PG_URL = os.environ.get("DEX_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
# Issue 27: a PostgreSQL fence adds <= 0.8 ms p50 at c=1 (at c=16 either store keeps >= 0.8x the
# unfenced throughput: GOAL_FENCED_THROUGHPUT, shared with gateway_overhead.py).
GOAL_PG_ADDED_MS = 0.8


def gateway_yaml(upstream_url: str, store: str) -> str:
    return (
        "server: {host: 127.0.0.1, port: 0}\n"
        "upstreams:\n"
        f"  - {{name: fenced, transport: streamable_http, url: \"{upstream_url}\"}}\n"
        f"  - {{name: open, transport: streamable_http, url: \"{upstream_url}\", keyless_writes: pass}}\n"
        f"fences: {{store: \"{store}\"}}\n"
    )


def pg_schema_action(sql: str) -> str | None:
    """Run one statement on PG_URL; the error text if PostgreSQL is unreachable."""
    import asyncpg

    async def go() -> None:
        conn = await asyncpg.connect(PG_URL, timeout=3)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    try:
        asyncio.run(go())
    except (OSError, asyncio.TimeoutError, asyncpg.PostgresError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def run_slice(url: str, tool: str, calls: int, fresh_keys: bool, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [
        PYTHON, str(HERE / "loadgen.py"), "--url", url, "--tool", tool, "--concurrency", str(args.concurrency),
        "--calls", str(calls), "--warmup", str(args.warmup), "--max-seconds", str(args.max_seconds),
        "--driver", "raw",
    ]
    if fresh_keys:
        cmd.append("--fresh-keys")
    out = subprocess.run(cmd, capture_output=True, check=False, cwd=ROOT)
    if out.returncode != 0:
        raise SystemExit(f"load generator failed: {out.stderr.decode(errors='replace')[-2000:]}")
    return json.loads(out.stdout)


def summarize(latencies: list[float], errors: int, first_errors: list[str], wall_s: float) -> dict[str, Any]:
    return {
        "calls": len(latencies),
        "calls_per_s": len(latencies) / wall_s if wall_s else float("nan"),
        "errors": errors,
        "first_errors": first_errors[:2],
        "p50_ms": percentile(latencies, 50),
        "p99_ms": percentile(latencies, 99),
        "mean_ms": statistics.fmean(latencies) if latencies else float("nan"),
    }


def goal_lines(added: dict[str, dict[str, float]], concurrency: int) -> list[str]:
    """The issue's fence goals that apply at this concurrency, each MET / NOT MET: at c=1 the
    added p50 of (a) and (b); above it the throughput of (a) and (b) over (c)."""
    lines = []
    sqlite, pg = added.get("(a) fenced, SQLite"), added.get("(b) fenced, PostgreSQL")
    if concurrency == 1:
        if sqlite is not None:
            ok = sqlite["p50_added_ms"] <= GOAL_FENCE_ADDED_MS
            lines.append(f"goal c=1: the SQLite fence adds {sqlite['p50_added_ms']:+.2f} ms p50 "
                         f"<= {GOAL_FENCE_ADDED_MS:g} ms: {verdict(ok)}")
        if pg is not None:
            ok = pg["p50_added_ms"] <= GOAL_PG_ADDED_MS
            lines.append(f"goal c=1: the PostgreSQL fence adds {pg['p50_added_ms']:+.2f} ms p50 "
                         f"<= {GOAL_PG_ADDED_MS:g} ms: {verdict(ok)}")
    else:
        for store, row in (("SQLite", sqlite), ("PostgreSQL", pg)):
            if row is not None:
                ok = row["throughput_ratio"] >= GOAL_FENCED_THROUGHPUT
                lines.append(f"goal c={concurrency}: {store}-fenced throughput {row['throughput_ratio']:.2f}x the "
                             f"unfenced >= {GOAL_FENCED_THROUGHPUT:g}x: {verdict(ok)}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=1000, help="measured calls per case")
    parser.add_argument("--rounds", type=int, default=2, help="slices per case, run in turn")
    parser.add_argument("--warmup", type=int, default=100, help="unmeasured calls before each slice")
    parser.add_argument("--max-seconds", type=float, default=120.0, help="time cap per slice")
    parser.add_argument("--concurrency", type=int, default=1, help="calls in flight per case (load generator tasks)")
    parser.add_argument("--no-direct", action="store_true", help="skip the direct-to-upstream reference row")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs, configs, SQLite file)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")
    parser.add_argument("--compare-pythonpath", metavar="DIR",
                        help="also run cases (a), (b) and (c) on the gateway package copy in DIR (e.g. the code "
                             "before a change), as (a'), (b') and (c'); their added cost is over (c')")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="dex-fence-bench-"))
    procs: list[Proc] = []
    schema = f"fence_bench_{uuid.uuid4().hex[:10]}"
    pg_problem = pg_schema_action("SELECT 1")
    try:
        upstream = start("upstream", [PYTHON, str(HERE / "echo_server.py"), "--port", "0"], workdir)
        procs.append(upstream)
        exe = shutil.which("dex-gateway", path=str(Path(PYTHON).parent)) or "dex-gateway"

        def gateway(name: str, store: str, pythonpath: str | None = None) -> Proc:
            config = workdir / f"{name}.yaml"
            config.write_text(gateway_yaml(upstream.url, store))
            argv = [exe, "serve", "--config", str(config), "--port", "0"]
            if pythonpath:
                argv = [PYTHON, "-c", SCRATCH_LAUNCHER, pythonpath, *argv[1:]]
            proc = start(name, argv, workdir)
            procs.append(proc)
            wait_for_tools(proc.url, {"fenced__write", "open__write"})
            return proc

        gw_sqlite = gateway("gateway-sqlite", f"sqlite:///{workdir / 'fences.db'}")
        pg_store = f"{PG_URL}{'&' if '?' in PG_URL else '?'}schema={schema}"
        gw_pg = None if pg_problem else gateway("gateway-pg", pg_store)
        gw_pg_other = gw_sqlite_other = None
        if args.compare_pythonpath:
            gw_sqlite_other = gateway("gateway-sqlite-compare", f"sqlite:///{workdir / 'fences-b.db'}",
                                      args.compare_pythonpath)
            if not pg_problem:
                gw_pg_other = gateway("gateway-pg-compare", pg_store + "_b", args.compare_pythonpath)

        # case -> (the process that answers, tool, fresh keys)
        cases: dict[str, tuple[Proc, str, bool]] = {
            "(a) fenced, SQLite": (gw_sqlite, "fenced__write", True),
        }
        if gw_sqlite_other is not None:
            cases["(a') fenced, SQLite, DIR"] = (gw_sqlite_other, "fenced__write", True)
        if gw_pg is not None:
            cases["(b) fenced, PostgreSQL"] = (gw_pg, "fenced__write", True)
        if gw_pg_other is not None:
            cases["(b') fenced, PostgreSQL, DIR"] = (gw_pg_other, "fenced__write", True)
        cases["(c) unfenced (keyless pass)"] = (gw_sqlite, "open__write", False)
        if gw_sqlite_other is not None:
            cases["(c') unfenced, DIR"] = (gw_sqlite_other, "open__write", False)
        if not args.no_direct:
            cases["(d) direct to upstream"] = (upstream, "write", False)

        rounds = max(1, args.rounds)
        per_slice = [args.calls // rounds + (1 if i < args.calls % rounds else 0) for i in range(rounds)]
        raw: dict[str, dict[str, Any]] = {
            name: {"lat": [], "errors": 0, "first_errors": [], "wall": 0.0, "cpu": 0.0, "pg_cpu": 0.0, "sent": 0}
            for name in cases
        }
        for n in per_slice:
            for name, (proc, tool, fresh) in cases.items():
                cpu, pg_cpu = proc.cpu_seconds(), postgres_cpu_seconds()
                out = run_slice(proc.url, tool, n, fresh, args)
                raw[name]["cpu"] += proc.cpu_seconds() - cpu  # the gateway's (or, direct, the upstream's)
                raw[name]["pg_cpu"] += postgres_cpu_seconds() - pg_cpu
                raw[name]["sent"] += n + args.warmup
                raw[name]["lat"].extend(out["latencies_ms"])
                raw[name]["errors"] += out["errors"]
                raw[name]["first_errors"].extend(out["first_errors"])
                raw[name]["wall"] += out["wall_s"]

        rows = {name: summarize(r["lat"], r["errors"], r["first_errors"], r["wall"]) for name, r in raw.items()}
        for name, r in raw.items():
            # CPU per call over every call of the slices, warm-up included (it ran in them).
            rows[name]["cpu_ms_per_call"] = r["cpu"] / r["sent"] * 1000
            rows[name]["postgres_cpu_ms_per_call"] = r["pg_cpu"] / r["sent"] * 1000
        added = {}
        for name in ("(a) fenced, SQLite", "(a') fenced, SQLite, DIR", "(b) fenced, PostgreSQL",
                     "(b') fenced, PostgreSQL, DIR"):
            if name in rows:
                r = rows[name]
                # The code in DIR is compared with its own unfenced path.
                base = rows["(c') unfenced, DIR" if "DIR" in name else "(c) unfenced (keyless pass)"]
                added[name] = {
                    "p50_added_ms": r["p50_ms"] - base["p50_ms"],
                    "p99_added_ms": r["p99_ms"] - base["p99_ms"],
                    "mean_added_ms": r["mean_ms"] - base["mean_ms"],
                    "p50_ratio": r["p50_ms"] / base["p50_ms"],
                    "p99_ratio": r["p99_ms"] / base["p99_ms"],
                    "throughput_ratio": r["calls_per_s"] / base["calls_per_s"],
                }
        meta = {
            "calls_per_case": args.calls,
            "rounds": rounds,
            "concurrency": args.concurrency,
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "postgresql": None if pg_problem else PG_URL,
            "postgresql_skipped": pg_problem,
        }
        if args.json:
            print(json.dumps({"meta": meta, "rows": rows, "added_over_unfenced": added,
                              "goals": goal_lines(added, args.concurrency)}, indent=2))
        else:
            print(f"fence overhead end to end: write tool through dex-gateway, c={args.concurrency}, {args.calls} calls per case "
                  f"in {rounds} interleaved slices, {meta['cpus']} CPU cores shared by all processes")
            if pg_problem:
                print(f"(b) skipped: PostgreSQL unreachable at {PG_URL}: {pg_problem}")
            header = (f"{'case':<30} {'calls':>6} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8} {'calls/s':>8}"
                      f" {'cpu ms':>7} {'pg cpu':>7} |"
                      f" {'+p50 ms':>8} {'+p99 ms':>8} {'p50 x':>6} {'p99 x':>6} {'thru x':>6}")
            print(header)
            print("-" * len(header))
            for name, r in rows.items():
                extra = ""
                if name in added:
                    a = added[name]
                    extra = (f" | {a['p50_added_ms']:>+8.2f} {a['p99_added_ms']:>+8.2f} "
                             f"{a['p50_ratio']:>6.2f} {a['p99_ratio']:>6.2f} {a['throughput_ratio']:>6.2f}")
                print(f"{name:<30} {r['calls']:>6} {r['p50_ms']:>8.2f} {r['p99_ms']:>8.2f} {r['mean_ms']:>8.2f}"
                      f" {r['calls_per_s']:>8.0f} {r['cpu_ms_per_call']:>7.2f}"
                      f" {r['postgres_cpu_ms_per_call']:>7.2f}{extra}")
                if r["errors"]:
                    print(f"    {r['errors']} errors; first: {r['first_errors'][:1]}")
            print("+p50/+p99: added over (c) (DIR rows: over (c')), the same gateway path without the fence; x: ratio to it"
                  " (thru x: calls/s over (c)'s). cpu ms: the answering"
                  " gateway's CPU per call ((d): the upstream's); pg cpu: every postgres process's, per call.")
            for line in goal_lines(added, args.concurrency):
                print(line)
        return 0 if all(r["errors"] == 0 for r in rows.values()) else 1
    finally:
        for p in reversed(procs):
            p.stop()
        if not pg_problem:
            pg_schema_action(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            pg_schema_action(f'DROP SCHEMA IF EXISTS "{schema}_b" CASCADE')
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
