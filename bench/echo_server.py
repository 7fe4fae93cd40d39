"""A minimal echo MCP server for benchmarks: SDK low-level Server, Streamable HTTP, stateless.

    .venv/bin/python bench/echo_server.py --port 0 [--json-response]

Prints `listening on http://127.0.0.1:N/mcp` on stderr once it accepts connections.

Tools (declared with the Dex `effect` key so the gateway needs no policy):
  * `echo`  - `read`: returns the `text` argument (no fence at the gateway);
  * `write` - `non_idempotent_write`: returns the `text` argument too (the gateway fences it,
              so every call needs a fresh `io.superdurable.dex/idempotencyKey`).

The server does as little as the SDK allows, so a benchmark measures the SDK stack plus the
gateway, not the tool. Loopback only.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import socket
import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio
import mcp_types as types
import uvicorn
from mcp.server import Server, ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from starlette.applications import Starlette
from starlette.routing import Route

EFFECT_KEY = "io.superdurable.dex/effect"
_SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}}
TOOLS = [
    types.Tool(
        name="echo",
        description="Echo the text back (read).",
        input_schema=_SCHEMA,
        annotations=types.ToolAnnotations(read_only_hint=True),
        _meta={EFFECT_KEY: "read"},
    ),
    types.Tool(
        name="write",
        description="Echo the text back, declared as a non-idempotent write (fenced by the gateway).",
        input_schema=_SCHEMA,
        annotations=types.ToolAnnotations(read_only_hint=False, idempotent_hint=False, destructive_hint=False),
        _meta={EFFECT_KEY: "non_idempotent_write"},
    ),
]
_NAMES = {t.name for t in TOOLS}


async def list_tools(ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
    if params.name not in _NAMES:
        raise MCPError(types.INVALID_PARAMS, f"unknown tool {params.name!r}")
    text = str((params.arguments or {}).get("text", ""))
    return types.CallToolResult(content=[types.TextContent(text=text)])


def build_app(json_response: bool) -> Starlette:
    server: Server[Any] = Server("bench-echo", version="1.0.0", on_list_tools=list_tools, on_call_tool=call_tool)
    manager = StreamableHTTPSessionManager(app=server, stateless=True, json_response=json_response)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        async with manager.run():
            yield

    return Starlette(
        routes=[Route("/mcp", endpoint=StreamableHTTPASGIApp(manager), methods=["GET", "POST", "DELETE"])],
        lifespan=lifespan,
    )


async def serve(host: str, port: int, json_response: bool, uvicorn_opts: dict[str, Any]) -> None:
    # proto=IPPROTO_TCP matters: asyncio sets TCP_NODELAY on accepted sockets only when the
    # listening socket says IPPROTO_TCP; with proto 0, keep-alive requests stall ~40 ms on
    # Nagle + delayed ACK (measured: 44 ms vs 1.2 ms p50).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    userver = uvicorn.Server(
        uvicorn.Config(build_app(json_response), log_level="warning", access_log=False, lifespan="on", **uvicorn_opts)
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: userver.serve(sockets=[sock]))
        while not userver.started:
            if userver.should_exit:
                return
            await anyio.sleep(0.01)
        gc.freeze()  # same start-up treatment as the gateway, so the comparison is fair
        print(f"listening on http://{host}:{sock.getsockname()[1]}/mcp", file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--json-response", action="store_true", help="answer POSTs as application/json, not SSE")
    parser.add_argument("--http", default="auto", help="uvicorn http implementation (auto|h11|httptools)")
    args = parser.parse_args()
    if not (args.host.startswith("127.") or args.host in ("::1", "localhost")):
        raise SystemExit("the bench server binds to loopback only")
    anyio.run(serve, args.host, args.port, args.json_response, {"http": args.http})


if __name__ == "__main__":
    main()
