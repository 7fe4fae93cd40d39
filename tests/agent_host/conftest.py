"""Make `tests.*` importable when pytest runs without the repo root on sys.path; the stack fixture, a store on
each backend."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.postgres import fresh_schema_url

from tests.agent_host.host_support import Stack, start_stack


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from start_stack(tmp_path_factory)


@pytest.fixture(params=["sqlite", "postgresql"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The session store's target on each backend: a SQLite file, or a fresh PostgreSQL schema
    (skipped without PostgreSQL); a contract test runs against both."""
    if request.param == "sqlite":
        yield str(tmp_path / "store.db")
    else:
        with fresh_schema_url("dex_agent_store") as url:
            yield url
