"""The reference server's transports: stateful Streamable HTTP on 127.0.0.1 (an in-memory event store
for SSE resumption, DNS-rebinding protection, optionally refusing 2026-07-28 requests), or stdio.
Imported by reference_server.py as a sibling."""

from __future__ import annotations

import contextlib
import socket
import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio
import mcp_types as types
import uvicorn
from mcp.server import Server
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http import EventCallback, EventMessage, EventStore
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["serve_http", "serve_stdio"]


class _Events(EventStore):
    """Every event of every stream in memory (a test server's lifetime is short)."""

    def __init__(self) -> None:
        self._events: list[tuple[str, str, types.JSONRPCMessage | None]] = []

    async def store_event(self, stream_id: str, message: types.JSONRPCMessage | None) -> str:
        event_id = f"{len(self._events) + 1}"
        self._events.append((event_id, stream_id, message))
        return event_id

    async def replay_events_after(self, last_event_id: str, send_callback: EventCallback) -> str | None:
        if not last_event_id.isdigit() or not 0 < int(last_event_id) <= len(self._events):
            return None
        stream = self._events[int(last_event_id) - 1][1]
        for event_id, stream_id, message in self._events[int(last_event_id):]:
            if stream_id == stream and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream


class _HandshakeOnly:
    """Refuses 2026-07-28 requests as a handshake-era server answers an unknown protocol version."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        version = dict(scope.get("headers") or []).get(b"mcp-protocol-version")
        if scope["type"] == "http" and version is not None and version.decode() not in HANDSHAKE_PROTOCOL_VERSIONS:
            body = {"jsonrpc": "2.0", "id": None,
                    "error": {"code": -32000, "message": f"Bad Request: Unsupported protocol version: {version.decode()}"}}
            await JSONResponse(body, status_code=400)(scope, receive, send)
            return
        await self._app(scope, receive, send)


async def serve_http(server: Server[Any], port: int, handshake_only: bool) -> None:
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=["127.0.0.1", "127.0.0.1:*", "localhost", "localhost:*"],
        allowed_origins=["http://127.0.0.1", "http://127.0.0.1:*", "http://localhost", "http://localhost:*"],
    )
    manager = StreamableHTTPSessionManager(app=server, event_store=_Events(), retry_interval=1000, security_settings=security)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        async with manager.run():
            yield

    endpoint: ASGIApp = StreamableHTTPASGIApp(manager)
    if handshake_only:
        endpoint = _HandshakeOnly(endpoint)
    app = Starlette(routes=[Route("/mcp", endpoint=endpoint, methods=["GET", "POST", "DELETE"])], lifespan=lifespan)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    userver = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=1))
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: userver.serve(sockets=[sock]))
        while not userver.started:
            await anyio.sleep(0.01)
        print(f"listening on http://127.0.0.1:{sock.getsockname()[1]}/mcp", file=sys.stderr, flush=True)


async def serve_stdio(server: Server[Any]) -> None:
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())
