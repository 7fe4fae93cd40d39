"""gateway.upstreams.wire against real loopback servers: a uvicorn + Starlette app in a thread
for well-behaved HTTP, and raw anyio TCP servers in the test's own loop for misbehaving peers.

Run as a script for the CPU-per-request micro-benchmark against httpx:
    .venv/bin/python tests/unit/test_wire.py [--requests 2000]
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.abc
import pytest

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from gateway.upstreams.wire import ConnectFailed, ConnectionBroke, HttpPool, WireError  # noqa: E402

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# -- a well-behaved server: uvicorn + Starlette in a thread -------------------------------------


@dataclass
class AppState:
    ports: list[int] = field(default_factory=list)  # client port of every request, in order
    paths: list[str] = field(default_factory=list)

    def reset(self) -> None:
        self.ports.clear()
        self.paths.clear()

    @property
    def connections(self) -> int:
        return len(set(self.ports))


def build_app(state: AppState):  # type: ignore[no-untyped-def]
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    def seen(request: Request) -> None:
        state.ports.append(request.client.port if request.client else -1)
        state.paths.append(request.url.path)

    async def echo(request: Request) -> Response:
        seen(request)
        body = await request.body()
        delay = float(request.query_params.get("delay", "0"))
        if delay:
            await asyncio.sleep(delay)
        return JSONResponse({"echo": json.loads(body) if body else None, "method": request.method})

    async def headers(request: Request) -> Response:
        seen(request)
        return JSONResponse(dict(request.headers))

    async def status(request: Request) -> Response:
        seen(request)
        return Response(status_code=int(request.path_params["code"]))

    async def sse(request: Request) -> Response:
        seen(request)
        count = int(request.query_params.get("n", "3"))
        delay = float(request.query_params.get("delay", "0.3"))

        async def events() -> AsyncIterator[bytes]:
            for i in range(count):
                yield f"event: message\ndata: {json.dumps({'i': i})}\n\n".encode()
                await asyncio.sleep(delay)
            yield b'data: {"done": true}\n\n'

        return StreamingResponse(events(), media_type="text/event-stream")

    async def chunked(request: Request) -> Response:
        seen(request)

        async def pieces() -> AsyncIterator[bytes]:
            for i in range(5):
                yield f"piece-{i};".encode()
                await asyncio.sleep(0.01)

        return StreamingResponse(pieces(), media_type="text/plain")

    async def big(request: Request) -> Response:
        seen(request)
        return Response(b"line\n" * 400_000, media_type="text/plain")  # 2 MB

    async def close(request: Request) -> Response:
        seen(request)
        return JSONResponse({"ok": True}, headers={"connection": "close"})

    return Starlette(routes=[
        Route("/echo", echo, methods=["GET", "POST", "DELETE"]),
        Route("/headers", headers, methods=["GET", "POST"]),
        Route("/status/{code:int}", status, methods=["GET", "POST"]),
        Route("/sse", sse, methods=["GET", "POST"]),
        Route("/chunked", chunked),
        Route("/big", big),
        Route("/close", close, methods=["GET", "POST"]),
    ])


@dataclass
class AppServer:
    base: str
    state: AppState
    port: int


def start_app_server(state: AppState) -> tuple[AppServer, Callable[[], None]]:
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(build_app(state), lifespan="off", log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)

    def stop() -> None:
        server.should_exit = True
        thread.join(5)
        sock.close()

    return AppServer(f"http://127.0.0.1:{port}", state, port), stop


@pytest.fixture(scope="module")
def app_server() -> Iterator[AppServer]:
    server, stop = start_app_server(AppState())
    try:
        yield server
    finally:
        stop()


@pytest.fixture
def app(app_server: AppServer) -> AppServer:
    app_server.state.reset()
    return app_server


@pytest.fixture
async def pool() -> AsyncIterator[HttpPool]:
    pool = HttpPool(connect_timeout=2)
    try:
        yield pool
    finally:
        await pool.aclose()
        assert pool.idle_connections == 0


async def post_json(pool: HttpPool, url: str, payload: object) -> tuple[int, object]:
    body = json.dumps(payload).encode()
    async with pool.stream("POST", url, headers={"content-type": "application/json"}, body=body) as response:
        return response.status, json.loads(await response.aread())


# -- a raw server in the test's loop for misbehaving peers --------------------------------------


Handler = Callable[[anyio.abc.SocketStream, "RawServer"], Awaitable[None]]


@dataclass
class RawServer:
    port: int
    requests: int = 0  # complete request heads read by the server
    connections: int = 0
    peer_eofs: int = 0  # connections on which the server saw the client close
    closed: anyio.Event = field(default_factory=anyio.Event)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    async def read_request(self, stream: anyio.abc.SocketStream, buffer: bytearray) -> bool:
        """Read one request (head + Content-Length body) off `buffer`/`stream`; False on EOF."""
        while b"\r\n\r\n" not in buffer:
            try:
                buffer += await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                self.peer_eofs += 1
                return False
        head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(rest) < length:
            rest += await stream.receive()
        buffer[:] = rest[length:]
        self.requests += 1
        return True


def ok(body: bytes = b'{"ok":true}', extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%s\r\n%s" % (
        len(body), extra, body)


def reset(stream: anyio.abc.SocketStream) -> None:
    """Close with RST (SO_LINGER 0)."""
    sock = stream.extra(anyio.abc.SocketAttribute.raw_socket)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


async def serve_raw(task_group: anyio.abc.TaskGroup, handler: Handler) -> RawServer:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    server = RawServer(listener.extra(anyio.abc.SocketAttribute.local_port))

    async def on_connect(stream: anyio.abc.SocketStream) -> None:
        server.connections += 1
        async with stream:
            try:
                await handler(stream, server)
            except (anyio.BrokenResourceError, anyio.EndOfStream, anyio.ClosedResourceError, OSError):
                pass

    async def serve() -> None:
        async with listener:
            await listener.serve(on_connect)

    task_group.start_soon(serve)
    return server


@pytest.fixture
async def tg() -> AsyncIterator[anyio.abc.TaskGroup]:
    async with anyio.create_task_group() as task_group:
        yield task_group
        task_group.cancel_scope.cancel()


# -- well-behaved exchanges ---------------------------------------------------------------------


async def test_json_post_round_trip(app: AppServer, pool: HttpPool) -> None:
    payload = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "ünï", "n": [1, 2]}}
    status, body = await post_json(pool, f"{app.base}/echo", payload)
    assert status == 200
    assert body == {"echo": payload, "method": "POST"}
    assert pool.open_connections == 1 and pool.idle_connections == 1


async def test_request_headers(app: AppServer) -> None:
    pool = HttpPool(connect_timeout=2, default_headers={"Authorization": "Bearer a", "X-Team": "dex"})
    try:
        async with pool.stream("POST", f"{app.base}/headers?x=1", headers={"x-team": "override"}, body=b"{}") as r:
            seen = json.loads(await r.aread())
        assert r.headers["content-type"] == "application/json"
    finally:
        await pool.aclose()
    assert seen["host"] == f"127.0.0.1:{app.port}"
    assert seen["user-agent"] == "dex-mcp-gateway"
    assert seen["authorization"] == "Bearer a"
    assert seen["x-team"] == "override"
    assert seen["content-length"] == "2"


async def test_keep_alive_reuses_one_connection(app: AppServer, pool: HttpPool) -> None:
    for i in range(50):
        status, body = await post_json(pool, f"{app.base}/echo", {"i": i})
        assert status == 200 and body == {"echo": {"i": i}, "method": "POST"}
    assert len(app.state.ports) == 50
    assert app.state.connections == 1
    assert pool.connections_opened == 1


async def test_concurrent_requests_use_their_own_connections(app: AppServer) -> None:
    pool = HttpPool(connect_timeout=2, max_idle_per_host=8)
    results: dict[int, object] = {}

    async def one(i: int) -> None:
        status, body = await post_json(pool, f"{app.base}/echo?delay=0.2", {"i": i})
        assert status == 200
        results[i] = body

    try:
        async with anyio.create_task_group() as task_group:
            for i in range(20):
                task_group.start_soon(one, i)
        assert results == {i: {"echo": {"i": i}, "method": "POST"} for i in range(20)}
        assert app.state.connections == 20  # overlapping requests: no sharing, no pipelining
        assert pool.idle_connections == 8 and pool.open_connections == 8  # max_idle_per_host
    finally:
        await pool.aclose()
    assert pool.open_connections == 0


@pytest.mark.parametrize("code", [202, 204])
async def test_no_body_responses(app: AppServer, pool: HttpPool, code: int) -> None:
    async with pool.stream("POST", f"{app.base}/status/{code}", headers={}, body=b"{}") as response:
        assert response.status == code
        assert await response.aread() == b""
    # Without reading: a body-less response is complete, so the connection is kept as well.
    async with pool.stream("POST", f"{app.base}/status/{code}", headers={}, body=b"{}") as response:
        assert response.status == code
    status, _ = await post_json(pool, f"{app.base}/echo", {})
    assert status == 200
    assert app.state.connections == 1


async def test_chunked_response(app: AppServer, pool: HttpPool) -> None:
    async with pool.stream("GET", f"{app.base}/chunked", headers={}) as response:
        assert response.headers.get("transfer-encoding") == "chunked"
        assert await response.aread() == b"".join(f"piece-{i};".encode() for i in range(5))
    status, _ = await post_json(pool, f"{app.base}/echo", {})
    assert status == 200 and app.state.connections == 1


async def test_sse_lines_arrive_as_they_are_sent(app: AppServer, pool: HttpPool) -> None:
    start = time.monotonic()
    arrivals: list[tuple[float, str]] = []
    async with pool.stream("POST", f"{app.base}/sse?n=3&delay=0.3", headers={"accept": "text/event-stream"},
                           body=b"{}") as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        async for line in response.aiter_lines():
            arrivals.append((time.monotonic() - start, line))
    end = time.monotonic() - start
    lines = [line for _, line in arrivals]
    assert lines == ['event: message', 'data: {"i": 0}', '',
                     'event: message', 'data: {"i": 1}', '',
                     'event: message', 'data: {"i": 2}', '',
                     'data: {"done": true}', '']
    first = next(t for t, line in arrivals if line == 'data: {"i": 0}')
    second = next(t for t, line in arrivals if line == 'data: {"i": 1}')
    assert end >= 0.85
    assert first < end - 0.5, "the first event must not wait for the stream to end"
    assert second - first > 0.2
    assert pool.idle_connections == 1  # fully read: reusable


async def test_partially_read_response_is_not_reused(app: AppServer, pool: HttpPool) -> None:
    async with pool.stream("GET", f"{app.base}/big", headers={}) as response:
        async for line in response.aiter_lines():
            assert line == "line"
            break
    assert pool.idle_connections == 0 and pool.open_connections == 0
    status, _ = await post_json(pool, f"{app.base}/echo", {})
    assert status == 200
    assert app.state.connections == 2


async def test_connection_close_from_server_is_not_reused(app: AppServer, pool: HttpPool) -> None:
    status, body = await post_json(pool, f"{app.base}/close", {})
    assert status == 200 and body == {"ok": True}
    assert pool.idle_connections == 0 and pool.open_connections == 0
    await post_json(pool, f"{app.base}/echo", {})
    assert app.state.connections == 2


async def test_https_and_bad_urls_are_refused_before_any_io(pool: HttpPool) -> None:
    with pytest.raises(WireError, match="TLS"):
        async with pool.stream("POST", "https://127.0.0.1:1/mcp", headers={}):
            pass
    for url in ("ftp://x/", "http:///nohost", "http://127.0.0.1:notaport/"):
        with pytest.raises(WireError) as info:
            async with pool.stream("GET", url, headers={}):
                pass
        assert not isinstance(info.value, (ConnectFailed, ConnectionBroke))
    assert pool.connections_opened == 0


async def test_closed_pool_refuses(app: AppServer) -> None:
    pool = HttpPool(connect_timeout=2)
    await post_json(pool, f"{app.base}/echo", {})
    assert pool.idle_connections == 1
    await pool.aclose()
    assert pool.open_connections == 0
    with pytest.raises(WireError, match="closed"):
        await post_json(pool, f"{app.base}/echo", {})


# -- line splitting -----------------------------------------------------------------------------


async def test_aiter_lines_handles_all_line_endings_across_chunks(tg: anyio.abc.TaskGroup, pool: HttpPool) -> None:
    pieces = [b"a\r", b"\nb\rc\n", b"\r", b"\n", b"\xc3", b"\xa9t\xc3\xa9\r\n\r", b"tail"]

    async def handler(stream: anyio.abc.SocketStream, server: RawServer) -> None:
        await server.read_request(stream, bytearray())
        await stream.send(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        for piece in pieces:
            await stream.send(b"%x\r\n%s\r\n" % (len(piece), piece))
            await anyio.sleep(0.02)  # separate TCP segments, separate h11 Data events
        await stream.send(b"0\r\n\r\n")
        await anyio.sleep(1)

    server = await serve_raw(tg, handler)
    async with pool.stream("GET", server.url, headers={}) as response:
        lines = [line async for line in response.aiter_lines()]
    assert lines == ["a", "b", "c", "", "été", "", "tail"]


async def test_close_delimited_body(tg: anyio.abc.TaskGroup, pool: HttpPool) -> None:
    async def handler(stream: anyio.abc.SocketStream, server: RawServer) -> None:
        if await server.read_request(stream, bytearray()):
            await stream.send(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n")
            await anyio.sleep(0.02)
            await stream.send(b'{"whole":')
            await anyio.sleep(0.02)
            await stream.send(b'"body"}')

    server = await serve_raw(tg, handler)
    async with pool.stream("POST", server.url, headers={}, body=b"{}") as response:
        assert json.loads(await response.aread()) == {"whole": "body"}
    assert pool.open_connections == 0 and pool.idle_connections == 0


async def test_idle_connections_expire(app: AppServer) -> None:
    pool = HttpPool(connect_timeout=2, keepalive_expiry=0.1)
    try:
        await post_json(pool, f"{app.base}/echo", {})
        await post_json(pool, f"{app.base}/echo", {})
        await anyio.sleep(0.2)
        await post_json(pool, f"{app.base}/echo", {})
        assert pool.connections_opened == 2 and pool.open_connections == 1
    finally:
        await pool.aclose()
    assert app.state.connections == 2


# -- misbehaving servers ------------------------------------------------------------------------


async def test_connection_refused_is_connect_failed(pool: HttpPool) -> None:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nobody listens there now
    with pytest.raises(ConnectFailed):
        async with pool.stream("POST", f"http://127.0.0.1:{port}/mcp", headers={}, body=b"{}"):
            pass
    assert pool.open_connections == 0


async def stale_server(tg: anyio.abc.TaskGroup) -> RawServer:
    """Answers one request per connection with a keep-alive response, then closes the idle
    connection shortly after (as a server's keep-alive timeout does)."""

    async def handler(stream: anyio.abc.SocketStream, server: RawServer) -> None:
        buffer = bytearray()
        if await server.read_request(stream, buffer):
            await stream.send(ok())
            await anyio.sleep(0.05)
            server.closed.set()

    return await serve_raw(tg, handler)


async def test_idle_connection_closed_by_server_is_replaced(tg: anyio.abc.TaskGroup, pool: HttpPool) -> None:
    server = await stale_server(tg)
    for _ in range(2):
        async with pool.stream("POST", server.url, headers={}, body=b"{}") as response:
            assert await response.aread() == b'{"ok":true}'
        await server.closed.wait()
        server.closed = anyio.Event()
        await anyio.sleep(0.05)  # the FIN reaches us
    assert server.requests == 2  # each sent exactly once
    assert server.connections == 2
    assert pool.connections_opened == 2


async def test_stale_keep_alive_is_retried_once_on_a_fresh_connection(
    tg: anyio.abc.TaskGroup, pool: HttpPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The race the liveness probe cannot see: the server closes the idle connection just after
    # the probe said it was fine. Simulated by turning the probe off.
    from gateway.upstreams import wire

    monkeypatch.setattr(wire._Conn, "peer_gone", lambda self: False)
    server = await stale_server(tg)
    async with pool.stream("POST", server.url, headers={}, body=b"{}") as response:
        assert await response.aread() == b'{"ok":true}'
    await server.closed.wait()
    await anyio.sleep(0.05)
    assert pool.idle_connections == 1
    async with pool.stream("POST", server.url, headers={}, body=b"{}") as response:
        assert response.status == 200
        assert await response.aread() == b'{"ok":true}'
    assert server.requests == 2  # the stale connection never delivered the second request
    assert server.connections == 2
    assert pool.connections_opened == 2


async def test_reset_after_reading_the_request_is_connection_broke(tg: anyio.abc.TaskGroup, pool: HttpPool) -> None:
    async def handler(stream: anyio.abc.SocketStream, server: RawServer) -> None:
        if await server.read_request(stream, bytearray()):
            reset(stream)

    server = await serve_raw(tg, handler)
    with pytest.raises(ConnectionBroke):
        async with pool.stream("POST", server.url, headers={}, body=b'{"id":1}'):
            pass
    assert server.requests == 1  # a fresh connection is never retried
    assert server.connections == 1
    assert pool.open_connections == 0


async def test_eof_mid_body_is_connection_broke(tg: anyio.abc.TaskGroup, pool: HttpPool) -> None:
    async def handler(stream: anyio.abc.SocketStream, server: RawServer) -> None:
        if await server.read_request(stream, bytearray()):
            await stream.send(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{\"partial\":")

    server = await serve_raw(tg, handler)
    async with pool.stream("POST", server.url, headers={}, body=b"{}") as response:
        assert response.status == 200
        with pytest.raises(ConnectionBroke):
            await response.aread()
    assert pool.open_connections == 0


async def test_second_request_on_a_used_connection_broken_after_read_is_broke_or_resent(
    tg: anyio.abc.TaskGroup, pool: HttpPool
) -> None:
    """Documents the residual risk of the stale retry: a server that reads a request on a
    reused connection and then drops it without a byte looks exactly like a stale keep-alive,
    so the request is resent once. A reset after a response byte is never retried."""

    async def handler(stream: anyio.abc.SocketStream, server: RawServer) -> None:
        buffer = bytearray()
        if await server.read_request(stream, buffer):
            await stream.send(ok())
        if await server.read_request(stream, buffer):
            if server.requests == 2:
                reset(stream)  # read it, then died without answering
                return
            await stream.send(ok())

    server = await serve_raw(tg, handler)
    async with pool.stream("POST", server.url, headers={}, body=b"{}") as response:
        await response.aread()
    async with pool.stream("POST", server.url, headers={}, body=b"{}") as response:
        assert await response.aread() == b'{"ok":true}'
    assert server.requests == 3  # request 2 was delivered twice (once per connection)

    async def partial(stream: anyio.abc.SocketStream, server: RawServer) -> None:
        buffer = bytearray()
        if await server.read_request(stream, buffer):
            await stream.send(ok())
        if await server.read_request(stream, buffer):
            await stream.send(b"HTTP/1.1 200")
            await anyio.sleep(0.02)
            reset(stream)

    server2 = await serve_raw(tg, partial)
    async with pool.stream("POST", server2.url, headers={}, body=b"{}") as response:
        await response.aread()
    with pytest.raises(ConnectionBroke):
        async with pool.stream("POST", server2.url, headers={}, body=b"{}"):
            pass
    assert server2.requests == 2 and server2.connections == 1


async def silent_server(tg: anyio.abc.TaskGroup, *, head: bytes = b"") -> RawServer:
    async def handler(stream: anyio.abc.SocketStream, server: RawServer) -> None:
        buffer = bytearray()
        if await server.read_request(stream, buffer):
            if head:
                await stream.send(head)
            await server.read_request(stream, buffer)  # returns False once the client closes

    return await serve_raw(tg, handler)


async def wait_for(predicate: Callable[[], bool], timeout: float = 2.0) -> None:
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.01)


async def test_cancel_while_waiting_for_the_head_closes_the_socket(tg: anyio.abc.TaskGroup, pool: HttpPool) -> None:
    server = await silent_server(tg)
    with pytest.raises(TimeoutError):
        with anyio.fail_after(0.3):
            async with pool.stream("POST", server.url, headers={}, body=b"{}"):
                pass
    assert server.requests == 1
    assert pool.open_connections == 0 and pool.idle_connections == 0
    await wait_for(lambda: server.peer_eofs == 1)  # the server saw our socket close


async def test_cancel_while_streaming_lines_closes_the_socket(tg: anyio.abc.TaskGroup, pool: HttpPool) -> None:
    head = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
            b"e\r\ndata: {\"a\":1}\n\r\n")
    server = await silent_server(tg, head=head)
    lines: list[str] = []
    with pytest.raises(TimeoutError):
        with anyio.fail_after(0.3):
            async with pool.stream("POST", server.url, headers={}, body=b"{}") as response:
                async for line in response.aiter_lines():
                    lines.append(line)
    assert lines == ['data: {"a":1}']
    assert pool.open_connections == 0 and pool.idle_connections == 0
    await wait_for(lambda: server.peer_eofs == 1)


async def test_cancel_during_aread_closes_the_socket(tg: anyio.abc.TaskGroup, pool: HttpPool) -> None:
    server = await silent_server(tg, head=b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n12345")
    with pytest.raises(TimeoutError):
        with anyio.fail_after(0.3):
            async with pool.stream("POST", server.url, headers={}, body=b"{}") as response:
                await response.aread()
    assert pool.open_connections == 0
    await wait_for(lambda: server.peer_eofs == 1)


async def test_connect_timeout_is_connect_failed() -> None:
    # A listener with a full backlog and no accept(): SYNs go unanswered, connect() hangs.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    pool = HttpPool(connect_timeout=0.3)
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
        with pytest.raises(ConnectFailed):
            async with pool.stream("POST", f"http://127.0.0.1:{port}/mcp", headers={}, body=b"{}"):
                pass
        assert time.monotonic() - start < 2
        assert pool.open_connections == 0
    finally:
        await pool.aclose()
        for filler in fillers:
            filler.close()
        listener.close()


# -- micro-benchmark: CPU per request, HttpPool vs httpx.AsyncClient ---------------------------


def _bench_server_main(port_file: str) -> None:  # pragma: no cover - runs in a subprocess
    """A minimal asyncio keep-alive HTTP server (own process, so its CPU is not counted)."""
    body = b'{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"hi"}]}}'
    answer = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                if length:
                    await reader.readexactly(length)
                writer.write(answer)
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        Path(port_file).write_text(str(server.sockets[0].getsockname()[1]))
        await server.serve_forever()

    asyncio.run(main())


def _bench(requests: int) -> None:  # pragma: no cover - manual
    import os
    import subprocess
    import tempfile

    import httpx

    port_file = tempfile.mktemp()
    proc = subprocess.Popen([sys.executable, __file__, "--serve", port_file])
    try:
        while not (os.path.exists(port_file) and Path(port_file).read_text()):
            time.sleep(0.02)
        url = f"http://127.0.0.1:{Path(port_file).read_text()}/mcp"
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                           "params": {"name": "echo", "arguments": {"text": "hi"}}}).encode()
        headers = {"accept": "application/json, text/event-stream", "content-type": "application/json",
                   "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "echo"}

        async def run_wire() -> None:
            pool = HttpPool(connect_timeout=5)
            for _ in range(requests):
                async with pool.stream("POST", url, headers=headers, body=body) as response:
                    json.loads(await response.aread())
            await pool.aclose()

        async def run_httpx() -> None:
            async with httpx.AsyncClient(timeout=httpx.Timeout(None, connect=5)) as client:
                for _ in range(requests):
                    request = client.build_request("POST", url, content=body, headers=headers)
                    response = await client.send(request, stream=True)
                    try:
                        json.loads(await response.aread())
                    finally:
                        await response.aclose()

        def measure(name: str, runner: Callable[[], Awaitable[None]]) -> None:
            anyio.run(runner)  # warm-up (imports, connection)
            cpu0, wall0 = time.process_time(), time.perf_counter()
            anyio.run(runner)
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
            print(f"{name:8s} {requests} req c=1: CPU {cpu / requests * 1e6:7.1f} us/req, "
                  f"wall {wall / requests * 1e6:7.1f} us/req")

        for _ in range(2):
            measure("wire", run_wire)
            measure("httpx", run_httpx)
    finally:
        proc.terminate()
        proc.wait()
        os.unlink(port_file)


if __name__ == "__main__":  # pragma: no cover
    if len(sys.argv) == 3 and sys.argv[1] == "--serve":
        _bench_server_main(sys.argv[2])
    else:
        count = int(sys.argv[sys.argv.index("--requests") + 1]) if "--requests" in sys.argv else 2000
        _bench(count)
