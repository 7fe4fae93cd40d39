"""A stdio MCP server with many tools, for the listing benchmark (bench/listing_bench.py).

    .venv/bin/python bench/many_tools_server.py --tools 50 --name s07

Each tool has a short description and a small input schema (about 300 bytes listed), so 20
of these behind one gateway make a 1,000-tool, ~300 KB `tools/list` answer. Calls echo.
"""

from __future__ import annotations

import argparse
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server


def build(count: int, name: str) -> Server[Any]:
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

    return Server(f"bench-many-{name}", version="1.0.0", on_list_tools=list_tools, on_call_tool=call_tool)


async def serve(count: int, name: str) -> None:
    server = build(count, name)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tools", type=int, default=50)
    parser.add_argument("--name", default="s00")
    args = parser.parse_args()
    anyio.run(serve, args.tools, args.name)


if __name__ == "__main__":
    main()
