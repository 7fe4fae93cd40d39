"""Operators' notes on fences in `unknown`: "I checked it, here is what happened".

A fence in `unknown` is terminal: the gateway cannot know whether the write took effect, and every
retry with that key gets the same `unknown` answer (SPEC 4). A person checks the upstream system and
records what they found here. Resolving changes **only what the console lists**: the fence leaves
the list of fences to check and carries the note, who wrote it and when. It does not change the
fence: retries still get the `unknown` answer they got before (rewriting it to "done" would tell a
client a result the gateway never saw), and the retention sweep deletes it as any other fence (the
note is then dropped with it from every listing).

One small table (`dex_fence_resolutions`) in the gateway's database, keyed by fence id, next to
the fences: every replica sees the same notes. The first resolution stands: resolving again
returns the existing note (409 on the admin API), so two operators never overwrite each other.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ..storage.database import Database, write_transaction
from ..storage.tables import PostgresTable, SqliteTable, open_table

if TYPE_CHECKING:
    import asyncpg

TABLE = "dex_fence_resolutions"
MAX_NOTE_CHARS = 2000

__all__ = ["MAX_NOTE_CHARS", "Resolution", "ResolutionStore", "open_resolution_store"]


@dataclass(frozen=True, slots=True)
class Resolution:
    fence_id: str
    note: str
    resolved_by: str
    resolved_at: float  # Unix seconds


class ResolutionStore(Protocol):
    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def resolve(self, resolution: Resolution) -> tuple[bool, Resolution]:
        """Record `resolution` unless the fence has one: (True, it) or (False, the first one)."""

    async def of(self, fence_ids: list[str]) -> dict[str, Resolution]:
        """The resolutions of these fences (absent: not resolved)."""


def open_resolution_store(where: str | Database) -> ResolutionStore:
    """A store (not yet opened) in the fence store's database (`fences.store`)."""
    return open_table(where, memory=MemoryResolutionStore, sqlite=f"{__name__}:SqliteResolutionStore",
                      postgres=f"{__name__}:PostgresResolutionStore")


class MemoryResolutionStore:
    def __init__(self) -> None:
        self._items: dict[str, Resolution] = {}

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def resolve(self, resolution: Resolution) -> tuple[bool, Resolution]:
        existing = self._items.setdefault(resolution.fence_id, resolution)
        return existing is resolution, existing

    async def of(self, fence_ids: list[str]) -> dict[str, Resolution]:
        return {i: self._items[i] for i in fence_ids if i in self._items}


def _row(row: Any) -> Resolution:
    fence_id, note, by, at = tuple(row)
    return Resolution(fence_id=fence_id, note=note, resolved_by=by, resolved_at=float(at))


class SqliteResolutionStore(SqliteTable):
    SCHEMA = (f"CREATE TABLE IF NOT EXISTS {TABLE} (fence_id TEXT PRIMARY KEY, note TEXT NOT NULL,"
              " resolved_by TEXT NOT NULL, resolved_at REAL NOT NULL)")

    async def resolve(self, resolution: Resolution) -> tuple[bool, Resolution]:
        def op(conn: sqlite3.Connection) -> tuple[bool, Resolution]:
            def step(c: sqlite3.Connection) -> tuple[bool, Resolution]:
                inserted = c.execute(
                    f"INSERT OR IGNORE INTO {TABLE} VALUES (?, ?, ?, ?)",
                    (resolution.fence_id, resolution.note, resolution.resolved_by, resolution.resolved_at),
                ).rowcount == 1
                row = c.execute(f"SELECT * FROM {TABLE} WHERE fence_id = ?", (resolution.fence_id,)).fetchone()
                return inserted, _row(row)

            return write_transaction(conn, step)

        return await self._run(op)

    async def of(self, fence_ids: list[str]) -> dict[str, Resolution]:
        if not fence_ids:
            return {}

        def op(conn: sqlite3.Connection) -> dict[str, Resolution]:
            marks = ", ".join("?" for _ in fence_ids)
            rows = conn.execute(f"SELECT * FROM {TABLE} WHERE fence_id IN ({marks})", fence_ids).fetchall()
            return {r.fence_id: r for r in map(_row, rows)}

        return await self._run(op)


class PostgresResolutionStore(PostgresTable):
    PURPOSE = "dex fence resolutions"

    def __init__(self, database: Database, *, owns_database: bool = False) -> None:
        super().__init__(database, owns_database=owns_database)
        self._t = self.table(TABLE)

    async def create(self, conn: "asyncpg.Connection") -> None:
        await conn.execute(
            f"CREATE TABLE IF NOT EXISTS {self._t} (fence_id text PRIMARY KEY, note text NOT NULL,"
            " resolved_by text NOT NULL, resolved_at double precision NOT NULL)"
        )

    async def resolve(self, resolution: Resolution) -> tuple[bool, Resolution]:
        async with self.pool.acquire() as conn, conn.transaction():
            status = await conn.execute(
                f"INSERT INTO {self._t} VALUES ($1, $2, $3, $4) ON CONFLICT (fence_id) DO NOTHING",
                resolution.fence_id, resolution.note, resolution.resolved_by, resolution.resolved_at,
            )
            row = await conn.fetchrow(f"SELECT * FROM {self._t} WHERE fence_id = $1", resolution.fence_id)
        return status.endswith(" 1"), _row(row)

    async def of(self, fence_ids: list[str]) -> dict[str, Resolution]:
        if not fence_ids:
            return {}
        rows = await self.pool.fetch(f"SELECT * FROM {self._t} WHERE fence_id = ANY($1::text[])", fence_ids)
        return {r.fence_id: r for r in map(_row, rows)}
