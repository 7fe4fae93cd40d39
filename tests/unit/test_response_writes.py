"""The gateway's HTTP protocol writes a whole answer to the socket at once (gateway/http/uvicorn_protocol.py).

A real uvicorn server on loopback with the gateway's protocol class; the only addition is a count
of the transport's writes. A raw socket is the client, so what arrives is what was written.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
import uvicorn

from gateway.http.uvicorn_protocol import ConnectionLimits, connection_protocol

pytestmark = pytest.mark.anyio


class _CountedTransport:
    """The real transport; every write is also recorded."""

    def __init__(self, transport: asyncio.Transport, writes: list[bytes]) -> None:
        self._transport = transport
        self._writes = writes

    def write(self, data: bytes) -> None:
        self._writes.append(bytes(data))
        self._transport.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def _counting_protocol(writes: list[bytes]) -> type:
    base = connection_protocol(ConnectionLimits())

    class Counting(base):  # type: ignore[misc, valid-type]
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(_CountedTransport(transport, writes))  # type: ignore[arg-type]

    return Counting


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    if scope["path"] == "/stream":  # the head now, the body a while later
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        await anyio.sleep(0.5)
        await send({"type": "http.response.body", "body": b"data: late\n\n", "more_body": False})
        return
    body = b'{"jsonrpc":"2.0","id":1,"result":{}}'
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


@pytest.fixture
async def server() -> AsyncIterator[tuple[int, list[bytes]]]:
    writes: list[bytes] = []
    config = uvicorn.Config(_app, host="127.0.0.1", port=0, http=_counting_protocol(writes), lifespan="off",
                            log_level="warning")
    running = uvicorn.Server(config)
    async with anyio.create_task_group() as tg:
        tg.start_soon(running.serve)
        while not running.started:
            await anyio.sleep(0.01)
        port = running.servers[0].sockets[0].getsockname()[1]
        yield port, writes
        running.should_exit = True


def _request(port: int, path: str, *, requests: int = 1) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(b"".join(f"GET {path} HTTP/1.1\r\nhost: x\r\n\r\n".encode() for _ in range(requests)))
    return sock


async def test_a_whole_answer_is_one_write_each_on_a_kept_alive_connection(server: tuple[int, list[bytes]]) -> None:
    port, writes = server

    def exchange() -> bytes:
        with _request(port, "/", requests=3) as sock:
            got = b""
            while got.count(b"HTTP/1.1 200") < 3 or not got.endswith(b"}"):
                got += sock.recv(65536)
            return got

    got = await anyio.to_thread.run_sync(exchange)
    assert got.count(b'"result":{}') == 3
    assert len(writes) == 3  # head and body together, once per answer (uvicorn alone writes 6)
    assert all(w.startswith(b"HTTP/1.1 200") and w.endswith(b"}") for w in writes)


async def test_a_head_whose_body_comes_later_is_not_held_back(server: tuple[int, list[bytes]]) -> None:
    port, writes = server

    def exchange() -> tuple[bytes, float, bytes]:
        with _request(port, "/stream") as sock:
            started = time.monotonic()
            head = sock.recv(65536)
            waited = time.monotonic() - started
            rest = b""
            while not rest.endswith(b"0\r\n\r\n"):
                rest += sock.recv(65536)
            return head, waited, rest

    head, waited, rest = await anyio.to_thread.run_sync(exchange)
    assert head.startswith(b"HTTP/1.1 200") and head.endswith(b"\r\n\r\n")  # the head alone, at once
    assert waited < 0.4
    assert b"data: late" in rest
    assert len(writes) == 2
