"""The HTTP transports (both, tests/upstreams/conftest.py) against well-behaved loopback servers: requests and answers on the wire,
keep-alive reuse and expiry, line-by-line streaming, and which connections go back to the pool."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.abc
import pytest
from aiohttp import web

from gateway.upstreams.transport import HttpRequest, iter_lines
from tests.upstreams.loopback import RawServer, WebServer, raw_server, web_server

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]


@pytest.fixture
def anyio_backend(both_loops: Any) -> Any:
    return both_loops

routes = web.RouteTableDef()


@routes.route("*", "/echo")
async def echo(request: web.Request) -> web.Response:
    body = await request.read()
    delay = float(request.query.get("delay", "0"))
    if delay:
        await anyio.sleep(delay)
    return web.json_response({"echo": json.loads(body) if body else None, "method": request.method},
                             headers={"set-cookie": "session=abc; Path=/"})


@routes.route("*", "/headers")
async def headers(request: web.Request) -> web.Response:
    return web.json_response({k.lower(): v for k, v in request.headers.items()})


@routes.route("*", "/status/{code}")
async def status(request: web.Request) -> web.Response:
    return web.Response(status=int(request.match_info["code"]))


@routes.get("/chunked")
async def chunked(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse()
    response.enable_chunked_encoding()
    await response.prepare(request)
    for i in range(5):
        await response.write(f"piece-{i};".encode())
    await response.write_eof()
    return response


@routes.get("/big")
async def big(request: web.Request) -> web.Response:
    return web.Response(body=b"line\n" * 400_000, content_type="text/plain")  # 2 MB


@routes.post("/close")
async def close(request: web.Request) -> web.Response:
    return web.json_response({"ok": True}, headers={"connection": "close"})


@routes.get("/gzip")
async def gzip(request: web.Request) -> web.Response:
    return web.Response(body=b"\x1f\x8b not really gzip", headers={"content-encoding": "gzip"})


@pytest.fixture
async def server() -> AsyncIterator[WebServer]:
    async with web_server(routes) as running:
        yield running


async def post_json(transport: Any, url: str, payload: object) -> tuple[int, object]:
    request = HttpRequest("POST", url, {"content-type": "application/json"}, json.dumps(payload).encode())
    async with transport.stream(request) as response:
        return response.status, json.loads(await response.aread())


async def test_json_post_round_trip_keeps_one_connection(server: WebServer, transport: Any) -> None:
    for i in range(50):
        payload = {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "ünï"}}
        assert await post_json(transport, f"{server.url}/echo", payload) == (200, {"echo": payload, "method": "POST"})
    assert len(server.ports) == 50 and server.connections == 1


async def test_request_headers_on_the_wire(server: WebServer, transport_class: Any) -> None:
    transport = transport_class(connect_timeout=2, default_headers={"Authorization": "Bearer a", "X-Team": "dex"})
    try:
        await post_json(transport, f"{server.url}/echo", {})  # its answer sets a cookie
        request = HttpRequest("POST", f"{server.url}/headers?x=1", {"x-team": "override"}, b"{}")
        async with transport.stream(request) as response:
            seen = json.loads(await response.aread())
            assert response.headers["content-type"].startswith("application/json")
            assert response.headers["Content-Type"] == response.headers["content-type"]
    finally:
        await transport.aclose()
    assert seen["host"] == server.url.removeprefix("http://")
    assert seen["user-agent"] == "dex-mcp-gateway"
    assert seen["authorization"] == "Bearer a"
    assert seen["x-team"] == "override"
    assert seen["content-length"] == "2"
    assert "cookie" not in seen  # no cookie jar
    assert "accept-encoding" not in seen  # we never ask for compression...


async def test_no_automatic_decompression(server: WebServer, transport: Any) -> None:
    async with transport.stream(HttpRequest("GET", f"{server.url}/gzip")) as response:
        assert await response.aread() == b"\x1f\x8b not really gzip"  # ...and never decode it


async def test_concurrent_requests_use_their_own_connections(server: WebServer, transport: Any) -> None:
    results: dict[int, object] = {}

    async def one(i: int) -> None:
        results[i] = await post_json(transport, f"{server.url}/echo?delay=0.2", {"i": i})

    async with anyio.create_task_group() as task_group:
        for i in range(20):
            task_group.start_soon(one, i)
    assert results == {i: (200, {"echo": {"i": i}, "method": "POST"}) for i in range(20)}
    assert server.connections == 20  # overlapping requests: no sharing, no pipelining


@pytest.mark.parametrize("code", [202, 204])
async def test_body_less_responses_keep_the_connection(server: WebServer, transport: Any, code: int) -> None:
    async with transport.stream(HttpRequest("POST", f"{server.url}/status/{code}", {}, b"{}")) as response:
        assert response.status == code
        assert await response.aread() == b""
    async with transport.stream(HttpRequest("POST", f"{server.url}/status/{code}", {}, b"{}")) as response:
        assert response.status == code  # not read: complete anyway
    await post_json(transport, f"{server.url}/echo", {})
    assert server.connections == 1


async def test_chunked_response(server: WebServer, transport: Any) -> None:
    async with transport.stream(HttpRequest("GET", f"{server.url}/chunked")) as response:
        assert response.headers.get("transfer-encoding") == "chunked"
        assert await response.aread() == b"".join(f"piece-{i};".encode() for i in range(5))
    await post_json(transport, f"{server.url}/echo", {})
    assert server.connections == 1


async def test_sse_lines_arrive_as_they_are_sent(tg: anyio.abc.TaskGroup, transport: Any) -> None:
    """The server sends the second event only after the client has seen the first line: a
    transport that buffered the stream would hang here."""
    first_line_seen = anyio.Event()

    async def handler(stream: anyio.abc.SocketStream, server: RawServer) -> None:
        await server.read_request(stream, bytearray())
        await stream.send(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        event = b'event: message\ndata: {"i": 0}\n\n'
        await stream.send(b"%x\r\n%s\r\n" % (len(event), event))
        await first_line_seen.wait()
        event = b'data: {"done": true}\n\n'
        await stream.send(b"%x\r\n%s\r\n0\r\n\r\n" % (len(event), event))
        await anyio.sleep_forever()

    server = await raw_server(tg, handler)
    lines = []
    with anyio.fail_after(5):
        async with transport.stream(HttpRequest("POST", server.url, {"accept": "text/event-stream"}, b"{}")) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            async for line in response.aiter_lines():
                lines.append(line)
                first_line_seen.set()
    assert lines == ["event: message", 'data: {"i": 0}', "", 'data: {"done": true}', ""]


async def test_partially_read_response_is_not_reused(server: WebServer, transport: Any) -> None:
    async with transport.stream(HttpRequest("GET", f"{server.url}/big")) as response:
        async for line in response.aiter_lines():
            assert line == "line"
            break
    await post_json(transport, f"{server.url}/echo", {})
    assert server.connections == 2


async def test_drain_reads_the_rest_so_the_connection_is_reused(server: WebServer, transport: Any) -> None:
    async with transport.stream(HttpRequest("GET", f"{server.url}/big")) as response:
        async for _ in response.aiter_lines():
            break
        await response.drain(5)
    await post_json(transport, f"{server.url}/echo", {})
    assert server.connections == 1


async def test_connection_close_from_the_server_is_not_reused(server: WebServer, transport: Any) -> None:
    assert await post_json(transport, f"{server.url}/close", {}) == (200, {"ok": True})
    await post_json(transport, f"{server.url}/echo", {})
    assert server.connections == 2


async def test_idle_connections_expire(server: WebServer, transport_class: Any) -> None:
    transport = transport_class(connect_timeout=2, keepalive_expiry=0.1)
    try:
        await post_json(transport, f"{server.url}/echo", {})
        await post_json(transport, f"{server.url}/echo", {})
        await anyio.sleep(0.3)
        await post_json(transport, f"{server.url}/echo", {})
    finally:
        await transport.aclose()
    assert server.connections == 2


async def test_close_delimited_body(tg: anyio.abc.TaskGroup, transport: Any) -> None:
    async def handler(stream: anyio.abc.SocketStream, server: RawServer) -> None:
        if await server.read_request(stream, bytearray()):
            await stream.send(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n")
            await stream.send(b'{"whole":')
            await stream.send(b'"body"}')

    server = await raw_server(tg, handler)
    async with transport.stream(HttpRequest("POST", server.url, {}, b"{}")) as response:
        assert json.loads(await response.aread()) == {"whole": "body"}


async def test_line_endings_across_chunks(tg: anyio.abc.TaskGroup, transport: Any) -> None:
    pieces = [b"a\r", b"\nb\rc\n", b"\r", b"\n", b"\xc3", b"\xa9t\xc3\xa9\r\n\r", b"tail"]
    sent = anyio.Event()

    async def handler(stream: anyio.abc.SocketStream, server: RawServer) -> None:
        await server.read_request(stream, bytearray())
        await stream.send(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        for piece in pieces:
            await stream.send(b"%x\r\n%s\r\n" % (len(piece), piece))
            await anyio.sleep(0.01)  # separate TCP segments
        await stream.send(b"0\r\n\r\n")
        await sent.wait()

    server = await raw_server(tg, handler)
    async with transport.stream(HttpRequest("GET", server.url)) as response:
        lines = [line async for line in response.aiter_lines()]
    sent.set()
    assert lines == ["a", "b", "c", "", "été", "", "tail"]


async def test_iter_lines_splits_every_way() -> None:
    async def run(chunks: list[bytes]) -> list[str]:
        queue = list(chunks) + [b""]

        async def next_chunk() -> bytes:
            return queue.pop(0)

        return [line async for line in iter_lines(next_chunk)]

    assert await run([b"a\r\n", b"b\n", b"c\r", b"d"]) == ["a", "b", "c", "d"]
    assert await run([b"a\r", b"\n", b"\n"]) == ["a", ""]  # \r\n split across chunks is one ending
    assert await run([b"x\r", b"\r\n"]) == ["x", ""]
    assert await run([b"\xff\n"]) == ["\ufffd"]
    assert await run([]) == []


async def test_credentials_in_the_url_are_sent_as_basic_auth(server: WebServer, transport: Any) -> None:
    url = server.url.replace("http://", "http://ops:s%40fe@") + "/headers"
    async with transport.stream(HttpRequest("GET", url)) as response:
        seen = json.loads(await response.aread())
    assert seen["authorization"] == "Basic b3BzOnNAZmU="  # base64("ops:s@fe")
    assert seen["host"] == server.url.removeprefix("http://")
