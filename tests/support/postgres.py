"""The machine's PostgreSQL for the tests: its URL, whether it answers, and fresh schemas.

Each test that needs PostgreSQL gets its own schema (dropped afterwards) on the server at
`DEX_TEST_POSTGRES_URL` (default: loopback, database `test`), and skips with the reason when the
server does not answer.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from contextlib import asynccontextmanager, contextmanager

import asyncpg
import pytest

PG_URL = os.environ.get("DEX_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


def schema_url(schema: str) -> str:
    """PG_URL in `schema` (the gateway's `?schema=` option)."""
    return f"{PG_URL}{'&' if '?' in PG_URL else '?'}schema={schema}"


def new_schema(label: str) -> str:
    return f"{label}_{uuid.uuid4().hex[:12]}"


async def unreachable_reason() -> str | None:
    """None when PostgreSQL answers; else why not (for pytest.skip)."""
    try:
        conn = await asyncpg.connect(PG_URL, timeout=3)
    except (OSError, asyncpg.PostgresError, asyncio.TimeoutError) as exc:
        return f"PostgreSQL unreachable at {PG_URL}: {exc!r}"
    await conn.close()
    return None


async def drop_schema(schema: str) -> None:
    conn = await asyncpg.connect(PG_URL, timeout=5)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await conn.close()


def skip_without_postgres() -> None:
    """pytest.skip when PostgreSQL does not answer (from sync code, outside an event loop)."""
    reason = asyncio.run(unreachable_reason())
    if reason:
        pytest.skip(reason)


@contextmanager
def fresh_schema_url(label: str) -> Iterator[str]:
    """A URL in a new schema, dropped afterwards; skips without PostgreSQL (sync fixtures)."""
    skip_without_postgres()
    schema = new_schema(label)
    try:
        yield schema_url(schema)
    finally:
        asyncio.run(drop_schema(schema))


@asynccontextmanager
async def fresh_schema(label: str) -> AsyncIterator[str]:
    """A new schema's name, dropped afterwards; skips without PostgreSQL (async fixtures)."""
    reason = await unreachable_reason()
    if reason:
        pytest.skip(reason)
    schema = new_schema(label)
    try:
        yield schema
    finally:
        await drop_schema(schema)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The gateway's database URL on each backend in turn: a store's contract test runs on all three
    (import this fixture into the test module)."""
    if request.param == "memory":
        yield "memory://"
    elif request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'gateway.db'}"
    else:
        with fresh_schema_url(request.module.__name__.rsplit(".", 1)[-1][:40]) as url:
            yield url
