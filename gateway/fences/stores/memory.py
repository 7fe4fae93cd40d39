"""An in-process fence store for unit tests of the state machine (not durable, one process)."""

from __future__ import annotations

import copy
import dataclasses
from types import TracebackType
from typing import Self

from ...protocol import Result
from ..records import FenceRecord, FenceState, FenceStats, Owner


class MemoryFenceStore:
    transient_errors: tuple[type[BaseException], ...] = ()
    def __init__(self) -> None:
        self._records: dict[str, FenceRecord] = {}

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # No await happens inside a method body, so each one is atomic on the event loop.
    # Answers are deep-copied in and out so callers cannot alias stored state.

    def _held(self, fence_id: str, owner: Owner, attempts: int) -> FenceRecord | None:
        rec = self._records.get(fence_id)
        if rec is None or rec.state is not FenceState.PENDING or rec.owner != owner or rec.attempts != attempts:
            return None
        return rec

    @staticmethod
    def _out(rec: FenceRecord) -> FenceRecord:
        return dataclasses.replace(rec, answer=copy.deepcopy(rec.answer))

    async def insert_if_absent(self, record: FenceRecord) -> tuple[bool, FenceRecord]:
        existing = self._records.get(record.fence_id)
        if existing is not None:
            return False, self._out(existing)
        self._records[record.fence_id] = self._out(record)
        return True, record

    async def get(self, fence_id: str) -> FenceRecord | None:
        rec = self._records.get(fence_id)
        return None if rec is None else self._out(rec)

    async def take_over(
        self, fence_id: str, *, expected: Owner, attempts: int, owner: Owner, lease_until: float, now: float
    ) -> bool:
        rec = self._held(fence_id, expected, attempts)
        if rec is None:
            return False
        self._records[fence_id] = dataclasses.replace(
            rec, owner=owner, lease_until=lease_until, attempts=attempts + 1, updated_at=now
        )
        return True

    async def renew(self, fence_id: str, *, owner: Owner, attempts: int, lease_until: float, now: float) -> bool:
        rec = self._held(fence_id, owner, attempts)
        if rec is None:
            return False
        self._records[fence_id] = dataclasses.replace(rec, lease_until=lease_until, updated_at=now)
        return True

    async def finish(
        self,
        fence_id: str,
        *,
        expected: Owner,
        attempts: int,
        state: FenceState,
        answer: Result | None,
        now: float,
    ) -> bool:
        rec = self._held(fence_id, expected, attempts)
        if rec is None:
            return False
        self._records[fence_id] = dataclasses.replace(
            rec, state=state, answer=copy.deepcopy(answer), lease_until=None, updated_at=now
        )
        return True

    async def delete_if_owner(self, fence_id: str, *, owner: Owner, attempts: int) -> bool:
        if self._held(fence_id, owner, attempts) is None:
            return False
        del self._records[fence_id]
        return True

    async def sweep(self, cutoff: float) -> int:
        doomed = [
            fid
            for fid, rec in self._records.items()
            if (rec.state is not FenceState.PENDING and rec.updated_at < cutoff)
            or (rec.state is FenceState.PENDING and rec.lease_until is not None and rec.lease_until < cutoff)
        ]
        for fid in doomed:
            del self._records[fid]
        return len(doomed)

    async def ping(self) -> None:
        return None

    async def stats(self) -> FenceStats:
        recs = list(self._records.values())
        updated = [r.updated_at for r in recs]
        return FenceStats(
            total=len(recs),
            pending=sum(r.state is FenceState.PENDING for r in recs),
            done=sum(r.state is FenceState.DONE for r in recs),
            unknown=sum(r.state is FenceState.UNKNOWN for r in recs),
            oldest_updated_at=min(updated, default=None),
            newest_updated_at=max(updated, default=None),
        )

    async def list_records(
        self, *, state: FenceState | None = None, principal: str | None = None, limit: int = 100
    ) -> list[FenceRecord]:
        recs = [
            r
            for r in self._records.values()
            if (state is None or r.state is state) and (principal is None or r.principal == principal)
        ]
        recs.sort(key=lambda r: r.updated_at, reverse=True)
        return [self._out(r) for r in recs[:limit]]
