"""A handshake-era (2025-11-25) session over raw HTTP, and its standalone GET stream read in a
thread, for notifications the SDK 2.3 client drops (`notifications/tasks/status`: its 2025-11-25
method table lacks it)."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx

HANDSHAKE = "2025-11-25"
BASE_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json",
                "mcp-protocol-version": HANDSHAKE}


def sse_messages(text: str) -> list[dict[str, Any]]:
    """The JSON-RPC messages in an SSE body (its `data:` lines)."""
    found = []
    for line in text.replace("\r\n", "\n").split("\n"):
        if line.startswith("data:") and line[5:].strip():
            found.append(json.loads(line[5:]))
    return found


def open_session(http: httpx.Client, url: str, headers: dict[str, str] | None = None) -> dict[str, str]:
    """initialize + notifications/initialized; the headers of the session's later requests."""
    base = {**BASE_HEADERS, **(headers or {})}
    opened = http.post(url, headers=base, json={
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": HANDSHAKE, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
    assert opened.status_code == 200, opened.text
    session = {**base, "mcp-session-id": opened.headers["mcp-session-id"]}
    http.post(url, headers=session, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
    return session


class StreamListener:
    """The session's standalone stream, read in a thread until `until` appears in it or `seconds`
    pass: `start()` returns once the stream is open; `join()` gives what it read."""

    def __init__(self, url: str, session: dict[str, str], *, until: str | None, seconds: float) -> None:
        self.url, self.session, self.until, self.seconds = url, session, until, seconds
        self.text = ""
        self.status: int | None = None
        self._open = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)

    def start(self) -> "StreamListener":
        self._thread.start()
        assert self._open.wait(10), "the standalone stream did not open"
        assert self.status == 200, f"the standalone stream answered {self.status}"
        return self

    def join(self) -> str:
        self._thread.join(self.seconds + 10)
        return self.text

    def notifications(self, method: str) -> list[dict[str, Any]]:
        return [m.get("params") or {} for m in sse_messages(self.text) if m.get("method") == method]

    def _read(self) -> None:
        try:
            with httpx.stream("GET", self.url, headers={**self.session, "accept": "text/event-stream"},
                              timeout=httpx.Timeout(5, read=self.seconds)) as stream:
                self.status = stream.status_code
                self._open.set()
                started = time.monotonic()
                for chunk in stream.iter_text():
                    self.text += chunk
                    if (self.until and self.until in self.text) or time.monotonic() - started > self.seconds:
                        break
        except httpx.ReadTimeout:
            pass
        finally:
            self._open.set()
