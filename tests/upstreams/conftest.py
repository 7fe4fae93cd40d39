"""Unit tests of gateway/upstreams/: the HTTP transport against real loopback servers, and the
HTTP and stdio connections against in-memory transports (MockTransport, memory byte streams)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import anyio.abc
import pytest

from gateway.upstreams.transport import AiohttpTransport


@pytest.fixture
async def tg() -> AsyncIterator[anyio.abc.TaskGroup]:
    """A task group for servers started by a test; cancelled when the test ends."""
    async with anyio.create_task_group() as task_group:
        yield task_group
        task_group.cancel_scope.cancel()


@pytest.fixture
async def transport() -> AsyncIterator[AiohttpTransport]:
    """The upstream HTTP transport, closed when the test ends."""
    transport = AiohttpTransport(connect_timeout=2)
    try:
        yield transport
    finally:
        await transport.aclose()
