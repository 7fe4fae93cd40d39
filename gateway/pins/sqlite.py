"""Pins in the gateway's SQLite file (beside the fences, WAL mode): worker threads, one short
connection per operation (`SqliteConnections`), writes in `BEGIN IMMEDIATE`."""

from __future__ import annotations

import sqlite3

from ..storage.database import write_transaction
from ..storage.tables import SqliteTable
from .records import Pin
from .store import COLUMNS, PINS_TABLE, from_row, to_row

__all__ = ["SqlitePinStore"]

_COLS = ", ".join(COLUMNS)
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {PINS_TABLE} (
    upstream TEXT NOT NULL, tool TEXT NOT NULL, state TEXT NOT NULL, pinned_digest TEXT, pinned_definition TEXT,
    seen_digest TEXT NOT NULL, seen_definition TEXT NOT NULL, first_seen_at REAL NOT NULL, changed_at REAL,
    reviewed_by TEXT, reviewed_at REAL, updated_at REAL NOT NULL, PRIMARY KEY (upstream, tool)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS {PINS_TABLE}_updated ON {PINS_TABLE} (updated_at)
"""


class SqlitePinStore(SqliteTable):
    SCHEMA = _SCHEMA

    async def all(self) -> list[Pin]:
        return await self._db.run(_all)

    async def put(self, pins: list[Pin], at: float) -> tuple[float, float]:
        return await self._db.run(_put, pins, at)

    async def stamp(self) -> float:
        return await self._db.run(_stamp)


def _all(conn: sqlite3.Connection) -> list[Pin]:
    return [from_row(r) for r in conn.execute(f"SELECT {_COLS} FROM {PINS_TABLE}").fetchall()]


def _put(conn: sqlite3.Connection, pins: list[Pin], at: float) -> tuple[float, float]:
    def put(c: sqlite3.Connection) -> tuple[float, float]:
        before = _stamp(c)
        c.executemany(f"INSERT OR REPLACE INTO {PINS_TABLE} ({_COLS}) VALUES ({', '.join('?' * len(COLUMNS))})",
                      [to_row(pin, at) for pin in pins])
        return before, _stamp(c)

    return write_transaction(conn, put)  # BEGIN IMMEDIATE: no other writer between the two stamps


def _stamp(conn: sqlite3.Connection) -> float:
    row = conn.execute(f"SELECT max(updated_at), count(*) FROM {PINS_TABLE}").fetchone()
    return float(row[0] or 0.0) + float(row[1]) * 1e-9
