"""MockTransport: the in-memory HttpTransport that the HTTP channel's unit tests stand on."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

from gateway.upstreams.mock_transport import (
    MockResponse,
    MockTransport,
    RequestMaybeSent,
    RequestNotSent,
    sse_event,
)
from gateway.upstreams.transport import HttpRequest

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(10)]


async def test_sync_and_async_handlers_and_recorded_requests() -> None:
    transport = MockTransport(lambda request: MockResponse.json({"got": request.body.decode()}, headers={"X-A": "1"}))
    async with transport.stream(HttpRequest("POST", "http://u/mcp", {"k": "v"}, b"hi")) as response:
        assert response.status == 200
        assert response.headers["x-a"] == "1" and response.headers.get("X-A") == "1" and "x-A" in response.headers
        assert await response.aread() == b'{"got": "hi"}'
    assert [(r.method, r.url, r.body) for r in transport.requests] == [("POST", "http://u/mcp", b"hi")]

    async def handler(request: HttpRequest) -> MockResponse:
        return MockResponse(204)

    transport = MockTransport(handler)
    async with transport.stream(HttpRequest("DELETE", "http://u/mcp")) as response:
        assert response.status == 204
    assert transport.unfinished == 0  # a body-less answer needs no read


async def test_sse_is_read_line_by_line_while_the_handler_still_writes() -> None:
    seen_first = anyio.Event()

    async def events() -> AsyncIterator[bytes]:
        yield sse_event({"n": 1}, event_id="a")
        await seen_first.wait()  # only continues once the reader has the first event
        yield b"data: tw"
        yield b"o\r\n\r\n"

    transport = MockTransport(lambda request: MockResponse.sse(events()))
    lines = []
    with anyio.fail_after(5):
        async with transport.stream(HttpRequest("POST", "http://u/mcp")) as response:
            async for line in response.aiter_lines():
                lines.append(line)
                if line.startswith("data: {"):
                    seen_first.set()
    assert lines == ["event: message", "id: a", 'data: {"n":1}', "", "data: two", ""]


async def test_simulated_failures() -> None:
    def refuse(request: HttpRequest) -> MockResponse:
        raise RequestNotSent("connect failed")

    with pytest.raises(RequestNotSent):
        async with MockTransport(refuse).stream(HttpRequest("POST", "http://u/")):
            pass

    def broke(request: HttpRequest) -> MockResponse:
        raise RequestMaybeSent("reset after the request left")

    with pytest.raises(RequestMaybeSent):
        async with MockTransport(broke).stream(HttpRequest("POST", "http://u/")):
            pass

    def mid_body() -> AsyncIterator[bytes]:
        async def gen() -> AsyncIterator[bytes]:
            yield b"data: 1\n\n"
            raise RequestMaybeSent("broke mid-body")
        return gen()

    transport = MockTransport(lambda request: MockResponse.sse(mid_body()))
    lines = []
    with pytest.raises(RequestMaybeSent, match="mid-body"):
        async with transport.stream(HttpRequest("POST", "http://u/")) as response:
            async for line in response.aiter_lines():
                lines.append(line)
    assert lines == ["data: 1", ""]
    assert transport.unfinished == 1 and transport.open_streams == 0


async def test_drain_and_close() -> None:
    transport = MockTransport(lambda request: MockResponse.sse([sse_event(1), sse_event(2)]))
    async with transport.stream(HttpRequest("POST", "http://u/")) as response:
        async for _ in response.aiter_lines():
            break
        await response.drain(1)
    assert transport.unfinished == 0
    await transport.aclose()
    with pytest.raises(RequestNotSent, match="closed"):
        async with transport.stream(HttpRequest("POST", "http://u/")):
            pass
    assert len(transport.requests) == 1
