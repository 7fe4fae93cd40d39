"""A lean async HTTP/1.1 client for Streamable-HTTP upstreams: h11 framing over anyio sockets.

Only what `HttpConnection` needs: plain http:// requests with a small in-memory body, a
keep-alive pool per (host, port), responses read whole (`aread`) or line by line as they arrive
(`aiter_lines`, for SSE). Every request is written with a single socket send (head + body)
on a TCP_NODELAY socket; there is no pipelining, so concurrent requests each hold their own
connection. There is no content decoding: we never send Accept-Encoding.

TLS is deliberately not supported: an https:// URL raises `WireError` and such upstreams keep
the httpx path (the idle-liveness probe below reads the raw socket, which TLS would defeat, and
TLS shutdown needs its own timeouts).

Errors, as the caller maps them:
* `ConnectFailed`  -- nothing of the request was written (refused, DNS, connect timeout).
* `ConnectionBroke` -- the request may have reached the server; the exchange failed after that.
* plain `WireError` -- rejected before any I/O (https:// or malformed URL, invalid header,
  closed pool): also never sent.
"""

from __future__ import annotations

import re
import select
import socket
import time
from collections.abc import AsyncIterator, Mapping
from types import TracebackType
from urllib.parse import urlsplit

import anyio
import anyio.abc
import h11

__all__ = ["ConnectFailed", "ConnectionBroke", "HttpPool", "Response", "WireError"]

USER_AGENT = "dex-mcp-gateway"
_READ_SIZE = 65536
_LINE_END = re.compile(rb"\r\n|\r|\n")
# Failures of one exchange on an open connection (anyio.EndOfStream is fed to h11 as EOF).
_IO_ERRORS = (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError, h11.ProtocolError)
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
_FRAMING_HEADERS = frozenset({"content-length", "transfer-encoding"})


class WireError(Exception):
    """An HTTP exchange failed. Raised as-is only before any I/O happened (never sent)."""


class ConnectFailed(WireError):
    """No byte of the request was written: connection refused, DNS, connect timeout. Safe to treat as never sent."""


class ConnectionBroke(WireError):
    """The request may have been written (partly or fully) and the exchange failed after that:
    reset, EOF before a complete response, read error, protocol error."""


def _describe(exc: BaseException) -> str:
    cause = exc.__cause__ if isinstance(exc, anyio.BrokenResourceError) and exc.__cause__ else exc
    text = str(cause)
    return f"{type(cause).__name__}: {text}" if text else type(cause).__name__


class _Target:
    __slots__ = ("host", "port", "key", "path", "host_header")

    def __init__(self, url: str) -> None:
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:
            raise WireError(f"invalid URL {url!r}: {exc}") from None
        if parts.scheme == "https":
            raise WireError(f"{url!r}: TLS upstreams are not supported by the lean client; use the httpx path")
        if parts.scheme != "http" or not parts.hostname:
            raise WireError(f"invalid URL {url!r}: only http://host[:port]/path is supported")
        self.host = parts.hostname
        self.port = port or 80
        self.key = (self.host, self.port)
        self.path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.host_header = host if self.port == 80 else f"{host}:{self.port}"


class _Conn:
    """One TCP connection and its h11 state machine."""

    __slots__ = ("stream", "sock", "h11", "key", "used", "idle_since", "received_any", "closed")

    def __init__(self, stream: anyio.abc.SocketStream, key: tuple[str, int]) -> None:
        self.stream = stream
        self.sock = stream.extra(anyio.abc.SocketAttribute.raw_socket)
        self.h11 = h11.Connection(h11.CLIENT)
        self.key = key
        self.used = False  # True once one full exchange completed on it (it came from the idle pool)
        self.idle_since = 0.0
        self.received_any = False  # a byte of the current response arrived
        self.closed = False

    def peer_gone(self) -> bool:
        """Whether an idle connection is readable: the server closed it (EOF/RST) or sent
        something unsolicited (e.g. a 408). Either way it must not carry a new request.

        Reading is paused while idle (anyio pauses the asyncio transport between receives), so
        the kernel socket is the truth. Same check as httpcore's `is_socket_readable`."""
        try:
            fd = self.sock.fileno()
            if fd < 0:
                return True
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            return bool(poller.poll(0))
        except (OSError, ValueError):
            return True


