"""The HTTP transports' "did any byte of this request leave" signal, against real loopback peers:
RequestNotSent only when provably nothing was sent, RequestMaybeSent otherwise, and never a
transport-level re-send of a POST (a stale keep-alive connection included). Each test runs
against both transports (tests/upstreams/conftest.py)."""

from __future__ import annotations

import socket
import sys
import time
from typing import Any

import aiohttp
import aiohttp.client
import anyio
import anyio.abc
import pytest
from aiohttp.abc import AbstractResolver

from gateway.errors import RequestMaybeSent, RequestNotSent
from gateway.upstreams import transport as transport_module
from gateway.upstreams.http11 import Http11Transport
from gateway.upstreams.transport import AiohttpTransport, HttpRequest
from tests.upstreams.loopback import RawServer, ok, raw_server, reset, wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


@pytest.fixture
def anyio_backend(both_loops: Any) -> Any:
    return both_loops


async def post(transport: Any, url: str, body: bytes = b"{}") -> bytes:
    async with transport.stream(HttpRequest("POST", url, {"content-type": "application/json"}, body)) as response:
        return await response.aread()


def free_port() -> int:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nobody listens there now
    return int(port)


# -- provably not sent ------------------------------------------------------------------------


async def test_connection_refused_is_not_sent(transport: Any) -> None:
    with pytest.raises(RequestNotSent, match="cannot connect to 127.0.0.1"):
        await post(transport, f"http://127.0.0.1:{free_port()}/mcp")


async def test_connect_timeout_is_not_sent(transport_class: Any) -> None:
    # A listener with a full backlog and no accept(): SYNs go unanswered, connect() hangs.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    transport = transport_class(connect_timeout=0.3)
    try:
        for _ in range(4):
            filler = socket.socket()
            filler.setblocking(False)
            try:
                filler.connect(("127.0.0.1", port))
            except BlockingIOError:
                pass
            fillers.append(filler)
        start = time.monotonic()
        with pytest.raises(RequestNotSent, match="timeout|timed out"):
            await post(transport, f"http://127.0.0.1:{port}/mcp")
        assert time.monotonic() - start < 2
    finally:
        await transport.aclose()
        for filler in fillers:
            filler.close()
        listener.close()


class FailingResolver(AbstractResolver):
    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET) -> Any:
        raise OSError(-2, "Name or service not known")

    async def close(self) -> None:
        return None


async def failing_resolve(host: str, port: int) -> str:
    raise OSError(-2, "Name or service not known")


async def test_dns_failure_is_not_sent(transport_class: Any) -> None:
    if transport_class is AiohttpTransport:
        transport = AiohttpTransport(connect_timeout=2, resolver=FailingResolver())
    else:
        transport = Http11Transport(connect_timeout=2, resolve=failing_resolve)
    try:
        with pytest.raises(RequestNotSent, match="Name or service not known"):
            await post(transport, "http://upstream.invalid/mcp")
    finally:
        await transport.aclose()


@pytest.mark.parametrize("url", ["ftp://x/", "http:///nohost", "http://127.0.0.1:notaport/", "mcp"])
async def test_invalid_urls_are_not_sent(transport: Any, url: str) -> None:
    with pytest.raises(RequestNotSent, match="invalid URL"):
        await post(transport, url)


async def test_closed_transport_is_not_sent(tg: anyio.abc.TaskGroup, transport_class: Any) -> None:
    server = await raw_server(tg, answer_forever)
    transport = transport_class(connect_timeout=2)
    assert await post(transport, server.url) == b'{"ok":true}'
    await transport.aclose()
    with pytest.raises(RequestNotSent, match="closed"):
        await post(transport, server.url)
    assert server.requests == 1


async def answer_forever(stream: anyio.abc.SocketStream, server: RawServer) -> None:
    buffer = bytearray()
    while await server.read_request(stream, buffer):
        await stream.send(ok())


# -- a stale keep-alive connection ------------------------------------------------------------


async def test_idle_connection_closed_by_the_server_is_replaced_not_maybe_sent(
    tg: anyio.abc.TaskGroup, transport: Any
) -> None:
    """The server closes idle keep-alive connections (as uvicorn and Node do after 5 s): the
    next request goes on a fresh connection and reaches the server exactly once."""

    async def handler(stream: anyio.abc.SocketStream, server: RawServer) -> None:
        if await server.read_request(stream, bytearray()):
            await stream.send(ok())  # keep-alive answer, then the idle timeout closes it
        server.event(f"closed-{server.connections}").set()

    server = await raw_server(tg, handler)
    for n in (1, 2, 3):
        assert await post(transport, server.url) == b'{"ok":true}'
        await server.event(f"closed-{n}").wait()
    assert server.requests == 3 and server.connections == 3


