"""Reading one Streamable-HTTP answer stream (Server-Sent Events) up to the caller's answer.

`read_events` parses SSE lines as they arrive, hands the upstream's own requests (elicitation,
sampling, ping) and notifications (progress, log) to callbacks while the call is running, and
returns the JSON-RPC response whose id is the caller's, or None when the stream ended without
it (`StreamCursor` then says where to resume). An event that is not JSON raises
`UpstreamInterrupted`: the request was sent and its answer is unreadable.

`read_answer` reads a call's answer stream to its answer, resuming with `Last-Event-ID` when the
server ends the stream early on purpose (SSE polling, SEP-1699).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass
from typing import Any

import anyio

from ..errors import UpstreamInterrupted
from .transport import HttpResponse

__all__ = ["StreamCursor", "read_answer", "read_events"]

_MAX_RESUMPTIONS = 5
_MAX_RETRY_SECONDS = 10.0
_DRAIN_SECONDS = 0.25

MessageHandler = Callable[[dict[str, Any]], Awaitable[None]]


@dataclass
class StreamCursor:
    """Where an SSE stream got to, so it can be resumed (`Last-Event-ID`, `retry`)."""

    last_event_id: str | None = None
    retry_seconds: float = 1.0


async def read_events(
    upstream: str,
    response: HttpResponse,
    request_id: int,
    cursor: StreamCursor,
    *,
    on_request: MessageHandler,
    on_notification: MessageHandler,
) -> dict[str, Any] | None:
    data_lines: list[str] = []
    async for line in response.aiter_lines():
        if line:
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "data":
                data_lines.append(value)
            elif field == "id":
                cursor.last_event_id = value
            elif field == "retry" and value.isdigit():
                cursor.retry_seconds = int(value) / 1000
            continue
        if not data_lines:
            continue  # keep-alives and priming events carry no data
        payload, data_lines = "\n".join(data_lines), []
        if not payload.strip():
            continue
        try:
            message = json.loads(payload)
        except ValueError:
            raise UpstreamInterrupted(upstream, "unreadable SSE event (not JSON)") from None
        if not isinstance(message, dict):
            continue
        if message.get("id") == request_id and ("result" in message or "error" in message):
            return message
        if "method" in message and "id" in message:
            await on_request(message)
        elif "method" in message:
            await on_notification(message)
    return None


Resume = Callable[[str], AbstractAsyncContextManager[HttpResponse | None]]


async def read_answer(
    upstream: str,
    response: HttpResponse,
    request_id: int,
    *,
    on_request: MessageHandler,
    on_notification: MessageHandler,
    resume: Resume,
    on_pause: Callable[[], Awaitable[None]] | None = None,
) -> dict[str, Any] | None:
    """The JSON-RPC response to `request_id`, or None when the stream(s) ended without it.

    When the server ends the stream early with an event id, `on_pause` is told (the gateway
    pauses its own client's stream likewise), then `resume(last_event_id)` opens the stream again
    after the server's `retry` delay (at most 5 times)."""
    cursor = StreamCursor()
    current = response
    async with AsyncExitStack() as resumed:
        for resumption in range(_MAX_RESUMPTIONS + 1):
            answer = await read_events(upstream, current, request_id, cursor,
                                       on_request=on_request, on_notification=on_notification)
            if answer is not None:
                # The server ends the stream after the answer: read to the end so the keep-alive
                # connection is reused instead of reopened for every call.
                await current.drain(_DRAIN_SECONDS)
                return answer
            if cursor.last_event_id is None or resumption == _MAX_RESUMPTIONS:
                return None
            if on_pause is not None:
                await on_pause()
            await anyio.sleep(min(cursor.retry_seconds, _MAX_RETRY_SECONDS))
            await resumed.aclose()  # the previous resumed stream, if any
            reopened = await resumed.enter_async_context(resume(cursor.last_event_id))
            if reopened is None:
                return None
            current = reopened
    return None
