"""Fixtures for the audit tests: a real SQLite file and the machine's PostgreSQL (a fresh schema)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.postgres import fresh_schema_url


@pytest.fixture(params=["sqlite", "postgres"])
def audit_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The gateway's database URL: a SQLite file, or a fresh PostgreSQL schema (dropped after)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'gateway.db'}"
        return
    with fresh_schema_url("audit_test") as url:
        yield url
