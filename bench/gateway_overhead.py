"""Gateway overhead: tools/call latency and throughput through the gateway vs. directly.

    .venv/bin/python bench/gateway_overhead.py [--upstream-json] [--gateway-json] [--json]

Starts its own upstream (bench/echo_server.py: SDK low-level Server, stateless Streamable
HTTP, SSE answers unless --upstream-json) and a gateway subprocess (`dex-gateway serve`)
fronting it with `prefix: ""` and a SQLite fence store, then drives both with the same
load generator (bench/loadgen.py, its own process per case, not the SDK client: a raw
asyncio HTTP/1.1 driver by default, `--driver httpx` for an httpx.AsyncClient).

Rows: `read` (tool `echo`, effect read, no fence) and `write` (tool `write`, effect
non_idempotent_write, a fresh idempotency key per call, fenced in SQLite), each at
concurrency 1 and 16 (default 2000 calls at c=1, 5000 at c=16, each case capped in time).
Columns: p50/p99 latency in ms and calls/s for direct and gateway, the gateway p50 minus
the direct p50 (ms), gateway/direct throughput, and CPU ms per call of each process.

A third column group is the **floor** (bench/floor_proxy.py): a zero-logic proxy on the gateway's
own HTTP stacks (uvicorn + uvloop + httptools in front, one aiohttp session behind), forwarding
bytes without parsing them; `gateway ÷ floor` is the gateway's own work (`--no-floor` skips it).

Goals (issue 27), each printed MET / NOT MET with the floor beside it: at c=1 gateway CPU per call
<= 0.45 ms and <= 1.6x the floor's, added p50 <= 0.6 ms; at c=16 a read's throughput >= 1.0x
direct; a fenced write (SQLite) adds <= 0.25 ms p50 at c=1 over the same call unfenced (the write's
added p50 minus the read's), and at c=16 keeps >= 0.8x the unfenced throughput (each tool's
throughput through the gateway over its own direct one, the write's over the read's). A read is
neither fenced nor audited, so these lines charge the write's audit row to the fence as well;
bench/fence_gateway_bench.py sets a fenced write against the same write sent without a key.

Caveat printed with every run: load generator, gateway and upstream share the machine's
cores (2 on the reference box), so at c=16 they compete for CPU; the CPU-per-call columns
show where the time goes.

`--gateway-pythonpath DIR` runs the gateway package found in DIR (a scratch copy with an
experimental change) instead of the installed one; `--gateway-json` sets
`server.json_response: true` in the generated gateway config.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PYTHON = sys.executable
LISTEN_RE = re.compile(r"listening on (http://\S+)")
CLK_TCK = os.sysconf("SC_CLK_TCK")
# Goals of issue 12, for both eras: added p50 at c=1, throughput at c=16, gateway CPU per call.
GOAL_P50_OVERHEAD_MS = 0.6
# The venv has the gateway as a setuptools *editable* install, whose meta-path finder wins over
# PYTHONPATH; a scratch copy is only imported when that finder is taken out first.
SCRATCH_LAUNCHER = (
    "import sys; d = sys.argv.pop(1); sys.path.insert(0, d); "
    "sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, '__module__', '').startswith('__editable__')]; "
    "import gateway; assert gateway.__file__.startswith(d), gateway.__file__; "
    "import importlib, importlib.util; "
    "cli = importlib.import_module('gateway.cli'); "
    "name = 'gateway.cli.main' if hasattr(cli, '__path__') else 'gateway.cli'; "
    "main = importlib.import_module(name).main; "  # gateway/cli/main.py, or an older gateway/cli.py
    "sys.argv[0] = 'dex-gateway'; sys.exit(main())"
)
GOAL_THROUGHPUT_RATIO = 1.0
GOAL_GATEWAY_CPU_MS = 0.45
GOAL_CPU_OVER_FLOOR = 1.6
GOAL_FENCE_ADDED_MS = 0.25  # at c=1
GOAL_FENCED_THROUGHPUT = 0.8  # above c=1: a fenced write's throughput over the unfenced one's


# -- processes ------------------------------------------------------------------------------


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    url: str = ""
    count_children: bool = False  # add the CPU of its descendants (a --workers supervisor)

    def cpu_seconds(self) -> float:
        """utime + stime of the process and of its descendants (`serve --workers N`) from /proc."""
        total, pending = 0.0, [self.popen.pid]
        while pending:
            pid = pending.pop()
            try:
                total += process_cpu_seconds(pid)
                children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            except OSError:
                continue
            if self.count_children:
                pending.extend(int(c) for c in children)
        return total

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGINT)
            try:
                self.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


def process_cpu_seconds(pid: int | str) -> float:
    """utime + stime of one process from /proc/PID/stat (OSError once it is gone)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    # fields[0] is state (field 3); utime=14, stime=15 -> index 11, 12
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def postgres_cpu_seconds() -> float:
    """utime + stime of every `postgres` process on this box (the local server: its backends, WAL
    writer and checkpointer), from /proc."""
    total = 0.0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if Path(f"/proc/{pid}/comm").read_text().startswith("postgres"):
                total += process_cpu_seconds(pid)
        except OSError:
            continue
    return total


