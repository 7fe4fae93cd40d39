"""The HTTP transports' caps and edges against real loopback peers, both clients: the response
size cap, the connection cap, a request head that a header value would split, flow control of an
unread body, interim 1xx answers, and idle connections closed on their own after the expiry."""

from __future__ import annotations

import time
from typing import Any

import anyio
import anyio.abc
import pytest

from gateway.errors import LocalLimitReached, RequestNotSent, ResponseTooLarge
from gateway.upstreams.http11 import Http11Transport
from gateway.upstreams.transport import HttpRequest
from tests.upstreams.loopback import RawServer, ok, raw_server, wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


@pytest.fixture
def anyio_backend(both_loops: Any) -> Any:
    return both_loops


async def answer(stream: anyio.abc.SocketStream, server: RawServer, reply: bytes) -> None:
    buffer = bytearray()
    while await server.read_request(stream, buffer):
        await stream.send(reply)


@pytest.mark.parametrize("framing", ["until-close", "chunked"])
async def test_a_body_over_max_response_bytes_is_too_large_and_the_connection_goes(
    tg: anyio.abc.TaskGroup, transport_class: Any, framing: str
) -> None:
    """2,000 bytes of a longer body arrive, the cap is 1,000: ResponseTooLarge, and the half-read
    connection is closed (the server sees our EOF); the next request takes a new one."""
    if framing == "until-close":
        partial = b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n" + b"x" * 2000
    else:
        partial = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n7d0\r\n" + b"x" * 2000 + b"\r\n"

    async def handler(stream: anyio.abc.SocketStream, server: RawServer) -> None:
        buffer = bytearray()
        if server.connections == 1:
            if await server.read_request(stream, buffer):
                await stream.send(partial)
                await server.read_request(stream, buffer)  # until the client closes
        else:
            await answer(stream, server, ok())

    server = await raw_server(tg, handler)
    transport = transport_class(connect_timeout=2, max_response_bytes=1000)
    try:
        with pytest.raises(ResponseTooLarge, match="over 1000"):
            async with transport.stream(HttpRequest("POST", server.url, {}, b"{}")) as response:
                await response.aread()
        await wait_for(lambda: server.peer_eofs == 1)
        async with transport.stream(HttpRequest("POST", server.url, {}, b"{}")) as response:
            assert await response.aread() == b'{"ok":true}'
    finally:
        await transport.aclose()
    assert server.connections == 2


async def test_a_declared_length_over_max_response_bytes_is_refused_before_the_body(
    tg: anyio.abc.TaskGroup, transport_class: Any
) -> None:
    server = await raw_server(tg, lambda stream, server: answer(stream, server, ok(b"x" * 5000)))
    transport = transport_class(connect_timeout=2, max_response_bytes=1000)
    try:
        with pytest.raises(ResponseTooLarge, match="declares 5000 bytes, over 1000"):
            async with transport.stream(HttpRequest("POST", server.url, {}, b"{}")) as response:
                await response.aread()
    finally:
        await transport.aclose()


async def test_calls_past_max_connections_wait_then_fail_as_not_sent(tg: anyio.abc.TaskGroup, transport_class: Any) -> None:
    release = anyio.Event()

    async def handler(stream: anyio.abc.SocketStream, server: RawServer) -> None:
        if await server.read_request(stream, bytearray()):
            await release.wait()
            await stream.send(ok())

    server = await raw_server(tg, handler)
    transport = transport_class(connect_timeout=2, max_connections=1, pool_timeout=0.2)
    try:
        async with anyio.create_task_group() as group:

            async def first() -> None:
                async with transport.stream(HttpRequest("POST", server.url, {}, b"{}")) as response:
                    await response.aread()

            group.start_soon(first)
            await wait_for(lambda: server.requests == 1)
            start = time.monotonic()
            with pytest.raises(LocalLimitReached, match="all 1 connections to the upstream"):
                async with transport.stream(HttpRequest("POST", server.url, {}, b"{}")):
                    pass
            assert time.monotonic() - start >= 0.19
            release.set()
    finally:
        await transport.aclose()
    assert server.requests == 1 and server.connections == 1


@pytest.mark.parametrize("value", ["a\r\nx-injected: 1", "a\nb", "a\rb", "a\0b"])
async def test_a_header_value_that_would_split_the_head_is_refused_unsent(tg: anyio.abc.TaskGroup, value: str) -> None:
    server = await raw_server(tg, lambda stream, server: answer(stream, server, ok()))
    transport = Http11Transport(connect_timeout=2)
    try:
        with pytest.raises(RequestNotSent, match="request header 'x-note'"):
            async with transport.stream(HttpRequest("POST", server.url, {"x-note": value}, b"{}")):
                pass
        with pytest.raises(RequestNotSent, match="header name 'bad name'"):
            async with transport.stream(HttpRequest("POST", server.url, {"bad name": "v"}, b"{}")):
                pass
    finally:
        await transport.aclose()
    assert server.connections == 0