async def test_fin_the_loop_has_not_read_yet_is_caught_by_the_probe(
    tg: anyio.abc.TaskGroup, transport: Any
) -> None:
    """The server's FIN sits in the kernel while the event loop has not processed it (simulated by
    pausing reads on the pooled socket): aiohttp still thinks the connection is fine; the
    liveness probe takes another one, so nothing is written to the dead socket."""

    server, pooled = await _closed_while_unread(tg, transport)
    await wait_for(lambda: transport_module._peer_gone(_Conn(pooled[0])))  # the FIN is in our kernel
    assert not pooled[0].is_closing()  # the transport has not noticed
    assert await post(transport, server.url) == b'{"ok":true}'
    assert server.requests == 2 and server.connections == 2


async def _closed_while_unread(tg: anyio.abc.TaskGroup, transport: Any) -> tuple[RawServer, list[Any]]:
    """One answered request, then the server closes the pooled connection while our event loop
    does not read it (reads paused): the FIN waits in the kernel. The server and the pool."""

    async def handler(stream: anyio.abc.SocketStream, server: RawServer) -> None:
        if await server.read_request(stream, bytearray()):
            await stream.send(ok())
            await server.event("pause").wait()
        server.event(f"closed-{server.connections}").set()

    server = await raw_server(tg, handler)
    assert await post(transport, server.url) == b'{"ok":true}'
    pooled = _pooled_sockets(transport)
    assert len(pooled) == 1
    pooled[0].pause_reading()
    server.event("pause").set()
    await server.event("closed-1").wait()
    return server, pooled


def _pooled_sockets(transport: Any) -> list[Any]:
    """The asyncio transports of the idle pooled connections (each client keeps its own pool)."""
    if isinstance(transport, AiohttpTransport):
        return [proto.transport for protos in transport._client().connector._conns.values() for proto, _ in protos]  # type: ignore[union-attr]
    return [conn.transport for conns in transport._idle.values() for conn in conns]


class _Conn:
    """The one attribute `_peer_gone` reads of a pooled connection."""

    def __init__(self, socket_transport: Any) -> None:
        self.transport = socket_transport


