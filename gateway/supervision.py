"""Background work under supervision: one place that runs every loop and job the gateway starts
beside the requests (task jobs, lease keepers, sweepers, listing refreshes, notifiers).

    supervisor = Supervisor(metrics)                    # one per runtime, made in the lifespan
    tg.start_soon(supervisor.loop, "fence sweeper", fences.run_sweeper)   # restarted with backoff
    tg.start_soon(supervisor.once, "task job", job)     # logged and counted, never re-run

A failure is logged with its traceback, counted in `dex_gateway_background_failures{work=...}`
(/metrics) and, for a loop, followed by a restart after a backoff (1 s doubling to 60 s). It never
reaches the task group: an exception there would cancel the whole runtime while the HTTP server
lives on (every `/mcp` request refused, `/healthz` still 200). When the runtime does end anyway
(a failure outside this module), `failed` says why and `/healthz` answers 503, so an
orchestrator restarts the process.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

import anyio

__all__ = ["FailureCounter", "Supervisor"]

logger = logging.getLogger(__name__)

_FIRST_BACKOFF = 1.0
_MAX_BACKOFF = 60.0


class FailureCounter(Protocol):
    def background_failed(self, work: str) -> None: ...


class Supervisor:
    def __init__(self, counter: FailureCounter | None = None, *, first_backoff: float = _FIRST_BACKOFF,
                 max_backoff: float = _MAX_BACKOFF) -> None:
        self._counter = counter
        self._first_backoff = first_backoff
        self._max_backoff = max_backoff
        self.failures = 0
        # Why the runtime can no longer serve (set by the app when its lifespan ends unasked).
        self.failed: str | None = None

    def _count(self, work: str) -> None:
        self.failures += 1
        if self._counter is not None:
            self._counter.background_failed(work)

    async def once(self, work: str, fn: Callable[[], Awaitable[object]]) -> None:
        """Run `fn` once; an exception is logged and counted, never raised."""
        try:
            await fn()
        except Exception:  # noqa: BLE001 - background work must not take the runtime down
            logger.exception("background work %r failed", work)
            self._count(work)

    async def loop(self, work: str, fn: Callable[[], Awaitable[object]]) -> None:
        """Run `fn` (a loop meant to run until cancelled) and start it again after a backoff
        whenever it raises or returns."""
        backoff = self._first_backoff
        while True:
            try:
                await fn()
            except Exception:  # noqa: BLE001 - logged, counted, restarted
                logger.exception("background loop %r failed; restarting in %.0f s", work, backoff)
                self._count(work)
            else:
                logger.warning("background loop %r returned; restarting in %.0f s", work, backoff)
            await anyio.sleep(backoff)
            backoff = min(backoff * 2, self._max_backoff)

    async def retry(self, work: str, fn: Callable[[], Awaitable[object]], *, give_up_after: float) -> bool:
        """Run `fn` until it succeeds, backing off between tries (0.1 s doubling to 5 s), for at
        most `give_up_after` seconds; True when it succeeded. Each failure is logged and counted."""
        delay = 0.1
        deadline = anyio.current_time() + give_up_after
        while True:
            try:
                await fn()
                return True
            except Exception:  # noqa: BLE001 - logged, counted, tried again
                self._count(work)
                if anyio.current_time() + delay > deadline:
                    logger.exception("background work %r failed; giving up", work)
                    return False
                logger.warning("background work %r failed; retrying in %.1f s", work, delay, exc_info=True)
            await anyio.sleep(delay)
            delay = min(delay * 2, 5.0)
