"""`https://` upstreams: the same pool interface as `wire.HttpPool`, on httpx (which does TLS).

The lean pool in `wire.py` speaks plain HTTP/1.1 only (it probes idle sockets directly); this
adapter keeps TLS upstreams working with the same error meaning: ConnectFailed = never sent,
ConnectionBroke = may have been sent.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

import httpx

from .wire import ConnectFailed, ConnectionBroke

_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


class HttpxResponse:
    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self.status = response.status_code
        self.headers = {k.lower(): v for k, v in response.headers.items()}

    async def aread(self) -> bytes:
        try:
            return await self._response.aread()
        except httpx.HTTPError as exc:
            raise ConnectionBroke(f"connection broke while reading: {exc}") from exc

    async def aiter_lines(self) -> AsyncIterator[str]:
        try:
            async for line in self._response.aiter_lines():
                yield line
        except httpx.HTTPError as exc:
            raise ConnectionBroke(f"connection broke while reading: {exc}") from exc

    async def drain(self, timeout: float) -> None:
        # httpx cannot resume a stream it started iterating; the connection is simply closed.
        return None

    async def aclose(self) -> None:
        await self._response.aclose()


class HttpxPool:
    def __init__(self, *, connect_timeout: float, default_headers: Mapping[str, str] | None = None) -> None:
        self._client = httpx.AsyncClient(
            headers=dict(default_headers or {}),
            timeout=httpx.Timeout(None, connect=connect_timeout),
            limits=httpx.Limits(max_connections=256, max_keepalive_connections=64),
        )

    @asynccontextmanager
    async def stream(
        self, method: str, url: str, *, headers: Mapping[str, str], body: bytes = b"", retry_stale: bool = True
    ) -> AsyncIterator[HttpxResponse]:
        # httpx has no per-request switch for stale-connection retries; it does not resend a
        # request whose connection broke after writing, which is what retry_stale=False asks.
        request = self._client.build_request(method, url, headers=dict(headers), content=body or None)
        try:
            response = await self._client.send(request, stream=True)
        except _NOT_SENT as exc:
            raise ConnectFailed(f"cannot connect: {exc}") from exc
        except httpx.HTTPError as exc:
            raise ConnectionBroke(f"connection broke: {exc}") from exc
        wrapped = HttpxResponse(response)
        try:
            yield wrapped
        finally:
            await wrapped.aclose()

    async def aclose(self) -> None:
        await self._client.aclose()
