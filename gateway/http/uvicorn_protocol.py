"""uvicorn's HTTP/1.1 protocol with the connection limits a gateway facing the network needs.

Everything here happens before a request reaches the gateway's ASGI app, on bytes nobody has
authenticated yet, so every refusal is cheap and closes the connection (in stages, so the client
reads the refusal and not a reset: `lingering.py`):

* **Unreadable requests** (a `Content-Length` that is not a number, a broken chunked body, an
  unknown method): uvicorn's 400, with the JSON-RPC error body every other refusal has.
* **The request head** (request line and headers) may hold at most `server.max_header_bytes`
  (431 past that, counted before the parser sees the bytes: httptools joins a header's pieces
  by copying, so an endless header would otherwise cost quadratic CPU and unbounded memory), and
  must arrive whole within `server.header_timeout_seconds` of its first byte (of the connection's
  opening, for a new connection): 408, so a head trickled one byte at a time cannot hold a
  connection forever.
* **Idle reads**: a connection that owes bytes of a request and sends none for
  `server.read_timeout_seconds` is closed (uvicorn waits forever for the first request of a new
  connection and for the rest of a request cut off mid-body; the app, if it was reading the body,
  sees a disconnect). TCP keepalive probes find a peer that vanished without a FIN.
* **Connections per process**: past `server.max_connections` open connections, a new one is
  answered 503 (with `Retry-After`) and closed before anything of its request is parsed.

And one thing on the way out: a response's head is written together with its first body bytes
(`_HeadWithBody`), so a whole answer is one write instead of uvicorn's two: one send(2) and one
segment, and the client wakes once (docs/benchmarks.md, "One write per answer").
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Callable
from dataclasses import dataclass

from mcp_types import INVALID_REQUEST
from uvicorn.protocols.http.httptools_impl import STATUS_LINE

from .lingering import LingeringHttpProtocol, StagedClose

__all__ = ["DISCONNECT", "ConnectionLimits", "Disconnect", "GatewayHttpProtocol", "connection_protocol"]

DISCONNECT = "dex.disconnect"  # the scope key of a request's `Disconnect`


class Disconnect:
    """Tells a request's app that its client went away, without a task waiting on `receive()`:
    the protocol calls `callback` (at most once) when the connection is lost before the response
    completed. An app that needs no more of the body sets `callback` instead of watching."""

    __slots__ = ("_callback", "lost")

    def __init__(self) -> None:
        self._callback: Callable[[], object] | None = None
        self.lost = False

    def on_lost(self, callback: Callable[[], object] | None) -> None:
        """Call `callback` when the client goes away (at once if it already has); None: no longer."""
        self._callback = callback
        if callback is not None and self.lost:
            self._callback = None
            callback()

    def _lose(self) -> None:
        self.lost = True
        callback, self._callback = self._callback, None
        if callback is not None:
            callback()

_HEAD_END = b"\r\n\r\n"


@dataclass(frozen=True)
class ConnectionLimits:
    read_timeout: float = 10.0
    keepalive_seconds: int = 0
    max_header_bytes: int = 64 * 1024
    header_timeout: float = 10.0
    max_connections: int = 1024


class GatewayHttpProtocol(LingeringHttpProtocol):
    """One client connection (the class attribute `limits` comes from `connection_protocol`)."""

    limits: ConnectionLimits = ConnectionLimits()
    _read_timer: asyncio.TimerHandle | None = None
    _head_timer: asyncio.TimerHandle | None = None
    _in_head: bool = True  # the bytes arriving belong to a request head (or precede one)
    _head_bytes: int = 0
    _head_tail: bytes = b""  # the last bytes of the head so far, to find its end across reads
    _over_capacity: bool = False

    # -- connection ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections:
            self._over_capacity = True  # answered 503 when its first bytes arrive
        if self.limits.keepalive_seconds:
            _keepalive(transport.get_extra_info("socket"), self.limits.keepalive_seconds)
        self._arm_read_timer()
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_read_timer()
        self._cancel_head_timer()
        cycle = self.cycle
        super().connection_lost(exc)
        if cycle is not None and cycle.disconnected:
            disconnect = cycle.scope.get(DISCONNECT)
            if isinstance(disconnect, Disconnect):
                disconnect._lose()

    def data_received(self, data: bytes) -> None:
        if self.lingering:
            super().data_received(data)  # dropped, never parsed
            return
        if self._over_capacity:
            self._refuse(503, "Service Unavailable: the gateway has too many open connections; retry shortly",
                         [b"retry-after: 1\r\n"])
            return
        if self._in_head and not self._count_head(data):
            self._refuse(431, f"Request Header Fields Too Large: the request head is over "
                              f"{self.limits.max_header_bytes} bytes (server.max_header_bytes)")
            return
        super().data_received(data)
        cycle = self.cycle
        if cycle is None or cycle.response_complete or cycle.more_body:
            self._arm_read_timer()  # a request is still arriving
        else:
            self._cancel_read_timer()

    # -- parser callbacks ------------------------------------------------------------------

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._cancel_head_timer()
        self.scope[DISCONNECT] = Disconnect()  # type: ignore[literal-required]  # the cycle's scope, made next
        super().on_headers_complete()

    def request_transport(self) -> _HeadWithBody:
        return _HeadWithBody(self)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._cancel_read_timer()
        self._in_head, self._head_bytes, self._head_tail = True, 0, b""

    def send_400_response(self, msg: str) -> None:
        self._refuse(400, f"Bad Request: {msg}")

    # -- the head --------------------------------------------------------------------------

    def _count_head(self, data: bytes) -> bool:
        """Count the head bytes in `data` (up to the blank line that ends the head); False when
        the head is over the limit."""
        if self._head_bytes == 0 and self._head_timer is None:
            self._arm_head_timer()  # the first byte of a new request's head
        seen = self._head_tail + data
        end = seen.find(_HEAD_END)
        if end < 0:
            self._head_bytes += len(data)
            self._head_tail = seen[-(len(_HEAD_END) - 1):]
        else:
            self._head_bytes += end + len(_HEAD_END) - len(self._head_tail)
            self._head_tail = b""
        return self._head_bytes <= self.limits.max_header_bytes

    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        self._head_timer = self.loop.call_later(self.limits.header_timeout, self._head_timed_out)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if not self._in_head or self.closing:
            return
        if self._head_bytes:
            self._refuse(408, f"Request Timeout: the request head did not arrive within "
                              f"{self.limits.header_timeout:g} s (server.header_timeout_seconds)")
        elif self.cycle is None:
            self.transport.close()  # a new connection that sent nothing at all
        # else: idle between requests; uvicorn's keep-alive timer closes it

    # -- idle reads ------------------------------------------------------------------------

    def _arm_read_timer(self) -> None:
        self._cancel_read_timer()
        self._read_timer = self.loop.call_later(self.limits.read_timeout, self._read_timed_out)

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

    # -- refusals --------------------------------------------------------------------------

    def _refuse(self, status: int, message: str, extra: list[bytes] | None = None) -> None:
        """Answer `status` with a JSON-RPC error body and close the connection."""
        if self.closing:
            return
        body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": INVALID_REQUEST, "message": message}}).encode()
        content = [STATUS_LINE[status]]
        for name, value in self.server_state.default_headers:
            content.extend([name, b": ", value, b"\r\n"])
        content.extend([
            b"content-type: application/json\r\n",
            b"content-length: " + str(len(body)).encode("ascii") + b"\r\n",
            *(extra or []),
            b"connection: close\r\n",
            b"\r\n",
            body,
        ])
        self.transport.write(b"".join(content))
        self.close_connection()


class _HeadWithBody(StagedClose):
    """The transport a request's response is written through: the response's head (its first
    write) waits for its first body bytes, so a whole answer leaves in one write (one send(2)
    and one segment instead of two), or until the loop's current pass ends, so a head whose body
    comes later (a stream) is not held back. `close` writes a held head, then closes in stages."""

    __slots__ = ("_transport", "_head", "_first")

    def __init__(self, protocol: LingeringHttpProtocol) -> None:
        super().__init__(protocol)
        self._transport = protocol.transport
        self._head: bytes | None = None
        self._first = True

    def write(self, data: bytes) -> None:
        if self._first:
            self._first = False
            self._head = data
            self._protocol.loop.call_soon(self._flush)
            return
        head, self._head = self._head, None
        self._transport.write(data if head is None else head + data)

    def _flush(self) -> None:
        head, self._head = self._head, None
        if head is not None and not self._protocol.closing:
            self._transport.write(head)

    def close(self) -> None:
        self._flush()
        super().close()


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


def connection_protocol(limits: ConnectionLimits) -> type[GatewayHttpProtocol]:
    """uvicorn's `http=` class for these limits."""
    return type("GatewayHttpProtocol", (GatewayHttpProtocol,), {"limits": limits})
