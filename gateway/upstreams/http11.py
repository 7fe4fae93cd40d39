"""`Http11Transport`: the upstream HTTP client, a lean HTTP/1.1 on asyncio.

The gateway's default `HttpTransport` (the interface and its contract are in transport.py). One
asyncio `Protocol` per connection (`loop.create_connection`, TLS with the upstream's
`ssl.SSLContext` and its host name for SNI and verification), the llhttp parser
(`httptools.HttpResponseParser`) doing the framing (Content-Length, chunked, close-delimited), and
a small keep-alive pool per origin. It does what the gateway needs and nothing else: no
redirects, cookies, decompression, proxies or environment, no pipelining, no retries. Profiling
showed about 30 % of the gateway's CPU per call inside aiohttp's general-purpose client (request
and response objects, multidict headers, payload writers, connector bookkeeping); this does the
same exchange in a few Python calls (docs/benchmarks.md, "The upstream HTTP client").

Error meanings are those of transport.py, and here "did any byte leave" is exact: everything
before `transport.write` of the request (URL, header validation, pool slot, DNS, connect, TLS
handshake, the fd headroom check) fails with `RequestNotSent`; everything after it with
`RequestMaybeSent`. Nothing is ever written twice.

Connections: a pooled connection is reused most recently used first and only when the previous
response was read to its end and allowed keep-alive; it is closed after `keepalive_expiry` idle
seconds (4 s), when the server closes it or sends anything while idle (the loop keeps reading idle
sockets), and, before reuse, when a poll of its socket shows a FIN/RST or bytes the loop has not
processed yet (`_peer_gone`). A half-read response, a cancelled exchange or an error closes the
connection. While a body is read, reading from the socket pauses when more than 256 KiB are
buffered unread and resumes once the reader took them. A response head (interim 1xx heads
included) over `MAX_HEAD_BYTES` (64 KiB) fails the exchange (`RequestMaybeSent`) and closes the
connection. TCP_NODELAY is set on every connection.

Request head: `METHOD target HTTP/1.1`, Host (`host[:port]`), the transport's default headers
(User-Agent `dex-mcp-gateway` unless given) overridden by the request's (names compared in lower
case), Content-Length for a body or a POST/PUT/PATCH. The request line and Host are encoded once
per (method, URL). A header name must be an HTTP token and a value must not hold CR, LF or NUL:
otherwise `RequestNotSent` naming the header, so no value can split the head.
"""

from __future__ import annotations

import asyncio
import base64
import re
import socket
import ssl
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio
import httptools
from yarl import URL

from ..errors import LocalLimitReached, RequestMaybeSent, RequestNotSent, ResponseTooLarge
from .transport import (
    KEEPALIVE_SECONDS,
    ChunkedBody,
    ConnectionSlots,
    HttpRequest,
    _peer_gone,
    describe,
    fd_headroom_error,
    upstream_url,
    with_user_agent,
)

__all__ = ["MAX_HEAD_BYTES", "Http11Transport", "Resolve"]

# (host, port) -> the address to connect to instead of `host` (TLS still verifies `host`).
Resolve = Callable[[str, int], Awaitable[str]]

_PAUSE_AT = 256 * 1024  # unread body bytes buffered before reading from the socket pauses
# Bytes of a response head (status line and headers, interim 1xx heads included) past which the
# exchange fails: an upstream cannot make the gateway hold an endless head (the body has its own
# cap, `max_response_bytes`). Generous next to Node's 16 KiB and aiohttp's 8 KiB per line.
MAX_HEAD_BYTES = 64 * 1024
_MAX_STALE_SKIPS = 8
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
_OWN_HEADERS = frozenset({"content-length", "transfer-encoding", "connection"})
_BROKE = "connection broke while reading the response"


class _Headers(dict[str, str]):
    """Response headers under lower-case names; a lookup in any case finds them."""

    __slots__ = ()

    def __missing__(self, key: str) -> str:
        lower = key.lower()
        if lower == key:
            raise KeyError(key)
        return self[lower]

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default


