"""The session store on PostgreSQL (`--store postgresql://user@host/db?schema=NAME`): the same
statements as on SQLite (`sqlite_*.py`), run through a small connection that speaks the subset of
SQLite's dialect they use, so there is one set of statements and one schema to keep.

* `?` placeholders become `$1..$n`; `IS ?` becomes `IS NOT DISTINCT FROM $n`; `INSERT OR IGNORE`
  becomes `ON CONFLICT DO NOTHING`; an INSERT into a table with a generated key returns it
  (`lastrowid`); `rowcount` comes from the command status.
* `BEGIN IMMEDIATE` (SQLite: one writer at a time) becomes `BEGIN` plus a transaction-scoped
  advisory lock on the schema, so writers on every process take turns exactly as on SQLite: the
  checks the statements make inside their transactions (a steer recorded only while a turn runs, a
  queued message started once, a lease taken by one process) hold across processes.
* asyncpg is asynchronous; the statements are synchronous and run in the store's worker thread, so
  the connection lives on an event loop of its own thread and each statement is handed over.
"""

from __future__ import annotations

import asyncio
import re
import threading
import zlib
from urllib.parse import urlsplit
from collections.abc import Iterator, Sequence
from typing import Any

import asyncpg

from gateway.errors import StoreError
from gateway.storage.urls import parse_postgres_url

SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
  id TEXT PRIMARY KEY, created_at DOUBLE PRECISION NOT NULL, model TEXT NOT NULL, gateway TEXT NOT NULL,
  plan TEXT, plan_revision INTEGER NOT NULL DEFAULT 0, plan_status TEXT, settings TEXT);
CREATE TABLE IF NOT EXISTS turns (
  session_id TEXT NOT NULL, id TEXT NOT NULL, seq INTEGER NOT NULL, status TEXT NOT NULL,
  user_text TEXT NOT NULL, final_text TEXT, error TEXT, model_calls INTEGER NOT NULL DEFAULT 0,
  started_at DOUBLE PRECISION NOT NULL, finished_at DOUBLE PRECISION, mode TEXT NOT NULL DEFAULT 'chat',
  settings TEXT, continuations INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (session_id, id));
CREATE TABLE IF NOT EXISTS messages (
  seq BIGSERIAL PRIMARY KEY, session_id TEXT NOT NULL, turn_id TEXT NOT NULL, body TEXT NOT NULL, message_id TEXT);
CREATE INDEX IF NOT EXISTS messages_by_session ON messages (session_id, seq);
CREATE TABLE IF NOT EXISTS tool_calls (
  session_id TEXT NOT NULL, turn_id TEXT NOT NULL, id TEXT NOT NULL, model_call INTEGER NOT NULL,
  position INTEGER NOT NULL, name TEXT NOT NULL, arguments TEXT NOT NULL, kind TEXT NOT NULL,
  effect TEXT NOT NULL, requires_approval INTEGER NOT NULL, idempotency_key TEXT NOT NULL,
  status TEXT NOT NULL, result_text TEXT, attempts INTEGER NOT NULL DEFAULT 0, wait_until DOUBLE PRECISION,
  updated_at DOUBLE PRECISION NOT NULL, cancel_reason TEXT, images TEXT, PRIMARY KEY (session_id, id));
CREATE TABLE IF NOT EXISTS approvals (
  id TEXT PRIMARY KEY, session_id TEXT NOT NULL, turn_id TEXT NOT NULL, tool_call_id TEXT NOT NULL,
  tool_name TEXT NOT NULL, arguments TEXT NOT NULL, status TEXT NOT NULL, reason TEXT,
  decided_by TEXT, created_at DOUBLE PRECISION NOT NULL, decided_at DOUBLE PRECISION, deadline DOUBLE PRECISION);
CREATE TABLE IF NOT EXISTS questions (
  id TEXT PRIMARY KEY, session_id TEXT NOT NULL, turn_id TEXT NOT NULL, tool_call_id TEXT NOT NULL,
  question TEXT NOT NULL, choices TEXT, allows_free_text INTEGER NOT NULL, status TEXT NOT NULL,
  answer TEXT, answered_by TEXT, created_at DOUBLE PRECISION NOT NULL, decided_at DOUBLE PRECISION,
  deadline DOUBLE PRECISION, kind TEXT NOT NULL DEFAULT 'ask_user', form TEXT, input_round TEXT);
