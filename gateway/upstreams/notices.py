"""What an upstream says during one call (progress, log messages), queued for that call's own task.

The reader of a shared upstream (a stdio process's stdout, shared by every principal's calls)
must never wait for a client: a client that does not read its stream would stall every other
call to that upstream. The reader `put`s each notification into the call's `CallNotices`, which
never blocks, and the call's own task hands them to its relay (`deliver_until_closed`, then `flush`).

The queue is bounded, per call:

* progress is coalesced: only the latest waits (the relay sends the client's own token, so all
  progress of one call is one series of values, and a newer value makes an older one moot);
* log messages beyond `max_logs` drop the oldest waiting one.

Each coalesced or dropped notification is counted (`on_drop(kind)`: "progress" or "log"; the
metric `dex_gateway_upstream_notifications_dropped_total`).
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable
from typing import Any

import anyio

from .relay import CallRelay
from .rpc import deliver_notification

__all__ = ["DEFAULT_MAX_QUEUED", "CallNotices", "OnDrop", "ignore_drops"]

DEFAULT_MAX_QUEUED = 256

OnDrop = Callable[[str], None]


def ignore_drops(kind: str) -> None:
    """An `OnDrop` that counts nothing."""


class CallNotices:
    """The notifications of one call waiting for its task (bounded; see the module docstring)."""

    def __init__(self, max_logs: int = DEFAULT_MAX_QUEUED, on_drop: OnDrop = ignore_drops) -> None:
        self._max_logs = max(1, max_logs)
        self._on_drop = on_drop
        self._order = itertools.count()
        self._logs: deque[tuple[int, dict[str, Any]]] = deque()
        self._progress: tuple[int, dict[str, Any]] | None = None
        self._wake: anyio.Event | None = None  # made only when a delivery task waits
        self._closed = False

    def __len__(self) -> int:
        return len(self._logs) + (self._progress is not None)

    def put(self, message: dict[str, Any]) -> None:
        """Queue a notification for the call (never blocks); other methods than progress and log
        messages are not for the client and are left out."""
        method = message.get("method")
        if method == "notifications/progress":
            if self._progress is not None:
                # Keep the queued one's place (it came first), with the newest values.
                self._progress = (self._progress[0], message)
                self._on_drop("progress")
            else:
                self._progress = (next(self._order), message)
        elif method == "notifications/message":
            if len(self._logs) >= self._max_logs:
                self._logs.popleft()
                self._on_drop("log")
            self._logs.append((next(self._order), message))
        else:
            return
        if self._wake is not None:
            self._wake.set()

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """The call's answer is in (or it failed): `deliver_until_closed` returns, leaving what is
        still queued for `flush`."""
        self._closed = True
        if self._wake is not None:
            self._wake.set()

    def _pop(self) -> dict[str, Any] | None:
        progress, logs = self._progress, self._logs
        if progress is not None and (not logs or progress[0] < logs[0][0]):
            self._progress = None
            return progress[1]
        if logs:
            return logs.popleft()[1]
        return None

    async def deliver_until_closed(self, relay: CallRelay) -> None:
        """Hand queued notifications to `relay` as they come, until `close()` (what is still
        queued then is left for `flush`)."""
        while not self._closed:
            while not self._closed and (message := self._pop()) is not None:
                await deliver_notification(message, relay)
            if not self._closed:
                self._wake = anyio.Event()
                await self._wake.wait()

    async def flush(self, relay: CallRelay) -> None:
        """Hand what is still queued to `relay` (ahead of the call's answer)."""
        while (message := self._pop()) is not None:
            await deliver_notification(message, relay)