class _Connection(asyncio.Protocol):
    """One connection and its response parser. Between exchanges it sits in the pool (idle)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, origin: tuple[str, str, int]) -> None:
        self.loop = loop
        self.origin = origin
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.busy = False  # an exchange is under way
        self.closed = False
        self.idle_since = 0.0
        self.error: str | None = None  # why the exchange broke
        self._waiter: asyncio.Future[None] | None = None
        self._paused = False
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.headers = _Headers()
        self.head_done = False
        self.complete = False
        self.keep_alive = False
        self.framed = False  # Content-Length or chunked: the end of the body is known without EOF
        self.declared: int | None = None
        self.chunks: deque[bytes] = deque()
        self.buffered = 0
        self.head_bytes = 0  # bytes received while the head was not complete

    # -- asyncio.Protocol --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:  # pragma: no cover - a socket that cannot take it
                pass

    def data_received(self, data: bytes) -> None:
        if not self.busy:
            # Bytes nobody asked for (e.g. a 408 on an idle connection): never reuse it.
            self._fail("the upstream sent bytes outside of an exchange")
            return
        if self.complete:  # bytes after a complete answer: the answer stands, the connection goes
            self.keep_alive = False
            return
        try:
            self.parser.feed_data(data)
            if not self.head_done:
                self.head_bytes += len(data)
                if self.head_bytes > MAX_HEAD_BYTES:
                    self._fail(f"the response head is over {MAX_HEAD_BYTES} bytes")
        except httptools.HttpParserUpgrade:
            self._fail("the upstream switched protocols")
        except httptools.HttpParserError as exc:
            if self.complete:
                self.keep_alive = False
            else:
                self._fail(f"malformed response: {describe(exc)}")

    def eof_received(self) -> bool | None:
        return None  # close the transport; connection_lost says what the EOF meant

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.busy and not self.complete and self.error is None:
            if self.head_done and not self.framed and exc is None:
                self.complete = True  # a close-delimited body ends here
            elif exc is not None:
                self.error = describe(exc)
            elif self.head_done:
                self.error = "the server closed the connection mid-body"
            else:
                self.error = "the server closed the connection without an answer"
        self._wake()

    # -- httptools callbacks ------------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        key = name.decode("latin-1").lower()
        text = value.decode("utf-8", "surrogateescape")
        headers = self.headers
        headers[key] = f"{headers[key]}, {text}" if key in headers else text

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if 100 <= status < 200:  # an interim answer (100 Continue, 103): the real one follows
            self.headers = _Headers()
            return
        self.status = status
        self.keep_alive = self.parser.should_keep_alive()
        headers = self.headers
        length = headers.get("content-length")
        if length is not None and length.isdigit():
            self.declared = int(length)
        self.framed = length is not None or "chunked" in headers.get("transfer-encoding", "").lower()
        self.head_done = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)
        self.buffered += len(body)
        if self.buffered > _PAUSE_AT and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self.head_done:  # not the end of an interim 1xx answer
            self.complete = True
            self._wake()

    # -- the exchange side --------------------------------------------------------------------

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    async def wait(self) -> None:
        waiter = self._waiter = self.loop.create_future()
        await waiter

    def _fail(self, error: str) -> None:
        if self.error is None:
            self.error = error
        self._close()
        self._wake()

    def _close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def begin(self) -> None:
        self.busy = True
        self.error = None
        self._reset()

    def take(self) -> bytes:
        """Every buffered body byte; reading resumes if it was paused."""
        chunks = self.chunks
        chunk = chunks.popleft() if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        self.buffered = 0
        if self._paused:
            self._paused = False
            if self.transport is not None and not self.closed:
                self.transport.resume_reading()
        return chunk

    def reusable(self) -> bool:
        return self.complete and self.keep_alive and not self.closed and not self.chunks


class _Response(ChunkedBody):
    __slots__ = ("status", "headers", "_conn", "max_event_bytes")

    def __init__(self, conn: _Connection, max_bytes: int | None) -> None:
        self.status = conn.status
        self.headers: Mapping[str, str] = conn.headers
        self._conn = conn
        self.max_event_bytes = max_bytes

    async def _next_chunk(self) -> bytes:
        conn = self._conn
        while not conn.chunks:
            if conn.complete:
                return b""
            if conn.error is not None:
                raise RequestMaybeSent(f"{_BROKE}: {conn.error}")
            await conn.wait()
        return conn.take()

    async def aread(self) -> bytes:
        conn = self._conn
        cap = self.max_event_bytes
        if cap is not None and conn.declared is not None and conn.declared > cap:
            raise ResponseTooLarge(f"the response declares {conn.declared} bytes, over {cap}", read=conn.declared, cap=cap)
        if conn.complete:  # the usual case: the body came with the head
            body = conn.take() if conn.chunks else b""
        else:
            parts = bytearray()
            while chunk := await self._next_chunk():
                parts += chunk
                if cap is not None and len(parts) > cap:
                    raise ResponseTooLarge(f"the response is over {cap} bytes", read=len(parts), cap=cap)
            return bytes(parts)
        if cap is not None and len(body) > cap:
            raise ResponseTooLarge(f"the response is over {cap} bytes", read=len(body), cap=cap)
        return body


class _Exchange:
    """One request: entered with its response once the head is read; on exit the connection goes
    back to the pool (the response read to its end, keep-alive allowed) or is closed."""

    __slots__ = ("_transport", "_request", "_slot", "_conn")

    def __init__(self, transport: "Http11Transport", request: HttpRequest) -> None:
        self._transport = transport
        self._request = request
        self._slot: anyio.Semaphore | None = None
        self._conn: _Connection | None = None

    async def __aenter__(self) -> _Response:
        transport = self._transport
        if transport._closed:
            raise RequestNotSent("the HTTP transport is closed")
        request = self._request
        url = upstream_url(request.url, transport._urls)
        data = transport._encode(request, url)  # before a slot: a refused header costs nothing
        self._slot = await transport._slots.take()
        try:
            conn = self._conn = await transport._connection(url)
            if conn.closed:  # a new connection the server closed (or wrote to) before our request
                raise RequestNotSent(f"cannot connect to {url.host}:{url.port}: {conn.error or 'the server closed it at once'}")
            conn.begin()
            conn.transport.write(data)  # type: ignore[union-attr]
            # From here on, bytes may have left.
            while not conn.head_done:
                if conn.error is not None:
                    raise RequestMaybeSent(f"exchange with {url.host}:{url.port} failed: {conn.error}")
                await conn.wait()
            if request.method == "HEAD":  # no body follows, whatever the head declares
                conn.complete, conn.keep_alive = True, False
        except BaseException:
            self._finish(reuse=False)
            raise
        return _Response(conn, transport._max_response_bytes)

    async def __aexit__(self, *exc_info: object) -> None:
        conn = self._conn
        self._finish(reuse=conn is not None and conn.reusable())

    def _finish(self, *, reuse: bool) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.busy = False
            if reuse and not self._transport._closed:
                self._transport._release(conn)
            else:
                self._transport._drop(conn)  # half-read, failed or cancelled: never reused
        slot, self._slot = self._slot, None
        if slot is not None:
            slot.release()


class Http11Transport:
    """Keep-alive HTTP/1.1 (and TLS) connections to one upstream, on asyncio and llhttp.

    Create and use it inside one event loop. `resolve` (tests): maps (host, port) to the address
    to connect to; by default the loop resolves the host name itself."""

    def __init__(
        self,
        *,
        connect_timeout: float,
        default_headers: Mapping[str, str] | None = None,
        ssl_context: ssl.SSLContext | None = None,
        keepalive_expiry: float = KEEPALIVE_SECONDS,
        resolve: Resolve | None = None,
        max_response_bytes: int | None = None,
        max_connections: int | None = None,
        pool_timeout: float = 30.0,
    ) -> None:
        self._connect_timeout = connect_timeout
        self._default_headers = with_user_agent(default_headers)
        self._ssl = ssl_context
        self._keepalive_expiry = keepalive_expiry
        self._resolve = resolve
        self._max_response_bytes = max_response_bytes
        self._slots = ConnectionSlots(max_connections, pool_timeout)
        self._urls: dict[str, URL] = {}
        self._lines: dict[tuple[str, str], tuple[str, str, str]] = {}  # (method, url) -> _start_lines
        self._names: set[str] = set()  # header names already checked to be tokens
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}
        self._open: set[_Connection] = set()
        self._sweeper: asyncio.TimerHandle | None = None
        self._closed = False

    def stream(self, request: HttpRequest) -> AbstractAsyncContextManager[_Response]:
        return _Exchange(self, request)

    # -- the request head ---------------------------------------------------------------------

    def _encode(self, request: HttpRequest, url: URL) -> bytes:
        method = request.method
        lines = self._lines.get((method, request.url))
        if lines is None:
            lines = self._start_lines(method, request.url, url)
        headers = self._default_headers
        if request.headers:
            headers = {**headers}
            for name, value in request.headers.items():
                key = name if name.islower() else name.lower()
                if key not in _OWN_HEADERS:
                    headers[key] = value
        start = lines[0] if "host" in headers else lines[0] + lines[1]
        if lines[2] and "authorization" not in headers:
            start += lines[2]
        names = self._names
        for name in headers:
            if name not in names:
                self._check_name(name)
        block = "".join([f"{name}: {value}\r\n" for name, value in headers.items()])
        count = len(headers)
        if block.count("\n") != count or block.count("\r") != count or "\0" in block:
            self._refuse_value(headers)
        body = request.body
        if body or method in _BODY_METHODS:
            block += f"content-length: {len(body)}\r\n"
        try:
            head = f"{start}{block}\r\n".encode("utf-8", "surrogateescape")
        except UnicodeEncodeError as exc:  # a lone surrogate that surrogateescape did not make
            raise RequestNotSent(f"the request head cannot be encoded: {exc}") from None
        return head + body if body else head

    def _start_lines(self, method: str, raw: str, url: URL) -> tuple[str, str, str]:
        """The request line, the Host line, and an Authorization line from user:password@ in the
        URL (HTTP Basic, as aiohttp did; a request's own Authorization header wins) or ""."""
        if not _TOKEN.fullmatch(method):
            raise RequestNotSent(f"invalid HTTP method {method!r}")
        target = url.raw_path_qs or "/"
        host = url.host_port_subcomponent
        if any(c in target or c in (host or "") for c in "\r\n\0 "):
            raise RequestNotSent(f"invalid URL {raw!r}: it holds a space, CR, LF or NUL")
        basic = ""
        if url.user is not None:
            secret = base64.b64encode(f"{url.user}:{url.password or ''}".encode()).decode()
            basic = f"authorization: Basic {secret}\r\n"
        if len(self._lines) >= 64:
            self._lines.clear()
        lines = self._lines[(method, raw)] = (f"{method} {target} HTTP/1.1\r\n", f"host: {host}\r\n", basic)
        return lines

    def _check_name(self, name: str) -> None:
        if not _TOKEN.fullmatch(name):
            raise RequestNotSent(f"invalid request header name {name!r}: not an HTTP token")
        if len(self._names) < 256:
            self._names.add(name)

    @staticmethod
    def _refuse_value(headers: Mapping[str, str]) -> None:
        for name, value in headers.items():
            if "\r" in value or "\n" in value or "\0" in value:
                raise RequestNotSent(f"invalid value of request header {name!r}: it holds a CR, LF or NUL character")
        raise RequestNotSent("invalid request headers")  # pragma: no cover - the counts differ only for a bad value

    # -- the pool -----------------------------------------------------------------------------

    async def _connection(self, url: URL) -> _Connection:
        origin = (url.scheme, url.raw_host or "", url.port or 0)
        idle = self._idle.get(origin)
        if idle:
            loop_time = asyncio.get_running_loop().time()
            skips = 0
            while idle:
                conn = idle.pop()
                if conn.closed or loop_time - conn.idle_since > self._keepalive_expiry:
                    self._drop(conn)
                    continue
                if skips < _MAX_STALE_SKIPS and _peer_gone(conn):
                    skips += 1
                    self._drop(conn)  # dead while idle: nothing was written to it; take another
                    continue
                return conn
        return await self._connect(origin, url)

    async def _connect(self, origin: tuple[str, str, int], url: URL) -> _Connection:
        where = f"{url.host}:{url.port}"
        if (why := fd_headroom_error()) is not None:
            raise LocalLimitReached(why)
        loop = asyncio.get_running_loop()
        scheme, host, port = origin
        tls: ssl.SSLContext | None = None
        if scheme == "https":
            if self._ssl is None:  # the system store (honouring SSL_CERT_FILE), loaded once
                self._ssl = ssl.create_default_context()
            tls = self._ssl
        try:
            with anyio.fail_after(self._connect_timeout):
                address = await self._resolve(host, port) if self._resolve is not None else host
                _, conn = await loop.create_connection(
                    lambda: _Connection(loop, origin), address, port, ssl=tls,
                    server_hostname=host if tls is not None else None,
                )
        except (OSError, TimeoutError, ValueError) as exc:
            raise RequestNotSent(f"cannot connect to {where}: {describe(exc)}") from exc
        if self._closed:  # closed while connecting
            conn._close()
            raise RequestNotSent("the HTTP transport is closed")
        self._open.add(conn)
        return conn

    def _release(self, conn: _Connection) -> None:
        loop = conn.loop
        conn.idle_since = loop.time()
        self._idle.setdefault(conn.origin, []).append(conn)
        if self._sweeper is None:
            self._sweeper = loop.call_later(self._keepalive_expiry, self._sweep)

    def _sweep(self) -> None:
        """Close connections idle for longer than keepalive_expiry; run again while any are left."""
        self._sweeper = None
        if self._closed:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        left = False
        for idle in self._idle.values():
            keep = []
            for conn in idle:
                if not conn.closed and now - conn.idle_since <= self._keepalive_expiry:
                    keep.append(conn)
                else:
                    self._drop(conn)
            idle[:] = keep
            left = left or bool(keep)
        if left:
            self._sweeper = loop.call_later(self._keepalive_expiry, self._sweep)

    def _drop(self, conn: _Connection) -> None:
        if not conn.closed:
            conn._close()
        self._open.discard(conn)

    async def aclose(self) -> None:
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        conns, self._open = self._open, set()
        self._idle.clear()
        for conn in conns:
            if not conn.closed:
                conn._close()

