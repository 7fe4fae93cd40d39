"""A connection the server closes while its client is still sending ends in stages
(gateway/http/lingering.py), so the client reads the refusal and never a reset.

A real uvicorn server on loopback (its own thread and loop: asyncio's and uvloop's) with the
protocol under test; a raw socket is the client. The request's body is sent with its head, more
than uvicorn reads before it stops reading for an app that does not take the body, so the
server closes with bytes of it unread: a plain close answers those with a reset, and the client,
reading after it arrived, gets ECONNRESET instead of the answer (the code before this fails the
first test that way every time).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import pytest
import uvicorn

from gateway.http.lingering import LingeringHttpProtocol
from gateway.http.uvicorn_protocol import ConnectionLimits, connection_protocol

BODY = 256 * 1024  # more than uvicorn buffers for an app that does not read (64 KiB)
REFUSAL = json.dumps({"error": "wrong token"}).encode()


async def _refusing_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answers 401 with `Connection: close` without reading the body, as a token check does."""
    if scope["type"] != "http":
        return
    await anyio.sleep(0.05)  # the body is in (and the rest of it waiting in the kernel)
    await send({"type": "http.response.start", "status": 401, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(REFUSAL)).encode()),
        (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": REFUSAL})


@dataclass
class Running:
    server: uvicorn.Server
    port: int

    def open_connections(self) -> int:
        return len(self.server.server_state.connections)


def _short_linger(base: type[LingeringHttpProtocol]) -> type[LingeringHttpProtocol]:
    return type("ShortLinger", (base,), {"linger_seconds": 0.5, "linger_bytes": 4 * BODY})


PROTOCOLS = {
    "lingering": _short_linger(LingeringHttpProtocol),
    "gateway": _short_linger(connection_protocol(ConnectionLimits(max_header_bytes=4096))),
}


@contextmanager
def _serving(protocol: type[LingeringHttpProtocol], loop: str = "auto") -> Iterator[Running]:
    config = uvicorn.Config(_refusing_app, host="127.0.0.1", port=0, http=protocol, loop=loop,
                            lifespan="off", log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        _wait_for(lambda: server.started, "the server did not start", seconds=10)
        yield Running(server, server.servers[0].sockets[0].getsockname()[1])
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture(params=[(p, loop) for p in PROTOCOLS for loop in ("asyncio", "uvloop")], ids=lambda p: "-".join(p))
def running(request: pytest.FixtureRequest) -> Iterator[Running]:
    protocol, loop = request.param
    with _serving(PROTOCOLS[protocol], loop) as served:
        yield served


def _read_until_eof(sock: socket.socket) -> bytes:
    sock.settimeout(5)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def _post(port: int, body: int = BODY) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(b"POST /steer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n\r\n%s" % (body, b"a" * body))
    return sock


def _wait_for(check: Any, what: str, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_a_refusal_sent_before_the_body_is_read_reaches_the_client(running: Running) -> None:
    for _ in range(3):
        with _post(running.port) as sock:
            time.sleep(0.3)  # the server answered and closed meanwhile: a reset would be here by now
            answer = _read_until_eof(sock)
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 401") and b"connection: close" in head.lower()
        assert body == REFUSAL
    _wait_for(lambda: running.open_connections() == 0, "a connection stayed open after its client closed")


def test_lingering_ends_after_its_time_or_its_bytes(running: Running) -> None:
    # A client that keeps its side open: closed after linger_seconds (0.5 s here).
    with _post(running.port) as sock:
        assert _read_until_eof(sock).startswith(b"HTTP/1.1 401")  # the write side is shut at once
        _wait_for(lambda: running.open_connections() == 0, "the linger did not end", seconds=3)

    # A client that keeps sending: dropped unparsed, closed past linger_bytes (1 MiB here).
    with _post(running.port) as sock:
        sent = 0
        with pytest.raises(OSError):
            while sent < 64 * 1024 * 1024:
                sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" * 1000)  # never parsed, never answered
                sent += 27_000
        assert sent < 32 * 1024 * 1024
        _wait_for(lambda: running.open_connections() == 0, "the linger did not end")


def test_a_pipelined_request_after_a_closing_answer_is_never_answered(running: Running) -> None:
    with socket.create_connection(("127.0.0.1", running.port), timeout=5) as sock:
        sock.sendall(b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
                     b"GET /b HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = _read_until_eof(sock)
    assert answer.count(b"HTTP/1.1 ") == 1 and answer.startswith(b"HTTP/1.1 401")


def test_the_gateways_own_refusals_linger_too() -> None:
    """A head over `server.max_header_bytes` is refused by the protocol itself (431) while the
    rest of the head is still coming."""
    with _serving(PROTOCOLS["gateway"]) as served:
        for _ in range(3):
            with socket.create_connection(("127.0.0.1", served.port), timeout=5) as sock:
                sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n" + b"X-Filler: %s\r\n" % (b"f" * 1000) * 200)
                time.sleep(0.3)
                answer = _read_until_eof(sock)
            assert answer.startswith(b"HTTP/1.1 431"), answer[:200]
            assert b"server.max_header_bytes" in answer
