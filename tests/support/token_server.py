"""A test upstream that records the `Authorization` every request brings, and refuses requests
without a bearer token the way an OAuth-protected MCP server does.

    python tests/support/token_server.py --port 0 [--check-audience] [--stateful]   (HTTP, JSON answers)

Every POST is recorded as one JSON line in `$DEX_EXAMPLE_STATE_DIR/authorization.jsonl`:
`{"method": ..., "name": ..., "authorization": ...}` (recorded before any check, so a refused
request is recorded too; a call the gateway never sent is not). Without a bearer token it answers
401 with `WWW-Authenticate: Bearer resource_metadata="<its metadata URL>"`. With
`--check-audience`, a `tools/call` or `resources/read` whose token's (unverified) JWT `aud` is not this server's URL
gets 401 `invalid_token` (listings take any bearer token): the server trusts its loopback tests,
it only checks whom a call's token is for.

Its tools, `whoami` (a read) and `note` (a write), answer the `sub` of the token they were called with.

With `--stateful` it keeps MCP sessions and binds each one to the `sub` of the token that opened it
(as the MCP security best practices ask of a server): a request on that session with another
user's token gets 403. Records carry the request's `session` (its `Mcp-Session-Id`, or None) and
its routing headers (`mcp-method`, `mcp-name`; None when absent).
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(_ROOT), str(_ROOT / "examples" / "servers")]

import mcp_types as types  # noqa: E402
from example_runtime import append_durably, build_parser, serve, state_dir  # noqa: E402
from mcp.server import Server, ServerRequestContext  # noqa: E402
from starlette.types import ASGIApp, Receive, Scope, Send  # noqa: E402

from gateway.http.asgi import header, read_body, replay_body  # noqa: E402

SCRIPT_PATH = Path(__file__).resolve()
RECORDS = "authorization.jsonl"
_MAX_BODY = 16 * 1024 * 1024
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


class Recorder:
    """Records each POST's Authorization, refuses one without a usable bearer token."""

    def __init__(self, app: ASGIApp, records: Path, check_audience: bool) -> None:
        self.app, self.records, self.check_audience = app, records, check_audience
        self.owners: dict[str, Any] = {}  # session id -> the `sub` that opened it

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        body = await read_body(receive, _MAX_BODY) or b""
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = {}
        parsed = parsed if isinstance(parsed, dict) else {}
        raw = header(scope, b"authorization")
        authorization = raw.decode("latin-1") if raw is not None else None
        raw_params = parsed.get("params")
        params = raw_params if isinstance(raw_params, dict) else {}
        raw_session = header(scope, b"mcp-session-id")
        session = raw_session.decode("latin-1") if raw_session is not None else None
        routing = {key: (raw.decode("latin-1") if (raw := header(scope, key.encode())) is not None else None)
                   for key in ("mcp-method", "mcp-name")}
        append_durably(self.records, {"method": parsed.get("method"), "name": params.get("name"),
                                      "uri": params.get("uri"), "authorization": authorization, "session": session,
                                      **routing})
        host = (header(scope, b"host") or b"").decode("latin-1")
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
        subject = claims_of(authorization[len("Bearer "):]).get("sub")
        if session is not None and session in self.owners and self.owners[session] != subject:
            await _json_status(send, 403, b'{"error":"this session belongs to another user"}')
            return
        await self.app(scope, replay_body(body, receive), self._binding(send, subject))

    def _binding(self, send: Send, subject: Any) -> Send:
        """`send`, noting the owner of a session the answer opens."""

        async def bind(message: Any) -> None:
            if message["type"] == "http.response.start":
                for name, value in message.get("headers", []):
                    if name.lower() == b"mcp-session-id":
                        self.owners.setdefault(value.decode("latin-1"), subject)
            await send(message)

        return bind


async def _json_status(send: Send, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def _unauthorized(send: Send, challenge: str) -> None:
    body = b'{"error":"unauthorized"}'
    await send({"type": "http.response.start", "status": 401,
                "headers": [(b"content-type", b"application/json"), (b"www-authenticate", challenge.encode()),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def _subject(ctx: ServerRequestContext[Any]) -> Any:
    """The `sub` of the token the request came with."""
    request = ctx.request
    authorization = request.headers.get("authorization", "") if request is not None else ""
    return claims_of(authorization.removeprefix("Bearer ")).get("sub")


async def list_tools(ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    return types.ListToolsResult(tools=[types.Tool(
        name="whoami", description="The subject of the token this call came with.",
        input_schema={"type": "object", "properties": {}},
        annotations=types.ToolAnnotations(read_only_hint=True)), types.Tool(
        name="note", description="Writes a note (a write the gateway fences by its idempotency key).",
        input_schema={"type": "object", "properties": {"text": {"type": "string"}}},
        annotations=types.ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False))])


async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=f"called by {_subject(ctx)}")])


async def list_resources(ctx: ServerRequestContext[Any],
                         params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
    return types.ListResourcesResult(resources=[types.Resource(name="me", uri=ME, mime_type="text/plain")])


async def read_resource(ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
    return types.ReadResourceResult(contents=[
        types.TextResourceContents(uri=str(params.uri), text=f"read by {_subject(ctx)}", mime_type="text/plain")])


def main() -> None:
    parser = build_parser(__doc__ or "")
    parser.add_argument("--check-audience", action="store_true")
    parser.set_defaults(transport="http", json_response=True)
    args = parser.parse_args()
    server: Server[Any] = Server("dex-test-token-server", version="0.1.0", on_list_tools=list_tools,
                                 on_call_tool=call_tool, on_list_resources=list_resources,
                                 on_read_resource=read_resource)
    serve(server, args, wrap=lambda app: Recorder(app, state_dir() / RECORDS, args.check_audience))


if __name__ == "__main__":
    main()