CREATE TABLE IF NOT EXISTS controls (
  id BIGSERIAL PRIMARY KEY, session_id TEXT NOT NULL, turn_id TEXT, kind TEXT NOT NULL,
  text TEXT, revision INTEGER, source TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL, applied_at DOUBLE PRECISION);
CREATE INDEX IF NOT EXISTS controls_by_session ON controls (session_id, id);
CREATE TABLE IF NOT EXISTS usage (
  id BIGSERIAL PRIMARY KEY, session_id TEXT NOT NULL, turn_id TEXT NOT NULL,
  kind TEXT NOT NULL, model TEXT NOT NULL, input_tokens BIGINT NOT NULL, output_tokens BIGINT NOT NULL,
  cost DOUBLE PRECISION, at DOUBLE PRECISION NOT NULL);
CREATE INDEX IF NOT EXISTS usage_by_session ON usage (session_id, turn_id);
CREATE TABLE IF NOT EXISTS compactions (
  id BIGSERIAL PRIMARY KEY, session_id TEXT NOT NULL, turn_id TEXT NOT NULL,
  summary TEXT NOT NULL, first_seq BIGINT NOT NULL, last_seq BIGINT NOT NULL,
  replaced TEXT NOT NULL, tool_call_ids TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL);
CREATE TABLE IF NOT EXISTS events (
  id BIGSERIAL PRIMARY KEY, session_id TEXT NOT NULL, turn_id TEXT, type TEXT NOT NULL,
  data TEXT NOT NULL, at DOUBLE PRECISION NOT NULL);
CREATE INDEX IF NOT EXISTS events_by_session ON events (session_id, id);
CREATE TABLE IF NOT EXISTS queued_messages (
  seq BIGSERIAL PRIMARY KEY, id TEXT NOT NULL UNIQUE, session_id TEXT NOT NULL,
  text TEXT NOT NULL, status TEXT NOT NULL, turn_id TEXT, created_at DOUBLE PRECISION NOT NULL,
  mode TEXT NOT NULL DEFAULT 'chat');
CREATE INDEX IF NOT EXISTS queued_by_session ON queued_messages (session_id, status, seq);
CREATE TABLE IF NOT EXISTS leases (
  session_id TEXT PRIMARY KEY, replica_id TEXT NOT NULL, boot_id TEXT NOT NULL, lease_until DOUBLE PRECISION NOT NULL);
CREATE TABLE IF NOT EXISTS found_tools (
  session_id TEXT NOT NULL, name TEXT NOT NULL, definition TEXT NOT NULL, found_at DOUBLE PRECISION NOT NULL,
  PRIMARY KEY (session_id, name));
