"""Helpers shared by the fence tests (a unique module name: other test folders have a conftest too)."""

from __future__ import annotations


class FakeClock:
    """Wall clock for leases that tests move by hand (waits still use real time)."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
