"""Who may read which image: one row per (principal, sha256) an answer carried to a principal.

A principal reads back (GET /media, resources/read) only images that reached it in a result;
any other hash is answered exactly like a missing one. The rows live in the gateway's one
database (`fences.store`): the SQLite file, or the PostgreSQL schema on the shared pool, so
every replica sees them. Inserts are idempotent (a replayed or repeated image adds nothing).

    dex_media_grants (principal, sha256, granted_at)   primary key (principal, sha256)
"""

from __future__ import annotations

import sqlite3
import time
from typing import TYPE_CHECKING, Protocol

from ..storage.database import Database, write_transaction
from ..storage.tables import PostgresTable, SqliteTable, open_table

if TYPE_CHECKING:
    import asyncpg

__all__ = ["GRANTS_TABLE", "GrantStore", "MemoryGrantStore", "PostgresGrantStore", "SqliteGrantStore", "open_grant_store"]

GRANTS_TABLE = "dex_media_grants"
_COLUMNS = "principal TEXT NOT NULL, sha256 TEXT NOT NULL, granted_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (principal, sha256)"


class GrantStore(Protocol):
    async def open(self) -> None: ...
    async def close(self) -> None: ...
    async def grant(self, principal: str, hashes: list[str]) -> None:
        """Record that these images reached `principal` (idempotent)."""
        ...
    async def granted(self, principal: str, sha256: str) -> bool: ...


def open_grant_store(where: str | Database) -> GrantStore:
    """The grants table in the gateway's database (not yet opened)."""
    return open_table(where, memory=MemoryGrantStore, sqlite=f"{__name__}:SqliteGrantStore",
                      postgres=f"{__name__}:PostgresGrantStore")


class MemoryGrantStore:
    def __init__(self) -> None:
        self.rows: set[tuple[str, str]] = set()

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def grant(self, principal: str, hashes: list[str]) -> None:
        self.rows.update((principal, h) for h in hashes)

    async def granted(self, principal: str, sha256: str) -> bool:
        return (principal, sha256) in self.rows


class SqliteGrantStore(SqliteTable):
    """In the gateway's SQLite file, beside the fences and the registrations (WAL)."""

    SCHEMA = f"CREATE TABLE IF NOT EXISTS {GRANTS_TABLE} ({_COLUMNS}) WITHOUT ROWID"

    async def grant(self, principal: str, hashes: list[str]) -> None:
        if hashes:
            await self._db.run(_sqlite_grant, principal, hashes, time.time())

    async def granted(self, principal: str, sha256: str) -> bool:
        return await self._db.run(_sqlite_granted, principal, sha256)


def _sqlite_grant(conn: sqlite3.Connection, principal: str, hashes: list[str], now: float) -> None:
    write_transaction(conn, lambda c: c.executemany(
        f"INSERT OR IGNORE INTO {GRANTS_TABLE} (principal, sha256, granted_at) VALUES (?, ?, ?)",
        [(principal, h, now) for h in hashes],
    ))


def _sqlite_granted(conn: sqlite3.Connection, principal: str, sha256: str) -> bool:
    row = conn.execute(f"SELECT 1 FROM {GRANTS_TABLE} WHERE principal = ? AND sha256 = ?", (principal, sha256)).fetchone()
    return row is not None


class PostgresGrantStore(PostgresTable):
    """On the gateway's shared asyncpg pool (the fence store's `Database`)."""

    PURPOSE = "dex media grants"

    def __init__(self, database: Database, *, owns_database: bool = False) -> None:
        super().__init__(database, owns_database=owns_database)
        self._table = self.table(GRANTS_TABLE)

    async def create(self, conn: "asyncpg.Connection") -> None:
        await conn.execute(f"CREATE TABLE IF NOT EXISTS {self._table} ({_COLUMNS})")

    async def grant(self, principal: str, hashes: list[str]) -> None:
        if hashes:
            await self.pool.executemany(
                f"INSERT INTO {self._table} (principal, sha256, granted_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                [(principal, h, time.time()) for h in hashes],
            )

    async def granted(self, principal: str, sha256: str) -> bool:
        row = await self.pool.fetchval(f"SELECT 1 FROM {self._table} WHERE principal = $1 AND sha256 = $2", principal, sha256)
        return row is not None
