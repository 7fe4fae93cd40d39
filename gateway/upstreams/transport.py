"""The upstream HTTP transport: one small interface for `http://` and `https://`, and its rules.

Two implementations keep this contract and run the same tests (tests/upstreams/, both clients):
`Http11Transport` (gateway/upstreams/http11.py: asyncio Protocol + httptools' llhttp parser), the
one the HTTP channel creates, and `AiohttpTransport` below, on aiohttp's client. The lean one is
the default because aiohttp's general-purpose client was ~30 % of the gateway's CPU per call
(py-spy) and ~150 of its ~900 Python calls per tools/call (docs/benchmarks.md, "The upstream
HTTP client (issue 27)"). The shared pieces live here: the request/response types, `iter_lines`
and `ChunkedBody`, `upstream_url`, `ConnectionSlots` (max_connections/pool_timeout),
`fd_headroom_error`, `_peer_gone` (the idle-socket probe) and `ssl_context`.

The HTTP channel (channels/http.py) speaks MCP over an `HttpTransport`, shaped like httpx's transports: one main
method, `stream(request)`, an async context manager that sends the request and enters with the
response once its head is read. The body is read whole (`aread`) or line by line as it arrives
(`aiter_lines`, for SSE); `drain` reads what is left so the connection can be reused. Leaving
the block hands a fully read connection back to the keep-alive pool and closes any other.
`MockTransport` (gateway/upstreams/mock_transport.py) is the in-memory one for unit tests.

Error meanings (classes in gateway/errors.py), the signal the outcome rules depend on:

* `RequestNotSent` -- provably no byte of the request left: invalid URL, closed transport,
  DNS failure, connection refused, connect or TLS handshake failure, connect timeout (waiting
  for a pool slot included). Raised only before a connection was handed to the request.
* `RequestMaybeSent` -- a connection was handed to the request, so its bytes may have reached
  the server: reset or EOF after writing, a malformed response, a read error in the body.

How "did any byte leave" is known (AiohttpTransport; Http11Transport draws the line at its own
`transport.write`): `_Connector.connect` is the last step before aiohttp writes
the request. Any failure up to and including it is `RequestNotSent`; once it returned, the
write follows in the same event-loop step and every failure is `RequestMaybeSent`. A pooled
keep-alive connection the server closed while idle is never handed out: aiohttp keeps reading
idle sockets and drops a closed one, and `connect` additionally polls a reused socket for a
pending FIN/RST the loop has not processed yet, taking another connection instead. Only the
inherent HTTP/1.1 race is left (the server's close crosses our request on the wire); it is
reported as `RequestMaybeSent`, never retried.

Never re-sent: Http11Transport writes a request once and never retries; aiohttp retries a
request on a broken persistent connection only for methods in `aiohttp.client.IDEMPOTENT_METHODS`
(GET, HEAD, OPTIONS, TRACE, PUT, DELETE), never POST. Redirects are not followed (a 307/308 would re-send a POST body), so a POST reaches the
server at most once per `stream` call. Whether a call is sent again is the gateway's outcome
rules' decision alone.

Caps (what one upstream can make the gateway hold):

* `max_response_bytes`: a body read whole (`aread`) and one SSE event (its lines up to the blank
  line that ends it, one endless line included) stop at this many bytes: `ResponseTooLarge` (a
  `RequestMaybeSent`), and the half-read connection is closed, never reused. A `Content-Length`
  over it is refused before any byte of the body is read.
* `max_connections`: exchanges in flight at once (HTTP/1.1: one per connection), so at most this
  many connections to the upstream. One more waits up to `pool_timeout` seconds for a slot, then
  fails with `LocalLimitReached` (a `RequestNotSent`: nothing was sent). A new connection is not
  opened either when the process is near its open-file limit (`LocalLimitReached` alike).

Header names must be HTTP tokens and values hold no CR, LF or NUL (Http11Transport refuses
anything else with RequestNotSent naming the header), so no configured value can split the head.

Pool settings: keep-alive idle expiry 4 s (below uvicorn's and Node's 5 s, so we drop an idle
connection before the server does), TCP_NODELAY (on every connection), no cookies, no
decompression (no Accept-Encoding is sent either), no redirects, no proxy or netrc
from the environment (upstreams are operator-configured endpoints; a proxy meant for other
traffic must not silently carry MCP requests and their bearer headers).
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import re
import resource
import select
import ssl
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp
import anyio
from aiohttp.abc import AbstractResolver
from aiohttp.connector import Connection as _PooledConnection
from aiohttp.http_exceptions import HttpProcessingError
from yarl import URL

from ..errors import LocalLimitReached, RequestMaybeSent, RequestNotSent, ResponseTooLarge

__all__ = [
    "KEEPALIVE_SECONDS",
    "USER_AGENT",
    "AiohttpTransport",
    "HttpRequest",
    "HttpResponse",
    "HttpTransport",
    "ChunkedBody",
    "ConnectionSlots",
    "describe",
    "fd_headroom_error",
    "iter_lines",
    "ssl_context",
    "upstream_url",
    "with_user_agent",
]

USER_AGENT = "dex-mcp-gateway"
KEEPALIVE_SECONDS = 4.0
_LINE_END = re.compile(rb"\r\n|\r|\n")
# Failures of an exchange once aiohttp holds a connection (HttpProcessingError: bad framing).
_EXCHANGE_ERRORS = (aiohttp.ClientError, OSError, HttpProcessingError)
# Failures before a connection was handed to the request (ValueError: invalid URL or header).
_SETUP_ERRORS = (aiohttp.ClientError, OSError, HttpProcessingError, ValueError)


@dataclass(slots=True)
class HttpRequest:
    """One request: `headers` are sent as given (plus the transport's defaults)."""

    method: str
    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""


class HttpResponse(Protocol):
    """A response whose head has been read. Read the body once: `aread()` or `aiter_lines()`."""

    status: int
    headers: Mapping[str, str]  # case-insensitive lookups (use lower-case names)

    async def aread(self) -> bytes:
        """The whole body; raises RequestMaybeSent when the connection breaks first."""
        ...

    def aiter_lines(self) -> AsyncIterator[str]:
        """Decoded lines without their ending (\\r\\n, \\n or \\r), each as soon as it arrives."""
        ...

    async def drain(self, timeout: float) -> None:
        """Read what is left of the body (at most `timeout` seconds), so the connection is reused."""
        ...


class HttpTransport(Protocol):
    def stream(self, request: HttpRequest) -> AbstractAsyncContextManager[HttpResponse]:
        """Send `request`; enter with the response once its head is read.

        Raises RequestNotSent or RequestMaybeSent (see the module docstring)."""
        ...

    async def aclose(self) -> None: ...


async def iter_lines(
    next_chunk: Callable[[], Awaitable[bytes]], max_event_bytes: int | None = None
) -> AsyncIterator[str]:
    """Split a body into lines as chunks arrive (`next_chunk()` returns b"" at the end).

    Every SSE line ending is honoured, also when a \\r\\n pair is split across two chunks; a
    last unterminated line is yielded at the end of the body. With `max_event_bytes`, the lines
    of one SSE event (up to the blank line that ends it) and a line still unterminated hold at
    most that many bytes together: past it, ResponseTooLarge, and nothing more is read."""
    pending = b""
    skip_lf = False  # the previous chunk ended in \r: a \n opening this one belongs to it
    event_bytes = 0  # bytes of the lines of the SSE event being read (since the last blank line)
    while chunk := await next_chunk():
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
        if max_event_bytes is not None:
            for line in lines:
                event_bytes = 0 if not line else event_bytes + len(line) + 1
                if event_bytes > max_event_bytes:
                    break
            if event_bytes + len(pending) > max_event_bytes:
                read = event_bytes + len(pending)
                raise ResponseTooLarge(
                    f"an event of the response stream is over {max_event_bytes} bytes", read=read, cap=max_event_bytes
                )
        for line in lines:
            yield line.decode("utf-8", "replace")
    if pending:
        yield pending.decode("utf-8", "replace")


class ChunkedBody:
    """`aiter_lines` and `drain` for a response that can hand out its body chunk by chunk."""

    max_event_bytes: int | None = None  # the cap of one SSE event (see iter_lines)

    async def _next_chunk(self) -> bytes:
        raise NotImplementedError

    def aiter_lines(self) -> AsyncIterator[str]:
        return iter_lines(self._next_chunk, self.max_event_bytes)

    async def drain(self, timeout: float) -> None:
        with anyio.move_on_after(timeout):
            while await self._next_chunk():
                pass


def with_user_agent(headers: Mapping[str, str] | None) -> dict[str, str]:
    """A transport's default headers: names in lower case, `user-agent` ours unless given."""
    return {"user-agent": USER_AGENT, **{k.lower(): v for k, v in (headers or {}).items()}}


def fd_headroom_error(reserve_fraction: float = 0.05, minimum_reserve: int = 32) -> str | None:
    """Why no new connection may be opened now: the process is near its open-file limit (fewer than
    5 % of the soft limit, at least 32, left), or None. None also where open files cannot be counted."""
    try:
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY or soft <= 0:
            return None
        in_use = len(os.listdir("/proc/self/fd"))
    except OSError:
        return None
    if in_use < soft - max(minimum_reserve, int(soft * reserve_fraction)):
        return None
    return f"the gateway is near its open-file limit ({in_use} of {soft} open files), so no new upstream connection is opened"


def ssl_context(ca_file: str | None = None) -> ssl.SSLContext:
    """Verification against `ca_file` only when given, else the system store.

    The system store is OpenSSL's default paths, which honour `SSL_CERT_FILE`/`SSL_CERT_DIR`."""
    return ssl.create_default_context(cafile=ca_file)


def upstream_url(url: str, cache: dict[str, URL]) -> URL:
    """`url` parsed (and kept in `cache`), or RequestNotSent when it is not http(s)://host[:port]/path."""
    parsed = cache.get(url)
    if parsed is None:
        try:
            parsed = URL(url)
            parsed.port  # noqa: B018 - a malformed port raises here
        except (ValueError, TypeError) as exc:
            raise RequestNotSent(f"invalid URL {url!r}: {exc}") from None
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise RequestNotSent(f"invalid URL {url!r}: only http(s)://host[:port]/path is supported")
        if len(cache) >= 64:
            cache.clear()
        cache[url] = parsed
    return parsed


class ConnectionSlots:
    """`max_connections` exchanges in flight at once; one more waits up to `pool_timeout` seconds."""

    __slots__ = ("_max", "_timeout", "_semaphore")

    def __init__(self, max_connections: int | None, pool_timeout: float) -> None:
        self._max = max_connections
        self._timeout = pool_timeout
        self._semaphore: anyio.Semaphore | None = None

    async def take(self) -> anyio.Semaphore | None:
        """A slot, taken (release it on the returned semaphore); None when there is no cap."""
        if self._max is None:
            return None
        if self._semaphore is None:
            self._semaphore = anyio.Semaphore(self._max)
        slots = self._semaphore
        try:
            if slots.value > 0:
                slots.acquire_nowait()  # a free connection: no timer, no trip through the event loop
            else:
                with anyio.fail_after(self._timeout):
                    await slots.acquire()
        except TimeoutError:
            raise LocalLimitReached(
                f"all {self._max} connections to the upstream (max_connections) stayed busy for "
                f"{self._timeout:g} s (pool_timeout_seconds), so the request was not sent"
            ) from None
        return slots


def describe(exc: BaseException) -> str:
    """An exception as text for an error message: its type and its text."""
    if isinstance(exc, asyncio.TimeoutError) and not str(exc):
        return "timed out"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# -- aiohttp --------------------------------------------------------------------------------


class _Attempt:
    """Per `stream` call: set once aiohttp holds a connection for the request."""

    __slots__ = ("connected",)

    def __init__(self) -> None:
        self.connected = False


_ATTEMPT: contextvars.ContextVar[_Attempt | None] = contextvars.ContextVar("dex_http_attempt", default=None)
_MAX_STALE_SKIPS = 8


class _Pooled(Protocol):
    """A pooled connection as `_peer_gone` sees it: aiohttp's Connection, http11's _Connection."""

    @property
    def transport(self) -> asyncio.BaseTransport | None: ...


def _peer_gone(connection: _Pooled) -> bool:
    """Whether a pooled socket has something pending while idle: a FIN or RST (the server
    closed it) or unsolicited bytes (e.g. a 408). Either way it must not carry a request."""
    transport = connection.transport
    if transport is None or transport.is_closing():
        return True
    sock = transport.get_extra_info("socket")
    if sock is None:
        return False  # not a socket transport: nothing to probe
    try:
        fd = sock.fileno()
        if fd < 0:
            return True
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError):
        return True


