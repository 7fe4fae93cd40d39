"""A test upstream written the way most MCP SDK 2.x servers are: `MCPServer` tools that ask the
client through their session (`ctx.elicit`, `ctx.session.create_message`). Served over Streamable
HTTP with sessions, the SDK speaks both eras; the questions work only on the handshake era (on
2026-07-28 a session's back-channel does not exist: "no back-channel").

    python tests/support/asking_server.py --transport http --stateful --port 0 [--modern-only]

`--modern-only` refuses `initialize` (HTTP 400 with a JSON-RPC error), as a server that speaks only
2026-07-28 does.

    ask_name()          asks the user's name (elicitation), answers "hello <name>"
    ask_model(question) asks the client's model (sampling), answers "the model said: <text>"
    echo(text)          answers "echo: <text>" (asks nothing)
    sign_up()           asks the user's name, then writes it down (one line in the state directory's
                        executions.jsonl per write, `DEX_EXAMPLE_STATE_DIR`), answers "signed up <name>"
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(_ROOT), str(_ROOT / "examples" / "servers")]

import mcp_types as types  # noqa: E402
from example_runtime import EXECUTIONS_FILE, ExecutionLog, build_parser, serve, state_dir  # noqa: E402
from mcp.server import MCPServer  # noqa: E402
from mcp.server.mcpserver import Context  # noqa: E402
from pydantic import BaseModel  # noqa: E402
from starlette.types import ASGIApp, Receive, Scope, Send  # noqa: E402

from gateway.http.asgi import read_body, replay_body  # noqa: E402

warnings.simplefilter("ignore")  # sampling is deprecated on 2026-07-28; these tools ask the 2025 way

app = MCPServer("asking")


class Name(BaseModel):
    name: str


@app.tool()
async def ask_name(ctx: Context) -> str:
    """Ask the user for their name, then greet them."""
    answer = await ctx.elicit("What is your name?", Name)
    if answer.action != "accept" or answer.data is None:
        return f"no name ({answer.action})"
    return f"hello {answer.data.name}"


@app.tool()
async def ask_model(question: str, ctx: Context) -> str:
    """Ask the client's model a question."""
    reply = await ctx.session.create_message(
        messages=[types.SamplingMessage(role="user", content=types.TextContent(text=question))],
        max_tokens=50, related_request_id=ctx.request_id)
    content = reply.content
    return f"the model said: {content.text if isinstance(content, types.TextContent) else content}"


@app.tool()
async def sign_up(ctx: Context) -> str:
    """Ask the user's name, then write it down (a write: counted in executions.jsonl)."""
    answer = await ctx.elicit("Your name, to sign you up?", Name)
    if answer.action != "accept" or answer.data is None:
        return f"not signed up ({answer.action})"
    key = (ctx.request_context.meta or {}).get("io.superdurable.dex/idempotencyKey")
    ExecutionLog(state_dir() / EXECUTIONS_FILE, "asking").record("sign_up", key if isinstance(key, str) else None,
                                                                 {"name": answer.data.name})
    return f"signed up {answer.data.name}"


@app.tool()
async def echo(text: str) -> str:
    """Answer at once."""
    return f"echo: {text}"


def refusing_initialize(inner: ASGIApp) -> ASGIApp:
    """`inner`, refusing the handshake era's `initialize` (a 2026-07-28-only server)."""

    async def app_(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await inner(scope, receive, send)
            return
        body = await read_body(receive, 1 << 20) or b""
        if b'"initialize"' in body:
            error = json.dumps({"jsonrpc": "2.0", "id": json.loads(body).get("id"),
                                "error": {"code": -32601, "message": "this server speaks 2026-07-28 only"}}).encode()
            await send({"type": "http.response.start", "status": 400,
                        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(error)).encode())]})
            await send({"type": "http.response.body", "body": error})
            return
        await inner(scope, replay_body(body, receive), send)

    return app_


if __name__ == "__main__":
    parser = build_parser("A test upstream whose tools ask through their session.")
    parser.add_argument("--modern-only", action="store_true")
    args = parser.parse_args()
    serve(app._lowlevel_server, args, wrap=refusing_initialize if args.modern_only else None)
