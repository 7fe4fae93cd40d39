"""Fixtures for the fence tests: real SQLite files, the machine's PostgreSQL, a fake clock."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from fence_helpers import FakeClock

PG_URL = os.environ.get("DEX_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


@pytest.fixture
def anyio_backend() -> str:
    # asyncpg is asyncio-only.
    return "asyncio"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


async def _pg_check() -> str | None:
    try:
        conn = await asyncpg.connect(PG_URL, timeout=3)
    except (OSError, asyncpg.PostgresError, asyncio.TimeoutError) as exc:
        return f"PostgreSQL unreachable at {PG_URL}: {exc!r}"
    await conn.close()
    return None


@pytest.fixture(scope="session")
def pg_available() -> None:
    reason = asyncio.run(_pg_check())
    if reason:
        pytest.skip(reason)


async def _drop_schema(schema: str) -> None:
    conn = await asyncpg.connect(PG_URL)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await conn.close()


@pytest.fixture
def pg_url(pg_available: None) -> Iterator[str]:
    """A fence store URL in a fresh PostgreSQL schema, dropped afterwards."""
    schema = f"fences_test_{uuid.uuid4().hex[:12]}"
    sep = "&" if "?" in PG_URL else "?"
    yield f"{PG_URL}{sep}schema={schema}"
    asyncio.run(_drop_schema(schema))


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'fences.db'}"


@pytest.fixture(params=["sqlite", "postgres"])
def durable_url(request: pytest.FixtureRequest) -> str:
    return request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def any_url(request: pytest.FixtureRequest) -> str:
    if request.param == "memory":
        return "memory://"
    return request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")
