"""Cancellation of the turn vs the MCP client's own cancel scope, with the real SDK client.

The SDK raises a bare `CancelledError` out of an exchange whose connection broke when the
exchange is entered the way the host used to enter it (`__aenter__`, then `__aexit__(None, ...)`
in a `finally`): that is the escape the issue saw. `outside_transport_cancels` must turn it into
`TransportCancelled`, and must let the host's own cancellation (a cancelled scope around the
turn, or a native task cancel as Ctrl-C delivers it) through untouched.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from agent_host.gateway_client.cancel_guard import TransportCancelled, outside_transport_cancels
from agent_host.gateway_client.tools import CallRequest, GatewayToolSource
from gateway.conventions.keys import Effect
from tests.agent_host.cutting_proxy import CuttingProxy
from tests.agent_host.host_support import Stack, start_stack
from tests.support.servers import count_executions

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from start_stack(tmp_path_factory)


@pytest.fixture
async def cutting(stack: Stack) -> AsyncIterator[CuttingProxy]:
    async with CuttingProxy("127.0.0.1", stack.gateway_port) as proxy:
        yield proxy


async def _exchange_as_the_host_used_to(url: str) -> types.CallToolResult:
    http = httpx2.AsyncClient()
    client = Client(streamable_http_client(url, http_client=http), mode="legacy", cache=None)
    await client.__aenter__()
    try:
        return await client.call_tool("payments__get_balance", {"account": "guard"})
    finally:
        try:
            await client.__aexit__(None, None, None)
        except Exception:  # noqa: BLE001 - as the old host did: closing errors were logged and dropped
            pass
        await http.aclose()


async def test_the_sdk_raises_a_bare_cancelled_error_when_the_connection_is_cut(cutting: CuttingProxy) -> None:
    escaped: list[BaseException] = []

    async def unguarded() -> None:
        try:
            await _exchange_as_the_host_used_to(cutting.url())
        except BaseException as exc:  # noqa: BLE001 - the point: what escapes, Exception or not
            escaped.append(exc)

    # In a task of its own, so the stray cancellation cannot touch the test's task.
    await asyncio.get_running_loop().create_task(unguarded())
    assert cutting.cuts == 1
    assert len(escaped) == 1 and isinstance(escaped[0], asyncio.CancelledError), escaped
    assert not isinstance(escaped[0], Exception)


async def test_the_guard_turns_it_into_an_ordinary_exception(cutting: CuttingProxy) -> None:
    with pytest.raises(TransportCancelled):
        await outside_transport_cancels(lambda: _exchange_as_the_host_used_to(cutting.url()))
    assert cutting.cuts == 1


async def _slow_read(source: GatewayToolSource, key: str, counted: list[int]) -> None:
    async def on_attempt(attempt: int) -> None:
        counted.append(attempt)

    await source.call(CallRequest("payments__sleep", {"seconds": 1.5}, key, Effect.READ), on_attempt)


async def test_cancelling_the_turn_is_not_a_transport_cancel(stack: Stack) -> None:
    """A cancelled scope around the call: the cancellation propagates, no attempt is re-sent."""
    source = GatewayToolSource(stack.gateway_url)
    counted: list[int] = []
    with anyio.move_on_after(0.7) as scope:
        await _slow_read(source, "guard/turn-1/scope", counted)
    assert scope.cancelled_caught and counted == [1]
    await anyio.sleep(1.5)
    assert count_executions(stack.state_dir, tool="sleep", key="guard/turn-1/scope") == 1


async def test_a_native_task_cancel_like_ctrl_c_propagates(stack: Stack) -> None:
    source = GatewayToolSource(stack.gateway_url)
    counted: list[int] = []
    task = asyncio.get_running_loop().create_task(_slow_read(source, "guard/turn-1/native", counted))
    await anyio.sleep(0.7)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert counted == [1]
    await anyio.sleep(1.5)
    assert count_executions(stack.state_dir, tool="sleep", key="guard/turn-1/native") == 1


async def test_the_host_source_retries_a_cut_read_and_counts_each_attempt(stack: Stack, cutting: CuttingProxy) -> None:
    source = GatewayToolSource(cutting.url())
    counted: list[int] = []

    async def on_attempt(attempt: int) -> None:
        counted.append(attempt)

    request = CallRequest("payments__get_balance", {"account": "g"}, "guard/turn-1/read", Effect.READ)
    result = await source.call(request, on_attempt)
    assert result.status.value == "failed" and result.attempts == 3 and counted == [1, 2, 3]
    assert cutting.cuts == 3
    assert count_executions(stack.state_dir, tool="get_balance", key="guard/turn-1/read") == 3
