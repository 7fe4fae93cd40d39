"""A test upstream written as an ordinary MCP SDK server would be: a tool that talks a lot while it
runs, and one that answers at once.

    python tests/support/chatty_server.py          (stdio)

    chatty(count, size)   reports progress `count` times and logs a line of about `size` characters
                          after each (`ctx.report_progress`, `ctx.info`), then answers "chatty: done"
    quick(text)           answers "quick: <text>" at once
"""

from __future__ import annotations

import warnings

from mcp.server import MCPServer
from mcp.server.mcpserver import Context

warnings.simplefilter("ignore")  # ctx.info is deprecated on 2026-07-28; this server speaks the handshake era

app = MCPServer("chatty")


@app.tool()
async def chatty(count: int, ctx: Context, size: int = 100) -> str:
    """Report progress and log a line (of about `size` characters) `count` times, then answer."""
    for step in range(count):
        await ctx.report_progress(step + 1, count, f"step {step + 1} of {count}")
        await ctx.info(f"chatty is at step {step + 1} of {count}; " + "x" * size)
    return "chatty: done"


@app.tool()
async def quick(text: str) -> str:
    """Answer at once."""
    return f"quick: {text}"


if __name__ == "__main__":
    app.run("stdio")
