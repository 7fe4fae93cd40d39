"""The one shape of a store that keeps a table in the gateway's database (`fences.store`), for each
kind of database; a store adds its own statements.

    SqliteTable     the gateway's SQLite file: short connections on worker threads
                    (`SqliteConnections`), the file private (0600), WAL, `SCHEMA` run at `open`
                    in one `BEGIN IMMEDIATE` transaction
    PostgresTable   the gateway's PostgreSQL database: the shared pool (`PoolLease`), `create`
                    run at `open` under the schema's advisory lock, so replicas starting together
                    create each table once
    SchemaVersion   a table's schema version row (`<table>_schema`): written when the table is
                    new, refused when this code is older than the table
    open_table      the dispatcher each store's `open_*_store` calls: memory, SQLite or PostgreSQL
                    by the database URL's scheme, each backend imported only when chosen
"""

from __future__ import annotations

import importlib
import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Self, TypeVar, cast

from .database import Database, PoolLease, SqliteConnections, lock_schema, write_transaction
from .loop_sqlite import synchronous_mode
from .private_files import private_file
from .urls import parse_sqlite_url

if TYPE_CHECKING:
    import asyncpg

__all__ = ["PostgresTable", "SchemaVersion", "SqliteTable", "open_table", "statements"]

S = TypeVar("S")
T = TypeVar("T")


def statements(script: str) -> list[str]:
    """The statements of a script, each ended by a `;` at the end of its line (so a trigger's body
    keeps its own `;`s); blank ones left out."""
    return [s for s in (part.strip() for part in re.split(r";[ \t]*(?:\n|$)", script)) if s]


@dataclass(frozen=True, slots=True)
class SchemaVersion:
    """The version of a store's tables, one row in `<table>_schema`: written when the tables are
    new; a table newer than this code (`known`) is refused, naming `what`."""

    known: int
    what: str

    def _new(self, found: int | None) -> bool:
        if found is not None and found > self.known:
            raise RuntimeError(f"{self.what} schema is at version {found}; this gateway knows up to {self.known}")
        return found is None

    def sqlite(self, c: sqlite3.Connection, table: str) -> None:
        """Inside the creating transaction (`SqliteTable.created`)."""
        c.execute(f"CREATE TABLE IF NOT EXISTS {table}_schema (version INTEGER NOT NULL)")
        if self._new(c.execute(f"SELECT max(version) FROM {table}_schema").fetchone()[0]):
            c.execute(f"INSERT INTO {table}_schema (version) VALUES (?)", (self.known,))

    async def postgres_check(self, conn: "asyncpg.Connection", qualified: str) -> bool:
        """Before the CREATE statements (`qualified`: the table in its schema): True when the tables
        are new (then `postgres_write` once they are made)."""
        await conn.execute(f"CREATE TABLE IF NOT EXISTS {qualified}_schema (version integer NOT NULL)")
        return self._new(await conn.fetchval(f"SELECT max(version) FROM {qualified}_schema"))

    async def postgres_write(self, conn: "asyncpg.Connection", qualified: str) -> None:
        await conn.execute(f"INSERT INTO {qualified}_schema (version) VALUES ($1)", self.known)


class SqliteTable:
    SCHEMA: ClassVar[str] = ""  # the CREATE statements, each idempotent and ended by `;` at a line's end

    def __init__(self, path: str | Path, *, busy_timeout_ms: int = 10_000, synchronous: str = "NORMAL") -> None:
        self.path = Path(path)
        self.busy_timeout_ms = busy_timeout_ms
        # The URL's `synchronous` (the fences' durability choice), for a store that keeps a
        # writer of its own (`storage.loop_sqlite.LoopSqlite`: the audit log).
        self.synchronous = synchronous_mode(synchronous)
        self._db = SqliteConnections(self.path, busy_timeout_ms=busy_timeout_ms)

    @classmethod
    def from_url(cls, url: str) -> Self:
        parsed = parse_sqlite_url(url)
        return cls(parsed.path, busy_timeout_ms=int(parsed.options.get("busy_timeout_ms", 10_000)),
                   synchronous=parsed.options.get("synchronous", "NORMAL"))

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(connection, *args)` on a worker thread."""
        return await self._db.run(fn, *args)

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
            cls.created(c)

        write_transaction(conn, create)

    @classmethod
    def created(cls, c: sqlite3.Connection) -> None:
        """After SCHEMA, in its transaction: what else the store checks or writes (`SchemaVersion`)."""


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
