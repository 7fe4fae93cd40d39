"""Fixtures for every test: the gateway runs on asyncio (uvloop, aiohttp, asyncpg, aioboto3), so
anyio tests do too. The repository root is on sys.path through pyproject's `pythonpath`."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"
