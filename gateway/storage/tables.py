"""The one shape of a store that keeps a table in the gateway's database (`fences.store`), for each
kind of database; a store adds its own statements.

    SqliteTable     the gateway's SQLite file: short connections on worker threads
                    (`SqliteConnections`), the file private (0600), WAL, `SCHEMA` run at `open`
                    in one `BEGIN IMMEDIATE` transaction
    PostgresTable   the gateway's PostgreSQL database: the shared pool (`PoolLease`), `create`
                    run at `open` under the schema's advisory lock, so replicas starting together
                    create each table once
    open_table      the dispatcher each store's `open_*_store` calls: memory, SQLite or PostgreSQL
                    by the database URL's scheme, each backend imported only when chosen
"""

from __future__ import annotations

import importlib
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Self, TypeVar, cast

from .database import Database, PoolLease, SqliteConnections, lock_schema, write_transaction
from .private_files import private_file
from .urls import parse_sqlite_url

if TYPE_CHECKING:
    import asyncpg

__all__ = ["PostgresTable", "SqliteTable", "open_table", "statements"]

S = TypeVar("S")


def statements(script: str) -> list[str]:
    """The statements of a `;`-separated script (blank ones left out)."""
    return [s for s in (part.strip() for part in script.split(";")) if s]


class SqliteTable:
    SCHEMA: ClassVar[str] = ""  # the CREATE statements, `;`-separated, each idempotent

    def __init__(self, path: str | Path, *, busy_timeout_ms: int = 10_000) -> None:
        self.path = Path(path)
        self._db = SqliteConnections(self.path, busy_timeout_ms=busy_timeout_ms)

    @classmethod
    def from_url(cls, url: str) -> Self:
        parsed = parse_sqlite_url(url)
        return cls(parsed.path, busy_timeout_ms=int(parsed.options.get("busy_timeout_ms", 10_000)))

    async def open(self) -> None:
        private_file(self.path)
        await self._db.run(self.migrate)

    async def close(self) -> None:
        return None

    @classmethod
    def migrate(cls, conn: sqlite3.Connection) -> None:
        conn.execute("PRAGMA journal_mode=WAL")

        def create(c: sqlite3.Connection) -> None:
            for statement in statements(cls.SCHEMA):
                c.execute(statement)

        write_transaction(conn, create)


class PostgresTable:
    PURPOSE: ClassVar[str] = "dex table"  # names the schema lock and the pool lease in messages

    def __init__(self, database: Database, *, owns_database: bool = False) -> None:
        self.schema = database.postgres.schema
        self._lease = PoolLease(database, owner=owns_database, name=self.PURPOSE)

    def table(self, name: str) -> str:
        """`name` qualified by the gateway's schema."""
        return f'"{self.schema}".{name}'

    @property
    def pool(self) -> "asyncpg.Pool":
        return self._lease.pool

    async def open(self) -> None:
        if self._lease.held:
            return
        async with self._lease.opening() as pool, pool.acquire() as conn, conn.transaction():
            await lock_schema(conn, self.schema, self.PURPOSE)
            await self.create(conn)

    async def create(self, conn: "asyncpg.Connection") -> None:
        """The store's CREATE statements (run once per open, under the schema lock)."""
        raise NotImplementedError

    async def close(self) -> None:
        await self._lease.release()


def open_table(where: str | Database, *, memory: Callable[[], S], sqlite: str, postgres: str) -> S:
    """A store (not yet opened) in the gateway's database: the open `Database` (PostgreSQL: the
    store borrows its pool) or a URL (the store owns its connections: the CLIs).

    `sqlite` and `postgres` name the backend class as "package.module:Class"; it is imported only
    when chosen, so the memory and SQLite paths never load the PostgreSQL driver. The SQLite class
    is made by `from_url(url)`, the PostgreSQL one by `(database, owns_database=…)`
    (`SqliteTable`, `PostgresTable`).
    """
    database = where if isinstance(where, Database) else Database(where)
    if database.scheme == "memory":
        return memory()
    if database.scheme == "sqlite":
        return cast(S, _backend(sqlite).from_url(database.url))
    if database.scheme == "postgresql":
        return cast(S, _backend(postgres)(database, owns_database=not isinstance(where, Database)))
    raise ValueError(f"unsupported database URL scheme {database.scheme!r}: use memory://, sqlite:///PATH or postgresql://…")


def _backend(name: str) -> Any:
    module, _, attribute = name.partition(":")
    return getattr(importlib.import_module(module), attribute)
