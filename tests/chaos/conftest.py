"""Fixtures of the chaos tests: real gateway processes killed and restarted, real example
upstreams, the official SDK client, SQLite and the machine's PostgreSQL.

Summary lines recorded with `chaos_support.report(...)` are printed at the end of the run
(terminal summary), so crash-loop counts can be quoted without `-s`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest


from tests.chaos.chaos_support import SUMMARY_LINES
from tests.support.postgres import fresh_schema_url


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
