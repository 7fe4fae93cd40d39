"""Unit tests of gateway/upstreams/: the HTTP transport against real loopback servers, and the
HTTP and stdio connections against in-memory transports (MockTransport, memory byte streams).

Every transport test runs against both HTTP clients: `Http11Transport` (the default) and
`AiohttpTransport`, through the `transport_class` and `transport` fixtures."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.abc
import pytest

from gateway.upstreams.http11 import Http11Transport
from gateway.upstreams.transport import AiohttpTransport

TRANSPORTS: dict[str, Any] = {"http11": Http11Transport, "aiohttp": AiohttpTransport}


@pytest.fixture
async def tg() -> AsyncIterator[anyio.abc.TaskGroup]:
    """A task group for servers started by a test; cancelled when the test ends."""
    async with anyio.create_task_group() as task_group:
        yield task_group
        task_group.cancel_scope.cancel()


@pytest.fixture(params=list(TRANSPORTS))
def transport_class(request: pytest.FixtureRequest) -> Any:
    """One of the HTTP transport classes (the test runs once per class)."""
    return TRANSPORTS[request.param]


@pytest.fixture
async def transport(transport_class: Any) -> AsyncIterator[Any]:
    """The upstream HTTP transport, closed when the test ends."""
    transport = transport_class(connect_timeout=2)
    try:
        yield transport
    finally:
        await transport.aclose()


@pytest.fixture(params=[pytest.param("asyncio", id="asyncio"), pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop")])
def both_loops(request: pytest.FixtureRequest) -> Any:
    """The transport tests run on asyncio's own event loop and on uvloop (what `serve` runs on)."""
    return request.param
