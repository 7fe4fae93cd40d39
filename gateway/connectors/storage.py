"""Where admin-API registrations live, shared by every replica that uses the same database.

URLs are those of `fences.store` (one database for both; the tables here are our own):

    memory://                    in-process, unit tests only (not shared)
    sqlite:///relative.db        one file (sqlite:////abs.db for absolute paths)
    postgresql://user@host/db    replicas; query: schema=NAME, pool_min=N, pool_max=N, rest to asyncpg

The gateway hands the stores its open `Database`, so PostgreSQL registrations use the fence
store's pool; a store made from a bare URL owns its connections.

A version row counts changes: every add/remove bumps it in the same transaction, so a replica
polls one small row to notice another's change.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, ConfigDict

from ..protocol import JsonObject
from ..storage.database import Database, write_transaction
from ..storage.tables import PostgresTable, SqliteTable, open_table

if TYPE_CHECKING:
    import asyncpg

REGISTRATIONS_TABLE = "dex_connector_registrations"
VERSION_TABLE = "dex_connector_registry_version"


class StoredRegistration(BaseModel):
    model_config = ConfigDict(frozen=True)

    connector_id: str
    filename: str
    manifest: str
    binding: JsonObject | None
    created_at: str
    updated_at: str


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class RegistrationStore(Protocol):
    async def open(self) -> None: ...
    async def close(self) -> None: ...
    async def version(self) -> int: ...
    async def all(self) -> list[StoredRegistration]: ...
    async def put(self, record: StoredRegistration) -> int:
        """Insert or replace by connector id (keeping created_at); the new version."""
        ...
    async def delete(self, connector_id: str) -> int | None:
        """The new version, or None when there was no such registration."""
        ...


def open_registration_store(where: str | Database) -> RegistrationStore:
    """A store (not yet opened): from a URL (owning its connections) or the gateway's `Database`."""
    return open_table(where, memory=MemoryRegistrationStore, sqlite=f"{__name__}:SqliteRegistrationStore",
                      postgres=f"{__name__}:PostgresRegistrationStore")


class MemoryRegistrationStore:
    def __init__(self) -> None:
        self._rows: dict[str, StoredRegistration] = {}
        self._version = 0

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def version(self) -> int:
        return self._version

    async def all(self) -> list[StoredRegistration]:
        return [self._rows[k] for k in sorted(self._rows)]

    async def put(self, record: StoredRegistration) -> int:
        old = self._rows.get(record.connector_id)
        if old is not None:
            record = record.model_copy(update={"created_at": old.created_at})
        self._rows[record.connector_id] = record
        self._version += 1
        return self._version

    async def delete(self, connector_id: str) -> int | None:
        if self._rows.pop(connector_id, None) is None:
            return None
        self._version += 1
        return self._version


