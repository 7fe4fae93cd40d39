"""An in-memory `HttpTransport` for unit tests: a Python function answers every request.

    async def handler(request: HttpRequest) -> MockResponse:
        return MockResponse.json({"jsonrpc": "2.0", "id": 1, "result": {}})

    transport = MockTransport(handler)

The handler may be sync or async. Its answer's body is bytes, or an (async) iterable of byte
chunks handed out as they are produced, so an SSE stream is read line by line while the
handler is still writing it (`MockResponse.sse(...)`).

Failures are simulated the way the real transport reports them (gateway/errors.py):

* the handler raises `RequestNotSent` -- "connect failed, nothing sent";
* the handler raises `RequestMaybeSent` -- "the request left, then the connection broke";
* the body iterator raises `RequestMaybeSent` -- the connection broke mid-body.

Every request is recorded in `requests`; `unfinished` counts responses left before their body
was read to its end (a real pool would have closed, not reused, those connections).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Union

import anyio
import anyio.lowlevel

from ..errors import RequestMaybeSent, RequestNotSent
from .transport import ChunkedBody, HttpRequest

# RequestNotSent / RequestMaybeSent are re-exported: they are what a handler raises.
__all__ = ["MockResponse", "MockTransport", "RequestMaybeSent", "RequestNotSent", "sse_event"]

Body = Union[bytes, Iterable[bytes], AsyncIterable[bytes]]
Handler = Callable[[HttpRequest], Union[Awaitable["MockResponse"], "MockResponse"]]


def sse_event(data: Any, *, event_id: str | None = None, event: str | None = "message") -> bytes:
    """One SSE event; `data` that is not a str is sent as compact JSON."""
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    if event_id is not None:
        head += f"id: {event_id}\n"
    return (head + "".join(f"data: {line}\n" for line in text.split("\n")) + "\n").encode()


@dataclass
class MockResponse:
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    body: Body = b""

    @classmethod
    def json(cls, payload: Any, *, status: int = 200, headers: Mapping[str, str] | None = None) -> "MockResponse":
        return cls(status, {"content-type": "application/json", **(headers or {})}, json.dumps(payload).encode())

    @classmethod
    def sse(
        cls, events: Iterable[bytes] | AsyncIterable[bytes], *, status: int = 200, headers: Mapping[str, str] | None = None
    ) -> "MockResponse":
        """An event stream; `events` yields raw SSE bytes (see `sse_event`)."""
        return cls(status, {"content-type": "text/event-stream", **(headers or {})}, events)


class _Headers(dict[str, str]):
    """Response headers with case-insensitive lookups, as the real transport has."""

    def __init__(self, headers: Mapping[str, str]) -> None:
        super().__init__((k.lower(), v) for k, v in headers.items())

    def get(self, key: str, default: Any = None) -> Any:
        return super().get(key.lower(), default)

    def __getitem__(self, key: str) -> str:
        return super().__getitem__(key.lower())

    def __contains__(self, key: object) -> bool:
        return super().__contains__(key.lower() if isinstance(key, str) else key)


class _MockStreamResponse(ChunkedBody):
    def __init__(self, answer: MockResponse) -> None:
        self.status = answer.status
        self.headers: Mapping[str, str] = _Headers(answer.headers)
        self._chunks = _chunks(answer.body)
        self.finished = answer.body == b""  # a body-less answer is complete without a read

    async def _next_chunk(self) -> bytes:
        if self.finished:
            return b""
        try:
            while True:
                chunk = await self._chunks.__anext__()
                if chunk:
                    return chunk
        except StopAsyncIteration:
            self.finished = True
            return b""

    async def aread(self) -> bytes:
        parts = []
        while chunk := await self._next_chunk():
            parts.append(chunk)
        return b"".join(parts)

    async def aclose(self) -> None:
        closer = getattr(self._chunks, "aclose", None)
        if closer is not None:
            await closer()


async def _chunks(body: Body) -> AsyncIterator[bytes]:
    if isinstance(body, (bytes, bytearray)):
        yield bytes(body)
    elif isinstance(body, AsyncIterable):
        async for chunk in body:
            yield chunk
    else:
        for chunk in body:
            yield chunk
            await anyio.lowlevel.checkpoint()


class MockTransport:
    """An `HttpTransport` answering from `handler`; see the module docstring."""

    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self.requests: list[HttpRequest] = []
        self.unfinished = 0
        self.open_streams = 0
        self.closed = False

    def stream(self, request: HttpRequest) -> AbstractAsyncContextManager[_MockStreamResponse]:
        return self._stream(request)

    @asynccontextmanager
    async def _stream(self, request: HttpRequest) -> AsyncIterator[_MockStreamResponse]:
        if self.closed:
            raise RequestNotSent("the HTTP transport is closed")
        self.requests.append(request)
        answer = self._handler(request)
        if inspect.isawaitable(answer):
            answer = await answer
        if not isinstance(answer, MockResponse):
            raise TypeError(f"a MockTransport handler must return a MockResponse, not {type(answer).__name__}")
        response = _MockStreamResponse(answer)
        self.open_streams += 1
        try:
            yield response
        finally:
            self.open_streams -= 1
            if not response.finished:
                self.unfinished += 1
            await response.aclose()

    async def aclose(self) -> None:
        self.closed = True