class HttpPool:
    """Keep-alive HTTP/1.1 connections per (host, port). Not thread-safe; one event loop."""

    def __init__(
        self,
        *,
        connect_timeout: float,
        max_idle_per_host: int = 32,
        default_headers: Mapping[str, str] | None = None,
        keepalive_expiry: float = 4.0,
    ) -> None:
        # keepalive_expiry stays below the common server idle timeouts (uvicorn and Node: 5 s),
        # so we drop an idle connection before the server does instead of racing its close.
        self._connect_timeout = connect_timeout
        self._max_idle = max_idle_per_host
        self._expiry = keepalive_expiry
        base = {"user-agent": USER_AGENT}
        for name, value in (default_headers or {}).items():
            base[name.lower()] = value
        self._base_headers = base
        self._idle: dict[tuple[str, int], list[_Conn]] = {}
        self._targets: dict[str, _Target] = {}
        self._closed = False
        self.open_connections = 0  # sockets open now, idle or in use
        self.connections_opened = 0  # sockets ever opened

    @property
    def idle_connections(self) -> int:
        return sum(len(stack) for stack in self._idle.values())

    def stream(
        self, method: str, url: str, *, headers: Mapping[str, str], body: bytes = b"", retry_stale: bool = True
    ) -> _Exchange:
        """`async with pool.stream(...) as response:` sends the request and enters once the
        response head is read; leaving the block closes (or recycles) the response.

        `retry_stale=False` never resends on a fresh connection after a reused one broke:
        for requests that must not reach a server twice (see `_open`)."""
        return _Exchange(self, method, url, headers, body, retry_stale)

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, {}
        for stack in idle.values():
            for conn in stack:
                await self._close(conn)

    # -- internals --------------------------------------------------------------------------

    def _target(self, url: str) -> _Target:
        target = self._targets.get(url)
        if target is None:
            target = _Target(url)
            if len(self._targets) >= 256:
                self._targets.clear()
            self._targets[url] = target
        return target

    def _request(self, method: str, target: _Target, headers: Mapping[str, str], body: bytes) -> h11.Request:
        merged = {"host": target.host_header, **self._base_headers}
        for name, value in headers.items():
            lname = name.lower()
            if lname not in _FRAMING_HEADERS:  # we own the framing
                merged[lname] = value
        if body or method in _BODY_METHODS:
            merged["content-length"] = str(len(body))
        try:
            return h11.Request(method=method, target=target.path, headers=list(merged.items()))
        except (h11.LocalProtocolError, UnicodeEncodeError) as exc:
            raise WireError(f"invalid request: {exc}") from None

    async def _open(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes, retry_stale: bool = True
    ) -> Response:
        if self._closed:
            raise WireError("the HTTP pool is closed")
        target = self._target(url)
        request = self._request(method, target, headers, body)
        conn = await self._checkout(target.key)
        retried = False
        while True:
            if conn is None:
                try:
                    conn = await self._connect(target)
                except ConnectFailed as exc:
                    if retried:
                        # The request did reach a socket before (the stale one): do not claim
                        # "never sent" if that server died after reading it and is now down.
                        raise ConnectionBroke(f"reconnect after a dropped keep-alive connection failed: {exc}") from exc
                    raise
            conn.received_any = False
            try:
                h = conn.h11
                data = h.send(request)
                if body:
                    data += h.send(h11.Data(data=body))
                data += h.send(h11.EndOfMessage())
                await conn.stream.send(data)
                event = await _read_head(conn)
            except _IO_ERRORS as exc:
                await self._close(conn)
                if retry_stale and conn.used and not conn.received_any and not retried:
                    # Stale keep-alive: a connection that sat idle in the pool died (EOF or
                    # reset while sending, or before any response byte) -- the server closed it
                    # while idle, racing our request. A server that closed the connection never
                    # read the new request, so resending it once on a fresh connection is what
                    # httpcore and browsers do. Residual risk, inherent to HTTP/1.1: a server
                    # that read the request and died before writing a byte looks the same; the
                    # liveness probe and keepalive_expiry make this path rare.
                    retried = True
                    conn = None
                    continue
                raise ConnectionBroke(f"connection to {target.host}:{target.port} broke: {_describe(exc)}") from exc
            except BaseException:
                # Cancelled (or a bug) mid-exchange: the connection is in an unknown state.
                await self._close(conn)
                raise
            return Response(self, conn, event)

    async def _checkout(self, key: tuple[str, int]) -> _Conn | None:
        stack = self._idle.get(key)
        if not stack:
            return None
        now = time.monotonic()
        while stack:
            conn = stack.pop()  # most recently used first: the least likely to be stale
            if now - conn.idle_since < self._expiry and not conn.peer_gone():
                return conn
            await self._close(conn)
        return None

    async def _connect(self, target: _Target) -> _Conn:
        try:
            with anyio.fail_after(self._connect_timeout):
                stream = await anyio.connect_tcp(target.host, target.port)
        except TimeoutError:
            raise ConnectFailed(
                f"connect to {target.host}:{target.port} timed out after {self._connect_timeout:g} s"
            ) from None
        except OSError as exc:
            raise ConnectFailed(f"cannot connect to {target.host}:{target.port}: {_describe(exc)}") from exc
        conn = _Conn(stream, target.key)
        self.open_connections += 1
        self.connections_opened += 1
        try:
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        return conn

    async def _release(self, conn: _Conn) -> None:
        """A response was read to its end: keep the connection if h11 says it can be reused."""
        h = conn.h11
        if (
            not self._closed
            and h.our_state is h11.DONE
            and h.their_state is h11.DONE  # MUST_CLOSE when the server sent Connection: close
            and not h.trailing_data[0]  # stray bytes after the response: not trustworthy
        ):
            h.start_next_cycle()
            stack = self._idle.setdefault(conn.key, [])
            if len(stack) < self._max_idle:
                conn.used = True
                conn.idle_since = time.monotonic()
                stack.append(conn)
                return
        await self._close(conn)

    async def _close(self, conn: _Conn) -> None:
        if conn.closed:
            return
        conn.closed = True
        self.open_connections -= 1
        # Forceful: never blocks, works inside a cancelled scope, and closes the socket.
        await anyio.aclose_forcefully(conn.stream)