class _Connector(aiohttp.TCPConnector):
    """aiohttp's pool, plus the "bytes left" marker and a liveness probe of reused sockets."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._handed_out: weakref.WeakSet[Any] = weakref.WeakSet()

    async def connect(self, req: Any, traces: Any, timeout: aiohttp.ClientTimeout) -> _PooledConnection:
        for _ in range(_MAX_STALE_SKIPS):
            connection = await super().connect(req, traces, timeout)
            protocol = connection.protocol
            if protocol not in self._handed_out:
                self._handed_out.add(protocol)
                break
            if not _peer_gone(connection):
                break
            # Dead while idle: nothing of this request was written to it. Drop it, take another.
            connection.close()
        else:  # pragma: no cover - needs eight dead pooled sockets in a row
            connection = await super().connect(req, traces, timeout)
        attempt = _ATTEMPT.get()
        if attempt is not None:
            attempt.connected = True
        return connection

    async def _create_connection(self, req: Any, traces: Any, timeout: aiohttp.ClientTimeout) -> Any:
        # Only for a new connection (a pooled one is reused without it): a new socket needs a file.
        if (why := fd_headroom_error()) is not None:
            raise LocalLimitReached(why)
        return await super()._create_connection(req, traces, timeout)


class _AiohttpResponse(ChunkedBody):
    __slots__ = ("status", "headers", "_response", "max_event_bytes")

    def __init__(self, response: aiohttp.ClientResponse, max_bytes: int | None) -> None:
        self.status: int = response.status
        self.headers: Mapping[str, str] = response.headers
        self._response = response
        self.max_event_bytes = max_bytes

    @property
    def finished(self) -> bool:
        return self._response.content.at_eof()

    async def _next_chunk(self) -> bytes:
        try:
            return await self._response.content.readany()
        except _EXCHANGE_ERRORS as exc:
            raise RequestMaybeSent(f"connection broke while reading the response: {_describe(exc)}") from exc

    async def aread(self) -> bytes:
        cap = self.max_event_bytes
        if cap is None:
            try:
                return await self._response.read()
            except _EXCHANGE_ERRORS as exc:
                raise RequestMaybeSent(f"connection broke while reading the response: {_describe(exc)}") from exc
        declared = self._response.content_length
        if declared is not None and declared > cap:
            raise ResponseTooLarge(f"the response declares {declared} bytes, over {cap}", read=declared, cap=cap)
        body = bytearray()
        while chunk := await self._next_chunk():
            body += chunk
            if len(body) > cap:
                raise ResponseTooLarge(f"the response is over {cap} bytes", read=len(body), cap=cap)
        return bytes(body)

    def close(self) -> None:
        if self.finished:
            self._response.release()  # back to the pool unless the server asked to close
        else:
            self._response.close()  # a half-read connection is never reused


class _Exchange:
    """One request's response, entered once its head is read; on exit the connection goes back to
    the pool (read to its end) or is closed, and its slot is freed. A class rather than an
    @asynccontextmanager: this runs on every upstream call, and a generator-based one costs an
    async generator (tracked by the event loop) per call."""

    __slots__ = ("_transport", "_request", "_slot", "_response")

    def __init__(self, transport: "AiohttpTransport", request: HttpRequest) -> None:
        self._transport = transport
        self._request = request
        self._slot: anyio.Semaphore | None = None
        self._response: _AiohttpResponse | None = None

    async def __aenter__(self) -> _AiohttpResponse:
        transport = self._transport
        if transport._closed:
            raise RequestNotSent("the HTTP transport is closed")
        url = transport._url(self._request.url)
        self._slot = await transport._slot()
        try:
            self._response = await transport._send(self._request, url)
        except BaseException:
            self._free()
            raise
        return self._response

    async def __aexit__(self, *exc_info: object) -> None:
        try:
            if self._response is not None:
                self._response.close()
        finally:
            self._free()

    def _free(self) -> None:
        slot, self._slot = self._slot, None
        if slot is not None:
            slot.release()


class AiohttpTransport:
    """Keep-alive HTTP/1.1 (and TLS) connections to one upstream, on aiohttp.

    Create it inside the event loop that uses it (aiohttp binds to the running loop)."""

    def __init__(
        self,
        *,
        connect_timeout: float,
        default_headers: Mapping[str, str] | None = None,
        ssl_context: ssl.SSLContext | None = None,
        keepalive_expiry: float = KEEPALIVE_SECONDS,
        resolver: AbstractResolver | None = None,
        max_response_bytes: int | None = None,
        max_connections: int | None = None,
        pool_timeout: float = 30.0,
    ) -> None:
        self._connect_timeout = connect_timeout
        self._max_response_bytes = max_response_bytes
        self._max_connections = max_connections
        self._slots = ConnectionSlots(max_connections, pool_timeout)
        self._default_headers = with_user_agent(default_headers)
        self._ssl: ssl.SSLContext | bool = ssl_context if ssl_context is not None else True
        self._keepalive_expiry = keepalive_expiry
        self._resolver = resolver
        self._session: aiohttp.ClientSession | None = None
        self._urls: dict[str, URL] = {}
        self._closed = False

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = _Connector(
                keepalive_timeout=self._keepalive_expiry,
                limit=self._max_connections or 0,  # the slots below keep to it; 0: no cap
                ssl=self._ssl,
                resolver=self._resolver,
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                headers=self._default_headers,
                skip_auto_headers=("Accept-Encoding",),
                cookie_jar=aiohttp.DummyCookieJar(),
                auto_decompress=False,
                trust_env=False,
                timeout=aiohttp.ClientTimeout(total=None, connect=self._connect_timeout),
            )
        return self._session

    def _url(self, url: str) -> URL:
        return upstream_url(url, self._urls)

    def stream(self, request: HttpRequest) -> AbstractAsyncContextManager[_AiohttpResponse]:
        return _Exchange(self, request)

    async def _slot(self) -> anyio.Semaphore | None:
        """A connection slot (max_connections), taken; None when the pool is not capped."""
        return await self._slots.take()

    async def _send(self, request: HttpRequest, url: URL) -> _AiohttpResponse:
        """The response to `request`, its head read."""
        session = self._client()
        attempt = _Attempt()
        token = _ATTEMPT.set(attempt)
        try:
            response = await session.request(
                request.method,
                url,
                headers=request.headers,
                data=request.body or None,
                allow_redirects=False,
            )
        except _SETUP_ERRORS as exc:
            where = f"{url.host}:{url.port}"
            if attempt.connected:
                raise RequestMaybeSent(f"exchange with {where} failed: {_describe(exc)}") from exc
            raise RequestNotSent(f"cannot connect to {where}: {_describe(exc)}") from exc
        finally:
            _ATTEMPT.reset(token)
        return _AiohttpResponse(response, self._max_response_bytes)

    async def aclose(self) -> None:
        self._closed = True
        session, self._session = self._session, None
        if session is not None:
            await session.close()


_describe = describe
