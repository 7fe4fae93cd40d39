"""Read timeouts: connections that go silent are closed, idle GET streams are ended.

Raw sockets against a real gateway with short timeouts (1 s): a connection that never sends a
request, one that stops mid-headers, one that stops mid-body, one left idle after a response,
and a stateful session's GET stream that carries nothing.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import httpx

from tests.operations.support import HANDSHAKE, ops_upstream
from tests.support.gateway import start_gateway, write_config

TIMEOUT = 1.0


def _closed_after(sock: socket.socket, limit: float) -> float:
    """Seconds until the gateway closes `sock` (reading and discarding what it sends)."""
    sock.settimeout(limit)
    started = time.monotonic()
    while sock.recv(65536):
        pass
    return time.monotonic() - started


def _connect(url: str) -> socket.socket:
    host, port = url.split("//", 1)[1].split("/", 1)[0].split(":")
    return socket.create_connection((host, int(port)))


def test_silent_and_half_sent_connections_are_closed(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, {
        "server": {"read_timeout_seconds": TIMEOUT, "idle_timeout_seconds": TIMEOUT},
        "upstreams": [ops_upstream("ops", tmp_path / "ops.jsonl")],
    })
    with start_gateway(cfg) as gw:
        silent = _connect(gw.url)
        headers_cut = _connect(gw.url)
        headers_cut.sendall(b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: applica")
        body_cut = _connect(gw.url)
        body_cut.sendall(b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
                         b"accept: application/json, text/event-stream\r\ncontent-length: 100\r\n\r\n{\"jsonrpc\":")
        idle = _connect(gw.url)
        idle.sendall(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
        for sock in (silent, headers_cut, body_cut, idle):
            assert _closed_after(sock, 10) < TIMEOUT + 1.5
            sock.close()
        # A request that keeps sending is not cut: 3 s of a slow body, a byte every 0.5 s.
        slow = _connect(gw.url)
        body = b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}'
        slow.sendall(b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
                     b"accept: application/json, text/event-stream\r\nmcp-protocol-version: " + HANDSHAKE.encode()
                     + b"\r\ncontent-length: " + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n")
        for i in range(0, 6):
            time.sleep(0.5)
            slow.sendall(body[i:i + 1])
        slow.sendall(body[6:])
        slow.settimeout(10)
        answer = b""
        while chunk := slow.recv(65536):
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
        assert b"ops__write" in answer


def test_idle_get_stream_is_ended(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, {
        "server": {"stateful": True, "stream_idle_seconds": TIMEOUT},
        "upstreams": [ops_upstream("ops", tmp_path / "ops.jsonl")],
    })
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": HANDSHAKE, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    with start_gateway(cfg) as gw, httpx.Client(timeout=15) as client:
        response = client.post(gw.url, json=init, headers=headers)
        session = response.headers["mcp-session-id"]
        session_headers = {**headers, "mcp-session-id": session, "mcp-protocol-version": HANDSHAKE}
        client.post(gw.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session_headers)
        started = time.monotonic()
        with client.stream("GET", gw.url, headers={"accept": "text/event-stream", "mcp-session-id": session,
                                                   "mcp-protocol-version": HANDSHAKE}) as stream:
            assert stream.status_code == 200
            for _ in stream.iter_bytes():
                pass
        assert TIMEOUT - 0.2 < time.monotonic() - started < TIMEOUT + 3
        # The session lives on: the client reconnects its stream.
        again = client.post(gw.url, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers=session_headers)
        assert again.status_code == 200