async def test_a_default_header_is_checked_as_well(tg: anyio.abc.TaskGroup) -> None:
    server = await raw_server(tg, lambda stream, server: answer(stream, server, ok()))
    transport = Http11Transport(connect_timeout=2, default_headers={"Authorization": "Bearer a\r\nx: y"})
    try:
        with pytest.raises(RequestNotSent, match="request header 'authorization'"):
            async with transport.stream(HttpRequest("POST", server.url, {}, b"{}")):
                pass
    finally:
        await transport.aclose()
    assert server.connections == 0


async def test_an_unread_body_pauses_reading_and_arrives_whole(tg: anyio.abc.TaskGroup, transport: Any) -> None:
    """32 MiB sent while nobody reads: the client stops reading from the socket (the server's
    sends then block on a full window) and still delivers every byte once read."""
    size = 32 * 1024 * 1024  # past what the loopback socket buffers hold
    sent = anyio.Event()

    async def handler(stream: anyio.abc.SocketStream, server: RawServer) -> None:
        if await server.read_request(stream, bytearray()):
            await stream.send(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % size)
            for _ in range(size // 65536):
                await stream.send(b"y" * 65536)
            sent.set()
            await anyio.sleep_forever()

    server = await raw_server(tg, handler)
    async with transport.stream(HttpRequest("GET", server.url)) as response:
        await anyio.sleep(0.3)
        assert not sent.is_set()  # the socket buffers are full: the client is not reading
        body = await response.aread()
    assert len(body) == size and sent.is_set()


async def test_interim_answers_are_skipped(tg: anyio.abc.TaskGroup, transport: Any) -> None:
    reply = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n" + ok(b'{"real":1}')
    server = await raw_server(tg, lambda stream, server: answer(stream, server, reply))
    for _ in range(2):
        async with transport.stream(HttpRequest("POST", server.url, {}, b"{}")) as response:
            assert response.status == 200
            assert "link" not in response.headers
            assert await response.aread() == b'{"real":1}'
    assert server.connections == 1


async def test_an_idle_connection_is_closed_at_the_expiry_without_a_next_request(
    tg: anyio.abc.TaskGroup, transport_class: Any
) -> None:
    server = await raw_server(tg, lambda stream, server: answer(stream, server, ok()))
    transport = transport_class(connect_timeout=2, keepalive_expiry=0.2)
    try:
        async with transport.stream(HttpRequest("POST", server.url, {}, b"{}")) as response:
            await response.aread()
        await wait_for(lambda: server.peer_eofs == 1, timeout=3)  # we closed it, not the server
    finally:
        await transport.aclose()


async def test_a_request_authorization_header_wins_over_url_credentials(tg: anyio.abc.TaskGroup) -> None:
    heads: list[bytes] = []

    async def handler(stream: anyio.abc.SocketStream, server: RawServer) -> None:
        data = await stream.receive()
        heads.append(data)
        await stream.send(ok(extra=b"connection: close\r\n"))

    server = await raw_server(tg, handler)
    transport = Http11Transport(connect_timeout=2)
    try:
        url = server.url.replace("http://", "http://u:p@")
        async with transport.stream(HttpRequest("GET", url, {"Authorization": "Bearer t"})) as response:
            await response.aread()
        async with transport.stream(HttpRequest("GET", url)) as response:
            await response.aread()
    finally:
        await transport.aclose()
    assert heads[0].lower().count(b"authorization:") == 1 and b"authorization: Bearer t\r\n" in heads[0]
    assert b"authorization: Basic dTpw\r\n" in heads[1]
    assert heads[1].startswith(b"GET /mcp HTTP/1.1\r\nhost: 127.0.0.1:%d\r\n" % server.port)


async def test_an_endless_response_head_fails_past_its_cap(tg: anyio.abc.TaskGroup) -> None:
    """An upstream that keeps sending header lines (never the blank line): the exchange fails once
    the head is over MAX_HEAD_BYTES, as maybe sent, and the connection goes; nothing waits forever."""
    from gateway.errors import RequestMaybeSent
    from gateway.upstreams.http11 import MAX_HEAD_BYTES

    closed = anyio.Event()

    async def handler(stream: anyio.abc.SocketStream, server: RawServer) -> None:
        buffer = bytearray()
        if await server.read_request(stream, buffer):
            await stream.send(b"HTTP/1.1 200 OK\r\n")
            line = b"x-pad: " + b"a" * 1000 + b"\r\n"
            try:
                while True:  # an endless head, until the client hangs up
                    await stream.send(line)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                closed.set()

    server = await raw_server(tg, handler)
    transport = Http11Transport(connect_timeout=2)
    try:
        with pytest.raises(RequestMaybeSent, match=f"head is over {MAX_HEAD_BYTES} bytes"):
            async with transport.stream(HttpRequest("POST", server.url, {}, b"{}")) as response:
                await response.aread()
        with anyio.fail_after(5):
            await closed.wait()  # the gateway's side of the connection is gone
    finally:
        await transport.aclose()
