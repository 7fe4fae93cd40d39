"""Python function calls per tools/call in the gateway process: a yardstick that load does not move.

    .venv/bin/python bench/call_profile.py [--era handshake|2026-07-28] [--tools read|write]
        [--gateway-pythonpath DIR ...]

Wall-clock and CPU figures (bench/gateway_overhead.py) swing by 30 % on a shared 2-core box; the
number of Python function calls (and coroutine resumptions) the gateway makes per call does not.
This runs bench/gateway_overhead.py twice per gateway (N and N + 2,000 calls at c=1) with the
gateway process under cProfile, and reports the difference per call, so start-up cancels out.
Each `--gateway-pythonpath` names a scratch copy of the package (e.g. `git archive REV gateway |
tar -x -C DIR`) to compare revisions side by side in one run; without one, the installed gateway.

It also lists the functions whose per-call count differs most between the first two gateways.
"""

from __future__ import annotations

import argparse
import os
import pstats
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PYTHON = sys.executable

# Loaded by the gateway process only (`python -c LAUNCHER DIR serve ...`): cProfile from the
# start, written at exit (the bench ends the gateway with SIGTERM; it drains and exits cleanly).
_SITECUSTOMIZE = '''
import os, sys
_out = os.environ.get("DEX_CALL_PROFILE_OUT")
if _out and len(sys.argv) > 1 and sys.argv[0] == "-c":
    import atexit, cProfile
    _profile = cProfile.Profile()
    _profile.enable()
    def _dump():
        _profile.disable()
        _profile.dump_stats(_out)
    atexit.register(_dump)
'''


def _profiled_run(gateway_dir: str | None, calls: int, out: Path, site: Path, args: argparse.Namespace) -> None:
    env = dict(os.environ, DEX_CALL_PROFILE_OUT=str(out))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    cmd = [PYTHON, str(HERE / "gateway_overhead.py"), "--era", args.era, "--concurrency", "1", "--tools", args.tools,
           "--calls-c1", str(calls), "--warmup", "100"]
    # The installed gateway runs through the same launcher, so that it is profiled too.
    cmd += ["--gateway-pythonpath", gateway_dir or str(Path(str(__import__("gateway").__file__)).parent.parent)]
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600)
    if not out.exists():
        raise SystemExit(f"no profile written for {gateway_dir or 'the installed gateway'}")


Counts = dict[tuple[str, str], tuple[float, float, float]]


def _per_call(small: Path, large: Path, extra: int) -> tuple[float, Counts]:
    """Per call: the total call count, and per function (calls, own and cumulative time in µs; a
    coroutine's cumulative time is the CPU of its resumptions, not the time it was suspended)."""
    a, b = pstats.Stats(str(small)), pstats.Stats(str(large))
    counts: Counts = {}
    before = a.stats  # type: ignore[attr-defined]
    for key, value in b.stats.items():  # type: ignore[attr-defined]
        old = before.get(key, (0, 0, 0.0, 0.0))
        delta = (value[1] - old[1]) / extra
        if delta > 0.3:
            name = ("/".join(key[0].split("/")[-2:]), f"{key[1]}:{key[2]}")
            calls, own, cum = counts.get(name, (0.0, 0.0, 0.0))
            own += (value[2] - old[2]) / extra * 1e6
            cum += (value[3] - old[3]) / extra * 1e6
            counts[name] = (calls + delta, own, cum)
    return (b.total_calls - a.total_calls) / extra, counts  # type: ignore[attr-defined]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--era", choices=["handshake", "2026-07-28"], default="handshake")
    parser.add_argument("--tools", choices=["read", "write"], default="read")
    parser.add_argument("--calls", type=int, default=500, help="calls of the smaller run (the larger: + 2,000)")
    parser.add_argument("--gateway-pythonpath", action="append", default=[])
    parser.add_argument("--diff", type=int, default=15, help="functions listed whose count differs most")
    parser.add_argument("--top", type=int, default=0, help="list each gateway's N most called functions per call")
    parser.add_argument("--sort", choices=["calls", "own", "cum"], default="calls",
                        help="--top's order: calls per call, or own or cumulative time per call under cProfile")
    args = parser.parse_args()
    extra = 2000
    gateways: list[str | None] = args.gateway_pythonpath or [None]
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp) / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text(_SITECUSTOMIZE)
        results = []
        for i, gateway_dir in enumerate(gateways):
            small, large = Path(tmp) / f"{i}.small", Path(tmp) / f"{i}.large"
            _profiled_run(gateway_dir, args.calls, small, site, args)
            _profiled_run(gateway_dir, args.calls + extra, large, site, args)
            results.append(_per_call(small, large, extra))
    print(f"Python function calls per tools/call ({args.tools} tool, {args.era}, c=1; cProfile, gateway process)")
    for gateway_dir, (total, _) in zip(gateways, results):
        print(f"  {total:8.1f}  {gateway_dir or 'installed gateway'}")
    for gateway_dir, (_, counts) in zip(gateways, results) if args.top else ():
        order = ("calls", "own", "cum").index(args.sort)
        print(f"top functions by {args.sort} per call (own and cumulative time under cProfile in µs, calls): "
              f"{gateway_dir or 'installed gateway'}")
        for key, (calls, own, cum) in sorted(counts.items(), key=lambda item: -item[1][order])[: args.top]:
            print(f"  {own:7.1f}  {cum:7.1f}  {calls:5.1f}  {key[0]} {key[1]}")
    if len(results) > 1 and args.diff:
        first, second = results[0][1], results[1][1]

        def count(side: Counts, key: tuple[str, str]) -> float:
            return side.get(key, (0.0, 0.0, 0.0))[0]

        keys = sorted(set(first) | set(second), key=lambda k: -abs(count(second, k) - count(first, k)))
        print("most changed, second minus first (per call):")
        for key in keys[: args.diff]:
            print(f"  {count(second, key) - count(first, key):+6.1f}  {key[0]} {key[1]}")


if __name__ == "__main__":
    main()
