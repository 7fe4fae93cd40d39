"""The driver of `dex-agent serve`: on start and continuously it asks the store which sessions
have work due (`due_sessions`: an interrupted turn, a durable wait whose time came, an approval or
question that got its answer, an upstream task that ended (polled by `task_watcher.py`), a steer
or cancel, a queued message) and drives each one it can lease, one task per session.

A session is driven until it has nothing left to do now: its unfinished turn is resumed (a call
that may have been sent is sent again with the same key, as `dex-agent resume` does), then each
queued message starts the next turn, then an approved draft plan its executing turn. A turn that
has to wait for someone, for a time or for an upstream task is parked
(`domain/parking.py`): the lease is released and the session comes back when the store says it
is due. Nothing sleeps in the process for a turn.
"""

from __future__ import annotations

import logging
import anyio

from ..domain.parking import TurnParked
from ..store.session_store import SessionStore
from ..store.sqlite_service import LeaseHolder
from ..turn.loop import TurnLoop
from ..store.lease import DEFAULT_LEASE_SECONDS, SessionBusy, hold_lease

log = logging.getLogger(__name__)

POLL_SECONDS = 0.25
MAX_BACKOFF_SECONDS = 60.0


class Driver:
    def __init__(
        self, store: SessionStore, loop: TurnLoop, me: LeaseHolder,
        lease_seconds: float = DEFAULT_LEASE_SECONDS, poll_seconds: float = POLL_SECONDS,
    ) -> None:
        self.store = store
        self.loop = loop
        self.me = me
        self.lease_seconds = lease_seconds
        self.poll_seconds = poll_seconds
        self._driving: set[str] = set()
        # Sessions whose driving failed: not picked up again before this monotonic time.
        self._backoff: dict[str, tuple[float, float]] = {}

    async def run(self) -> None:
        """Pick up due sessions until cancelled."""
        async with anyio.create_task_group() as tg:
            while True:
                now = anyio.current_time()
                for session_id in await self.store.due_sessions(self.me):
                    if session_id not in self._driving and self._backoff.get(session_id, (0.0, 0.0))[0] <= now:
                        self._driving.add(session_id)
                        tg.start_soon(self._drive, session_id)
                await anyio.sleep(self.poll_seconds)

    async def _drive(self, session_id: str) -> None:
        try:
            async with hold_lease(self.store, session_id, self.me, self.lease_seconds):
                await self.drive_session(session_id)
        except SessionBusy:
            pass  # another process took it first
        except Exception:  # a turn the loop could not settle: logged, tried again later (backing off)
            log.exception("driving session %s failed", session_id)
            delay = min(MAX_BACKOFF_SECONDS, 2 * self._backoff.get(session_id, (0.0, 0.5))[1])
            self._backoff[session_id] = (anyio.current_time() + delay, delay)
        else:
            self._backoff.pop(session_id, None)
        finally:
            self._driving.discard(session_id)

    async def drive_session(self, session_id: str) -> None:
        """Resume the unfinished turn, then run the queued messages, until the session has nothing
        to do now (or a turn parks)."""
        while True:
            if await self.store.unfinished_turn(session_id) is not None:
                try:
                    await self.loop.resume(session_id)
                except BaseException as exc:
                    if _parked(exc):
                        return
                    raise
                continue
            # Queued messages first, then an approved draft plan (as the seeds order them).
            if await self.store.start_queued_turn(session_id) is None and await self.store.start_plan_execution(session_id) is None:
                return


def _parked(exc: BaseException) -> bool:
    """Whether `exc` is a parked turn (possibly inside task groups' exception groups)."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_parked(e) for e in exc.exceptions)
    return isinstance(exc, TurnParked)
