"""The goals the benchmarks print (issue 27): which row each goal reads, and one threshold per goal.

`bench/gateway_overhead.py` and `bench/fence_gateway_bench.py` both judge fenced writes; the
threshold lives in the first and the second imports it, so the two cannot drift apart.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def benches() -> Any:
    sys.path.insert(0, str(BENCH))
    try:
        import fence_gateway_bench
        import gateway_overhead
    finally:
        sys.path.remove(str(BENCH))
    return gateway_overhead, fence_gateway_bench


def _row(tool: str, concurrency: int, *, added: float, thru: float, cpu: float | None = None) -> dict[str, Any]:
    return {
        "case": f"{tool} c={concurrency}", "tool": tool, "concurrency": concurrency,
        "p50_overhead_ms": added, "throughput_ratio": thru,
        "gateway": {} if cpu is None else {"gateway_cpu_ms_per_call": cpu},
        "direct": {"p50_ms": 0.7, "calls_per_s": 1000.0},
        "floor": {"p50_ms": 1.1, "calls_per_s": 1020.0, "floor_cpu_ms_per_call": 0.3},
    }


def test_plain_goals_read_the_read_rows_and_fence_goals_compare_the_write_with_the_read(benches: Any) -> None:
    overhead, _ = benches
    lines = overhead.goal_lines([
        _row("read", 1, added=0.5, thru=0.6, cpu=0.42),
        _row("write", 1, added=0.9, thru=0.5, cpu=0.9),  # a fenced write's own CPU is no plain-call goal
        _row("read", 16, added=0.0, thru=1.02),
        _row("write", 16, added=4.0, thru=0.78),
    ])
    assert lines == [
        "goal read c=1: added p50 +0.50 ms <= 0.6 ms (floor +0.40 ms): MET",
        "goal read c=1: gateway CPU 0.42 ms/call <= 0.45 ms, 1.40x the floor's 0.30 ms (<= 1.6x): MET",
        "goal write c=1: the fence adds +0.40 ms p50 over the unfenced read <= 0.25 ms: NOT MET",
        "goal read c=16: throughput 1.02x direct >= 1.00x (floor 1.02x): MET",
        "goal write c=16: fenced write 0.78x direct, unfenced read 1.02x: 0.76x the unfenced >= 0.8x: NOT MET",
    ]


def test_the_fence_goals_flip_at_their_thresholds(benches: Any) -> None:
    overhead, fence = benches
    lines = overhead.goal_lines([
        _row("read", 1, added=0.7, thru=0.6, cpu=0.6),
        _row("write", 1, added=0.9, thru=0.5),
        _row("read", 16, added=0.0, thru=0.9),
        _row("write", 16, added=2.0, thru=0.73),  # 0.81x the read's 0.9x
    ])
    assert [line.rsplit(": ", 1)[1] for line in lines] == ["NOT MET", "NOT MET", "MET", "NOT MET", "MET"]
    assert fence.GOAL_FENCED_THROUGHPUT is overhead.GOAL_FENCED_THROUGHPUT
    rows = {"(a) fenced, SQLite": {"p50_added_ms": 0.2, "throughput_ratio": 0.81},
            "(b) fenced, PostgreSQL": {"p50_added_ms": 0.9, "throughput_ratio": 0.79}}
    assert fence.goal_lines(rows, 1) == [
        "goal c=1: the SQLite fence adds +0.20 ms p50 <= 0.25 ms: MET",
        "goal c=1: the PostgreSQL fence adds +0.90 ms p50 <= 0.8 ms: NOT MET",
    ]
    assert fence.goal_lines(rows, 16) == [
        "goal c=16: SQLite-fenced throughput 0.81x the unfenced >= 0.8x: MET",
        "goal c=16: PostgreSQL-fenced throughput 0.79x the unfenced >= 0.8x: NOT MET",
    ]
