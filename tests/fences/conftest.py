"""Fixtures for the fence tests: real SQLite files, the machine's PostgreSQL, a fake clock."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fence_helpers import FakeClock
from tests.support.postgres import fresh_schema_url


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fence store URL in a fresh PostgreSQL schema, dropped afterwards."""
    with fresh_schema_url("fences_test") as url:
        yield url


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
