"""Fixtures of the chaos tests: real gateway processes killed and restarted, real example
upstreams, the official SDK client, SQLite and the machine's PostgreSQL.

Summary lines recorded with `chaos_support.report(...)` are printed at the end of the run
(terminal summary), so crash-loop counts can be quoted without `-s`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tests.chaos.chaos_support import SUMMARY_LINES  # noqa: E402
from tests.support.postgres import fresh_schema_url  # noqa: E402


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    # asyncpg (PostgreSQL schema clean-up) and the SDK client run on asyncio.
    return "asyncio"


@pytest.fixture(scope="module")
def pg_store_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """A fence store URL in a fresh PostgreSQL schema, dropped after the module."""
    with fresh_schema_url("chaos") as url:
        yield url


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if SUMMARY_LINES:
        terminalreporter.section("chaos summary")
        for line in SUMMARY_LINES:
            terminalreporter.write_line(line)
