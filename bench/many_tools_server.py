"""MCP servers with many tools, for the listing benchmarks (bench/listing_bench.py, bench/start_bench.py).

    .venv/bin/python bench/many_tools_server.py --tools 50 --name s07            # one server on stdio
    .venv/bin/python bench/many_tools_server.py --http --servers 100 --tools 100 # 100 servers, one port

Each tool has a short description and a small input schema (about 300 bytes listed), so 20
of these behind one gateway make a 1,000-tool, ~300 KB `tools/list` answer. Calls echo.

`--http`: `--servers` servers in one process (Streamable HTTP, stateless, JSON answers) at
`http://127.0.0.1:N/sNN/mcp` (tools named `sNN_tool_000`...), printed as `listening on
http://127.0.0.1:N` on stderr once it accepts connections: a hundred upstreams without a
hundred processes. `--empty-lists`: also answer prompts/list, resources/list and
resources/templates/list, each with nothing (a server that declares those capabilities).
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server


def build(count: int, name: str, empty_lists: bool = False) -> Server[Any]:
    tools = [
        types.Tool(
            name=f"{name}_tool_{i:03d}",
            description=f"Tool {i} of server {name}: looks up a record by id and returns its fields as text.",
            input_schema={
                "type": "object",
                "properties": {
                    "id": {"type": "string", "description": "record id"},
                    "fields": {"type": "array", "items": {"type": "string"}, "description": "fields to return"},
                },
                "required": ["id"],
            },
            annotations=types.ToolAnnotations(read_only_hint=True),
        )
        for i in range(count)
    ]

    async def list_tools(ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
        return types.CallToolResult(content=[types.TextContent(text=str(params.arguments))])

    # A 2026-07-28 call's `Mcp-Param-*` check needs the tool's input schema: without this lookup the
    # SDK server lists every tool on every call (bench/scale_bench.py measures the gateway, not that).
    schemas = {tool.name: tool.input_schema for tool in tools}
    lookup = schemas.get

    if not empty_lists:
        return Server(f"bench-many-{name}", version="1.0.0", on_list_tools=list_tools, on_call_tool=call_tool,
                      get_tool_input_schema=lookup)

    async def list_prompts(ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
        return types.ListPromptsResult(prompts=[])

    async def list_resources(ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[])

    async def list_templates(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=[])

    return Server(
        f"bench-many-{name}", version="1.0.0", on_list_tools=list_tools, on_call_tool=call_tool,
        on_list_prompts=list_prompts, on_list_resources=list_resources, on_list_resource_templates=list_templates,
        get_tool_input_schema=lookup,
    )


async def serve(count: int, name: str, empty_lists: bool) -> None:
    server = build(count, name, empty_lists)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


async def serve_http(servers: int, count: int, empty_lists: bool, port: int) -> None:
    import uvicorn
    from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
    from starlette.applications import Starlette
    from starlette.routing import Route

    managers = [
        StreamableHTTPSessionManager(app=build(count, f"s{i:02d}", empty_lists), stateless=True, json_response=True)
        for i in range(servers)
    ]

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            for manager in managers:
                await stack.enter_async_context(manager.run())
            yield

    routes = [
        Route(f"/s{i:02d}/mcp", endpoint=StreamableHTTPASGIApp(m), methods=["GET", "POST", "DELETE"])
        for i, m in enumerate(managers)
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    userver = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on"))
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: userver.serve(sockets=[sock]))
        while not userver.started:
            if userver.should_exit:
                return
            await anyio.sleep(0.01)
        print(f"listening on http://127.0.0.1:{sock.getsockname()[1]}", file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tools", type=int, default=50)
    parser.add_argument("--name", default="s00")
    parser.add_argument("--http", action="store_true", help="serve --servers servers over Streamable HTTP")
    parser.add_argument("--servers", type=int, default=1)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--empty-lists", action="store_true", help="answer the prompt and resource lists, empty")
    args = parser.parse_args()
    if args.http:
        anyio.run(serve_http, args.servers, args.tools, args.empty_lists, args.port)
    else:
        anyio.run(serve, args.tools, args.name, args.empty_lists)


if __name__ == "__main__":
    main()
