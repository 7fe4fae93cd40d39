"""Fixtures of the replica tests: a fresh PostgreSQL schema the replicas share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.postgres import fresh_schema_url


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A database URL in a fresh PostgreSQL schema, dropped afterwards."""
    with fresh_schema_url("replicas_test") as url:
        yield url
