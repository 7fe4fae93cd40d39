"""`storage.tables.SchemaVersion` on the stores that keep one (tasks, audit), on real SQLite and
PostgreSQL: a new database gets one version row, reopening keeps it, and a table newer than this
code is refused with a message that names the store."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

import asyncpg
import pytest

from gateway.audit import open_audit_store
from gateway.storage.database import Database, opened
from gateway.tasks import open_task_store
from tests.support.postgres import PG_URL, store_url  # noqa: F401 (the fixture: memory, SQLite, PostgreSQL)

pytestmark = pytest.mark.anyio

STORES: list[tuple[Callable[[Database], Any], str, str, str]] = [
    (open_task_store, "dex_tasks", "dex_tasks", "task store"),
    (open_audit_store, "audit_log", "dex_audit_log", "audit log"),
]


async def _versions(url: str, sqlite_table: str, postgres_table: str, *, set_to: int | None = None) -> list[int]:
    database = Database(url)
    if database.scheme == "sqlite":
        conn = sqlite3.connect(url.removeprefix("sqlite:///"))
        try:
            if set_to is not None:
                with conn:
                    conn.execute(f"UPDATE {sqlite_table}_schema SET version = ?", (set_to,))
            return [r[0] for r in conn.execute(f"SELECT version FROM {sqlite_table}_schema")]
        finally:
            conn.close()
    pg = await asyncpg.connect(PG_URL)
    try:
        table = f'"{database.postgres.schema}".{postgres_table}_schema'
        if set_to is not None:
            await pg.execute(f"UPDATE {table} SET version = $1", set_to)
        return [r[0] for r in await pg.fetch(f"SELECT version FROM {table}")]
    finally:
        await pg.close()


@pytest.mark.parametrize("store", STORES, ids=[s[3] for s in STORES])
async def test_one_row_then_a_newer_table_is_refused(store_url: str, store: tuple[Callable[[Database], Any], str, str, str]) -> None:  # noqa: F811
    open_store, sqlite_table, postgres_table, what = store
    if store_url == "memory://":
        pytest.skip("memory stores keep no schema")
    for _ in range(2):  # reopening keeps the one row
        async with Database(store_url) as database, opened(open_store(database)):
            pass
    assert await _versions(store_url, sqlite_table, postgres_table) == [1]
    await _versions(store_url, sqlite_table, postgres_table, set_to=99)
    with pytest.raises(RuntimeError, match=f"{what} schema is at version 99; this gateway knows up to 1"):
        async with Database(store_url) as database, opened(open_store(database)):
            pass
