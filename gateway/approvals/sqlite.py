"""Approvals in the gateway's SQLite file (beside the fences, WAL mode): worker threads, one short
connection per operation (`SqliteConnections`), writes in `BEGIN IMMEDIATE`."""

from __future__ import annotations

import sqlite3

from ..storage.database import write_transaction
from ..storage.tables import SqliteTable
from .records import Approval, ApprovalState
from .store import APPROVALS_TABLE, COLUMNS, View, from_row, to_row

__all__ = ["SqliteApprovalStore"]

_COLS = ", ".join(COLUMNS)
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {APPROVALS_TABLE} (
    id TEXT PRIMARY KEY, principal TEXT NOT NULL, tool TEXT NOT NULL, upstream TEXT,
    arguments_digest TEXT NOT NULL, arguments TEXT NOT NULL, card TEXT NOT NULL, idempotency_key TEXT,
    created_at REAL NOT NULL, expires_at REAL NOT NULL, state TEXT NOT NULL, decided_by TEXT,
    decided_at REAL, reason TEXT, channel TEXT
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS {APPROVALS_TABLE}_created ON {APPROVALS_TABLE} (created_at);
CREATE INDEX IF NOT EXISTS {APPROVALS_TABLE}_expires ON {APPROVALS_TABLE} (expires_at)
"""
_PENDING = "state = 'pending' AND expires_at > ?"


class SqliteApprovalStore(SqliteTable):
    SCHEMA = _SCHEMA
    transient_errors: tuple[type[BaseException], ...] = (sqlite3.OperationalError, OSError)

    async def insert(self, approval: Approval) -> Approval:
        return await self._db.run(_insert, approval)

    async def get(self, approval_id: str) -> Approval | None:
        return await self._db.run(_get, approval_id)

    async def list(self, view: View, now: float, limit: int) -> list[Approval]:
        return await self._db.run(_list, view, now, limit)

    async def decide(self, approval_id: str, state: ApprovalState, *, by: str, reason: str | None, channel: str,
                     at: float) -> tuple[Approval, bool] | None:
        return await self._db.run(_decide, approval_id, state, by, reason, channel, at)

    async def purge(self, expired_before: float) -> int:
        return await self._db.run(_purge, expired_before)


def _get(conn: sqlite3.Connection, approval_id: str) -> Approval | None:
    row = conn.execute(f"SELECT {_COLS} FROM {APPROVALS_TABLE} WHERE id = ?", (approval_id,)).fetchone()
    return None if row is None else from_row(row)


def _insert(conn: sqlite3.Connection, approval: Approval) -> Approval:
    def insert(c: sqlite3.Connection) -> Approval:
        c.execute(f"INSERT INTO {APPROVALS_TABLE} ({_COLS}) VALUES ({', '.join('?' * len(COLUMNS))})"
                  " ON CONFLICT (id) DO NOTHING", to_row(approval))
        stored = _get(c, approval.id)
        assert stored is not None
        return stored

    return write_transaction(conn, insert)


def _list(conn: sqlite3.Connection, view: View, now: float, limit: int) -> list[Approval]:
    where = {"pending": f"WHERE {_PENDING}", "decided": f"WHERE NOT ({_PENDING})", "all": ""}[view]
    args = (now, limit) if where else (limit,)
    rows = conn.execute(f"SELECT {_COLS} FROM {APPROVALS_TABLE} {where} ORDER BY created_at DESC LIMIT ?", args)
    return [from_row(r) for r in rows.fetchall()]


def _decide(conn: sqlite3.Connection, approval_id: str, state: ApprovalState, by: str, reason: str | None,
            channel: str, at: float) -> tuple[Approval, bool] | None:
    def decide(c: sqlite3.Connection) -> tuple[Approval, bool] | None:
        changed = c.execute(
            f"UPDATE {APPROVALS_TABLE} SET state = ?, decided_by = ?, reason = ?, channel = ?, decided_at = ?"
            f" WHERE id = ? AND {_PENDING}", (state.value, by, reason, channel, at, approval_id, at)).rowcount
        stored = _get(c, approval_id)
        return None if stored is None else (stored, bool(changed))

    return write_transaction(conn, decide)


def _purge(conn: sqlite3.Connection, expired_before: float) -> int:
    return write_transaction(conn, lambda c: int(c.execute(
        f"DELETE FROM {APPROVALS_TABLE} WHERE expires_at < ?", (expired_before,)).rowcount))
