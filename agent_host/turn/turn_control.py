"""Steering and cancelling a running turn.

Controls arrive through the session store (`controls`: the chat terminal, the HTTP API and the
web page all record them there, from this process or another), and a watcher polls them while
the turn runs:

* **cancel_turn** stops the turn at once: the model call in flight is abandoned (its answer is
  dropped), and so are the waits (approvals, `ask_user`, `durable_wait`) and the started reads
  (best effort: a read has no effect to lose). A call that has not started is not sent. A write
  that has started (its attempt is committed) runs to its recorded end: it is never inside a
  cancellable scope. The turn then ends `cancelled`, with the reason.
* A started **long-running write task** is abandoned by cancel_turn instead of awaited: the
  write's scope is handed over (`abandon_on_cancel`) once its task exists, the call records
  `outcome_unknown`, and the task is cancelled upstream (`tasks/cancel`, best effort).
* **steer** ends the waits only: a model call or a tool call that started runs to its end, the
  calls not started are not sent, and the message is added to the turn before its next model call.

A cancellable section is `with control.scope(Section.MODEL | WAIT | READ):`; when the turn is
cancelled (or steered, for a wait) its scope is cancelled, which the section sees as
`scope.cancelled_caught`. The host's own cancellation (Ctrl-C, shutdown) is untouched by this.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum

import anyio

from ..domain import texts
from ..domain.records import CancelReason, ControlKind, TurnRecord
from ..store.session_store import SessionStore

POLL_SECONDS = 0.1


class Section(Enum):
    MODEL = "model"  # a model call: cancel_turn abandons it, a steer lets it finish
    WAIT = "wait"  # an approval, a question, a durable wait: both end it
    READ = "read"  # a started read: cancel_turn abandons it (best effort)


class TurnControl:
    """What the user asked of one running turn, and the scopes a request cancels."""

    def __init__(self, store: SessionStore, turn: TurnRecord, poll_seconds: float = POLL_SECONDS) -> None:
        self._store = store
        self.session_id = turn.session_id
        self.turn_id = turn.id
        self._poll = poll_seconds
        self._scopes: list[tuple[Section, anyio.CancelScope]] = []
        self._tasks: list[anyio.CancelScope] = []  # started write tasks, abandoned by cancel_turn
        self.cancel_reason: str | None = None
        self._steering = False

    @property
    def cancelled(self) -> bool:
        return self.cancel_reason is not None

    @contextmanager
    def scope(self, section: Section) -> Iterator[anyio.CancelScope]:
        scope = anyio.CancelScope()
        entry = (section, scope)
        self._scopes.append(entry)
        if self.cancelled or (self._steering and section is Section.WAIT):
            scope.cancel()
        try:
            with scope:
                yield scope
        finally:
            self._scopes.remove(entry)

    async def not_started_reason(self) -> CancelReason | None:
        """Why a call that has not started must not start now (None: it may)."""
        if self.cancelled:
            return CancelReason.TURN_CANCELLED
        if await self._store.has_pending_steer(self.session_id, self.turn_id):
            return CancelReason.STEERED
        return None

    def abandon_on_cancel(self, scope: anyio.CancelScope) -> None:
        """A started write's task exists: cancel_turn (now, or already) abandons it."""
        if self.cancelled:
            scope.cancel()
        else:
            self._tasks.append(scope)

    def forget(self, scope: anyio.CancelScope) -> None:
        if scope in self._tasks:
            self._tasks.remove(scope)

    def _cancel(self, sections: set[Section]) -> None:
        for section, scope in list(self._scopes):
            if section in sections:
                scope.cancel()

    async def check(self) -> None:
        """Read the turn's pending controls once and act on them."""
        pending = await self._store.pending_controls(self.session_id, self.turn_id)
        cancels = [c for c in pending if c.kind is ControlKind.CANCEL]
        self._steering = any(c.kind is ControlKind.STEER for c in pending)
        if cancels and not self.cancelled:
            first = cancels[0]
            self.cancel_reason = texts.turn_cancelled_reason(first.source, first.text)
            self._cancel(set(Section))
            # Questions an upstream asks during a started write end now too (the upstream gets
            # `cancel`), so the write can reach its end.
            await self._store.cancel_waits(self.session_id, self.turn_id, CancelReason.TURN_CANCELLED.value)
            for scope in list(self._tasks):
                scope.cancel()
        elif self._steering:
            self._cancel({Section.WAIT})

    async def watch(self) -> None:
        """Poll the store for controls until cancelled (the turn ended)."""
        while True:
            await self.check()
            await anyio.sleep(self._poll)

    async def settle(self) -> None:
        """The turn ended: its cancel requests (the one that applied, and any that came too late
        or twice) are settled."""
        pending = await self._store.pending_controls(self.session_id, self.turn_id)
        cancels = [c for c in pending if c.kind is ControlKind.CANCEL]
        if cancels:
            await self._store.mark_applied(cancels)
