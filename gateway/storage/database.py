"""The gateway's one database (`fences.store`), opened once and shared by its users.

The fence store and the connector registrations live in the same database. With PostgreSQL
they share one asyncpg pool, opened here (in the app's lifespan) and closed here; each store
only borrows it. SQLite and memory URLs share nothing: each SQLite store keeps its own short
connections to the file (WAL lets them work side by side), and a memory store is its own.

A store made from a bare URL (the CLI, tests) makes its own `Database` and owns it.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from pathlib import Path
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Protocol, Self, TypeVar
from urllib.parse import urlsplit

import anyio
import anyio.to_thread

from .urls import PostgresUrl, parse_postgres_url

if TYPE_CHECKING:
    import asyncpg

T = TypeVar("T")

DEFAULT_POOL_MIN = 1
DEFAULT_POOL_MAX = 10


class Database:
    def __init__(self, url: str) -> None:
        self.url = url
        scheme = urlsplit(url).scheme.lower()
        self.scheme = "postgresql" if scheme == "postgres" else scheme
        self._postgres = parse_postgres_url(url) if self.scheme == "postgresql" else None
        self._pool: asyncpg.Pool | None = None

    @property
    def postgres(self) -> PostgresUrl:
        if self._postgres is None:
            raise ValueError(f"{self.scheme}:// is not a PostgreSQL URL")
        return self._postgres

    @property
    def pool_min(self) -> int:
        return min(self.postgres.pool_min or DEFAULT_POOL_MIN, self.pool_max)

    @property
    def pool_max(self) -> int:
        return self.postgres.pool_max or DEFAULT_POOL_MAX

    @property
    def pool(self) -> "asyncpg.Pool":
        if self._pool is None:
            raise RuntimeError("the database is not open")
        return self._pool

    async def open(self) -> None:
        """Create the PostgreSQL pool (nothing to do for SQLite and memory); idempotent."""
        if self._postgres is None or self._pool is not None:
            return
        import asyncpg  # only the PostgreSQL path loads the driver

        self._pool = await asyncpg.create_pool(
            self._postgres.dsn, min_size=self.pool_min, max_size=self.pool_max, reset=_keep_session
        )

    async def close(self) -> None:
        if self._pool is not None:
            pool, self._pool = self._pool, None
            with anyio.CancelScope(shield=True):
                await pool.close()

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def lock_schema(conn: "asyncpg.Connection", schema: str, purpose: str) -> None:
    """Inside a transaction: take the advisory lock of `purpose` in `schema` (replicas starting
    together would race on CREATE ... IF NOT EXISTS) and make sure the schema exists."""
    key = int.from_bytes(hashlib.sha256(f"{purpose} {schema}".encode()).digest()[:8], "big", signed=True)
    await conn.execute("SELECT pg_advisory_xact_lock($1)", key)
    await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')


async def _keep_session(connection: "asyncpg.Connection") -> None:
    """Released connections skip asyncpg's reset query (`RESET ALL; UNLISTEN *; ...`), a second
    round trip after every statement; asyncpg still rolls back an open transaction first. Safe
    because the gateway leaves no session state behind: no SET, LISTEN, cursors or session
    advisory locks (schema set-up takes transaction-scoped locks only)."""


class Openable(Protocol):
    """A store on the database: opened before use, closed after."""

    async def open(self) -> None: ...

    async def close(self) -> None: ...


S = TypeVar("S", bound=Openable)


@asynccontextmanager
async def opened(store: S) -> AsyncIterator[S]:
    """`store`, open for the body; closed after it even when the body is cancelled."""
    await store.open()
    try:
        yield store
    finally:
        with anyio.CancelScope(shield=True):
            await store.close()


def run_with_store(store: S, action: Callable[[S], Awaitable[T]]) -> T:
    """For a CLI command: `action(store)` on its own event loop, the store open for it (made from
    the database URL, so it owns its connections) and closed after."""

    async def run() -> T:
        async with opened(store):
            return await action(store)

    return anyio.run(run)


def write_transaction(conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
    """`fn(conn)` inside `BEGIN IMMEDIATE` ... `COMMIT` on an autocommit connection; rolled back on
    any exception, also when COMMIT itself failed, so the next user never finds it open."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        result = fn(conn)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return result


class SqliteConnections:
    """SQLite for the stores that share the gateway's database file: each operation runs in a
    worker thread (never on the event loop) on its own short connection, so no connection is
    shared across threads; WAL lets them, and other replicas, work side by side."""

    def __init__(self, path: str | Path, *, busy_timeout_ms: int = 10_000, threads: int = 4) -> None:
        self.path = Path(path)
        self.busy_timeout_ms = busy_timeout_ms
        self._limiter = anyio.CapacityLimiter(threads)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(connection, *args)` in a worker thread (autocommit: `fn` opens its own transactions)."""
        return await anyio.to_thread.run_sync(partial(self._with_connection, fn, *args), limiter=self._limiter)

    def _with_connection(self, fn: Callable[..., T], *args: Any) -> T:
        conn = sqlite3.connect(self.path, timeout=self.busy_timeout_ms / 1000, isolation_level=None)
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")
            return fn(conn, *args)
        finally:
            conn.close()


class PoolLease:
    """A PostgreSQL store's hold on a `Database`: it opens and closes the database only when it
    owns it (a store made from a bare URL), and says when the store is used before `open()`."""

    def __init__(self, database: Database, *, owner: bool, name: str) -> None:
        self.database = database
        self._owner = owner
        self._name = name
        self.held = False

    @property
    def pool(self) -> "asyncpg.Pool":
        if not self.held:
            raise RuntimeError(f"{self._name} is not open")
        return self.database.pool

    @asynccontextmanager
    async def opening(self) -> AsyncIterator["asyncpg.Pool"]:
        """The pool to set the store up with (schema, tables); held once the body succeeds."""
        if self._owner:
            await self.database.open()
        try:
            yield self.database.pool
        except BaseException:
            if self._owner:
                await self.database.close()
            raise
        self.held = True

    async def release(self) -> None:
        was_held, self.held = self.held, False
        if was_held and self._owner:
            await self.database.close()


__all__ = ["DEFAULT_POOL_MAX", "DEFAULT_POOL_MIN", "Database", "PoolLease", "Openable", "SqliteConnections", "lock_schema", "opened", "run_with_store", "write_transaction"]
