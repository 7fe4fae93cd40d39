"""The cost of the policy per call: `Policy.denial` (what the pipeline runs before the fence) for a
typical arguments rule, a claims rule, both, and a call no rule applies to; and `Policy.hides`
per tool for a listing built anew (once per catalog version and caller key).

    .venv/bin/python bench/policy_bench.py [--calls 20000] [--compare-cel-python]

In-process, one core, no I/O: microseconds per decision (p50 and mean over --calls decisions,
after a warm-up). `--compare-cel-python` also times the same conditions in cel-python (pure
Python; not a dependency: `pip install cel-python` first), the library docs/policy.md compares.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.auth.policy import Policy  # noqa: E402
from gateway.auth.principals import Identity  # noqa: E402
from gateway.config.policy import PolicyConfig  # noqa: E402

ARGUMENTS_RULE = "arguments.amount > 5000"
CLAIMS_RULE = '!("finance" in claims.groups)'
ARGUMENTS = {"order": "o-123", "amount": 100, "currency": "EUR", "reason": "damaged in transit"}
IDENTITY = Identity("alice", claims={"iss": "https://idp.example.com", "sub": "alice", "aud": "https://gw.example.com/mcp",
                                     "exp": 1_900_000_000, "iat": 1_800_000_000, "jti": "0f3c", "groups": ["finance", "staff"]},
                    scopes=frozenset({"mcp"}))


def policy(*rules: tuple[str, str, str]) -> Policy:
    return Policy(PolicyConfig.model_validate({"rules": [
        {"name": name, "tools": [tool], "when": when, "effect": "deny"} for name, tool, when in rules]}))


def timed(fn: Callable[[], object], calls: int) -> tuple[float, float]:
    for _ in range(min(calls, 2000)):
        fn()
    samples = []
    for _ in range(calls):
        start = time.perf_counter_ns()
        fn()
        samples.append(time.perf_counter_ns() - start)
    return statistics.median(samples) / 1000, statistics.fmean(samples) / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--compare-cel-python", action="store_true")
    args = parser.parse_args()
    arguments_only = policy(("large-refunds", "billing__refund", ARGUMENTS_RULE))
    claims_only = policy(("exports-for-finance", "billing__export", CLAIMS_RULE))
    both = policy(("large-refunds", "billing__refund", ARGUMENTS_RULE),
                  ("finance-refunds", "billing__refund", CLAIMS_RULE))
    cases: list[tuple[str, Callable[[], object]]] = [
        ("arguments rule (arguments.amount > 5000)",
         lambda: arguments_only.denial(IDENTITY, "billing__refund", "billing", ARGUMENTS)),
        ('claims rule (!("finance" in claims.groups))',
         lambda: claims_only.denial(IDENTITY, "billing__export", "billing", ARGUMENTS)),
        ("both rules on one call", lambda: both.denial(IDENTITY, "billing__refund", "billing", ARGUMENTS)),
        ("no rule applies (the tool matches no glob)",
         lambda: both.denial(IDENTITY, "notes__read", "notes", ARGUMENTS)),
        ("listing: hides() for one tool, claims rule",
         lambda: claims_only.hides(IDENTITY, "billing__export", "billing")),
    ]
    print(f"policy evaluation, {args.calls} decisions each (us per decision)")
    for label, fn in cases:
        p50, mean = timed(fn, args.calls)
        print(f"  {label:48s} p50 {p50:7.2f}  mean {mean:7.2f}")
    if args.compare_cel_python:
        compare(args.calls // 10)


def compare(calls: int) -> None:
    try:
        import celpy  # type: ignore[import-untyped]
    except ImportError:
        print("cel-python is not installed (pip install cel-python)")
        return
    env = celpy.Environment()
    activation: dict[str, Any] = {"arguments": ARGUMENTS, "claims": dict(IDENTITY.claims)}
    print(f"cel-python, the same conditions, {calls} evaluations each (us; its values converted per call)")
    for source in (ARGUMENTS_RULE, CLAIMS_RULE):
        program = env.program(env.compile(source))
        p50, mean = timed(lambda: program.evaluate(celpy.json_to_cel(activation)), calls)
        print(f"  {source:48s} p50 {p50:7.2f}  mean {mean:7.2f}")


if __name__ == "__main__":
    main()
