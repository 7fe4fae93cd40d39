"""Pins in the gateway's PostgreSQL database, on its shared pool (`PoolLease`)."""

from __future__ import annotations

import asyncpg

from ..storage.database import Database
from ..storage.tables import PostgresTable
from .records import Pin
from .store import COLUMNS, PINS_TABLE, from_row, to_row

__all__ = ["PostgresPinStore"]

_COLS = ", ".join(COLUMNS)


class PostgresPinStore(PostgresTable):
    PURPOSE = "dex tool pins"

    def __init__(self, database: Database, *, owns_database: bool = False) -> None:
        super().__init__(database, owns_database=owns_database)
        self._table = self.table(PINS_TABLE)

    async def create(self, conn: asyncpg.Connection) -> None:
        await conn.execute(
            f"CREATE TABLE IF NOT EXISTS {self._table} (upstream text NOT NULL, tool text NOT NULL,"
            " state text NOT NULL, pinned_digest text, pinned_definition text, seen_digest text NOT NULL,"
            " seen_definition text NOT NULL, first_seen_at double precision NOT NULL,"
            " changed_at double precision, reviewed_by text, reviewed_at double precision,"
            " updated_at double precision NOT NULL, PRIMARY KEY (upstream, tool))")

    async def all(self) -> list[Pin]:
        return [from_row(r) for r in await self.pool.fetch(f"SELECT {_COLS} FROM {self._table}")]

    async def put(self, pins: list[Pin], at: float) -> tuple[float, float]:
        placeholders = ", ".join(f"${i}" for i in range(1, len(COLUMNS) + 1))
        updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in COLUMNS[2:])
        async with self.pool.acquire() as conn, conn.transaction():
            # Pin writers of every replica take turns, so the two stamps bracket this write alone.
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", self._table)
            before = await self._stamp(conn)
            await conn.executemany(
                f"INSERT INTO {self._table} ({_COLS}) VALUES ({placeholders})"
                f" ON CONFLICT (upstream, tool) DO UPDATE SET {updates}", [to_row(pin, at) for pin in pins])
            return before, await self._stamp(conn)

    async def stamp(self) -> float:
        async with self.pool.acquire() as conn:
            return await self._stamp(conn)

    async def _stamp(self, conn: asyncpg.Connection) -> float:
        row = await conn.fetchrow(f"SELECT max(updated_at) AS at, count(*) AS n FROM {self._table}")
        return float(row["at"] or 0.0) + float(row["n"]) * 1e-9
