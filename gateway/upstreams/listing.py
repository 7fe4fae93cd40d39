"""Cached listings of one upstream (tools, resources, templates, prompts).

The first listing is awaited, bounded by the connect timeout, so a hung server never delays
the others; after the TTL the cached list is served while one background refresh runs; a
server that cannot be listed is left out and not asked again for `failure_backoff` seconds.
A listing with more items than the upstream's `max_listed_items` is refused whole: the previous
listing (or none) stays, and `refusals()` says why (reported by /readyz).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import anyio
from anyio.abc import TaskGroup

from ..errors import UpstreamError, UpstreamListingRefused
from .upstream import Upstream

logger = logging.getLogger(__name__)


class ListKind(Enum):
    TOOLS = ("tools/list", "tools")
    RESOURCES = ("resources/list", "resources")
    RESOURCE_TEMPLATES = ("resources/templates/list", "resourceTemplates")
    PROMPTS = ("prompts/list", "prompts")

    @property
    def method(self) -> str:
        return self.value[0]

    @property
    def key(self) -> str:
        return self.value[1]


@dataclass
class _Entry:
    items: list[dict[str, Any]] | None = None
    fetched_at: float = 0.0
    failed_at: float | None = None
    inflight: anyio.Event | None = None
    inflight_since: float = 0.0
    refused: str | None = None  # why the last listing was refused (too many items), if it was
    error: str | None = None  # why the last fetch failed (kept after a later success: the console shows it)
    error_at: float | None = None  # wall-clock time of that failure (Unix seconds)


@dataclass
class ListingCache:
    upstream: Upstream
    task_group: TaskGroup
    failure_backoff: float = 30.0
    clock: Callable[[], float] = time.monotonic
    # Bumped whenever a listing's content changes: the catalog rebuilds on a new version.
    version: int = 0
    # Called after a fetch changed a listing (the catalog rebuilds and notifies sessions).
    on_update: Callable[[], None] | None = None
    _entries: dict[ListKind, _Entry] = field(default_factory=lambda: {k: _Entry() for k in ListKind})

    def __post_init__(self) -> None:
        self.upstream.list_changed_listeners.append(self.refresh_now)

    def refresh_now(self) -> None:
        """The upstream said a list changed: refetch every listing we hold, in the background."""
        for kind, entry in self._entries.items():
            entry.fetched_at = float("-inf")
            if entry.items is not None and entry.inflight is None:
                self._start_fetch(kind, entry)

    async def get(self, kind: ListKind) -> list[dict[str, Any]] | None:
        """The cached items, or None while the server cannot be listed."""
        entry = self._entries[kind]
        now = self.clock()
        if entry.items is not None:
            stale = now - entry.fetched_at > self.upstream.config.list_ttl_seconds
            backing_off = entry.failed_at is not None and now - entry.failed_at < self.failure_backoff
            if stale and entry.inflight is None and not backing_off:
                self._start_fetch(kind, entry)
            return entry.items
        if entry.failed_at is not None and now - entry.failed_at < self.failure_backoff:
            return None
        event = entry.inflight or self._start_fetch(kind, entry)
        # Callers wait within the first connect-timeout window of a fetch only: a fetch that
        # hangs past it must not delay every later tools/list by a full window again.
        window = entry.inflight_since + self.upstream.config.connect_timeout_seconds - self.clock()
        if window > 0:
            with anyio.move_on_after(window):
                await event.wait()
        return entry.items

    def peek(self, kind: ListKind) -> list[dict[str, Any]] | None:
        return self._entries[kind].items

    def health(self) -> tuple[bool, float | None]:
        """(listed and the last tools listing succeeded, seconds since the tools were listed)."""
        entry = self._entries[ListKind.TOOLS]
        if entry.items is None:
            return False, None
        failing = entry.failed_at is not None and entry.failed_at >= entry.fetched_at
        return not failing, max(0.0, self.clock() - entry.fetched_at)

    def refusals(self) -> list[str]:
        """Why listings of this upstream were refused on their last fetch (too many items)."""
        return [entry.refused for entry in self._entries.values() if entry.refused is not None]

    def last_error(self) -> tuple[str, float] | None:
        """The most recent failed listing of this upstream: (why, when in Unix seconds), or None."""
        failures = [(e.error_at, e.error) for e in self._entries.values() if e.error is not None and e.error_at is not None]
        if not failures:
            return None
        at, why = max(failures)
        return why, at

    @staticmethod
    def _failed(entry: _Entry, why: str) -> None:
        entry.error, entry.error_at = why, time.time()

    def _start_fetch(self, kind: ListKind, entry: _Entry) -> anyio.Event:
        entry.inflight = anyio.Event()
        entry.inflight_since = self.clock()
        self.task_group.start_soon(self._fetch, kind, entry)
        return entry.inflight

    async def _fetch(self, kind: ListKind, entry: _Entry) -> None:
        cfg = self.upstream.config
        try:
            items = await self.upstream.list_all(
                kind.method, kind.key, timeout=cfg.connect_timeout_seconds + cfg.call_timeout_seconds
            )
        except UpstreamListingRefused as exc:
            entry.failed_at = self.clock()
            entry.refused = exc.reason
            self._failed(entry, f"{kind.method}: {exc.reason}")
            kept = "no listing is kept" if entry.items is None else f"the previous {len(entry.items)} items are kept"
            logger.error("upstream %s: %s; %s (upstreams[].max_listed_items)", self.upstream.name, exc.reason, kept)
        except (UpstreamError, TimeoutError) as exc:
            entry.failed_at = self.clock()
            what = "listing failed" if entry.items is None else "refresh failed, serving the cached list"
            reason = str(exc) if isinstance(exc, UpstreamError) else "no complete answer in time"
            self._failed(entry, f"{kind.method}: {reason}")
            logger.warning("upstream %s: %s %s: %s", self.upstream.name, kind.method, what, reason)
        except Exception:  # noqa: BLE001 - one bad upstream answer must never stop the gateway
            entry.failed_at = self.clock()
            self._failed(entry, f"{kind.method}: failed unexpectedly (see the gateway log)")
            logger.exception("upstream %s: %s failed unexpectedly", self.upstream.name, kind.method)
        else:
            # No listing yet and an empty one publish the same nothing: not a change.
            changed = items != (entry.items if entry.items is not None else [])
            entry.items = items
            entry.fetched_at = self.clock()
            entry.failed_at = None
            entry.refused = None
            if changed:
                self.version += 1
                if self.on_update is not None:
                    self.on_update()
        finally:
            if entry.inflight is not None:
                entry.inflight.set()
                entry.inflight = None
