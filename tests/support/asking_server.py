"""A test upstream written the way most MCP SDK 2.x servers are: `MCPServer` tools that ask the
client through their session (`ctx.elicit`, `ctx.session.create_message`). Served over Streamable
HTTP with sessions, the SDK speaks both eras; the questions work only on the handshake era (on
2026-07-28 a session's back-channel does not exist: "no back-channel").

    python tests/support/asking_server.py --transport http --stateful --port 0 [--modern-only]

`--modern-only` refuses `initialize` (HTTP 400 with a JSON-RPC error), as a server that speaks only
2026-07-28 does.

    ask_name()          a read: asks the user's name (elicitation), answers "hello <name>"
    ask_city()          like ask_name, but declares no effect (unclassified), answers "a city for <name>"
    ask_model(question) a read: asks the client's model (sampling), answers "the model said: <text>"
    echo(text)          answers "echo: <text>" (asks nothing)
    refuse()            refuses the request (JSON-RPC -32600 "not today"), asking nothing
    sign_guestbook()    a non-idempotent write that asks the name (elicitation), then writes it:
                        answers "signed by <name> (entry <n>)", n counting this process's writes
    sign_up()           asks the user's name, then writes it down (one line in the state directory's
                        executions.jsonl per write, `DEX_EXAMPLE_STATE_DIR`; one `sign_up:asked` line
                        per start of the call), answers "signed up <name>"
"""

from __future__ import annotations

import itertools
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
from mcp.shared.exceptions import MCPError  # noqa: E402
from mcp_types import INVALID_REQUEST  # noqa: E402
from pydantic import BaseModel  # noqa: E402
from starlette.types import ASGIApp, Receive, Scope, Send  # noqa: E402

from gateway.http.asgi import read_body, replay_body  # noqa: E402

warnings.simplefilter("ignore")  # sampling is deprecated on 2026-07-28; these tools ask the 2025 way

app = MCPServer("asking")


class Name(BaseModel):
    name: str


async def asked_name(ctx: Context, question: str) -> str | None:
    """The name the user gives (elicitation through the session); None when they do not accept."""
    answer = await ctx.elicit(question, Name)
    return answer.data.name if answer.action == "accept" and answer.data is not None else None


@app.tool(meta={"io.superdurable.dex/effect": "read"})
async def ask_name(ctx: Context) -> str:
    """Ask the user for their name, then greet them."""
    name = await asked_name(ctx, "What is your name?")
    return "no name" if name is None else f"hello {name}"


@app.tool()
async def ask_city(ctx: Context) -> str:
    """Ask the user's name (declared nothing: an unclassified tool), then answer it."""
    name = await asked_name(ctx, "Who asks for a city?")
    return "no name" if name is None else f"a city for {name}"


@app.tool(meta={"io.superdurable.dex/effect": "read"})
async def ask_model(question: str, ctx: Context) -> str:
    """Ask the client's model a question."""
    reply = await ctx.session.create_message(
        messages=[types.SamplingMessage(role="user", content=types.TextContent(text=question))],
        max_tokens=50, related_request_id=ctx.request_id)
    content = reply.content
    return f"the model said: {content.text if isinstance(content, types.TextContent) else content}"


_entries = itertools.count(1)  # the guestbook's writes (a run of the server is one test's upstream)


@app.tool(meta={"io.superdurable.dex/effect": "non_idempotent_write"})
async def sign_guestbook(ctx: Context) -> str:
    """Ask the user's name, then write it in the guestbook (a write: it runs once per key)."""
    name = await asked_name(ctx, "Who signs?")
    return "not signed" if name is None else f"signed by {name} (entry {next(_entries)})"


@app.tool()
async def refuse() -> str:
    """Refuse the request (an error that is not about asking)."""
    raise MCPError(INVALID_REQUEST, "not today")


@app.tool()
async def sign_up(ctx: Context) -> str:
    """Ask the user's name, then write it down (a write: counted in executions.jsonl, and each
    start of the call, before it asks, as `sign_up:asked`)."""
    found = (ctx.request_context.meta or {}).get("io.superdurable.dex/idempotencyKey")
    key = found if isinstance(found, str) else None
    executions = ExecutionLog(state_dir() / EXECUTIONS_FILE, "asking")
    executions.record("sign_up:asked", key, {})
    answer = await ctx.elicit("Your name, to sign you up?", Name)
    if answer.action != "accept" or answer.data is None:
        return f"not signed up ({answer.action})"
    executions.record("sign_up", key, {"name": answer.data.name})
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