def start(name: str, cmd: list[str], workdir: Path, env: dict[str, str] | None = None, timeout: float = 30.0,
          count_children: bool = False) -> Proc:
    log = workdir / f"{name}.log"
    handle = log.open("wb")
    popen = subprocess.Popen(cmd, stdout=handle, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
    proc = Proc(name, popen, log, count_children=count_children)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        match = LISTEN_RE.search(log.read_text(errors="replace"))
        if match:
            proc.url = match.group(1)
            return proc
        if popen.poll() is not None:
            break
        time.sleep(0.05)
    proc.stop()
    raise SystemExit(f"{name} did not start; its log:\n{log.read_text(errors='replace')[-3000:]}")


def wait_for_tools(url: str, names: set[str], timeout: float = 30.0) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"accept": "application/json, text/event-stream", "mcp-protocol-version": "2025-11-25"}
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        try:
            r = httpx.post(url, json=body, headers=headers, timeout=5)
            last = r.text
            if all(f'"name":"{n}"' in r.text.replace(" ", "") for n in names):
                return
        except httpx.HTTPError as exc:
            last = repr(exc)
        time.sleep(0.2)
    raise SystemExit(f"tools {sorted(names)} never appeared at {url}: {last[:500]}")


def gateway_config(upstream_url: str, db: Path, json_response: bool, upstream_protocol: str) -> str:
    server = f"server: {{host: 127.0.0.1, port: 0, json_response: {'true' if json_response else 'false'}}}\n"
    return (
        server
        + "upstreams:\n"
        + f"  - {{name: bench, transport: streamable_http, url: \"{upstream_url}\", prefix: \"\", "
        + f"protocol: \"{upstream_protocol}\"}}\n"
        + f"fences: {{store: \"sqlite:///{db}\"}}\n"
    )


# -- one case -------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, int(round(q / 100.0 * len(ordered) + 0.5)) - 1))
    return ordered[k]


def run_case(url: str, tool: str, concurrency: int, calls: int, args: argparse.Namespace, watch: list[Proc]) -> dict[str, Any]:
    cmd = [
        PYTHON, str(HERE / "loadgen.py"), "--url", url, "--tool", tool, "--concurrency", str(concurrency),
        "--calls", str(calls), "--warmup", str(args.warmup), "--max-seconds", str(args.max_seconds),
        "--driver", args.driver, "--era", args.era,
    ]
    if tool == "write":
        cmd.append("--fresh-keys")
    before = {p.name: p.cpu_seconds() for p in watch}
    out = subprocess.run(cmd, capture_output=True, check=False, cwd=ROOT)
    after = {p.name: p.cpu_seconds() for p in watch}
    if out.returncode != 0:
        raise SystemExit(f"load generator failed: {out.stderr.decode(errors='replace')[-2000:]}")
    raw = json.loads(out.stdout)
    lat = raw["latencies_ms"]
    n = max(len(lat), 1)
    # The server CPU delta includes the warm-up; scale it to the measured share.
    share = len(lat) / (len(lat) + args.warmup)
    return {
        "calls": len(lat),
        "errors": raw["errors"],
        "first_errors": raw["first_errors"],
        "capped": raw["capped"],
        "p50_ms": percentile(lat, 50),
        "p99_ms": percentile(lat, 99),
        "mean_ms": statistics.fmean(lat) if lat else float("nan"),
        "calls_per_s": len(lat) / raw["wall_s"] if raw["wall_s"] else 0.0,
        "client_cpu_ms_per_call": raw["client_cpu_s"] * 1000.0 / n,
        **{f"{p.name}_cpu_ms_per_call": (after[p.name] - before[p.name]) * share * 1000.0 / n for p in watch},
    }


