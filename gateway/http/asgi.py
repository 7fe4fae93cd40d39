"""Small ASGI helpers shared by the front's middleware: headers, bodies, JSON-RPC refusals."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from starlette.types import Message, Receive, Scope, Send

__all__ = ["Refusal", "header", "read_body", "refuse", "replay_body"]

_JSON = b"application/json"


def header(scope: Scope, name: bytes) -> bytes | None:
    """The first value of request header `name` (lower-case bytes), or None."""
    headers: Iterable[tuple[bytes, bytes]] = scope["headers"]
    for key, value in headers:
        if key == name:
            return value
    return None


async def read_body(receive: Receive, limit: int) -> bytes | None:
    """The whole request body, or None once it grows past `limit` bytes."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks)
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def replay_body(body: bytes, receive: Receive) -> Receive:
    """A `receive` that hands the already-read body to the next app, then the rest of the stream."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


async def refuse(
    send: Send, status: int, code: int, message: str, extra_headers: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    """Answer with an HTTP status and a JSON-RPC error body (`id: null`: the request was not read)."""
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}).encode()
    headers = [(b"content-type", _JSON), (b"content-length", str(len(body)).encode()), *extra_headers]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@dataclass(frozen=True, slots=True)
class Refusal:
    """An edge rule's answer instead of the request: an HTTP status and a JSON-RPC error body."""

    status: int
    code: int
    message: str
    headers: Sequence[tuple[bytes, bytes]] = ()

    async def send(self, send: Send) -> None:
        await refuse(send, self.status, self.code, self.message, self.headers)