async def _read_head(conn: _Conn) -> h11.Response:
    h = conn.h11
    while True:
        event = h.next_event()
        if event is h11.NEED_DATA:
            try:
                data = await conn.stream.receive(_READ_SIZE)
            except anyio.EndOfStream:
                data = b""
            else:
                conn.received_any = True
            h.receive_data(data)
            continue
        if type(event) is h11.Response:
            return event
        if type(event) is h11.InformationalResponse:
            continue
        raise h11.RemoteProtocolError(f"unexpected {type(event).__name__} before the response head")


class _Exchange:
    __slots__ = ("_pool", "_args", "_response")

    def __init__(
        self, pool: HttpPool, method: str, url: str, headers: Mapping[str, str], body: bytes, retry_stale: bool
    ) -> None:
        self._pool = pool
        self._args = (method, url, headers, body, retry_stale)
        self._response: Response | None = None

    async def __aenter__(self) -> Response:
        self._response = await self._pool._open(*self._args)
        return self._response

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._response is not None:
            await self._response.aclose()


class Response:
    """A response whose head has been read. Read the body once: `aread()` or `aiter_lines()`."""

    __slots__ = ("status", "headers", "_pool", "_conn", "_done", "_body")

    def __init__(self, pool: HttpPool, conn: _Conn, event: h11.Response) -> None:
        self.status: int = event.status_code
        headers: dict[str, str] = {}
        for raw_name, raw_value in event.headers:  # h11 lower-cases the names
            name = raw_name.decode("latin-1")
            value = raw_value.decode("latin-1")
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        self.headers: Mapping[str, str] = headers
        self._pool = pool
        self._conn: _Conn | None = conn
        self._done = False
        self._body: bytes | None = None

    async def aread(self) -> bytes:
        if self._body is None:
            chunks = []
            while (chunk := await self._next_chunk()) is not None:
                chunks.append(chunk)
            self._body = b"".join(chunks)
        return self._body

    async def aiter_lines(self) -> AsyncIterator[str]:
        """Decoded lines without their ending (\\r\\n, \\n or \\r), each yielded as soon as its
        ending arrives; a last unterminated line is yielded at the end of the body."""
        pending = b""
        skip_lf = False  # the previous chunk ended in \r: a \n opening this one belongs to it
        while (chunk := await self._next_chunk()) is not None:
            if skip_lf:
                skip_lf = False
                if chunk[:1] == b"\n":
                    chunk = chunk[1:]
            if not chunk:
                continue
            data = pending + chunk if pending else chunk
            if b"\r" in data:
                lines = _LINE_END.split(data)
                skip_lf = data[-1] == 0x0D
            else:
                lines = data.split(b"\n")
            pending = lines.pop()
            for line in lines:
                yield line.decode("utf-8", "replace")
        if pending:
            yield pending.decode("utf-8", "replace")

    async def drain(self, timeout: float) -> None:
        """Read what is left of the body (at most `timeout` seconds) so that the connection can
        go back to the pool: an SSE stream usually ends right after the event a caller needed."""
        with anyio.move_on_after(timeout):
            while await self._next_chunk() is not None:
                pass

    async def aclose(self) -> None:
        """A fully read response returns its connection to the pool; otherwise it is closed."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if not self._done:
            # A body-less response (202, 204, Content-Length: 0) is complete without any read.
            try:
                self._done = type(conn.h11.next_event()) is h11.EndOfMessage
            except h11.ProtocolError:
                pass
            except BaseException:
                await self._pool._close(conn)
                raise
        if self._done:
            await self._pool._release(conn)
        else:
            await self._pool._close(conn)

    async def _next_chunk(self) -> bytes | bytearray | None:
        """The next piece of body as it arrives; None at the end of the body."""
        if self._done:
            return None
        conn = self._conn
        if conn is None:
            raise WireError("the response is closed")
        h = conn.h11
        try:
            while True:
                event = h.next_event()
                if event is h11.NEED_DATA:
                    try:
                        data = await conn.stream.receive(_READ_SIZE)
                    except anyio.EndOfStream:
                        data = b""  # h11 ends a close-delimited body, or raises if incomplete
                    h.receive_data(data)
                    continue
                kind = type(event)
                if kind is h11.Data:
                    return event.data
                if kind is h11.EndOfMessage:
                    self._done = True
                    return None
                raise h11.RemoteProtocolError(f"unexpected {kind.__name__} in the response body")
        except _IO_ERRORS as exc:
            self._conn = None
            await self._pool._close(conn)
            raise ConnectionBroke(f"connection broke while reading the response: {_describe(exc)}") from exc
        except BaseException:
            self._conn = None
            await self._pool._close(conn)
            raise
