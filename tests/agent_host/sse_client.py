"""A small Server-Sent Events reader for the tests (httpx streaming): events as dicts."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx


def sse_events(url: str, token: str, last_event_id: int | None = None, timeout: float = 30.0) -> Iterator[dict[str, Any]]:
    """Each event's parsed data (with its SSE `id` as `sse_id`) until the stream ends."""
    headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
    if last_event_id is not None:
        headers["Last-Event-ID"] = str(last_event_id)
    with httpx.stream("GET", url, headers=headers, timeout=httpx.Timeout(10.0, read=timeout)) as response:
        response.raise_for_status()
        fields: dict[str, str] = {}
        for line in response.iter_lines():
            if line == "":
                if "data" in fields:
                    event = json.loads(fields["data"])
                    event["sse_id"] = int(fields["id"])
                    event["sse_event"] = fields.get("event")
                    yield event
                fields = {}
            elif not line.startswith(":"):
                name, _, value = line.partition(":")
                fields[name] = value[1:] if value.startswith(" ") else value


def read_until(url: str, token: str, last_event_id: int | None, stop: Callable[[dict[str, Any]], bool],
               connect_timeout: float = 20.0) -> list[dict[str, Any]]:
    """Events until `stop(event)` or the end of the stream; retries the connection until the host
    answers (it may be starting)."""
    deadline = time.monotonic() + connect_timeout
    while True:
        got: list[dict[str, Any]] = []
        try:
            for event in sse_events(url, token, last_event_id):
                got.append(event)
                if stop(event):
                    break
            return got
        except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError):
            if got:
                return got
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
