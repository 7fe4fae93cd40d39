"""A test upstream that records the `Authorization` every request brings, and refuses requests
without a bearer token the way an OAuth-protected MCP server does.

    python tests/support/token_server.py --port 0 [--check-audience] [--stateful]

Every POST is recorded as one JSON line in `$DEX_EXAMPLE_STATE_DIR/authorization.jsonl`:
`{"method": ..., "name": ..., "authorization": ...}` (recorded before any check, so a refused
request is recorded too; a call the gateway never sent is not). Without a bearer token it answers
401 with `WWW-Authenticate: Bearer resource_metadata="<its metadata URL>"`. With
`--check-audience`, a `tools/call` or `resources/read` whose token's (unverified) JWT `aud` is not this server's URL
gets 401 `invalid_token` (listings take any bearer token): the server trusts its loopback tests,
it only checks whom a call's token is for.

Its tools, `whoami` (a read) and `note` (a write), answer the `sub` of the token they were called with.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(_ROOT), str(_ROOT / "examples" / "servers")]

import anyio  # noqa: E402
import mcp_types as types  # noqa: E402
import uvicorn  # noqa: E402
from example_runtime import append_durably, state_dir  # noqa: E402
from mcp.server import Server, ServerRequestContext  # noqa: E402
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager  # noqa: E402
from starlette.applications import Starlette  # noqa: E402
from starlette.routing import Route  # noqa: E402
from starlette.types import ASGIApp, Message, Receive, Scope, Send  # noqa: E402

SCRIPT_PATH = Path(__file__).resolve()
RECORDS = "authorization.jsonl"
ME = "whoami://me"  # its one resource: read, it answers the `sub` of the token it was read with


def claims_of(token: str) -> dict[str, Any]:
    """A JWT's payload, unverified (what the test reads of what the upstream received)."""
    try:
        payload = token.split(".")[1]
        decoded = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError):
        return {}
    return decoded if isinstance(decoded, dict) else {}


def read_records(directory: Path) -> list[dict[str, Any]]:
    path = directory / RECORDS
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


class Recorder:
    """Records each POST's Authorization, refuses one without a usable bearer token."""

    def __init__(self, app: ASGIApp, records: Path, check_audience: bool) -> None:
        self.app, self.records, self.check_audience = app, records, check_audience

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        more = True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = {}
        parsed = parsed if isinstance(parsed, dict) else {}
        authorization = _header(scope, b"authorization")
        params = parsed.get("params") if isinstance(parsed.get("params"), dict) else {}
        append_durably(self.records, {"method": parsed.get("method"), "name": params.get("name"),
                                      "authorization": authorization})
        host = _header(scope, b"host") or ""
        own_url = f"http://{host}{scope['path']}"
        metadata = f"http://{host}/.well-known/oauth-protected-resource{scope['path']}"
        if authorization is None or not authorization.startswith("Bearer "):
            await _unauthorized(send, f'Bearer resource_metadata="{metadata}"')
            return
        if self.check_audience and parsed.get("method") in ("tools/call", "resources/read"):
            audience = claims_of(authorization[len("Bearer "):]).get("aud")
            audiences = audience if isinstance(audience, list) else [audience]
            if own_url not in audiences:
                await _unauthorized(send, f'Bearer error="invalid_token", error_description="the token is not for '
                                          f'{own_url}", resource_metadata="{metadata}"')
                return
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


async def _unauthorized(send: Send, challenge: str) -> None:
    body = b'{"error":"unauthorized"}'
    await send({"type": "http.response.start", "status": 401,
                "headers": [(b"content-type", b"application/json"), (b"www-authenticate", challenge.encode()),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def list_tools(ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    return types.ListToolsResult(tools=[types.Tool(
        name="whoami", description="The subject of the token this call came with.",
        input_schema={"type": "object", "properties": {}},
        annotations=types.ToolAnnotations(read_only_hint=True)), types.Tool(
        name="note", description="Writes a note (a write the gateway fences by its idempotency key).",
        input_schema={"type": "object", "properties": {"text": {"type": "string"}}},
        annotations=types.ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False))])


async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
    request = ctx.request
    authorization = request.headers.get("authorization", "") if request is not None else ""
    subject = claims_of(authorization.removeprefix("Bearer ")).get("sub")
    return types.CallToolResult(content=[types.TextContent(text=f"called by {subject}")])


async def list_resources(ctx: ServerRequestContext[Any],
                         params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
    return types.ListResourcesResult(resources=[types.Resource(name="me", uri=ME, mime_type="text/plain")])


async def read_resource(ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
    request = ctx.request
    authorization = request.headers.get("authorization", "") if request is not None else ""
    subject = claims_of(authorization.removeprefix("Bearer ")).get("sub")
    return types.ReadResourceResult(contents=[
        types.TextResourceContents(uri=str(params.uri), text=f"read by {subject}", mime_type="text/plain")])


async def serve(port: int, check_audience: bool, stateful: bool) -> None:
    server: Server[Any] = Server("dex-test-token-server", version="0.1.0", on_list_tools=list_tools,
                                 on_call_tool=call_tool, on_list_resources=list_resources,
                                 on_read_resource=read_resource)
    manager = StreamableHTTPSessionManager(app=server, stateless=not stateful, json_response=True)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        async with manager.run():
            yield

    app = Starlette(routes=[Route("/mcp", endpoint=StreamableHTTPASGIApp(manager), methods=["GET", "POST", "DELETE"])],
                    lifespan=lifespan)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    userver = uvicorn.Server(uvicorn.Config(Recorder(app, state_dir() / RECORDS, check_audience),
                                            log_level="warning", lifespan="on", timeout_graceful_shutdown=1))
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: userver.serve(sockets=[sock]))
        while not userver.started:
            if userver.should_exit:
                return
            await anyio.sleep(0.01)
        print(f"listening on http://127.0.0.1:{sock.getsockname()[1]}/mcp", file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--check-audience", action="store_true")
    parser.add_argument("--stateful", action="store_true", help="Mcp-Session-Id sessions (handshake era)")
    args = parser.parse_args()
    anyio.run(serve, args.port, args.check_audience, args.stateful)


if __name__ == "__main__":
    main()
