"""Telling a transport's own cancellation apart from the cancellation of the turn.

The MCP SDK client runs its transport in a task group. When the connection breaks after the
request left, that group's cancel scope cancels the code inside it, and the cancellation can
escape as a bare `CancelledError` ("Cancelled via cancel scope …"): a BaseException that no
`except Exception` sees, and that looks exactly like the host being cancelled (Ctrl-C,
shutdown, a cancelled turn).

`outside_transport_cancels(fn)` runs `fn` in a child task of a task group of its own and looks
at where a cancellation came from:

* ours: the task group's scope was cancelled (the caller's task was cancelled natively, e.g.
  Ctrl-C), or an enclosing scope still is (anyio cancellation is level-triggered, so
  `checkpoint_if_cancelled()` raises again) — the cancellation propagates, untouched;
* the transport's: the scope that cancelled is gone (it was inside the SDK) — it becomes
  `TransportCancelled`, an ordinary exception the caller sorts like any broken connection.

Whatever the child decides, the caller's own cancellation also propagates from the task
group's exit, so a cancelled turn is never recorded as an answer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar, cast

import anyio
from anyio.lowlevel import checkpoint_if_cancelled

T = TypeVar("T")


class TransportCancelled(Exception):
    """The MCP client's own cancel scope ended the exchange (the connection broke)."""


class _Outcome(Generic[T]):
    def __init__(self) -> None:
        self.value: T | None = None
        self.done = False
        self.error: Exception | None = None


async def _still_cancelled() -> bool:
    """Whether an enclosing cancel scope of this task is cancelled (level-triggered)."""
    try:
        await checkpoint_if_cancelled()
    except anyio.get_cancelled_exc_class():
        return True
    return False


async def outside_transport_cancels(fn: Callable[[], Awaitable[T]]) -> T:
    """`await fn()`, with a transport's stray cancellation turned into `TransportCancelled`."""
    outcome: _Outcome[T] = _Outcome()
    async with anyio.create_task_group() as group:

        async def run() -> None:
            try:
                outcome.value = await fn()
                outcome.done = True
            except anyio.get_cancelled_exc_class() as exc:
                if group.cancel_scope.cancel_called or await _still_cancelled():
                    raise  # ours: the turn or the host is being cancelled
                outcome.error = TransportCancelled(str(exc) or "cancelled by the MCP client")
            except Exception as exc:  # noqa: BLE001 - handed to the caller's task as is, outside any exception group
                outcome.error = exc

        group.start_soon(run)
    if outcome.error is not None:
        raise outcome.error
    if not outcome.done:
        # Only reachable if the child swallowed our own cancellation and the task group did not
        # re-raise it, which anyio never does; treat it as the transport's, never as an answer.
        raise TransportCancelled("the exchange ended without an answer")
    return cast(T, outcome.value)
