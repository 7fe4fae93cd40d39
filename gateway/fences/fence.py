"""The fence state machine on top of any `FenceStore`.

new key            → insert pending (owner + lease)                 → Proceed
done               → stored answer, marked replayed                 → Replay
unknown            → terminal                                       → FenceUnknown
pending, alive     → poll with backoff up to wait_seconds, then     → FenceUnknown (unchanged)
pending, dead      → read/idempotent_write: CAS take over           → Proceed(takeover=True)
                     other effects: CAS to unknown                  → FenceUnknown
other tool/args    → refused, nothing changed                       → FenceRejected

An owner is dead as the lease rule says (gateway/storage/leases.py: its lease ran out, or it is
this replica under an older boot id). NTP skew is far below the 15 s lease.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import anyio

from gateway.conventions.keys import Effect
from gateway.storage.leases import holder_dead

from ..protocol import Result
from .ids import fence_id, fingerprint
from .outcomes import (
    BeginResult,
    FenceRejected,
    FenceUnknown,
    Proceed,
    Replay,
    Ticket,
    UnknownReason,
    mark_replayed,
    reused_key_text,
    unknown_text,
)
from .records import FenceRecord, FenceState, Owner
from .store import FenceStore

log = logging.getLogger(__name__)

# Tries for the writes that end a call: losing a finished answer to one transient store
# error would turn a known outcome into an unknown one.
_FINAL_WRITE_TRIES = 3


class Fences:
    def __init__(
        self,
        store: FenceStore,
        owner: Owner,
        *,
        lease_seconds: float = 15.0,
        wait_seconds: float = 30.0,
        poll_interval: float = 0.02,
        max_poll_interval: float = 0.5,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if lease_seconds <= 0:
            raise ValueError("lease_seconds must be positive")
        self.store = store
        self.owner = owner
        self.lease_seconds = lease_seconds
        self.wait_seconds = wait_seconds
        self.poll_interval = poll_interval
        self.max_poll_interval = max(max_poll_interval, poll_interval)
        # Renewing three times per lease survives two missed renewals before expiry.
        self.renew_interval = lease_seconds / 3
        self._clock = clock
        self._held: dict[str, Ticket] = {}
        self._renewer_running = False

    # -- claiming ----------------------------------------------------------------------

    def owner_is_dead(self, record: FenceRecord) -> bool:
        return holder_dead(record.owner, record.lease_until, me=self.owner, now=self._clock())

    async def begin(
        self,
        *,
        principal: str,
        key: str,
        tool: str,
        arguments: Mapping[str, Any] | None,
        effect: Effect,
    ) -> BeginResult:
        fid = fence_id(principal, key)
        fp = fingerprint(tool, arguments)
        deadline = anyio.current_time() + self.wait_seconds
        delay = self.poll_interval
        record: FenceRecord | None = None

        while True:
            if record is None:
                now = self._clock()
                claim = FenceRecord(
                    fence_id=fid,
                    principal=principal,
                    fingerprint=fp,
                    tool=tool,
                    effect=effect,
                    state=FenceState.PENDING,
                    owner=self.owner,
                    lease_until=now + self.lease_seconds,
                    answer=None,
                    created_at=now,
                    updated_at=now,
                    attempts=1,
                )
                inserted, record = await self.store.insert_if_absent(claim)
                if inserted:
                    return Proceed(Ticket(fid, principal, tool, effect, self.owner, 1, takeover=False))

            if record.fingerprint != fp or record.principal != principal:
                return FenceRejected(fid, reused_key_text(first_tool=record.tool, tool=tool))
            if record.state is FenceState.DONE:
                return Replay(fid, mark_replayed(record.answer or {}))
            if record.state is FenceState.UNKNOWN:
                return FenceUnknown(
                    fid, UnknownReason.STORED, unknown_text(UnknownReason.STORED, effect=effect, waited=0), record.answer
                )

            # pending
            if self.owner_is_dead(record):
                decided = await self._dead_owner(record, principal=principal, tool=tool, effect=effect)
                if decided is not None:
                    return decided
                # Another replica won the compare-and-set: look again (usually: wait for it).
                record = await self.store.get(fid)
                continue

            remaining = deadline - anyio.current_time()
            if remaining <= 0:
                return FenceUnknown(
                    fid,
                    UnknownReason.WAIT_TIMEOUT,
                    unknown_text(UnknownReason.WAIT_TIMEOUT, effect=effect, waited=self.wait_seconds),
                )
            await anyio.sleep(min(delay, remaining))
            delay = min(delay * 2, self.max_poll_interval)
            record = await self.store.get(fid)

    async def settle(
        self, *, principal: str, key: str, tool: str, arguments: Mapping[str, Any] | None, effect: Effect,
        answer: Result,
    ) -> tuple[bool, FenceRecord]:
        """Claim a new key as done at once, with `answer` (a task handle: the work runs as a task that
        keeps its own record, gateway/tasks/). One insert: (True, the record) when the key was new;
        (False, the existing fence) otherwise, changed in nothing."""
        now = self._clock()
        record = FenceRecord(
            fence_id=fence_id(principal, key),
            principal=principal,
            fingerprint=fingerprint(tool, arguments),
            tool=tool,
            effect=effect,
            state=FenceState.DONE,
            owner=None,
            lease_until=None,
            answer=answer,
            created_at=now,
            updated_at=now,
            attempts=1,
        )
        return await self.store.insert_if_absent(record)

    async def _dead_owner(
        self, record: FenceRecord, *, principal: str, tool: str, effect: Effect
    ) -> BeginResult | None:
        assert record.owner is not None
        # The effect recorded at the first claim counts too: a tool reclassified since
        # then must not turn a non-idempotent pending into a resend.
        effective = Effect.most_conservative(record.effect, effect)
        now = self._clock()
        if effective.resendable:
            won = await self.store.take_over(
                record.fence_id,
                expected=record.owner,
                attempts=record.attempts,
                owner=self.owner,
                lease_until=now + self.lease_seconds,
                now=now,
            )
            if won:
                log.info("fence %s: took over from dead owner %s", record.fence_id, record.owner)
                ticket = Ticket(record.fence_id, principal, tool, effect, self.owner, record.attempts + 1, takeover=True)
                return Proceed(ticket)
            return None
        won = await self.store.finish(
            record.fence_id,
            expected=record.owner,
            attempts=record.attempts,
            state=FenceState.UNKNOWN,
            answer=None,
            now=now,
        )
        if won:
            log.warning("fence %s: owner %s died mid-call; %s call is now unknown", record.fence_id, record.owner, effective)
            return FenceUnknown(
                record.fence_id, UnknownReason.OWNER_DIED, unknown_text(UnknownReason.OWNER_DIED, effect=effective, waited=0)
            )
        return None

    # -- holding -----------------------------------------------------------------------

    @asynccontextmanager
    async def holding(self, ticket: Ticket) -> AsyncIterator[Ticket]:
        """Keep the lease of `ticket` alive while the body (the upstream call) runs."""
        if self._renewer_running:
            # One shared renewer (run_renewer) renews every held ticket: no task per call.
            self._held[ticket.fence_id] = ticket
            try:
                yield ticket
            finally:
                self._held.pop(ticket.fence_id, None)
            return
        # The body's exception is carried out of the task group by hand so callers see it
        # as raised, not wrapped in an ExceptionGroup (the renewer never raises).
        body_error: BaseException | None = None
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._renew_until_cancelled, ticket)
            try:
                yield ticket
            except BaseException as exc:
                body_error = exc
            finally:
                tg.cancel_scope.cancel()
        if body_error is not None:
            raise body_error

    async def run_renewer(self) -> None:
        """Renew the leases of every held ticket every `renew_interval`, until cancelled."""
        self._renewer_running = True
        try:
            while True:
                await anyio.sleep(self.renew_interval)
                for ticket in list(self._held.values()):
                    if not await self._renew(ticket):
                        self._held.pop(ticket.fence_id, None)
        finally:
            self._renewer_running = False

    async def _renew_until_cancelled(self, ticket: Ticket) -> None:
        while True:
            await anyio.sleep(self.renew_interval)
            if not await self._renew(ticket):
                return

    async def _renew(self, ticket: Ticket) -> bool:
        """Extend the lease; False once the fence is no longer ours (stop renewing it)."""
        now = self._clock()
        try:
            held = await self.store.renew(
                ticket.fence_id,
                owner=ticket.owner,
                attempts=ticket.attempts,
                lease_until=now + self.lease_seconds,
                now=now,
            )
        except self.store.transient_errors:
            # Keep trying: the lease has two more renewals of slack before it expires.
            log.warning("fence %s: lease renewal failed", ticket.fence_id, exc_info=True)
            return True
        if not held:
            # Our lease ran out and someone took the fence over or made it unknown;
            # our final write will be refused by the compare-and-set.
            log.error("fence %s: lost the fence while the call was running", ticket.fence_id)
        return held

    # -- ending ------------------------------------------------------------------------

    async def complete(self, ticket: Ticket, answer: Result) -> bool:
        """Store the answer (Answer wire form) for every retry. False if the fence was lost."""
        return await self._finish(ticket, FenceState.DONE, answer)

    async def mark_unknown(self, ticket: Ticket, answer: Result | None = None) -> bool:
        """The upstream outcome is unknown (e.g. the connection broke after sending)."""
        return await self._finish(ticket, FenceState.UNKNOWN, answer)

    async def release(self, ticket: Ticket) -> bool:
        """The call was never sent: forget the fence so the key may be retried as new."""

        async def attempt() -> bool:
            return await self.store.delete_if_owner(ticket.fence_id, owner=ticket.owner, attempts=ticket.attempts)

        async def confirm() -> bool:
            return await self.store.get(ticket.fence_id) is None

        return await self._final_write(ticket, attempt, confirm)

    async def _finish(self, ticket: Ticket, state: FenceState, answer: Result | None) -> bool:
        async def attempt() -> bool:
            return await self.store.finish(
                ticket.fence_id,
                expected=ticket.owner,
                attempts=ticket.attempts,
                state=state,
                answer=answer,
                now=self._clock(),
            )

        async def confirm() -> bool:
            rec = await self.store.get(ticket.fence_id)
            return rec is not None and rec.state is state and rec.owner == ticket.owner and rec.attempts == ticket.attempts

        return await self._final_write(ticket, attempt, confirm)

    async def _final_write(
        self, ticket: Ticket, attempt: Callable[[], Awaitable[bool]], confirm: Callable[[], Awaitable[bool]]
    ) -> bool:
        # Shielded: a client hanging up after the upstream answered must not keep the
        # answer from being stored.
        with anyio.CancelScope(shield=True):
            failed_once = False
            for n in range(_FINAL_WRITE_TRIES):
                try:
                    if await attempt():
                        return True
                    # A refused CAS after an error may mean the failed try did commit.
                    if failed_once and await confirm():
                        return True
                    log.error("fence %s: final write refused, the fence was lost", ticket.fence_id)
                    return False
                except self.store.transient_errors:
                    failed_once = True
                    if n == _FINAL_WRITE_TRIES - 1:
                        raise
                    log.warning("fence %s: final write failed, retrying", ticket.fence_id, exc_info=True)
                    await anyio.sleep(0.05 * 3**n)
        return False

    # -- retention ---------------------------------------------------------------------

    async def sweep_once(self, retention: timedelta) -> int:
        return await self.store.sweep(self._clock() - retention.total_seconds())

    async def run_sweeper(self, retention: timedelta, interval: float = 300.0) -> None:
        """Delete fences past retention every `interval` seconds; run in the app lifespan."""
        while True:
            try:
                swept = await self.sweep_once(retention)
                if swept:
                    log.info("fence sweep: %d fences past retention deleted", swept)
            except Exception:  # noqa: BLE001 - retention is housekeeping: log any failure, try again later
                log.warning("fence sweep failed; will retry", exc_info=True)
            await anyio.sleep(interval)