async def test_without_the_probe_that_race_is_maybe_sent_and_never_resent(
    tg: anyio.abc.TaskGroup, transport: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The inherent HTTP/1.1 race (the server's close crosses our request): with the probe off
    the POST is written to the dead socket. It is reported maybe-sent, and aiohttp does not
    quietly send it again on a fresh connection."""

    def probe_sees_nothing(connection: Any) -> bool:
        connection.transport.resume_reading()  # the loop reads again, after the write below
        return False

    # Where the transport under test looks the probe up (http11 imports it from transport).
    monkeypatch.setattr(sys.modules[type(transport).__module__], "_peer_gone", probe_sees_nothing)

    server, _ = await _closed_while_unread(tg, transport)
    with pytest.raises(RequestMaybeSent):
        await post(transport, server.url)
    assert server.connections == 1  # no second connection: no re-send


# -- maybe sent, never re-sent ----------------------------------------------------------------


def test_aiohttp_never_retries_a_post_by_itself() -> None:
    # aiohttp re-sends a request on a broken persistent connection only for these methods.
    assert "POST" not in aiohttp.client.IDEMPOTENT_METHODS


async def test_reset_after_reading_the_request_is_maybe_sent(tg: anyio.abc.TaskGroup, transport: Any) -> None:
    async def handler(stream: anyio.abc.SocketStream, server: RawServer) -> None:
        if await server.read_request(stream, bytearray()):
            reset(stream)

    server = await raw_server(tg, handler)
    with pytest.raises(RequestMaybeSent):
        await post(transport, server.url, b'{"id":1}')
    assert server.requests == 1 and server.connections == 1


async def test_close_without_an_answer_is_maybe_sent(tg: anyio.abc.TaskGroup, transport: Any) -> None:
    async def handler(stream: anyio.abc.SocketStream, server: RawServer) -> None:
        await server.read_request(stream, bytearray())  # then a clean close (FIN)

    server = await raw_server(tg, handler)
    # aiohttp names its exception (ServerDisconnected); Http11Transport says what happened.
    with pytest.raises(RequestMaybeSent, match="ServerDisconnected|closed the connection without an answer"):
        await post(transport, server.url)
    assert server.requests == 1 and server.connections == 1


@pytest.mark.parametrize("how", ["reset", "fin", "partial-head"])
async def test_a_reused_connection_that_breaks_after_the_request_is_never_resent(
    tg: anyio.abc.TaskGroup, transport: Any, how: str
) -> None:
    """A server that reads the second request on a kept-alive connection and dies without an
    answer looks like a stale connection; the request was delivered, so it must not be sent again."""

    async def handler(stream: anyio.abc.SocketStream, server: RawServer) -> None:
        buffer = bytearray()
        if await server.read_request(stream, buffer):
            await stream.send(ok())
        if await server.read_request(stream, buffer):
            if how == "partial-head":
                await stream.send(b"HTTP/1.1 200")
            if how != "fin":
                reset(stream)

    server = await raw_server(tg, handler)
    assert await post(transport, server.url) == b'{"ok":true}'
    with pytest.raises(RequestMaybeSent):
        await post(transport, server.url)
    assert server.requests == 2 and server.connections == 1


async def test_eof_mid_body_is_maybe_sent(tg: anyio.abc.TaskGroup, transport: Any) -> None:
    async def handler(stream: anyio.abc.SocketStream, server: RawServer) -> None:
        if await server.read_request(stream, bytearray()):
            await stream.send(b'HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{"partial":')

    server = await raw_server(tg, handler)
    async with transport.stream(HttpRequest("POST", server.url, {}, b"{}")) as response:
        assert response.status == 200
        with pytest.raises(RequestMaybeSent, match="connection broke while reading"):
            await response.aread()


async def test_malformed_response_is_maybe_sent(tg: anyio.abc.TaskGroup, transport: Any) -> None:
    async def handler(stream: anyio.abc.SocketStream, server: RawServer) -> None:
        if await server.read_request(stream, bytearray()):
            await stream.send(b"SMTP ready\r\n\r\n")

    server = await raw_server(tg, handler)
    with pytest.raises(RequestMaybeSent):
        await post(transport, server.url)


async def test_redirects_are_not_followed(tg: anyio.abc.TaskGroup, transport: Any) -> None:
    async def handler(stream: anyio.abc.SocketStream, server: RawServer) -> None:
        buffer = bytearray()
        while await server.read_request(stream, buffer):
            await stream.send(b"HTTP/1.1 307 Temporary Redirect\r\nlocation: /mcp/\r\ncontent-length: 0\r\n\r\n")

    server = await raw_server(tg, handler)
    async with transport.stream(HttpRequest("POST", server.url, {}, b"{}")) as response:
        assert response.status == 307
    assert server.requests == 1  # a followed 307 would have sent the POST body again


# -- cancellation closes the socket -----------------------------------------------------------


async def silent(stream: anyio.abc.SocketStream, server: RawServer, head: bytes = b"") -> None:
    buffer = bytearray()
    if await server.read_request(stream, buffer):
        if head:
            await stream.send(head)
        await server.read_request(stream, buffer)  # returns False once the client closes


@pytest.mark.parametrize("stage", ["head", "lines", "aread"])
async def test_cancel_mid_exchange_closes_the_socket(tg: anyio.abc.TaskGroup, transport: Any, stage: str) -> None:
    head = {
        "head": b"",
        "lines": b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                 b"e\r\ndata: {\"a\":1}\n\r\n",
        "aread": b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n12345",
    }[stage]  # fmt: skip

    async def handler(stream: anyio.abc.SocketStream, server: RawServer) -> None:
        await silent(stream, server, head)

    server = await raw_server(tg, handler)
    lines: list[str] = []
    with pytest.raises(TimeoutError):
        with anyio.fail_after(0.3):
            async with transport.stream(HttpRequest("POST", server.url, {}, b"{}")) as response:
                if stage == "lines":
                    async for line in response.aiter_lines():
                        lines.append(line)
                else:
                    await response.aread()
    if stage == "lines":
        assert lines == ['data: {"a":1}']
    await wait_for(lambda: server.peer_eofs == 1)  # the server saw our socket close
    assert server.requests == 1
