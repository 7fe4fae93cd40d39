"""The GET-stream SSE events of stateful front sessions, in the shared PostgreSQL, so a replica that
adopts a session can replay what its client missed from the replica that died.

    dex_front_events   seq (order of writing), session_id, event_id, data (the message's JSON;
                       NULL: a priming event, or one too large to keep), at (epoch seconds)

Only the standalone (GET) stream's events: server notifications that belong to no request (list
changes, resource updates, log messages, task status). A POST stream's events answer a request
that dies with its process, so they are never written. The session's event store hands each event
to `add`, which only queues it (never waits, never fails the request); one writer per process
(`run`) inserts what is queued in batches of up to `_BATCH` rows in one statement, then trims the
sessions it wrote to the same bounds as the in-memory store: at most `max_events` rows per session,
none older than `max_age_seconds`. Past `_QUEUE` queued events new ones are not written (logged):
the session still has them in memory; only an adoption would miss them. A failed write is logged
and its batch dropped (best effort, as the in-memory store is lost with its process anyway).
Rows go when their session ends (`forget`) and, by age, in `sweep`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import anyio

from .database import Database
from .tables import PostgresTable

if TYPE_CHECKING:
    import asyncpg

__all__ = ["FrontEventLog", "SessionEvents"]

logger = logging.getLogger(__name__)

_TABLE = "dex_front_events"
_BATCH = 200  # rows per INSERT
_QUEUE = 10_000  # events queued and not yet written; past it new ones are not written (logged)
_SWEEP_SECONDS = 60.0  # how often rows past their age are removed from every session


class _Queued(NamedTuple):
    session_id: str
    event_id: str
    data: str | None
    at: float
    cut: bool  # the session's earlier rows go (an event too large to keep: no replay passes over it)


class FrontEventLog(PostgresTable):
    PURPOSE = "front event log"

    def __init__(self, database: Database, *, max_events: int, max_age_seconds: float,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__(database)
        self._max_events = max_events
        self._max_age = max_age_seconds
        self._clock = clock
        self._table = self.table(_TABLE)
        self._send, self._receive = anyio.create_memory_object_stream[_Queued](_QUEUE)
        self._dropped = 0
        self.written = 0  # events written since start (tests, measurements)

    async def create(self, conn: "asyncpg.Connection") -> None:
        await conn.execute(f"CREATE TABLE IF NOT EXISTS {self._table} (seq BIGSERIAL PRIMARY KEY, "
                           "session_id TEXT NOT NULL, event_id TEXT NOT NULL, data TEXT, "
                           "at DOUBLE PRECISION NOT NULL)")
        await conn.execute(f"CREATE INDEX IF NOT EXISTS {_TABLE}_session ON {self._table} (session_id, seq)")

    def session(self, session_id: str) -> SessionEvents:
        """The log as one session's event store sees it."""
        return SessionEvents(self, session_id)

    def add(self, session_id: str, event_id: str, data: bytes | None, *, cut: bool = False) -> None:
        """Queue one event for the writer; never waits."""
        try:
            self._send.send_nowait(_Queued(session_id, event_id, data.decode() if data is not None else None,
                                           self._clock(), cut))
        except anyio.WouldBlock:
            self._dropped += 1
            if self._dropped == 1 or self._dropped % 1000 == 0:
                logger.warning("front event log: %d events not written (%d are queued already); a session "
                               "adopted by another replica may miss them", self._dropped, _QUEUE)

    async def run(self) -> None:
        """Write what is queued, in batches, until cancelled; sweep old rows now and then."""
        swept = 0.0
        while True:
            batch: list[_Queued] = []
            with anyio.move_on_after(_SWEEP_SECONDS):
                batch.append(await self._receive.receive())
                while len(batch) < _BATCH:
                    try:
                        batch.append(self._receive.receive_nowait())
                    except anyio.WouldBlock:
                        break
            try:
                if batch:
                    await self._write(batch)
                if self._clock() - swept > _SWEEP_SECONDS:
                    swept = self._clock()
                    await self.sweep()
            except Exception:  # noqa: BLE001 - these events stay in memory only; the next batch is tried
                logger.warning("front event log: could not write %d events", len(batch), exc_info=True)

    async def _write(self, queued: list[_Queued]) -> None:
        # A session's rows before its last cut go, those queued in this batch too.
        batch: list[_Queued] = []
        cut_after: set[str] = set()
        for event in reversed(queued):
            if event.session_id not in cut_after:
                batch.append(event)
                if event.cut:
                    cut_after.add(event.session_id)
        batch.reverse()
        sessions, cut = sorted({e.session_id for e in batch}), sorted(cut_after)
        async with self.pool.acquire() as conn, conn.transaction():
            if cut:
                await conn.execute(f"DELETE FROM {self._table} WHERE session_id = ANY($1::text[])", cut)
            await conn.execute(
                f"INSERT INTO {self._table} (session_id, event_id, data, at) "
                "SELECT s, i, d, a FROM unnest($1::text[], $2::text[], $3::text[], $4::float8[]) WITH ORDINALITY AS e(s, i, d, a, n) "
                "ORDER BY n",
                [e.session_id for e in batch], [e.event_id for e in batch], [e.data for e in batch], [e.at for e in batch])
            # Each session back within its bounds: its newest `max_events` rows, none past the age.
            await conn.execute(
                f"DELETE FROM {self._table} WHERE session_id = ANY($1::text[]) AND (at < $3 OR seq IN ("
                f"SELECT seq FROM (SELECT seq, row_number() OVER (PARTITION BY session_id ORDER BY seq DESC) AS n "
                f"FROM {self._table} WHERE session_id = ANY($1::text[])) ranked WHERE n > $2))",
                sessions, self._max_events, self._clock() - self._max_age)
        self.written += len(queued)

    async def after(self, session_id: str, event_id: str) -> list[tuple[str, bytes | None]] | None:
        """The session's events written after `event_id`, oldest first; None when the session has no
        such event (another session's id, or one past the bounds)."""
        oldest = self._clock() - self._max_age
        async with self.pool.acquire() as conn:
            seq = await conn.fetchval(f"SELECT seq FROM {self._table} WHERE session_id = $1 AND event_id = $2 "
                                      "AND at >= $3", session_id, event_id, oldest)
            if seq is None:
                return None
            rows = await conn.fetch(f"SELECT event_id, data FROM {self._table} WHERE session_id = $1 AND seq > $2 "
                                    "AND at >= $3 ORDER BY seq", session_id, seq, oldest)
        return [(str(r["event_id"]), r["data"].encode() if r["data"] is not None else None) for r in rows]

    async def forget(self, session_id: str) -> None:
        """The session ended: its events go."""
        await self.pool.execute(f"DELETE FROM {self._table} WHERE session_id = $1", session_id)

    async def sweep(self) -> None:
        """Rows past their age, of every session (those that stopped writing too)."""
        await self.pool.execute(f"DELETE FROM {self._table} WHERE at < $1", self._clock() - self._max_age)


class SessionEvents:
    """One session's part of the log (the in-memory event store's durable side)."""

    def __init__(self, log: FrontEventLog, session_id: str) -> None:
        self._log = log
        self.session_id = session_id

    def add(self, event_id: str, data: bytes | None, *, cut: bool = False) -> None:
        self._log.add(self.session_id, event_id, data, cut=cut)

    async def after(self, event_id: str) -> list[tuple[str, bytes | None]] | None:
        return await self._log.after(self.session_id, event_id)
