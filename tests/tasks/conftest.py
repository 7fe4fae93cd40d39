"""Fixtures of the task tests: store URLs (SQLite files, the machine's PostgreSQL in a fresh schema)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


from tests.support.postgres import fresh_schema_url


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A database URL in a fresh PostgreSQL schema, dropped afterwards."""
    with fresh_schema_url("tasks_test") as url:
        yield url


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "memory":
        return "memory://"
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'gateway.db'}"
    return str(request.getfixturevalue("pg_url"))
