"""Helpers shared by the fence tests (a unique module name: other test folders have a conftest too)."""

from __future__ import annotations

import inspect
import time
from collections import Counter
from typing import Any

import anyio


class FakeClock:
    """Wall clock for leases that tests move by hand (waits still use real time)."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class WatchedStore:
    """A fence store that counts its finished calls by method, so a test can wait for one
    (e.g. a duplicate's first poll: it saw a live pending claim and is waiting)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not inspect.iscoroutinefunction(attr):
            return attr

        async def counted(*args: Any, **kwargs: Any) -> Any:
            try:
                return await attr(*args, **kwargs)
            finally:
                self.calls[name] += 1

        return counted

    async def wait_calls(self, method: str, count: int, *, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while self.calls[method] < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.calls[method]} of {count} {method} calls after {timeout} s")
            await anyio.sleep(0.002)
