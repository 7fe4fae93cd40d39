"""The shared fence store: PostgreSQL through an asyncpg pool, for several gateway replicas.

The pool belongs to a `Database` (one per gateway, shared with the connector registrations);
a store made from a bare URL opens and closes its own.

Schema: table `dex_fences` plus `dex_fences_schema` holding one version row, in the
PostgreSQL schema named by `?schema=` (default `public`). `open()` creates or checks them
under a transaction-scoped advisory lock, so replicas starting at the same moment neither
fail on concurrent `CREATE ... IF NOT EXISTS` nor see a half-built schema.

Each write is one statement, atomic at READ COMMITTED: the conditional UPDATE/DELETE re-checks
its WHERE clause on the latest row version, which is the compare-and-set.

One round trip each: a claim of a new key is one `INSERT ... ON CONFLICT DO NOTHING` (a key
already there is read by a second statement), and the pool skips asyncpg's reset query on
release (gateway/storage/database.py). asyncpg prepares each statement once per connection and
reuses it (its statement cache), so a call sends no SQL text to parse. Every write commits
synchronously: a finished answer acknowledged to the pipeline survives a PostgreSQL crash too.

Group commit (`group_commit=True`, the default): a finish that finds no commit under way is the
plain one-row UPDATE, sent at once; finishes arriving while commits are under way and ready in
the same pass of the event loop go together in one UPDATE ... FROM unnest(...) (one transaction,
one WAL flush), and each caller is answered only once that commit returned (group_commit.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

import asyncpg

from ...protocol import Result
from ...storage.database import Database, PoolLease
from ...storage.kept_connection import KeptConnection
from ...storage.postgres_errors import TRANSIENT_ERRORS
from ..records import COLUMNS, FenceRecord, FenceState, FenceStats, Owner, dump_answer, record_from_row, record_to_row
from .group_commit import GroupCommit

SCHEMA_VERSION = 1
SWEEP_BATCH_ROWS = 2000  # rows deleted per statement by a sweep or purge
_COLS = ", ".join(COLUMNS)


@dataclass(frozen=True, slots=True)
class _Finish:
    fence_id: str
    owner: Owner
    attempts: int
    state: str
    answer: str | None
    now: float


def _lock_key(schema: str) -> int:
    # A stable signed 64-bit advisory lock id per PostgreSQL schema.
    return int.from_bytes(hashlib.sha256(f"dex-gateway fences {schema}".encode()).digest()[:8], "big", signed=True)


class PostgresFenceStore:
    transient_errors: tuple[type[BaseException], ...] = TRANSIENT_ERRORS  # storage/postgres_errors.py

    def __init__(
        self, database: Database, *, owns_database: bool = False, group_commit: bool = True, keep_connection: bool = True
    ) -> None:
        """On `database`'s pool; `owns_database`: open and close it with the store;
        `group_commit`: finishes that become ready together share one statement and commit;
        `keep_connection`: claims and finishes run on one of the pool's connections kept for them
        while it is free (storage/kept_connection.py), the pool otherwise."""
        self.group_commit = group_commit
        self.keep_connection = keep_connection
        self._kept = KeptConnection(lambda: self.pool)
        self.schema = database.postgres.schema  # checked when the URL was parsed
        self._lease = PoolLease(database, owner=owns_database, name="fence store")
        self._t = f'"{self.schema}".dex_fences'
        self._held = "fence_id = ${0} AND state = 'pending' AND owner_replica = ${1} AND owner_boot = ${2} AND attempts = ${3}"
        placeholders = ", ".join(f"${i}" for i in range(1, len(COLUMNS) + 1))
        self._claim = f"INSERT INTO {self._t} ({_COLS}) VALUES ({placeholders}) ON CONFLICT (fence_id) DO NOTHING"
        self._read = f"SELECT {_COLS} FROM {self._t} WHERE fence_id = $1"
        self._finish_one = (
            f"UPDATE {self._t} SET state = $1, answer = $2, lease_until = NULL, updated_at = $3 WHERE {self._cas(4)}"
        )
        # Several finishes in one statement: each row's compare-and-set is its own join condition,
        # re-checked on the latest row version like the single UPDATE's WHERE clause.
        self._finish_many = (
            f"UPDATE {self._t} AS f SET state = v.state, answer = v.answer, lease_until = NULL, updated_at = v.now"
            " FROM unnest($1::text[], $2::text[], $3::text[], $4::integer[], $5::text[], $6::text[], $7::float8[])"
            " AS v(fence_id, owner_replica, owner_boot, attempts, state, answer, now)"
            " WHERE f.fence_id = v.fence_id AND f.state = 'pending' AND f.owner_replica = v.owner_replica"
            " AND f.owner_boot = v.owner_boot AND f.attempts = v.attempts RETURNING f.fence_id"
        )
        self._finishes: GroupCommit[_Finish, bool] = GroupCommit(
            self._commit_finishes, key=lambda f: f.fence_id, transient=self.transient_errors
        )

    @classmethod
    def from_url(cls, url: str) -> "PostgresFenceStore":
        return cls(Database(url), owns_database=True)

    @property
    def dsn(self) -> str:
        return self._lease.database.postgres.dsn

    @property
    def pool_max(self) -> int:
        return self._lease.database.pool_max

    def _cas(self, first: int) -> str:
        return self._held.format(first, first + 1, first + 2, first + 3)

    # -- lifecycle ---------------------------------------------------------------------

    async def open(self) -> None:
        if self._lease.held:
            return
        self._kept = KeptConnection(lambda: self.pool)
        async with self._lease.opening() as pool, pool.acquire() as conn:
            await self._migrate(conn)

    async def _migrate(self, conn: asyncpg.Connection) -> None:
        s = f'"{self.schema}"'
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", _lock_key(self.schema))
            await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {s}")
            await conn.execute(f"CREATE TABLE IF NOT EXISTS {s}.dex_fences_schema (version integer NOT NULL)")
            version = await conn.fetchval(f"SELECT max(version) FROM {s}.dex_fences_schema")
            if version is not None and version > SCHEMA_VERSION:
                raise RuntimeError(
                    f"fence schema {self.schema} is at version {version}; this gateway knows up to {SCHEMA_VERSION}"
                )
            if version is None or version < SCHEMA_VERSION:
                await conn.execute(
                    f"""
                    CREATE TABLE IF NOT EXISTS {self._t} (
                        fence_id      text PRIMARY KEY,
                        principal     text NOT NULL,
                        fingerprint   text NOT NULL,
                        tool          text NOT NULL,
                        effect        text NOT NULL,
                        state         text NOT NULL CHECK (state IN ('pending', 'done', 'unknown')),
                        owner_replica text,
                        owner_boot    text,
                        lease_until   double precision,
                        answer        text,
                        created_at    double precision NOT NULL,
                        updated_at    double precision NOT NULL,
                        attempts      integer NOT NULL
                    )"""
                )
                await conn.execute(f"CREATE INDEX IF NOT EXISTS dex_fences_state_updated ON {self._t} (state, updated_at)")
                await conn.execute(f"DELETE FROM {s}.dex_fences_schema")
                await conn.execute(f"INSERT INTO {s}.dex_fences_schema (version) VALUES ($1)", SCHEMA_VERSION)

    async def close(self) -> None:
        await self._kept.close()  # before the pool can close
        await self._lease.release()

    @property
    def _hot(self) -> "KeptConnection | asyncpg.Pool":
        """Where the claims and finishes run."""
        return self._kept if self.keep_connection else self.pool

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    @property
    def pool(self) -> asyncpg.Pool:
        return self._lease.pool

    @staticmethod
    def _one(status: str) -> bool:
        # asyncpg returns the command tag, e.g. "UPDATE 1" / "DELETE 0".
        return status.rsplit(" ", 1)[-1] == "1"

    # -- operations --------------------------------------------------------------------

    async def insert_if_absent(self, record: FenceRecord) -> tuple[bool, FenceRecord]:
        # A new key (nearly every call) is one statement. A key already there (a retry) is read by
        # a second statement, which finds it gone only if it was deleted in between (swept, or
        # released by its owner): then claim again. (An insert meeting a claim not yet committed
        # waits for that transaction to end, then does nothing or inserts.)
        row = record_to_row(record)
        while True:
            if self._one(await self._hot.execute(self._claim, *row)):
                return True, record
            found = await self._hot.fetchrow(self._read, record.fence_id)
            if found is not None:
                return False, record_from_row(found)

    async def get(self, fence_id: str) -> FenceRecord | None:
        row = await self.pool.fetchrow(self._read, fence_id)
        return None if row is None else record_from_row(row)

    async def take_over(
        self, fence_id: str, *, expected: Owner, attempts: int, owner: Owner, lease_until: float, now: float
    ) -> bool:
        status = await self.pool.execute(
            f"UPDATE {self._t} SET owner_replica = $1, owner_boot = $2, lease_until = $3, attempts = attempts + 1,"
            f" updated_at = $4 WHERE {self._cas(5)}",
            owner.replica_id, owner.boot_id, lease_until, now,
            fence_id, expected.replica_id, expected.boot_id, attempts,
        )
        return self._one(status)

    async def renew(self, fence_id: str, *, owner: Owner, attempts: int, lease_until: float, now: float) -> bool:
        status = await self.pool.execute(
            f"UPDATE {self._t} SET lease_until = $1, updated_at = $2 WHERE {self._cas(3)}",
            lease_until, now, fence_id, owner.replica_id, owner.boot_id, attempts,
        )
        return self._one(status)

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
        if state is FenceState.PENDING:
            raise ValueError("finish() moves a fence to done or unknown, not pending")
        item = _Finish(fence_id, expected, attempts, state.value, dump_answer(answer), now)
        if self.group_commit:
            return await self._finishes.submit(item)
        return (await self._commit_finishes([item]))[0]

    async def _commit_finishes(self, items: Sequence[_Finish]) -> list[bool]:
        """One statement, one commit, for every finish in `items` (distinct fences)."""
        if len(items) == 1:
            f = items[0]
            status = await self._hot.execute(
                self._finish_one, f.state, f.answer, f.now, f.fence_id, f.owner.replica_id, f.owner.boot_id, f.attempts
            )
            return [self._one(status)]
        done = {
            r[0]
            for r in await self._hot.fetch(
                self._finish_many,
                [f.fence_id for f in items],
                [f.owner.replica_id for f in items],
                [f.owner.boot_id for f in items],
                [f.attempts for f in items],
                [f.state for f in items],
                [f.answer for f in items],
                [f.now for f in items],
            )
        }
        return [f.fence_id in done for f in items]

    async def delete_if_owner(self, fence_id: str, *, owner: Owner, attempts: int) -> bool:
        status = await self.pool.execute(
            f"DELETE FROM {self._t} WHERE {self._cas(1)}", fence_id, owner.replica_id, owner.boot_id, attempts
        )
        return self._one(status)

    async def sweep(self, cutoff: float) -> int:
        # Short batches by the (state, updated_at) index: no long transaction holding row locks
        # and a growing WAL; a pending fence's lease ends after its last update, so the index
        # finds the abandoned ones too.
        total = 0
        for state, extra in (("done", ""), ("unknown", ""), ("pending", " AND lease_until < $1")):
            sql = (f"DELETE FROM {self._t} WHERE fence_id IN (SELECT fence_id FROM {self._t}"
                   f" WHERE state = '{state}' AND updated_at < $1{extra} LIMIT $2)")
            while True:
                deleted = int((await self.pool.execute(sql, cutoff, SWEEP_BATCH_ROWS)).rsplit(" ", 1)[-1])
                total += deleted
                if deleted < SWEEP_BATCH_ROWS:
                    break
        return total

    async def ping(self) -> None:
        await self.pool.fetchval(f"SELECT 1 FROM {self._t} LIMIT 1")

    async def stats(self) -> FenceStats:
        async with self.pool.acquire() as conn:
            counts = {r["state"]: r["n"] for r in await conn.fetch(f"SELECT state, count(*) AS n FROM {self._t} GROUP BY state")}
            bounds = await conn.fetchrow(f"SELECT min(updated_at) AS lo, max(updated_at) AS hi FROM {self._t}")
        return FenceStats(
            total=sum(counts.values()),
            pending=counts.get("pending", 0),
            done=counts.get("done", 0),
            unknown=counts.get("unknown", 0),
            oldest_updated_at=bounds["lo"],
            newest_updated_at=bounds["hi"],
        )

    async def list_records(
        self, *, state: FenceState | None = None, principal: str | None = None, limit: int = 100
    ) -> list[FenceRecord]:
        where: list[str] = []
        params: list[Any] = []
        if state is not None:
            params.append(state.value)
            where.append(f"state = ${len(params)}")
        if principal is not None:
            params.append(principal)
            where.append(f"principal = ${len(params)}")
        params.append(int(limit))
        sql = (
            f"SELECT {_COLS} FROM {self._t} {'WHERE ' + ' AND '.join(where) if where else ''}"
            f" ORDER BY updated_at DESC LIMIT ${len(params)}"
        )
        return [record_from_row(r) for r in await self.pool.fetch(sql, *params)]
