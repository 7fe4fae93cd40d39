"""Unit tests of gateway/upstreams/: the HTTP transport against real loopback servers, and the
HTTP and stdio connections against in-memory transports (MockTransport, memory byte streams)."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import anyio.abc
import pytest

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # aiohttp runs on asyncio only


@pytest.fixture
async def tg() -> AsyncIterator[anyio.abc.TaskGroup]:
    """A task group for servers started by a test; cancelled when the test ends."""
    async with anyio.create_task_group() as task_group:
        yield task_group
        task_group.cancel_scope.cancel()
