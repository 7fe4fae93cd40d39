"""The request body limit (`server.max_request_bytes`), as ASGI middleware in front of /mcp.

A declared `Content-Length` over the limit (or not a number) is refused at once with 413; a
chunked body, which declares no size, is read up to the limit before anything else sees it.
"""

from __future__ import annotations

from mcp_types import INVALID_REQUEST
from starlette.types import ASGIApp, Receive, Scope, Send

from .asgi import header, read_body, refuse, replay_body

__all__ = ["BodyLimit"]


class BodyLimit:
    def __init__(self, app: ASGIApp, max_body: int) -> None:
        self._app = app
        self._max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            length = header(scope, b"content-length")
            if length is not None and (not length.isdigit() or int(length) > self._max_body):
                await self._too_large(send)
                return
            if length is None and scope["method"] == "POST":
                body = await read_body(receive, self._max_body)
                if body is None:
                    await self._too_large(send)
                    return
                receive = replay_body(body, receive)
        await self._app(scope, receive, send)

    async def _too_large(self, send: Send) -> None:
        await refuse(send, 413, INVALID_REQUEST, f"Request body too large: the limit is {self._max_body} bytes")
