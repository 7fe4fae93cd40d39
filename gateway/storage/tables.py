"""The one shape of a store that keeps a table in the gateway's database (`fences.store`), for each
kind of database; a store adds its own statements.

    SqliteTable     the gateway's SQLite file: short connections on worker threads
                    (`SqliteConnections`), the file private (0600), WAL, `SCHEMA` run at `open`
                    in one `BEGIN IMMEDIATE` transaction
    PostgresTable   the gateway's PostgreSQL database: the shared pool (`PoolLease`), `create`
                    run at `open` under the schema's advisory lock, so replicas starting together
                    create each table once
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Self

from .database import Database, PoolLease, SqliteConnections, lock_schema, write_transaction
from .private_files import private_file
from .urls import parse_sqlite_url

if TYPE_CHECKING:
    import asyncpg

__all__ = ["PostgresTable", "SqliteTable", "statements"]


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