CREATE INDEX IF NOT EXISTS compactions_by_session ON compactions (session_id, last_seq);
CREATE TABLE IF NOT EXISTS host_tasks (
  key TEXT PRIMARY KEY, task_id TEXT NOT NULL, tool TEXT NOT NULL, status TEXT NOT NULL,
  updated_at DOUBLE PRECISION NOT NULL, session_id TEXT, turn_id TEXT, tool_call_id TEXT,
  next_poll_at DOUBLE PRECISION NOT NULL DEFAULT 0, polls INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS host_tasks_by_status ON host_tasks (status, next_poll_at);
CREATE INDEX IF NOT EXISTS host_tasks_by_turn ON host_tasks (session_id, turn_id);
CREATE TABLE IF NOT EXISTS host_images (
  sha256 TEXT PRIMARY KEY, mime_type TEXT NOT NULL, size_bytes BIGINT NOT NULL, data BYTEA NOT NULL,
  created_at DOUBLE PRECISION NOT NULL);
"""

# Columns added to a table after a schema was first made (they are in SCHEMA too): added to an
# older schema when it is opened, each only when missing (no table lock when nothing is to do).
ADDED_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("questions", "kind", "TEXT NOT NULL DEFAULT 'ask_user'"),
    ("questions", "form", "TEXT"),
    ("questions", "input_round", "TEXT"),
)

# The generated key an INSERT into each table returns (`lastrowid`).
_KEYS = {"messages": "seq", "events": "id", "controls": "id", "usage": "id", "compactions": "id", "queued_messages": "seq"}
_INSERT = re.compile(r"^\s*INSERT\s+(OR\s+IGNORE\s+)?INTO\s+(\w+)", re.IGNORECASE)


def is_postgres_url(target: object) -> bool:
    return isinstance(target, str) and target.split("://", 1)[0].lower() in ("postgresql", "postgres")


def translate(sql: str) -> tuple[str, str | None, bool]:
    """(the statement in PostgreSQL's dialect, the key an INSERT returns, whether it ignores conflicts)."""
    insert = _INSERT.match(sql)
    ignore = bool(insert and insert.group(1))
    if ignore:
        sql = re.sub(r"INSERT\s+OR\s+IGNORE\s+INTO", "INSERT INTO", sql, count=1, flags=re.IGNORECASE)
    sql = sql.replace("IS ?", "IS NOT DISTINCT FROM ?")
    count = 0

    def number(_: re.Match[str]) -> str:
        nonlocal count
        count += 1
        return f"${count}"

    sql = re.sub(r"\?", number, sql)
    if ignore:
        sql += " ON CONFLICT DO NOTHING"
    key = _KEYS.get(insert.group(2).lower()) if insert else None
    if key is not None:
        sql += f" RETURNING {key}"
    return sql, key, ignore


class PgCursor:
    """What the statements read of a sqlite3 cursor."""

    def __init__(self, rows: list[asyncpg.Record], lastrowid: int | None, rowcount: int) -> None:
        self._rows = rows
        self.lastrowid = lastrowid
        self.rowcount = rowcount

    def fetchone(self) -> asyncpg.Record | None:
        return self._rows[0] if self._rows else None

    def fetchall(self) -> list[asyncpg.Record]:
        return list(self._rows)

    def __iter__(self) -> Iterator[asyncpg.Record]:
        return iter(self._rows)


class PgConnection:
    """One asyncpg connection on its own thread's event loop, used like a sqlite3 connection."""

    def __init__(self, url: str) -> None:
        parsed = parse_postgres_url(url)
        self._schema = parsed.schema
        self._lock_key = zlib.crc32(f"dex-agent-store:{parsed.schema}".encode())
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="dex-agent-postgres", daemon=True)
        self._thread.start()
        try:
            self._conn: asyncpg.Connection = self._call(self._connect(parsed.dsn))
        except BaseException:
            self._stop()
            raise

    async def _connect(self, dsn: str) -> asyncpg.Connection:
        try:
            conn = await asyncpg.connect(dsn, timeout=10)
        except (OSError, asyncio.TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            where = urlsplit(dsn)
            raise StoreError(f"cannot open the session store at PostgreSQL {where.hostname}:{where.port or 5432}"
                             f"{where.path}: {exc}") from None
        await conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{self._schema}"')
        await conn.execute(f'SET search_path TO "{self._schema}"')
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", self._lock_key)
            await conn.execute(SCHEMA)
            for table, column, declaration in ADDED_COLUMNS:
                present = await conn.fetchval(
                    "SELECT 1 FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2"
                    " AND column_name = $3", self._schema, table, column)
                if not present:
                    await conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
        return conn

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def execute(self, sql: str, params: Sequence[Any] = ()) -> PgCursor:
        return self._call(self._execute(sql, tuple(params)))  # type: ignore[no-any-return]

    async def _execute(self, sql: str, params: tuple[Any, ...]) -> PgCursor:
        statement = sql.strip().upper()
        if statement == "BEGIN IMMEDIATE":
            await self._conn.execute("BEGIN")
            await self._conn.execute("SELECT pg_advisory_xact_lock($1)", self._lock_key)
            return PgCursor([], None, 0)
        translated, key, _ = translate(sql)
        if key is not None or statement.startswith(("SELECT", "WITH")) or " RETURNING " in translated:
            rows = await self._conn.fetch(translated, *params)
            last = int(rows[0][key]) if key is not None and rows else None
            return PgCursor(rows, last, len(rows))
        status = await self._conn.execute(translated, *params)
        tail = status.rsplit(" ", 1)[-1]
        return PgCursor([], None, int(tail) if tail.isdigit() else 0)

    def close(self) -> None:
        try:
            self._call(self._conn.close())
        finally:
            self._stop()

    def _stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