class SqliteRegistrationStore(SqliteTable):
    """In the gateway's SQLite file (`SqliteTable`: short connections on worker threads, WAL lets
    replicas read while another writes)."""

    SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {REGISTRATIONS_TABLE} (connector_id TEXT PRIMARY KEY, filename TEXT NOT NULL,
    manifest TEXT NOT NULL, binding TEXT, created_at TEXT NOT NULL, updated_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS {VERSION_TABLE} (id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL);
INSERT OR IGNORE INTO {VERSION_TABLE} (id, version) VALUES (1, 0)
"""

    async def version(self) -> int:
        return await self._run(lambda c: int(c.execute(f"SELECT version FROM {VERSION_TABLE} WHERE id = 1").fetchone()[0]))

    async def all(self) -> list[StoredRegistration]:
        rows = await self._run(lambda c: c.execute(
            f"SELECT connector_id, filename, manifest, binding, created_at, updated_at FROM {REGISTRATIONS_TABLE} ORDER BY connector_id"
        ).fetchall())
        return [_from_row(r) for r in rows]

    async def put(self, record: StoredRegistration) -> int:
        return await self._run(self._put, record)

    @staticmethod
    def _put(conn: sqlite3.Connection, r: StoredRegistration) -> int:
        def put(c: sqlite3.Connection) -> int:
            c.execute(
                f"INSERT INTO {REGISTRATIONS_TABLE} VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (connector_id) DO UPDATE SET"
                " filename = excluded.filename, manifest = excluded.manifest, binding = excluded.binding,"
                " updated_at = excluded.updated_at",
                (r.connector_id, r.filename, r.manifest, _binding_text(r), r.created_at, r.updated_at),
            )
            return _next_version(c)

        return write_transaction(conn, put)

    async def delete(self, connector_id: str) -> int | None:
        return await self._run(self._delete, connector_id)

    @staticmethod
    def _delete(conn: sqlite3.Connection, connector_id: str) -> int | None:
        def delete(c: sqlite3.Connection) -> int | None:
            if not c.execute(f"DELETE FROM {REGISTRATIONS_TABLE} WHERE connector_id = ?", (connector_id,)).rowcount:
                return None
            return _next_version(c)

        return write_transaction(conn, delete)


def _next_version(conn: sqlite3.Connection) -> int:
    """Bump the registrations' version (inside the caller's transaction) and return it."""
    return int(conn.execute(f"UPDATE {VERSION_TABLE} SET version = version + 1 WHERE id = 1 RETURNING version").fetchone()[0])


class PostgresRegistrationStore(PostgresTable):
    PURPOSE = "dex connectors"

    def __init__(self, database: Database, *, owns_database: bool = False) -> None:
        """On `database`'s pool; `owns_database`: open and close it with the store."""
        super().__init__(database, owns_database=owns_database)
        self._regs = self.table(REGISTRATIONS_TABLE)
        self._version = self.table(VERSION_TABLE)

    @classmethod
    def from_url(cls, url: str) -> "PostgresRegistrationStore":
        return cls(Database(url), owns_database=True)

    async def create(self, conn: "asyncpg.Connection") -> None:
        await conn.execute(
            f"CREATE TABLE IF NOT EXISTS {self._regs} (connector_id text PRIMARY KEY, filename text NOT NULL,"
            " manifest text NOT NULL, binding text, created_at text NOT NULL, updated_at text NOT NULL)"
        )
        await conn.execute(f"CREATE TABLE IF NOT EXISTS {self._version} (id integer PRIMARY KEY CHECK (id = 1), version bigint NOT NULL)")
        await conn.execute(f"INSERT INTO {self._version} (id, version) VALUES (1, 0) ON CONFLICT DO NOTHING")

    async def version(self) -> int:
        return int(await self.pool.fetchval(f"SELECT version FROM {self._version} WHERE id = 1"))

    async def all(self) -> list[StoredRegistration]:
        rows = await self.pool.fetch(
            f"SELECT connector_id, filename, manifest, binding, created_at, updated_at FROM {self._regs} ORDER BY connector_id"
        )
        return [_from_row(tuple(r)) for r in rows]

    async def put(self, r: StoredRegistration) -> int:
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(
                f"INSERT INTO {self._regs} VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (connector_id) DO UPDATE SET"
                " filename = excluded.filename, manifest = excluded.manifest, binding = excluded.binding,"
                " updated_at = excluded.updated_at",
                r.connector_id, r.filename, r.manifest, _binding_text(r), r.created_at, r.updated_at,
            )
            return int(await conn.fetchval(f"UPDATE {self._version} SET version = version + 1 WHERE id = 1 RETURNING version"))

    async def delete(self, connector_id: str) -> int | None:
        async with self.pool.acquire() as conn, conn.transaction():
            gone = await conn.fetchval(f"DELETE FROM {self._regs} WHERE connector_id = $1 RETURNING connector_id", connector_id)
            if gone is None:
                return None
            return int(await conn.fetchval(f"UPDATE {self._version} SET version = version + 1 WHERE id = 1 RETURNING version"))


def _binding_text(r: StoredRegistration) -> str | None:
    return json.dumps(r.binding, sort_keys=True) if r.binding is not None else None


def _from_row(row: tuple[Any, ...]) -> StoredRegistration:
    connector_id, filename, manifest, binding, created_at, updated_at = row
    return StoredRegistration(
        connector_id=connector_id, filename=filename, manifest=manifest,
        binding=json.loads(binding) if binding else None, created_at=created_at, updated_at=updated_at,
    )
