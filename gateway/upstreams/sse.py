"""Reading one Streamable-HTTP answer stream (Server-Sent Events) up to the caller's answer.

`read_events` parses SSE lines as they arrive, hands the upstream's own requests (elicitation,
sampling, ping) and notifications (progress, log) to callbacks while the call is running, and
returns the JSON-RPC response whose id is the caller's, or None when the stream ended without
it (`StreamCursor` then says where to resume). An event that is not JSON raises
`UpstreamInterrupted`: the request was sent and its answer is unreadable.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ..errors import UpstreamInterrupted
from .transport import HttpResponse

__all__ = ["StreamCursor", "read_events"]

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