# -- report ---------------------------------------------------------------------------------


def print_table(rows: list[dict[str, Any]], meta: dict[str, Any]) -> None:
    print(
        f"gateway overhead, era {meta['era']} on both sides: upstream answers {meta['upstream_mode']}, "
        f"gateway front answers {meta['gateway_mode']}; "
        f"{meta['cpus']} CPU cores shared by load generator, gateway and upstream "
        "(at c=16 they compete for CPU: read the CPU ms/call columns)."
    )
    header = (
        f"{'case':<12} {'direct p50':>10} {'p99':>7} {'calls/s':>8} | {'gateway p50':>11} {'p99':>7} {'calls/s':>8} | "
        f"{'p50 +ms':>7} {'thru':>5} | {'cpu ms/call: gw':>15} {'up(d)':>6} {'up(g)':>6} {'cli':>5}"
        f" | {'floor +ms':>9} {'floor cpu':>9} {'gw/floor':>8}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        d, g, f = r["direct"], r["gateway"], r.get("floor")
        floor_cols = (f" | {f['p50_ms'] - d['p50_ms']:>+9.2f} {f.get('floor_cpu_ms_per_call', 0):>9.2f} "
                      f"{_ratio(g.get('gateway_cpu_ms_per_call'), f.get('floor_cpu_ms_per_call')):>8.2f}") if f else ""
        print(
            f"{r['case']:<12} {d['p50_ms']:>10.2f} {d['p99_ms']:>7.2f} {d['calls_per_s']:>8.0f} | "
            f"{g['p50_ms']:>11.2f} {g['p99_ms']:>7.2f} {g['calls_per_s']:>8.0f} | "
            f"{r['p50_overhead_ms']:>+7.2f} {r['throughput_ratio']:>5.2f} | "
            f"{g.get('gateway_cpu_ms_per_call', 0):>15.2f} {d.get('upstream_cpu_ms_per_call', 0):>6.2f} "
            f"{g.get('upstream_cpu_ms_per_call', 0):>6.2f} {g['client_cpu_ms_per_call']:>5.2f}{floor_cols}"
        )
        for side in ("direct", "gateway", "floor"):
            s = r.get(side)
            if s and (s["errors"] or s["capped"]):
                print(f"    {side}: {s['errors']} errors, {s['calls']} calls{' (time cap hit)' if s['capped'] else ''}; "
                      f"first: {s['first_errors'][:1]}")
    print()
    for line in goal_lines(rows):
        print(line)


def _ratio(a: float | None, b: float | None) -> float:
    return a / b if a is not None and b else float("nan")


def verdict(ok: bool) -> str:
    return "MET" if ok else "NOT MET"


def goal_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Each goal of issue 27 with its figure, the floor's beside it, and MET / NOT MET: a plain
    call's goals on the read rows, a fenced write's over the unfenced read at the same concurrency."""
    by_case = {r["case"]: r for r in rows}
    lines: list[str] = []
    for r in rows:
        if r["tool"] != "write":
            lines += _plain_call_goals(r)
        elif (read := by_case.get(r["case"].replace("write", "read"))) is not None:
            lines += _fence_goals(r, read)
    return lines


def _plain_call_goals(r: dict[str, Any]) -> list[str]:
    g, f = r["gateway"], r.get("floor")
    if r["concurrency"] != 1:
        ok = r["throughput_ratio"] >= GOAL_THROUGHPUT_RATIO
        floor_thru = f" (floor {f['calls_per_s'] / r['direct']['calls_per_s']:.2f}x)" if f and r['direct']['calls_per_s'] else ""
        return [f"goal {r['case']}: throughput {r['throughput_ratio']:.2f}x direct >= {GOAL_THROUGHPUT_RATIO:.2f}x"
                f"{floor_thru}: {verdict(ok)}"]
    floor_added = f" (floor {f['p50_ms'] - r['direct']['p50_ms']:+.2f} ms)" if f else ""
    ok = r["p50_overhead_ms"] <= GOAL_P50_OVERHEAD_MS
    lines = [f"goal {r['case']}: added p50 {r['p50_overhead_ms']:+.2f} ms <= {GOAL_P50_OVERHEAD_MS:g} ms"
             f"{floor_added}: {verdict(ok)}"]
    cpu = g.get("gateway_cpu_ms_per_call")
    if cpu is not None:
        floor_cpu = f.get("floor_cpu_ms_per_call") if f else None
        over = _ratio(cpu, floor_cpu)
        ok = cpu <= GOAL_GATEWAY_CPU_MS and (floor_cpu is None or over <= GOAL_CPU_OVER_FLOOR)
        beside = f", {over:.2f}x the floor's {floor_cpu:.2f} ms (<= {GOAL_CPU_OVER_FLOOR:g}x)" if floor_cpu else ""
        lines.append(f"goal {r['case']}: gateway CPU {cpu:.2f} ms/call <= {GOAL_GATEWAY_CPU_MS:g} ms{beside}: "
                     f"{verdict(ok)}")
    return lines


def _fence_goals(write: dict[str, Any], read: dict[str, Any]) -> list[str]:
    if write["concurrency"] == 1:
        added = write["p50_overhead_ms"] - read["p50_overhead_ms"]
        return [f"goal {write['case']}: the fence adds {added:+.2f} ms p50 over the unfenced read "
                f"<= {GOAL_FENCE_ADDED_MS:g} ms: {verdict(added <= GOAL_FENCE_ADDED_MS)}"]
    # Each tool's throughput through the gateway over its own direct one, so the tools' own costs cancel.
    kept = _ratio(write["throughput_ratio"], read["throughput_ratio"])
    return [f"goal {write['case']}: fenced write {write['throughput_ratio']:.2f}x direct, unfenced read "
            f"{read['throughput_ratio']:.2f}x: {kept:.2f}x the unfenced >= {GOAL_FENCED_THROUGHPUT:g}x: "
            f"{verdict(kept >= GOAL_FENCED_THROUGHPUT)}"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--upstream-json", action="store_true", help="upstream answers application/json instead of SSE")
    parser.add_argument("--gateway-json", action="store_true", help="gateway config server.json_response: true")
    parser.add_argument("--era", default="handshake", choices=["handshake", "2026-07-28"],
                        help="protocol era on both sides: the load generator's requests (direct and to the "
                             "gateway) and the gateway's requests to the upstream, so a ratio compares like with like")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--calls-c1", type=int, default=2000, help="measured calls per case at c=1")
    parser.add_argument("--calls", type=int, default=5000, help="measured calls per case at c>1")
    parser.add_argument("--warmup", type=int, default=200, help="unmeasured calls before each case")
    parser.add_argument("--max-seconds", type=float, default=60.0, help="time cap per case")
    parser.add_argument("--tools", nargs="+", default=["read", "write"], choices=["read", "write"])
    parser.add_argument("--gateway-pythonpath", help="run the gateway package copy in this dir (scratch experiments)")
    parser.add_argument("--gateway-workers", type=int, default=1, help="dex-gateway serve --workers N")
    parser.add_argument("--traces", action="store_true",
                        help="the gateway exports spans over OTLP/HTTP (OTEL_* variables) to bench/otlp_sink.py")
    parser.add_argument("--no-metrics", action="store_true", help="gateway config telemetry.metrics: false")
    parser.add_argument("--driver", choices=["raw", "httpx"], default="raw",
                        help="load generator HTTP client: raw asyncio HTTP/1.1 (lean) or httpx")
    parser.add_argument("--upstream-http", default="auto", help="uvicorn http implementation of the upstream")
    parser.add_argument("--no-floor", action="store_true", help="skip the zero-logic floor proxy (bench/floor_proxy.py)")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs, config, fence DB)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="dex-bench-"))
    procs: list[Proc] = []
    try:
        up_cmd = [PYTHON, str(HERE / "echo_server.py"), "--port", "0", "--http", args.upstream_http]
        if args.upstream_json:
            up_cmd.append("--json-response")
        upstream = start("upstream", up_cmd, workdir)
        procs.append(upstream)
        config = workdir / "gateway.yaml"
        config.write_text(gateway_config(upstream.url, workdir / "fences.db", args.gateway_json, args.era)
                          + ("telemetry: {metrics: false}\n" if args.no_metrics else ""))
        env = dict(os.environ)
        if args.traces:
            sink = start("otlp-sink", [PYTHON, str(HERE / "otlp_sink.py"), "--port", "0"], workdir)
            procs.append(sink)
            env.update(OTEL_TRACES_EXPORTER="otlp", OTEL_EXPORTER_OTLP_ENDPOINT=sink.url,
                       OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf", OTEL_SERVICE_NAME="dex-gateway-bench")
        if args.gateway_pythonpath:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [args.gateway_pythonpath, env.get("PYTHONPATH")]))
            gw_cmd = [PYTHON, "-c", SCRATCH_LAUNCHER, args.gateway_pythonpath, "serve", "--config", str(config), "--port", "0"]
        else:
            exe = shutil.which("dex-gateway", path=str(Path(PYTHON).parent)) or "dex-gateway"
            gw_cmd = [exe, "serve", "--config", str(config), "--port", "0"]
        if args.gateway_workers > 1:
            gw_cmd += ["--workers", str(args.gateway_workers)]
        gateway = start("gateway", gw_cmd, workdir, env=env, count_children=args.gateway_workers > 1)
        procs.append(gateway)
        wait_for_tools(gateway.url, {"echo", "write"})
        floor = None
        if not args.no_floor:
            floor = start("floor", [PYTHON, str(HERE / "floor_proxy.py"), "--upstream", upstream.url, "--port", "0"],
                          workdir)
            procs.append(floor)
            wait_for_tools(floor.url, {"echo", "write"})

        rows = []
        for c in args.concurrency:
            calls = args.calls_c1 if c == 1 else args.calls
            for kind in args.tools:
                tool = "echo" if kind == "read" else "write"
                direct = run_case(upstream.url, tool, c, calls, args, [upstream])
                through = run_case(gateway.url, tool, c, calls, args, [gateway, upstream])
                extra = {"floor": run_case(floor.url, tool, c, calls, args, [floor, upstream])} if floor else {}
                rows.append({
                    **extra,
                    "case": f"{kind} c={c}",
                    "tool": tool,
                    "concurrency": c,
                    "direct": direct,
                    "gateway": through,
                    "p50_overhead_ms": through["p50_ms"] - direct["p50_ms"],
                    "throughput_ratio": through["calls_per_s"] / direct["calls_per_s"] if direct["calls_per_s"] else 0.0,
                })
        meta = {
            "upstream_mode": "JSON" if args.upstream_json else "SSE",
            "gateway_mode": "JSON" if args.gateway_json else "SSE",
            "cpus": os.cpu_count(),
            "era": args.era,
            "driver": args.driver,
            "gateway_workers": args.gateway_workers,
            "traces": args.traces,
            "metrics": not args.no_metrics,
            "python": sys.version.split()[0],
            "workdir": str(workdir) if args.keep else None,
        }
        if args.json:
            for r in rows:
                for side in ("direct", "gateway", "floor"):
                    if side in r and not r[side]["errors"]:
                        r[side].pop("first_errors", None)
            print(json.dumps({"meta": meta, "rows": rows, "goals": goal_lines(rows)}, indent=2))
        else:
            print_table(rows, meta)
        return 0 if all(r[side]["errors"] == 0 for r in rows for side in ("direct", "gateway", "floor") if side in r) else 1
    finally:
        for p in reversed(procs):
            p.stop()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
