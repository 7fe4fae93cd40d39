"""The fence store contract and the URL that picks an implementation.

Every mutating method is a single atomic step (one statement or one transaction), so the
state machine in `fence.py` stays correct with several processes on one store. Methods
that change an existing pending fence are compare-and-set on (owner, attempts): they
return False, changing nothing, when someone else got there first.
"""

from __future__ import annotations

from types import TracebackType
from typing import Protocol, Self, runtime_checkable

from ..protocol import Result
from ..storage.database import Database
from .records import FenceRecord, FenceState, FenceStats, Owner


@runtime_checkable
class FenceStore(Protocol):
    # Errors that say "the database could not do it now" (connection lost, busy, I/O): the
    # fence machine retries its final writes and lease renewals on these, and on nothing else
    # (a programming error must fail loudly, not be retried).
    transient_errors: tuple[type[BaseException], ...]

    async def open(self) -> None:
        """Connect and create or check the schema (idempotent, safe from two processes)."""

    async def close(self) -> None: ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...

    async def insert_if_absent(self, record: FenceRecord) -> tuple[bool, FenceRecord]:
        """Insert `record` unless its fence exists: (True, record) or (False, existing)."""

    async def get(self, fence_id: str) -> FenceRecord | None: ...

    async def take_over(
        self, fence_id: str, *, expected: Owner, attempts: int, owner: Owner, lease_until: float, now: float
    ) -> bool:
        """pending held by (expected, attempts) → pending held by `owner`, attempts + 1."""

    async def renew(self, fence_id: str, *, owner: Owner, attempts: int, lease_until: float, now: float) -> bool:
        """Extend the lease of a pending fence still held by (owner, attempts)."""

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
        """pending held by (expected, attempts) → done/unknown with `answer`, lease cleared."""

    async def delete_if_owner(self, fence_id: str, *, owner: Owner, attempts: int) -> bool:
        """Drop a pending fence still held by (owner, attempts): the call was never sent."""

    async def sweep(self, cutoff: float) -> int:
        """Delete finished fences last updated before `cutoff` (Unix seconds) and pending
        fences whose lease ran out before it (abandoned for a whole retention period).
        Live pending fences are never swept. Returns the number deleted. Deletes in short
        batches found by the (state, updated_at) index, so fenced calls are never held up for
        more than one batch, whatever the number of rows."""

    async def ping(self) -> None:
        """One cheap query: the store answers (readiness), whatever the number of fences."""

    async def stats(self) -> FenceStats:
        """Counts by state: a scan of the whole table, for the CLI (never on a request path)."""

    async def list_records(
        self, *, state: FenceState | None = None, principal: str | None = None, limit: int = 100
    ) -> list[FenceRecord]:
        """Most recently updated first."""


def open_fence_store(where: str | Database) -> FenceStore:
    """A store (not yet opened) for `fences.store`: a URL (the store owns its connections)
    or the gateway's open `Database` (PostgreSQL: the store borrows its pool).

    memory://                       in-process, unit tests only
    sqlite:///relative/path.db      one file (sqlite:////abs/path.db for absolute paths);
                                    query: synchronous=NORMAL|FULL, busy_timeout_ms=N
    postgresql://user@host/db       shared by replicas (also postgres://); query:
                                    schema=NAME, pool_min=N, pool_max=N; the rest is
                                    passed to asyncpg
    """
    database = where if isinstance(where, Database) else Database(where)
    # Imports are local so the memory/SQLite paths never load the PostgreSQL driver.
    if database.scheme == "memory":
        from .stores.memory import MemoryFenceStore

        return MemoryFenceStore()
    if database.scheme == "sqlite":
        from .stores.sqlite import SqliteFenceStore

        return SqliteFenceStore.from_url(database.url)
    if database.scheme == "postgresql":
        from .stores.postgres import PostgresFenceStore

        return PostgresFenceStore(database, owns_database=not isinstance(where, Database))
    raise ValueError(f"unsupported fences.store URL scheme {database.scheme!r}: use memory://, sqlite:///PATH or postgresql://…")
