"""Fixtures of the task tests: store URLs (SQLite files, the machine's PostgreSQL in a fresh schema)."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

PG_URL = os.environ.get("DEX_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # asyncpg is asyncio-only


async def _pg_reason() -> str | None:
    try:
        conn = await asyncpg.connect(PG_URL, timeout=3)
    except (OSError, asyncpg.PostgresError, asyncio.TimeoutError) as exc:
        return f"PostgreSQL unreachable at {PG_URL}: {exc!r}"
    await conn.close()
    return None


async def _drop_schema(schema: str) -> None:
    conn = await asyncpg.connect(PG_URL)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await conn.close()


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A database URL in a fresh PostgreSQL schema, dropped afterwards."""
    reason = asyncio.run(_pg_reason())
    if reason:
        pytest.skip(reason)
    schema = f"tasks_test_{uuid.uuid4().hex[:12]}"
    yield f"{PG_URL}{'&' if '?' in PG_URL else '?'}schema={schema}"
    asyncio.run(_drop_schema(schema))


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "memory":
        return "memory://"
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'gateway.db'}"
    return str(request.getfixturevalue("pg_url"))
