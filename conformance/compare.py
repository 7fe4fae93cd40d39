#!/usr/bin/env python3
"""Runs the MCP conformance suites directly against the reference server and through the Dex
gateway, and prints the results scenario by scenario, side by side (`make conformance`).

Suites: `legacy` = @modelcontextprotocol/conformance 0.1.16 `--suite all`; `2025` and `2026` =
0.2.0-alpha.12 `--requirements 2025-11-25` / `--requirements 2026-07-28` (the latter runs the
tasks extension scenarios too, reported but not scored by the suite).
Targets: `direct` (the reference server), `stateful` and `stateless` (a gateway in that mode
fronting its own reference server; one upstream, streamable_http, prefix "").
Servers: `both` (the reference server speaks both eras: the gateway's `protocol: auto` picks
2026-07-28 towards it), `handshake` (`--handshake-only`: the gateway falls back to initialize) and
`session` (`--asks-on-session`: both eras, its tools asking through the session as SDK tools
written with `ctx.elicit` do; the gateway's era per caller must keep their questions working).

    conformance/compare.py [--suites legacy,2025,2026] [--servers both,handshake,session]
                           [--targets direct,stateful,stateless] [--jobs N]

Exit status 1 when, for some suite and server, the stateful gateway fails a scenario that
passes directly and is not listed in EXPECTED below. Loopback only; needs node >= 20 and the
npm packages of conformance/package.json (run.sh installs them). Logs and checks.json files stay
in the printed directory.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PY = os.environ.get("PY", str(ROOT / ".venv" / "bin" / "python"))
GATEWAY = os.environ.get("GATEWAY_CMD", str(ROOT / ".venv" / "bin" / "dex-gateway")).split()
SUITES = {
    "legacy": ("@modelcontextprotocol/conformance", ["--suite", "all"], "0.1.16 --suite all"),
    "2025": ("conformance-next", ["--requirements", "2025-11-25"], "0.2.0-alpha.12 --requirements 2025-11-25"),
    "2026": ("conformance-next", ["--requirements", "2026-07-28"], "0.2.0-alpha.12 --requirements 2026-07-28"),
}
SERVERS = {"both": [], "handshake": ["--handshake-only"], "session": ["--asks-on-session"]}
TARGETS = ("direct", "stateful", "stateless")

# Scenarios allowed to differ from direct, with the reason: (suite, server, target, scenario).
# "*" matches any suite or server. A stateful-gateway scenario that fails while it passes directly
# and is not listed here fails the run; other differences are printed with their failed checks.
_NO_SESSION = ("a stateless gateway has no session with a handshake-era client, so an upstream's question "
               "(elicitation, sampling) cannot be put to it; the upstream is told the client can answer nothing "
               "and refuses (-32021). A 2026-07-28 client is asked with input_required rounds instead "
               "(docs/interop.md)")
_NO_SESSION_ID = "a stateless gateway issues no Mcp-Session-Id (the suite warns that it cannot test resumption)"
EXPECTED: dict[tuple[str, str, str, str], str] = {
    ("*", "*", "stateless", "tools-call-sampling"): _NO_SESSION,
    ("*", "*", "stateless", "tools-call-elicitation"): _NO_SESSION,
    ("*", "*", "stateless", "elicitation-sep1034-defaults"): _NO_SESSION,
    ("*", "*", "stateless", "elicitation-sep1330-enums"): _NO_SESSION,
    ("*", "*", "stateless", "server-sse-polling"): _NO_SESSION_ID,
    ("*", "*", "stateless", "server-sse-multiple-streams"): _NO_SESSION_ID,
    ("*", "*", "stateless", "server-session-lifecycle"): _NO_SESSION_ID,
    ("2026", "*", "stateful", "tasks-required-task-error"): "by design (tasks.plain_required: wait): a client that "
        "knows no tasks still gets a task-required tool's result; `--plain-required refuse` passes it",
    ("2026", "*", "stateless", "tasks-required-task-error"): "as for the stateful gateway",
    ("*", "both", "stateful", "server-sse-polling"): "the 2026-07-28 upstream cannot end its stream mid-call (SSE "
        "polling is a handshake-era transport feature), so the gateway's stream is not ended either; against the "
        "handshake-only server the gateway ends its own stream when the upstream does, and the client resumes",
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suites", default="legacy,2025,2026")
    parser.add_argument("--servers", default="both,handshake,session")
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("CONFORMANCE_JOBS", "3")),
                        help="targets run in parallel (each has its own reference server)")
    parser.add_argument("--plain-required", choices=("wait", "refuse"), default="wait",
                        help="the gateway's tasks.plain_required")
    args = parser.parse_args()
    suites, servers, targets = (_names(args.suites, SUITES), _names(args.servers, SERVERS), _names(args.targets, TARGETS))
    work = Path(tempfile.mkdtemp(prefix="dex-conformance-"))
    results: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for server in servers:
        with ExitStack() as stack:
            urls = {target: _start_target(stack, work / server / target, server, target, args.plain_required)
                    for target in targets}
            for suite in suites:
                print(f"running {SUITES[suite][2]} against the {server}-era reference server ...", file=sys.stderr, flush=True)
                with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
                    runs = {t: pool.submit(_run_suite, suite, urls[t], work / server / t / suite) for t in targets}
                    results[(suite, server)] = {t: run.result() for t, run in runs.items()}
    failed = _report(results, targets)
    print(f"\nlogs and results: {work}")
    return 1 if failed else 0


def _names(value: str, known: Any) -> list[str]:
    names = [n.strip() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"unknown: {', '.join(unknown)} (known: {', '.join(known)})")
    return names


# -- processes --------------------------------------------------------------------------------


def _spawn(stack: ExitStack, argv: list[str], log: Path, env: dict[str, str] | None = None) -> str:
    """Start a process logging to `log`; the URL of its "listening on" line."""
    log.parent.mkdir(parents=True, exist_ok=True)
    out = stack.enter_context(log.open("w"))
    process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env={**os.environ, **(env or {})})
    stack.callback(_stop, process)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = re.search(r"listening on (http://\S+)", log.read_text(errors="replace"))
        if found:
            return found.group(1)
        if process.poll() is not None:
            break
        time.sleep(0.1)
    raise SystemExit(f"{argv[0]} did not start; its log ({log}):\n{log.read_text(errors='replace')[-3000:]}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _start_target(stack: ExitStack, directory: Path, server: str, target: str, plain_required: str) -> str:
    env = {"DEX_EXAMPLE_STATE_DIR": str(directory / "server-state")}
    url = _spawn(stack, [PY, str(HERE / "reference_server.py"), "--port", "0", *SERVERS[server]],
                 directory / "server.log", env)
    if target == "direct":
        return url
    config = directory / "gateway.yaml"
    config.write_text(
        f"server: {{host: 127.0.0.1, port: 0, stateful: {str(target == 'stateful').lower()}}}\n"
        "upstreams:\n"
        "  # The suites are plain MCP clients (no idempotency keys): let keyless writes through.\n"
        f'  - {{name: reference, transport: streamable_http, url: "{url}", prefix: "", keyless_writes: pass}}\n'
        f'fences: {{store: "sqlite:///{directory / "gateway.db"}"}}\n'
        f"tasks: {{plain_required: {plain_required}}}\n"
        + (f'media: {{store: "file://{directory / "media"}"}}\n' if os.environ.get("GATEWAY_MEDIA") else "")
    )
    gateway_url = _spawn(stack, [*GATEWAY, "serve", "--config", str(config), "--port", "0"], directory / "gateway.log")
    deadline = time.monotonic() + 30
    while "catalog ready" not in (directory / "gateway.log").read_text(errors="replace") and time.monotonic() < deadline:
        time.sleep(0.1)
    return gateway_url


def _run_suite(suite: str, url: str, out: Path) -> dict[str, Any]:
    package, options, _ = SUITES[suite]
    out.mkdir(parents=True, exist_ok=True)
    cli = HERE / "node_modules" / package / "dist" / "index.js"
    argv = ["node", "--import", str(HERE / "fs-globsync-hook.mjs"), str(cli), "server", "--url", url, *options, "-o", str(out)]
    text = subprocess.run(argv, cwd=HERE, capture_output=True, text=True).stdout
    (out / "suite.out").write_text(text)
    unscored = set(re.findall(r"^\s+[✓✗] ([\w/-]+) \((?:extension|pending|added-after-release)\)", text, re.M))
    scenarios: dict[str, Any] = {}
    for found in glob.glob(str(out / "server-*" / "checks.json")):
        name = re.sub(r"-\d{4}-\d\d-\d\dT[\d-]+Z$", "", Path(found).parent.name).removeprefix("server-")
        checks = json.loads(Path(found).read_text())
        scenarios[name] = {"verdict": _verdict(checks), "checks": checks, "scored": name not in unscored}
    return scenarios


def _verdict(checks: list[dict[str, Any]]) -> str:
    statuses = {c.get("status") for c in checks}
    if "FAILURE" in statuses:
        return "FAIL"
    if "WARNING" in statuses:
        return "warn"
    return "pass" if "SUCCESS" in statuses else "info"


# -- the report -------------------------------------------------------------------------------


def _expected(suite: str, server: str, target: str, scenario: str) -> str | None:
    for (s, v, t, n), reason in EXPECTED.items():
        if s in ("*", suite) and v in ("*", server) and t == target and n == scenario:
            return reason
    return None


def _report(results: dict[tuple[str, str], dict[str, dict[str, Any]]], targets: list[str]) -> bool:
    failed = False
    summary: list[str] = []
    for (suite, server), by_target in results.items():
        names = sorted({n for scenarios in by_target.values() for n in scenarios})
        print(f"\n== {SUITES[suite][2]}, reference server: "
              f"{ {'both': 'both eras', 'handshake': 'handshake era only', 'session': 'both eras, asking on the session'}[server]}")
        print(f"{'scenario':46}" + "".join(f"{t:>11}" for t in targets))
        notes: list[str] = []
        for name in names:
            row = {t: by_target[t].get(name, {}).get("verdict", "-") for t in targets}
            scored = all(by_target[t].get(name, {}).get("scored", True) for t in targets)
            print(f"{name + ('' if scored else ' *'):46}" + "".join(f"{row[t]:>11}" for t in targets))
            if "direct" not in row:
                continue
            for target in targets[1:] if targets[0] == "direct" else []:
                if row[target] == row["direct"]:
                    if (checks := _check_differences(by_target["direct"].get(name), by_target[target].get(name))):
                        reason = _expected(suite, server, target, name)
                        notes.append(f"  {name} [{target}] same verdict, checks differ: {checks}"
                                     + (f" -- {reason}" if reason else ""))
                    continue
                reason = _expected(suite, server, target, name)
                worse = row[target] == "FAIL" and row["direct"] != "FAIL"
                tag = "expected" if reason else ("WORSE" if worse else "differs")
                if worse and not reason and target == "stateful" and scored:
                    failed = True
                notes.append(f"  {name} [{target}: {row[target]}, direct: {row['direct']}] {tag}: "
                             f"{reason or '; '.join(_failures(by_target[target].get(name))) or 'see checks.json'}")
        counts = []
        for target in targets:
            scenarios = by_target[target]
            ok = sum(1 for s in scenarios.values() if s["verdict"] != "FAIL")
            counts.append(f"{target} {ok}/{len(scenarios)}")
        print("passed (no failed check): " + ", ".join(counts) + "   (* = run but not scored by the suite)")
        summary.append(f"{SUITES[suite][2]:44} {server:9} " + "  ".join(counts))
        if notes:
            print("differences from direct:")
            print("\n".join(notes))
    print("\n== summary (scenarios without a failed check / scenarios run)")
    print("\n".join(summary))
    return failed


def _check_differences(direct: dict[str, Any] | None, other: dict[str, Any] | None) -> str:
    """Checks (other than INFO) whose status differs from direct's, as `id: direct -> other`."""
    if not direct or not other:
        return ""

    def statuses(scenario: dict[str, Any]) -> dict[str, str]:
        return {c["id"]: c.get("status", "") for c in scenario["checks"] if c.get("status") != "INFO"}

    before, after = statuses(direct), statuses(other)
    return "; ".join(f"{i}: {before.get(i, '-')} -> {after.get(i, '-')}"
                     for i in sorted(set(before) | set(after)) if before.get(i) != after.get(i))


def _failures(scenario: dict[str, Any] | None) -> list[str]:
    if not scenario:
        return ["(not run)"]
    return [f"{c['id']}: {(c.get('errorMessage') or '')[:160]}" for c in scenario["checks"]
            if c.get("status") in ("FAILURE", "WARNING")][:3]


if __name__ == "__main__":
    sys.exit(main())
