"""uvicorn's HTTP/1.1 protocol, answering unreadable requests with a JSON-RPC error body.

A request uvicorn's parser cannot read (a `Content-Length` that is not a number, a broken
chunked body, an unknown method) never reaches the gateway's ASGI app: uvicorn answers it
itself with `400 text/plain`. This subclass keeps uvicorn's behaviour (400, close the
connection) and only gives that answer the same JSON-RPC error body every other refusal has.
"""

from __future__ import annotations

import asyncio
import json
import socket

from mcp_types import INVALID_REQUEST
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

__all__ = ["JsonErrorHttpToolsProtocol", "connection_protocol"]


class JsonErrorHttpToolsProtocol(HttpToolsProtocol):
    def send_400_response(self, msg: str) -> None:
        body = json.dumps(
            {"jsonrpc": "2.0", "id": None, "error": {"code": INVALID_REQUEST, "message": f"Bad Request: {msg}"}}
        ).encode()
        content = [STATUS_LINE[400]]
        for name, value in self.server_state.default_headers:
            content.extend([name, b": ", value, b"\r\n"])
        content.extend(
            [
                b"content-type: application/json\r\n",
                b"content-length: " + str(len(body)).encode("ascii") + b"\r\n",
                b"connection: close\r\n",
                b"\r\n",
                body,
            ]
        )
        self.transport.write(b"".join(content))
        self.transport.close()


class _ConnectionTimeouts(JsonErrorHttpToolsProtocol):
    """Read timeouts and TCP keepalive on each client connection (values from `connection_protocol`).

    uvicorn closes a keep-alive connection that stays idle after a response (`timeout_keep_alive`),
    but waits forever for the first request of a new connection and for the rest of a request cut
    off mid-headers or mid-body. Here a connection that owes bytes of a request and sends none for
    `read_timeout` seconds is closed (the app, if it was reading the body, sees a disconnect).
    TCP keepalive probes find a peer that vanished without a FIN (half-open) during a long call.
    """

    read_timeout: float = 10.0
    keepalive_seconds: int = 0
    _read_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if self.keepalive_seconds:
            _keepalive(transport.get_extra_info("socket"), self.keepalive_seconds)
        self._arm_read_timer()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        cycle = self.cycle
        if cycle is None or cycle.response_complete or cycle.more_body:
            self._arm_read_timer()  # a request is still arriving
        else:
            self._cancel_read_timer()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._cancel_read_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_read_timer()
        super().connection_lost(exc)

    def _arm_read_timer(self) -> None:
        self._cancel_read_timer()
        self._read_timer = self.loop.call_later(self.read_timeout, self._read_timed_out)

    def _cancel_read_timer(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None

    def _read_timed_out(self) -> None:
        self._read_timer = None
        cycle = self.cycle
        # Only while the client owes us bytes; between requests uvicorn's keep-alive timer rules.
        if cycle is not None and not cycle.response_complete and not cycle.more_body:
            return
        if cycle is not None and cycle.response_complete and self.timeout_keep_alive_task is not None:
            return
        if not self.transport.is_closing():
            self.transport.close()


def _keepalive(sock: socket.socket | None, seconds: int) -> None:
    if sock is None:
        return
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        if hasattr(socket, "TCP_KEEPIDLE"):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, seconds)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, max(1, seconds // 3))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)
    except OSError:
        pass  # not a TCP socket (a Unix socket): nothing to probe


def connection_protocol(read_timeout: float, keepalive_seconds: int) -> type[JsonErrorHttpToolsProtocol]:
    """uvicorn's `http=` class for these timeouts."""
    return type(
        "GatewayHttpProtocol", (_ConnectionTimeouts,),
        {"read_timeout": read_timeout, "keepalive_seconds": keepalive_seconds},
    )
